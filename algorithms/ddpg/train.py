"""DDPG (deterministic policy gradient with replay and target networks) as one program.

``make_train(config, env, env_params) -> Trainer`` (see `jaxdrive.training`). One
iteration, one pure function that jits as a whole:

1. a `lax.scan` of ``num_steps`` steps over ``num_envs`` vmapped envs: each policy's
   actor acts on its groups' observations, plus Gaussian or Ornstein–Uhlenbeck
   noise (uniform random actions until ``learning_starts`` env steps);
2. every transition, one per agent, goes into its policy's device-side replay
   buffer (``next_obs`` is the episode's last observation where it ended, so a
   truncated episode bootstraps from it; ``terminated`` stops the bootstrap);
3. once ``learning_starts`` env steps are done and the buffer holds ``batch_size``
   transitions, a `lax.scan` of ``updates_per_iteration`` gradient steps per
   learning policy (under a `lax.cond`: one program serves both phases): critic on
   the TD target ``r + γ (1 − terminated) Q'(s', μ'(s'))``, actor on ``−Q(s, μ(s))``,
   then Polyak updates of both target networks.

Policies serve groups (parameter sharing within a policy; the groups of a policy need
the same observation shape and the same `Box` action space). Each policy has its own
networks, optimisers, learning rates and buffer, and may override any ``config.algo``
key for itself (e.g. ``policies.runner.noise_scale = 0.3``); a ``frozen`` policy acts
deterministically and never learns (it keeps no buffer).

Metrics (float32 scalars per iteration): ``loss/<policy>/actor``,
``loss/<policy>/critic`` (means over the iteration's gradient steps; 0 before learning
starts), ``q_mean`` (mean ``Q(s, a)`` on the sampled batches, averaged over learning
policies; ``q_mean/<policy>`` too when there are several), ``episode_return/<group>``
(mean over the group's agents and over the episodes that ended in this iteration; it
keeps the last value when none ended, NaN before the first), ``episodes_done`` (episodes
ended in this iteration) and ``env_steps`` (env steps so far).

Dimension letters: ``T`` steps per iteration, ``N`` envs, ``A_g`` agents of group
``g``, ``A_p`` agents served by policy ``p`` (summed over its groups), ``O`` one
agent's observation shape, ``D`` its action size, ``C`` buffer capacity.

Example:
    >>> import jax, jaxdrive
    >>> from algorithms.ddpg import default_config, make_train
    >>> config = default_config()
    >>> config.num_envs, config.num_steps, config.total_env_steps = 2, 4, 16
    >>> config.algo.batch_size, config.algo.learning_starts = 8, 8
    >>> config.policies.agent.hidden_sizes = (16,)
    >>> trainer = make_train(config, *jaxdrive.make("Pendulum-v1"))
    >>> state, metrics = jax.jit(trainer)(jax.random.key(0))
    >>> metrics["env_steps"].tolist()
    [8.0, 16.0]
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import struct

import jaxdrive
from algorithms.common import config as cfg
from algorithms.common.networks import DeterministicActor, QNetwork, activation_fn
from algorithms.ddpg import buffer as rb
from algorithms.ddpg import losses
from algorithms.ddpg import noise as nz
from jaxdrive.distributed import resolve_num_devices
from jaxdrive.spaces import Box
from jaxdrive.training import Trainer
from jaxdrive.types import TimeStep

__all__ = [
    "ALGO_DEFAULTS",
    "POLICY_DEFAULTS",
    "RUN_DEFAULTS",
    "PolicyState",
    "RunnerState",
    "default_config",
    "from_env_action",
    "make_train",
    "to_env_action",
]

#: ``config.algo`` keys and defaults. A policy's config may override any of them for
#: that policy only (e.g. ``policies.runner.noise_scale = 0.3``).
ALGO_DEFAULTS: dict[str, Any] = {
    "gamma": 0.99,  # discount
    "tau": 0.005,  # Polyak rate of the target networks
    "buffer_size": 100_000,  # replay capacity, in agent-transitions
    "batch_size": 256,  # transitions per gradient step
    "learning_starts": 1_000,  # env steps of uniform random actions before learning
    "updates_per_iteration": 1,  # gradient steps per iteration
    "noise": "gaussian",  # exploration noise: "gaussian" | "ou"
    "noise_scale": 0.1,  # noise multiplier, in normalised action units ([-1, 1])
    "ou_theta": 0.15,  # OU mean reversion per step
    "ou_sigma": 0.2,  # OU step standard deviation
    "max_grad_norm": 0.0,  # global-norm gradient clipping (0: off)
}
#: Keys of one policy's config (besides `ALGO_DEFAULTS` overrides) and their defaults.
POLICY_DEFAULTS: dict[str, Any] = {
    "groups": None,  # env groups this policy acts for (parameter sharing); required
    "actor_lr": 1e-3,  # Adam learning rate of the actor
    "critic_lr": 1e-3,  # Adam learning rate of the critic
    "hidden_sizes": (256, 256),  # MLP layers of actor and critic
    "activation": "relu",  # one of algorithms.common.networks.ACTIVATIONS
    "frozen": False,  # act (without noise) but never learn
}
#: Host-loop defaults written by `default_config` (``config.run`` is the host loop's).
RUN_DEFAULTS: dict[str, Any] = {
    "iterations_per_chunk": 100,
    "checkpoint_every_chunks": 10,
    "keep_checkpoints": 3,
}


def default_config() -> ml_collections.ConfigDict:
    """A complete DDPG config (Pendulum-v1, one policy ``"agent"``) to start from."""
    c = ml_collections.ConfigDict()
    c.env_name = "Pendulum-v1"
    c.env_kwargs = ml_collections.ConfigDict()
    c.algorithm = "ddpg"
    c.seed = 0
    c.num_envs = 4
    c.num_steps = 8
    c.total_env_steps = 100_000
    c.algo = ml_collections.ConfigDict(dict(ALGO_DEFAULTS))
    c.policies = ml_collections.ConfigDict()
    c.policies.agent = ml_collections.ConfigDict({**POLICY_DEFAULTS, "groups": ["agent"]})
    c.run = ml_collections.ConfigDict(dict(RUN_DEFAULTS))
    return c


# ----------------------------------------------------------------------------------------
# state
@struct.dataclass
class PolicyState:
    """One policy's learnable state (parameter pytrees and optax states)."""

    actor: Any  # actor params
    critic: Any  # critic params
    target_actor: Any  # Polyak-averaged copy of `actor`
    target_critic: Any  # Polyak-averaged copy of `critic`
    actor_opt: Any  # optax state of the actor's optimiser
    critic_opt: Any  # optax state of the critic's optimiser


@struct.dataclass
class RunnerState:
    """Everything one DDPG run carries between iterations (checkpointable as is)."""

    policies: dict[str, PolicyState]  # {policy: PolicyState}
    buffers: dict[str, rb.ReplayBuffer]  # {learning policy: buffer, leaves [C, ...]}
    env_state: Any  # batched env state, leaves [N, ...]
    timestep: TimeStep  # last timestep, leaves [N, ...]
    noise: dict[str, jax.Array]  # {g: [N, A_g, D]} float32 OU state (zeros for Gaussian)
    last_return: dict[str, jax.Array]  # {g: []} float32, last episodes' mean return (NaN: none)
    key: jax.Array  # uint32[2] raw PRNG key
    iteration: jax.Array  # [] int32, iterations done


# ----------------------------------------------------------------------------------------
# actions: the actor works in [-1, 1]^D; the env gets the Box's units
def to_env_action(a: jax.Array, space: Box) -> jax.Array:
    """Maps normalised ``a`` in ``[-1, 1]`` onto ``space``'s bounds: ``[..., D] -> [..., *S]``."""
    low = jnp.asarray(space.low, jnp.float32).reshape(-1)
    high = jnp.asarray(space.high, jnp.float32).reshape(-1)
    out = low + (jnp.clip(a, -1.0, 1.0) + 1.0) * 0.5 * (high - low)
    out = jnp.clip(out, low, high)
    return out.reshape(*a.shape[:-1], *space.shape).astype(space.dtype)


def from_env_action(x: jax.Array, space: Box) -> jax.Array:
    """Inverse of `to_env_action`: ``[..., *S] -> [..., D]`` in ``[-1, 1]``."""
    low = np.asarray(space.low, np.float32).reshape(-1)
    high = np.asarray(space.high, np.float32).reshape(-1)
    span = np.where(high > low, high - low, 1.0)
    x = jnp.asarray(x, jnp.float32)
    flat = x.reshape(*x.shape[: x.ndim - len(space.shape)], -1)
    return 2.0 * (flat - low) / span - 1.0


# ----------------------------------------------------------------------------------------
# config checking
@dataclasses.dataclass(frozen=True, eq=False)
class _Policy:
    """Static facts and settings of one policy, resolved from the config and the env."""

    name: str
    groups: tuple[str, ...]
    frozen: bool
    obs_shape: tuple[int, ...]
    space: Box
    action_dim: int  # D
    num_agents: int  # A_p
    hp: dict[str, Any]  # checked hyper-parameters (ALGO_DEFAULTS + POLICY_DEFAULTS keys)
    random_steps: int  # per-env steps of uniform random actions
    learn_from_iter: int  # first iteration (0-based) with gradient steps
    actor: DeterministicActor  # normalised output, in [-1, 1]
    critic: QNetwork
    actor_tx: optax.GradientTransformation
    critic_tx: optax.GradientTransformation

    def _flat(self, obs: jax.Array) -> jax.Array:
        lead = obs.shape[: obs.ndim - len(self.obs_shape)]
        return obs.astype(jnp.float32).reshape(*lead, -1)

    def mu(self, params: Any, obs: jax.Array) -> jax.Array:
        """Normalised actions ``μ(s)``: ``[..., *O] -> [..., D]`` in ``[-1, 1]``."""
        return self.actor.apply(params, self._flat(obs))

    def q(self, params: Any, obs: jax.Array, action: jax.Array) -> jax.Array:
        """``Q(s, a)`` for normalised ``a``: ``([..., *O], [..., D]) -> [...]``."""
        return self.critic.apply(params, self._flat(obs), action)


def _int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if int(value) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _float(value: Any, name: str, lo: float, hi: float, lo_open: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    bad_lo = v <= lo if lo_open else v < lo
    if bad_lo or v > hi or math.isnan(v):
        raise ValueError(f"{name} must lie in {'(' if lo_open else '['}{lo}, {hi}], got {value!r}")
    return v


def _check_hp(hp: dict[str, Any], where: str) -> dict[str, Any]:
    """Checks one policy's merged hyper-parameters; returns them as plain Python values.

    ``where`` names the policy in messages (its values come from ``config.algo`` or the
    policy's own overrides).
    """
    out = dict(hp)
    name = lambda k: f"{where}: {k}"
    out["gamma"] = _float(hp["gamma"], name("gamma"), 0.0, 1.0)
    out["tau"] = _float(hp["tau"], name("tau"), 0.0, 1.0, lo_open=True)
    out["buffer_size"] = _int(hp["buffer_size"], name("buffer_size"), 1)
    out["batch_size"] = _int(hp["batch_size"], name("batch_size"), 1)
    if out["batch_size"] > out["buffer_size"]:
        raise ValueError(
            f"{where}: batch_size={out['batch_size']} exceeds buffer_size={out['buffer_size']}"
        )
    out["learning_starts"] = _int(hp["learning_starts"], name("learning_starts"), 0)
    out["updates_per_iteration"] = _int(
        hp["updates_per_iteration"], name("updates_per_iteration"), 1
    )
    if hp["noise"] not in ("gaussian", "ou"):
        raise ValueError(f"{where}: noise must be 'gaussian' or 'ou', got {hp['noise']!r}")
    out["noise_scale"] = _float(hp["noise_scale"], name("noise_scale"), 0.0, math.inf)
    out["ou_theta"] = _float(hp["ou_theta"], name("ou_theta"), 0.0, 1.0, lo_open=True)
    out["ou_sigma"] = _float(hp["ou_sigma"], name("ou_sigma"), 0.0, math.inf)
    mgn = hp["max_grad_norm"]
    out["max_grad_norm"] = 0.0 if mgn is None else _float(mgn, name("max_grad_norm"), 0, math.inf)
    for k in ("actor_lr", "critic_lr"):
        out[k] = _float(hp[k], name(k), 0.0, math.inf, lo_open=True)
    out["hidden_sizes"] = tuple(_int(h, name("hidden_sizes"), 1) for h in hp["hidden_sizes"])
    activation_fn(hp["activation"])  # ValueError naming the known ones
    out["frozen"] = bool(hp["frozen"])
    return out


def _optimizer(lr: float, max_grad_norm: float) -> optax.GradientTransformation:
    adam = optax.adam(lr)
    if max_grad_norm > 0:
        return optax.chain(optax.clip_by_global_norm(max_grad_norm), adam)
    return adam


def _resolve(config: Any, env: Any) -> dict[str, _Policy]:
    """Checks ``config`` against ``env``; returns the policies' static descriptions."""
    num_envs, num_steps = int(config["num_envs"]), int(config["num_steps"])
    specs = cfg.resolve_policies(config, env, ALGO_DEFAULTS, POLICY_DEFAULTS)
    out = {}
    for name, spec in specs.items():
        where = f"policy {name!r}"
        space = spec.action_space
        if not isinstance(space, Box):
            raise ValueError(
                f"DDPG needs Box actions: group {spec.groups[0]!r} of {env.name} has action "
                f"space {space} (use PPO or A2C for Discrete/MultiDiscrete actions)"
            )
        if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            raise ValueError(
                f"DDPG needs Box actions with finite bounds (its actor is tanh-scaled); "
                f"group {spec.groups[0]!r} of {env.name} has {space}"
            )
        hp = _check_hp(spec.hp, where)
        action_dim = int(np.prod(space.shape, dtype=np.int64)) if space.shape else 1
        # learning starts after the first iteration that ends with enough env steps
        start = max(hp["learning_starts"], -(-hp["batch_size"] // spec.num_agents))
        out[name] = _Policy(
            name=name,
            groups=spec.groups,
            frozen=hp["frozen"],
            obs_shape=tuple(spec.obs_space.shape),
            space=space,
            action_dim=action_dim,
            num_agents=spec.num_agents,
            hp=hp,
            random_steps=-(-hp["learning_starts"] // num_envs),
            learn_from_iter=max(-(-start // (num_envs * num_steps)) - 1, 0),
            actor=DeterministicActor(
                action_dim,
                (-1.0,) * action_dim,
                (1.0,) * action_dim,
                hp["hidden_sizes"],
                hp["activation"],
            ),
            critic=QNetwork(hp["hidden_sizes"], hp["activation"]),
            actor_tx=_optimizer(hp["actor_lr"], hp["max_grad_norm"]),
            critic_tx=_optimizer(hp["critic_lr"], hp["max_grad_norm"]),
        )
    return out


def _as_raw_key(key: jax.Array) -> jax.Array:
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key)
    return key


# ----------------------------------------------------------------------------------------
def make_train(config: Any, env: Any = None, env_params: Any = None) -> Trainer:
    """Builds the DDPG `Trainer` for ``env`` (``jaxdrive.make(config.env_name)`` if None).

    Raises ``ValueError`` for unknown config keys, bad values, ``batch_size >
    buffer_size``, groups without a policy, or non-`Box` action spaces.
    """
    cfg.check_top_level(config)
    if config["algorithm"] != "ddpg":
        raise ValueError(
            f"config.algorithm must be 'ddpg' for algorithms.ddpg, got {config['algorithm']!r}"
        )
    num_iterations = cfg.num_iterations(config)
    n_dev = resolve_num_devices(cfg.as_dict(config).get("num_devices", 1), None)
    if n_dev != 1:
        raise ValueError(
            f"DDPG runs on one device for now (config.num_devices={n_dev}); use "
            "num_devices=1, or PPO/A2C for data-parallel training"
        )
    if env is None:
        env, made_params = cfg.make_env(config)
        env_params = made_params if env_params is None else env_params
    if env_params is None:
        env_params = env.default_params
    pols = _resolve(config, env)
    learners = [p for p in pols.values() if not p.frozen]

    N, T = int(config["num_envs"]), int(config["num_steps"])
    steps_per_iter = N * T
    venv = jaxdrive.vectorize(
        jaxdrive.wrappers.EpisodeStats(env), N, auto_reset=True, keep_final_obs=True
    )
    group_policy = {g: p for p in pols.values() for g in p.groups}

    # ---- init ---------------------------------------------------------------------
    def init_policy(key: jax.Array, p: _Policy) -> PolicyState:
        k_a, k_c = jax.random.split(key)
        obs = jnp.zeros((1, int(np.prod(p.obs_shape, dtype=np.int64))), jnp.float32)
        act = jnp.zeros((1, p.action_dim), jnp.float32)
        actor = p.actor.init(k_a, obs)
        critic = p.critic.init(k_c, obs, act)
        return PolicyState(
            actor=actor,
            critic=critic,
            target_actor=actor,
            target_critic=critic,
            actor_opt=p.actor_tx.init(actor),
            critic_opt=p.critic_tx.init(critic),
        )

    def init(key: jax.Array) -> RunnerState:
        key = jax.random.wrap_key_data(_as_raw_key(key))
        key, k_env, k_pol = jax.random.split(key, 3)
        pkeys = jax.random.split(k_pol, len(pols))
        policies = {n: init_policy(k, p) for (n, p), k in zip(pols.items(), pkeys, strict=True)}
        buffers = {
            p.name: rb.init(p.hp["buffer_size"], p.obs_shape, p.action_dim) for p in learners
        }
        env_state, ts = venv.reset(k_env, env_params)
        noise = {
            g: nz.ou_init((N, env.num_agents(g), group_policy[g].action_dim)) for g in env.groups
        }
        return RunnerState(
            policies=policies,
            buffers=buffers,
            env_state=env_state,
            timestep=ts,
            noise=noise,
            last_return={g: jnp.full((), jnp.nan, jnp.float32) for g in env.groups},
            key=jax.random.key_data(key),
            iteration=jnp.zeros((), jnp.int32),
        )

    # ---- acting -------------------------------------------------------------------
    def explore(key, policies, obs, noise, env_step):
        """Noisy normalised actions ``{g: [N, A_g, D]}`` and the next OU state.

        ``env_step``: [] int32 per-env steps taken before this one.
        """
        actions, new_noise = {}, {}
        gkeys = jax.random.split(key, len(env.groups))
        for g, k in zip(env.groups, gkeys, strict=True):
            p = group_policy[g]
            mu = p.mu(policies[p.name].actor, obs[g])
            if p.frozen:
                actions[g], new_noise[g] = mu, noise[g]
                continue
            k_noise, k_rand = jax.random.split(k)
            if p.hp["noise"] == "ou":
                x = nz.ou_step(k_noise, noise[g], p.hp["ou_theta"], p.hp["ou_sigma"])
                eps = p.hp["noise_scale"] * x
            else:
                x = noise[g]
                eps = nz.gaussian(k_noise, mu.shape, p.hp["noise_scale"])
            noisy = jnp.clip(mu + eps, -1.0, 1.0)
            if p.random_steps > 0:
                rand = jax.random.uniform(k_rand, mu.shape, jnp.float32, -1.0, 1.0)
                noisy = jnp.where(env_step < p.random_steps, rand, noisy)
            actions[g] = noisy
            new_noise[g] = x
        return actions, new_noise

    def rollout(rs: RunnerState, key: jax.Array):
        """``T`` steps of the ``N`` envs; returns the new carry and ``[T, N, ...]`` arrays."""

        def step(carry, xs):
            env_state, ts, noise = carry
            k, t = xs
            k_act, k_env = jax.random.split(k)
            a, noise = explore(k_act, rs.policies, ts.obs, noise, rs.iteration * T + t)
            env_a = {g: to_env_action(a[g], group_policy[g].space) for g in env.groups}
            env_state, nts = venv.step(k_env, env_state, env_a, env_params)
            noise = {g: nz.reset_where(nts.done, x) for g, x in noise.items()}
            out = {
                "obs": ts.obs,  # {g: [N, A_g, *O]}
                "action": a,  # {g: [N, A_g, D]} normalised
                "reward": nts.reward,  # {g: [N, A_g]}
                "next_obs": nts.extras["final_obs"],  # the episode's own next obs
                "terminated": nts.terminated,  # {g: [N, A_g]}
                "active": ts.active,  # {g: [N, A_g]} active when acting
                "done": nts.done,  # [N]
                "episode_return": nts.extras["episode_return"],  # {g: [N, A_g]}
            }
            return (env_state, nts, noise), out

        xs = (jax.random.split(key, T), jnp.arange(T, dtype=jnp.int32))
        return jax.lax.scan(step, (rs.env_state, rs.timestep, rs.noise), xs)

    def policy_batch(traj: dict[str, Any], p: _Policy) -> rb.Transition:
        """The rollout's transitions of ``p``'s agents, flattened to ``[T * N * A_p, ...]``."""

        def cat(field: str) -> jax.Array:
            x = jnp.concatenate([traj[field][g].astype(jnp.float32) for g in p.groups], axis=2)
            return x.reshape(-1, *x.shape[3:])

        return rb.Transition(
            obs=cat("obs"),
            action=cat("action"),
            reward=cat("reward"),
            next_obs=cat("next_obs"),
            terminated=cat("terminated"),
            active=cat("active"),
        )

    # ---- learning -----------------------------------------------------------------
    def gradient_step(p: _Policy, ps: PolicyState, buf: rb.ReplayBuffer, key: jax.Array):
        """Critic step, actor step (on the new critic), then Polyak target updates."""
        batch = rb.sample(buf, key, p.hp["batch_size"])
        (c_loss, q_mean), c_grads = jax.value_and_grad(losses.critic_loss, has_aux=True)(
            ps.critic, ps.target_actor, ps.target_critic, batch, p.hp["gamma"], p.mu, p.q
        )
        upd, critic_opt = p.critic_tx.update(c_grads, ps.critic_opt, ps.critic)
        critic = optax.apply_updates(ps.critic, upd)
        a_loss, a_grads = jax.value_and_grad(losses.actor_loss)(ps.actor, critic, batch, p.mu, p.q)
        upd, actor_opt = p.actor_tx.update(a_grads, ps.actor_opt, ps.actor)
        actor = optax.apply_updates(ps.actor, upd)
        tau = p.hp["tau"]
        new = PolicyState(
            actor=actor,
            critic=critic,
            target_actor=losses.soft_update(ps.target_actor, actor, tau),
            target_critic=losses.soft_update(ps.target_critic, critic, tau),
            actor_opt=actor_opt,
            critic_opt=critic_opt,
        )
        return new, {"actor": a_loss, "critic": c_loss, "q_mean": q_mean}

    def learn(p: _Policy, ps: PolicyState, buf: rb.ReplayBuffer, key: jax.Array, iteration):
        """``updates_per_iteration`` gradient steps (a scan) once learning has started."""

        def run(ps, key):
            keys = jax.random.split(key, p.hp["updates_per_iteration"])
            ps, stats = jax.lax.scan(lambda c, k: gradient_step(p, c, buf, k), ps, keys)
            return ps, jax.tree.map(jnp.mean, stats)

        def skip(ps, key):
            zero = jnp.zeros((), jnp.float32)
            return ps, {"actor": zero, "critic": zero, "q_mean": zero}

        return jax.lax.cond(iteration >= p.learn_from_iter, run, skip, ps, key)

    # ---- one iteration ------------------------------------------------------------
    def update(rs: RunnerState) -> tuple[RunnerState, dict[str, jax.Array]]:
        key = jax.random.wrap_key_data(rs.key)
        key, k_roll, k_learn = jax.random.split(key, 3)
        (env_state, ts, noise), traj = rollout(rs, k_roll)
        policies, buffers, stats = dict(rs.policies), {}, {}
        lkeys = jax.random.split(k_learn, max(len(learners), 1))
        for p, k in zip(learners, lkeys, strict=False):
            buffers[p.name] = rb.add_batch(rs.buffers[p.name], policy_batch(traj, p))
            policies[p.name], stats[p.name] = learn(
                p, rs.policies[p.name], buffers[p.name], k, rs.iteration
            )

        done = traj["done"].astype(jnp.float32)  # [T, N]
        n_done = jnp.sum(done)
        metrics: dict[str, jax.Array] = {}
        last_return = {}
        for g in env.groups:
            ret = jnp.mean(traj["episode_return"][g], axis=-1)  # [T, N]
            mean_ret = jnp.sum(ret * done) / jnp.maximum(n_done, 1.0)
            last_return[g] = jnp.where(n_done > 0, mean_ret, rs.last_return[g])
            metrics[f"episode_return/{g}"] = last_return[g]
        for name, st in stats.items():
            metrics[f"loss/{name}/actor"] = st["actor"]
            metrics[f"loss/{name}/critic"] = st["critic"]
            if len(stats) > 1:
                metrics[f"q_mean/{name}"] = st["q_mean"]
        q = [st["q_mean"] for st in stats.values()]
        metrics["q_mean"] = jnp.mean(jnp.stack(q)) if q else jnp.zeros((), jnp.float32)
        metrics["episodes_done"] = n_done
        iteration = rs.iteration + 1
        metrics["env_steps"] = iteration.astype(jnp.float32) * float(steps_per_iter)
        metrics = {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}
        new = RunnerState(
            policies=policies,
            buffers=buffers,
            env_state=env_state,
            timestep=ts,
            noise=noise,
            last_return=last_return,
            key=jax.random.key_data(key),
            iteration=iteration,
        )
        return new, metrics

    # ---- evaluation / export ------------------------------------------------------
    def get_params(rs: RunnerState) -> dict[str, Any]:
        """``{policy: {"actor": params, "critic": params}}``."""
        return {n: {"actor": ps.actor, "critic": ps.critic} for n, ps in rs.policies.items()}

    def act(
        params_by_policy: Mapping[str, Any],
        key: jax.Array,
        obs: Mapping[str, jax.Array],
        deterministic: bool = True,
    ) -> dict[str, jax.Array]:
        """Actions in env units: ``obs {g: [..., A_g, *O]} -> {g: [..., A_g, *S]}``.

        ``μ(s)`` when ``deterministic``; else plus Gaussian noise of the policy's
        exploration scale (for OU noise, its stationary std) for learning policies.
        ``params_by_policy[p]`` is `get_params`'s ``{"actor": ...}`` or the actor params.
        """
        out = {}
        keys = jax.random.split(key, len(env.groups))
        for g, k in zip(env.groups, keys, strict=True):
            if g not in obs:
                continue
            p = group_policy[g]
            params = params_by_policy[p.name]
            if isinstance(params, Mapping) and "actor" in params:
                params = params["actor"]
            a = p.mu(params, obs[g])
            if not deterministic and not p.frozen:
                scale = p.hp["noise_scale"]
                if p.hp["noise"] == "ou":
                    scale *= nz.ou_stationary_std(p.hp["ou_theta"], p.hp["ou_sigma"])
                a = a + nz.gaussian(k, a.shape, scale)
            out[g] = to_env_action(a, p.space)
        return out

    return Trainer(
        init=init,
        update=update,
        num_iterations=num_iterations,
        env_steps_per_iteration=steps_per_iter,
        config=config,
        get_params=get_params,
        act=act,
    )
