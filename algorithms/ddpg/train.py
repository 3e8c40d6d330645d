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
deterministically and never learns (it keeps no buffer). The learning rates, ``gamma``,
``tau`` and ``noise_scale`` (`HPARAM_KEYS`) are read from the policy's state
(``PolicyState.hparams``), so vmapped members of a population may differ in them.

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
from algorithms.common.networks import DeterministicActor, QNetwork
from algorithms.ddpg import buffer as rb
from algorithms.ddpg import losses
from algorithms.ddpg import noise as nz
from jaxdrive.spaces import Box
from jaxdrive.training import Trainer
from jaxdrive.types import TimeStep

__all__ = [
    "ALGO_DEFAULTS",
    "HPARAM_KEYS",
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
    "activation": "relu",  # one of algorithms.common.layers.ACTIVATIONS
    "frozen": False,  # act (without noise) but never learn
}
#: DDPG's host-loop defaults, over `algorithms.common.config.RUN_DEFAULTS`: its
#: iterations are short (a few env steps each), so a chunk holds more of them.
RUN_DEFAULTS: dict[str, Any] = {"iterations_per_chunk": 100}
#: Hyper-parameters kept in each policy's state (``PolicyState.hparams``) and read from
#: there, so that members of a population (`algorithms.population`) may differ in them.
HPARAM_KEYS = ("actor_lr", "critic_lr", "gamma", "tau", "noise_scale")


def default_config() -> ml_collections.ConfigDict:
    """A complete DDPG config (Pendulum-v1, one policy ``"agent"``) to start from:
    `algorithms.common.config.base_config` with 8 steps per iteration."""
    c = cfg.base_config("ddpg", "Pendulum-v1")
    c.num_steps = 8
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
    hparams: dict[str, jax.Array]  # {name: [] float32} of HPARAM_KEYS (may vary per member)


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

    def txs(self, hparams: dict[str, jax.Array]) -> tuple[Any, Any]:
        """The actor's and the critic's optimisers at ``hparams``' learning rates."""
        mgn = self.hp["max_grad_norm"]
        return _optimizer(hparams["actor_lr"], mgn), _optimizer(hparams["critic_lr"], mgn)

    def _flat(self, obs: jax.Array) -> jax.Array:
        lead = obs.shape[: obs.ndim - len(self.obs_shape)]
        return obs.astype(jnp.float32).reshape(*lead, -1)

    def mu(self, params: Any, obs: jax.Array) -> jax.Array:
        """Normalised actions ``μ(s)``: ``[..., *O] -> [..., D]`` in ``[-1, 1]``."""
        return self.actor.apply(params, self._flat(obs))

    def q(self, params: Any, obs: jax.Array, action: jax.Array) -> jax.Array:
        """``Q(s, a)`` for normalised ``a``: ``([..., *O], [..., D]) -> [...]``."""
        return self.critic.apply(params, self._flat(obs), action)


def _optimizer(lr: float, max_grad_norm: float) -> optax.GradientTransformation:
    adam = optax.adam(lr)
    if max_grad_norm > 0:
        return optax.chain(optax.clip_by_global_norm(max_grad_norm), adam)
    return adam


def _resolve(run: cfg.RunSpec) -> dict[str, _Policy]:
    """The policies' static descriptions; ``ValueError`` for what DDPG cannot serve."""
    env, num_envs, num_steps = run.env, run.num_envs, run.num_steps
    out = {}
    for name, spec in run.policies.items():
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
        hp = spec.hp
        if hp["batch_size"] > hp["buffer_size"]:
            raise ValueError(
                f"policy {name!r}: batch_size={hp['batch_size']} exceeds "
                f"buffer_size={hp['buffer_size']}"
            )
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
        )
    return out


def _as_raw_key(key: jax.Array) -> jax.Array:
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key)
    return key


# ----------------------------------------------------------------------------------------
# one policy's initial state, transitions and learning step
def _init_policy(key: jax.Array, p: _Policy) -> PolicyState:
    """Fresh actor and critic parameters (targets equal to them) and optimiser states."""
    k_a, k_c = jax.random.split(key)
    obs = jnp.zeros((1, int(np.prod(p.obs_shape, dtype=np.int64))), jnp.float32)
    act = jnp.zeros((1, p.action_dim), jnp.float32)
    actor = p.actor.init(k_a, obs)
    critic = p.critic.init(k_c, obs, act)
    hparams = {k: jnp.asarray(p.hp[k], jnp.float32) for k in HPARAM_KEYS}
    actor_tx, critic_tx = p.txs(hparams)
    return PolicyState(
        actor=actor,
        critic=critic,
        target_actor=actor,
        target_critic=critic,
        actor_opt=actor_tx.init(actor),
        critic_opt=critic_tx.init(critic),
        hparams=hparams,
    )


def _policy_batch(traj: dict[str, Any], p: _Policy) -> rb.Transition:
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


def _gradient_step(p: _Policy, ps: PolicyState, buf: rb.ReplayBuffer, key: jax.Array):
    """Critic step, actor step (on the new critic), then Polyak target updates."""
    batch = rb.sample(buf, key, p.hp["batch_size"])
    hp = ps.hparams
    actor_tx, critic_tx = p.txs(hp)
    (c_loss, q_mean), c_grads = jax.value_and_grad(losses.critic_loss, has_aux=True)(
        ps.critic, ps.target_actor, ps.target_critic, batch, hp["gamma"], p.mu, p.q
    )
    upd, critic_opt = critic_tx.update(c_grads, ps.critic_opt, ps.critic)
    critic = optax.apply_updates(ps.critic, upd)
    a_loss, a_grads = jax.value_and_grad(losses.actor_loss)(ps.actor, critic, batch, p.mu, p.q)
    upd, actor_opt = actor_tx.update(a_grads, ps.actor_opt, ps.actor)
    actor = optax.apply_updates(ps.actor, upd)
    tau = hp["tau"]
    new = ps.replace(
        actor=actor,
        critic=critic,
        target_actor=losses.soft_update(ps.target_actor, actor, tau),
        target_critic=losses.soft_update(ps.target_critic, critic, tau),
        actor_opt=actor_opt,
        critic_opt=critic_opt,
    )
    return new, {"actor": a_loss, "critic": c_loss, "q_mean": q_mean}


def _learn(p: _Policy, ps: PolicyState, buf: rb.ReplayBuffer, key: jax.Array, iteration):
    """``updates_per_iteration`` gradient steps (a scan) once learning has started."""

    def run(ps, key):
        keys = jax.random.split(key, p.hp["updates_per_iteration"])
        ps, stats = jax.lax.scan(lambda c, k: _gradient_step(p, c, buf, k), ps, keys)
        return ps, jax.tree.map(jnp.mean, stats)

    def skip(ps, key):
        zero = jnp.zeros((), jnp.float32)
        return ps, {"actor": zero, "critic": zero, "q_mean": zero}

    return jax.lax.cond(iteration >= p.learn_from_iter, run, skip, ps, key)


# ----------------------------------------------------------------------------------------
def make_train(config: Any, env: Any = None, env_params: Any = None) -> Trainer:
    """Builds the DDPG `Trainer` for ``env`` (``jaxdrive.make(config.env_name)`` if None).

    Raises ``ValueError`` for unknown config keys, bad values, ``batch_size >
    buffer_size``, groups without a policy, or non-`Box` action spaces.
    """
    run = cfg.resolve_run(
        config,
        env,
        env_params,
        algorithm="ddpg",
        algo_defaults=ALGO_DEFAULTS,
        policy_defaults=POLICY_DEFAULTS,
        rules=cfg.DDPG_RULES,
    )
    if run.num_devices != 1:
        raise ValueError(
            f"DDPG runs on one device for now (config.num_devices={run.num_devices}); use "
            "num_devices=1, or PPO/A2C for data-parallel training"
        )
    env, env_params, num_iterations = run.env, run.env_params, run.num_iterations
    pols = _resolve(run)
    learners = [p for p in pols.values() if not p.frozen]

    N, T = run.num_envs, run.num_steps
    steps_per_iter = N * T
    venv = jaxdrive.vectorize(
        jaxdrive.wrappers.EpisodeStats(env), N, auto_reset=True, keep_final_obs=True
    )
    group_policy = {g: p for p in pols.values() for g in p.groups}

    # ---- init ---------------------------------------------------------------------
    def init(key: jax.Array) -> RunnerState:
        key = jax.random.wrap_key_data(_as_raw_key(key))
        key, k_env, k_pol = jax.random.split(key, 3)
        pkeys = jax.random.split(k_pol, len(pols))
        policies = {n: _init_policy(k, p) for (n, p), k in zip(pols.items(), pkeys, strict=True)}
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
                eps = policies[p.name].hparams["noise_scale"] * x
            else:
                x = noise[g]
                eps = nz.gaussian(k_noise, mu.shape, policies[p.name].hparams["noise_scale"])
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

    # ---- learning -----------------------------------------------------------------
    # ---- one iteration ------------------------------------------------------------
    def update(rs: RunnerState) -> tuple[RunnerState, dict[str, jax.Array]]:
        key = jax.random.wrap_key_data(rs.key)
        key, k_roll, k_learn = jax.random.split(key, 3)
        (env_state, ts, noise), traj = rollout(rs, k_roll)
        policies, buffers, stats = dict(rs.policies), {}, {}
        lkeys = jax.random.split(k_learn, max(len(learners), 1))
        for p, k in zip(learners, lkeys, strict=False):
            buffers[p.name] = rb.add_batch(rs.buffers[p.name], _policy_batch(traj, p))
            policies[p.name], stats[p.name] = _learn(
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
