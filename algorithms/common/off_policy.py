"""The off-policy trainer skeleton shared by DDPG, TD3 and SAC, fused into one program.

`make_off_policy_trainer` builds a `jaxdrive.training.Trainer` whose ``update`` is one
whole iteration, pure and jittable; an algorithm supplies its networks, its policy
state, how it explores and acts, and one gradient step (an `OffPolicyAlgorithm`):

1. a `lax.scan` of ``num_steps`` steps over ``num_envs`` vmapped envs: each policy's
   actor acts on its groups' observations with the algorithm's exploration (uniform
   random actions until ``learning_starts`` env steps);
2. every transition, one per agent, goes into its policy's device-side replay buffer
   (`algorithms.ddpg.buffer`; ``next_obs`` is the episode's last observation where it
   ended, so a truncated episode bootstraps from it; ``terminated`` stops the
   bootstrap);
3. once ``learning_starts`` env steps are done and the buffer holds ``batch_size``
   transitions, a `lax.scan` of ``updates_per_iteration`` gradient steps per learning
   policy (under a `lax.cond`: one program serves both phases).

Actors work in normalised action units, ``[-1, 1]^D``; `to_env_action` maps them onto
the `Box` bounds. Policies serve groups (parameter sharing; the groups of a policy need
the same observation shape and `Box` action space), each with its own networks,
optimisers and buffer, and may override any ``config.algo`` key for itself; a ``frozen``
policy acts deterministically and never learns (it keeps no buffer). One device only.

Metrics (float32 scalars per iteration): ``loss/<policy>/<name>`` for every statistic of
the algorithm's gradient step but ``q_mean`` (means over the iteration's gradient steps;
0 before learning starts), ``q_mean`` (mean ``Q(s, a)`` on the sampled batches, averaged
over learning policies; ``q_mean/<policy>`` too when there are several),
``episode_return/<group>`` (mean over the group's agents and the episodes that ended in
this iteration; the last value when none ended, NaN before the first), ``episodes_done``
and ``env_steps``.

Dimension letters: ``T`` steps per iteration, ``N`` envs, ``A_g`` agents of group ``g``,
``A_p`` agents served by policy ``p``, ``O`` one agent's observation shape, ``D`` its
action size, ``C`` buffer capacity, ``K`` critics of a `TwinQNetwork`, ``B`` a batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

import jaxdrive
from algorithms.common import config as cfg
from algorithms.common.config_rules import COMMON_RULES, Rule, integer, max_grad_norm_or_off, number
from algorithms.common.networks import DeterministicActor, QNetwork
from algorithms.ddpg import buffer as rb
from algorithms.ddpg import noise as nz
from jaxdrive.spaces import Box
from jaxdrive.training import Trainer
from jaxdrive.types import TimeStep

__all__ = [
    "REPLAY_DEFAULTS",
    "REPLAY_RULES",
    "OffPolicy",
    "OffPolicyAlgorithm",
    "RunnerState",
    "TwinQNetwork",
    "actor_apply",
    "critic_apply",
    "default_config",
    "deterministic_act",
    "deterministic_actor",
    "deterministic_explore",
    "from_env_action",
    "init_networks",
    "make_off_policy_trainer",
    "optimizer",
    "policy_batch",
    "scaled_rewards",
    "to_env_action",
]


#: The ``config.algo`` keys every off-policy algorithm has, with their defaults.
REPLAY_DEFAULTS: dict[str, Any] = {
    "gamma": 0.99,  # discount
    "tau": 0.005,  # Polyak rate of the target networks
    "buffer_size": 100_000,  # replay capacity, in agent-transitions
    "batch_size": 256,  # transitions per gradient step
    "learning_starts": 1_000,  # env steps of uniform random actions before learning
    "updates_per_iteration": 1,  # gradient steps per iteration
    "max_grad_norm": 0.0,  # global-norm gradient clipping (0: off)
}
#: Value rules of the `REPLAY_DEFAULTS` keys, the common ones and the learning rates.
REPLAY_RULES: dict[str, Rule] = {
    **COMMON_RULES,
    "tau": number(0.0, 1.0, lo_open=True),
    "buffer_size": integer(1),
    "batch_size": integer(1),
    "learning_starts": integer(0),
    "updates_per_iteration": integer(1),
    "max_grad_norm": max_grad_norm_or_off,  # 0 or None: no clipping
    "actor_lr": number(0.0, lo_open=True),
    "critic_lr": number(0.0, lo_open=True),
}


# ----------------------------------------------------------------------------------------
# state
@struct.dataclass
class RunnerState:
    """Everything one off-policy run carries between iterations (checkpointable as is)."""

    policies: dict[str, Any]  # {policy: the algorithm's policy state}
    buffers: dict[str, rb.ReplayBuffer]  # {learning policy: buffer, leaves [C, ...]}
    env_state: Any  # batched env state, leaves [N, ...]
    timestep: TimeStep  # last timestep, leaves [N, ...]
    noise: dict[str, jax.Array]  # {g: [N, A_g, D]} float32 OU state (zeros otherwise)
    last_return: dict[str, jax.Array]  # {g: []} float32, last episodes' mean return (0: none)
    returns_seen: jax.Array  # [] bool, an episode has ended (last_return holds its mean)
    key: jax.Array  # uint32[2] raw PRNG key
    iteration: jax.Array  # [] int32, iterations done


# ----------------------------------------------------------------------------------------
# actions: the actors work in [-1, 1]^D; the env gets the Box's units
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
# networks and optimisers
class TwinQNetwork(nn.Module):
    """``num_critics`` independent `QNetwork`s: ``([..., O], [..., D]) -> [K, ...]``."""

    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    num_critics: int = 2

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        ensemble = nn.vmap(
            QNetwork,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=None,
            out_axes=0,
            axis_size=self.num_critics,
        )
        return ensemble(self.hidden_sizes, self.activation, name="critics")(obs, action)


def deterministic_actor(p: OffPolicy) -> DeterministicActor:
    """``p``'s deterministic actor MLP, tanh output in ``[-1, 1]^D`` (DDPG, TD3)."""
    d, hp = p.action_dim, p.hp
    return DeterministicActor(d, (-1.0,) * d, (1.0,) * d, hp["hidden_sizes"], hp["activation"])


def actor_apply(p: OffPolicy, params: Any, obs: jax.Array) -> Any:
    """``p.nets.actor`` on flattened ``obs [..., *O]``: DDPG/TD3 actions ``[..., D]`` in
    ``[-1, 1]``, SAC's distribution."""
    return p.nets.actor.apply(params, p.flat(obs))


def critic_apply(p: OffPolicy, params: Any, obs: jax.Array, action: jax.Array) -> jax.Array:
    """``p.nets.critic`` on ``(obs [..., *O], normalised action [..., D])``: ``[...]``,
    or ``[K, ...]`` for a `TwinQNetwork`."""
    return p.nets.critic.apply(params, p.flat(obs), action)


def init_networks(key: jax.Array, p: OffPolicy) -> tuple[Any, Any]:
    """Fresh ``(actor params, critic params)`` of ``p.nets`` (from one key, split)."""
    k_a, k_c = jax.random.split(key)
    obs = jnp.zeros((1, p.obs_size), jnp.float32)
    act = jnp.zeros((1, p.action_dim), jnp.float32)
    return p.nets.actor.init(k_a, obs), p.nets.critic.init(k_c, obs, act)


def default_config(algorithm: str) -> Any:
    """A complete config of ``algorithm`` (Pendulum-v1, one policy ``"agent"``) to start
    from: `algorithms.common.config.base_config` with 8 steps per iteration."""
    c = cfg.base_config(algorithm, "Pendulum-v1")
    c.num_steps = 8
    return c


def optimizer(lr: float, max_grad_norm: float) -> optax.GradientTransformation:
    """Adam with ``lr``, after global-norm clipping when ``max_grad_norm > 0``."""
    adam = optax.adam(lr)
    if max_grad_norm > 0:
        return optax.chain(optax.clip_by_global_norm(max_grad_norm), adam)
    return adam


# ----------------------------------------------------------------------------------------
# policies
@dataclasses.dataclass(frozen=True, eq=False)
class OffPolicy:
    """Static facts and settings of one policy, resolved from the config and the env;
    ``nets`` holds what the algorithm built for it (networks, optimisers)."""

    name: str
    groups: tuple[str, ...]
    frozen: bool
    obs_shape: tuple[int, ...]
    space: Box
    action_dim: int  # D
    num_agents: int  # A_p
    hp: dict[str, Any]  # checked hyper-parameters (the algorithm's defaults' keys)
    random_steps: int  # per-env steps of uniform random actions
    learn_from_iter: int  # first iteration (0-based) with gradient steps
    nets: Any = None

    @property
    def obs_size(self) -> int:
        return int(np.prod(self.obs_shape, dtype=np.int64))

    def flat(self, obs: jax.Array) -> jax.Array:
        """``[..., *O] -> [..., prod(O)]`` float32."""
        lead = obs.shape[: obs.ndim - len(self.obs_shape)]
        return obs.astype(jnp.float32).reshape(*lead, -1)


@dataclasses.dataclass(frozen=True, eq=False)
class OffPolicyAlgorithm:
    """What an off-policy algorithm plugs into `make_off_policy_trainer`.

    * ``build(policy) -> nets``: the policy's networks and optimisers (static).
    * ``init_policy(key, policy) -> policy state`` (a pytree).
    * ``explore(policy, state, key, obs [N, A_g, *O], noise [N, A_g, D]) -> (actions
      [N, A_g, D] in [-1, 1], new noise)``: a learning policy's behaviour actions.
    * ``mean_action(policy, actor params, obs [..., *O]) -> [..., D]``: its deterministic
      action (frozen policies act with it; so does ``act(deterministic=True)``).
    * ``sample_action(policy, actor params, key, obs) -> [..., D]``: a behaviour action
      without a noise state (``act(deterministic=False)``).
    * ``gradient_step(policy, state, buffer, key) -> (state, stats)``: one update on a
      sampled batch; ``stats``: float32 scalars, one of them ``q_mean``.
    """

    name: str  # the config's algorithm name, e.g. "sac"
    label: str  # how messages name it, e.g. "SAC"
    algo_defaults: Mapping[str, Any]
    policy_defaults: Mapping[str, Any]
    rules: Mapping[str, Rule]
    build: Callable[[OffPolicy], Any]
    init_policy: Callable[[jax.Array, OffPolicy], Any]
    explore: Callable[..., tuple[jax.Array, jax.Array]]
    mean_action: Callable[[OffPolicy, Any, jax.Array], jax.Array]
    sample_action: Callable[[OffPolicy, Any, jax.Array, jax.Array], jax.Array]
    gradient_step: Callable[..., tuple[Any, dict[str, jax.Array]]]


def _resolve(run: cfg.RunSpec, algo: OffPolicyAlgorithm) -> dict[str, OffPolicy]:
    """The policies' static descriptions; ``ValueError`` for what the algorithm cannot
    serve (non-`Box` or unbounded actions, ``batch_size > buffer_size``)."""
    env, num_envs, num_steps = run.env, run.num_envs, run.num_steps
    out = {}
    for name, spec in run.policies.items():
        space = spec.action_space
        if not isinstance(space, Box):
            raise ValueError(
                f"{algo.label} needs Box actions: group {spec.groups[0]!r} of {env.name} has "
                f"action space {space} (use PPO or A2C for Discrete/MultiDiscrete actions)"
            )
        if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            raise ValueError(
                f"{algo.label} needs Box actions with finite bounds (its actor is "
                f"tanh-scaled); group {spec.groups[0]!r} of {env.name} has {space}"
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
        pol = OffPolicy(
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
        )
        out[name] = dataclasses.replace(pol, nets=algo.build(pol))
    return out


def _as_raw_key(key: jax.Array) -> jax.Array:
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key)
    return key


def policy_batch(traj: dict[str, Any], p: OffPolicy) -> rb.Transition:
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


def scaled_rewards(batch: rb.Transition, scale: float) -> rb.Transition:
    """``batch`` with its rewards times ``scale`` (``batch`` itself for 1)."""
    return batch if scale == 1.0 else batch.replace(reward=batch.reward * scale)


# ----------------------------------------------------------------------------------------
# exploration of deterministic actors (DDPG, TD3): Gaussian or Ornstein–Uhlenbeck noise
def deterministic_explore(
    p: OffPolicy, ps: Any, key: jax.Array, obs: jax.Array, noise: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """``clip(μ(s) + ε, ±1)`` and the next noise state: ``ε = noise_scale · x`` for the OU
    process ``x`` (``noise == "ou"``), else ``ε ~ N(0, noise_scale²)``; ``obs [..., *O]``,
    ``noise [..., D]`` (DDPG, TD3: the ``explore`` hook). ``noise_scale`` is the state's
    (``ps.hparams``, a population member's) where the state holds it."""
    hp = p.hp
    scale = getattr(ps, "hparams", {}).get("noise_scale", hp["noise_scale"])
    mu = actor_apply(p, ps.actor, obs)
    if hp["noise"] == "ou":
        x = nz.ou_step(key, noise, hp["ou_theta"], hp["ou_sigma"])
        eps = scale * x
    else:
        x = noise
        eps = nz.gaussian(key, mu.shape, scale)
    return jnp.clip(mu + eps, -1.0, 1.0), x


def deterministic_act(p: OffPolicy, params: Any, key: jax.Array, obs: jax.Array) -> jax.Array:
    """``μ(s)`` plus Gaussian noise of the exploration scale (for OU noise, its stationary
    std): the noisy action of `Trainer.act` without a noise state (DDPG, TD3)."""
    hp = p.hp
    mu = actor_apply(p, params, obs)
    scale = hp["noise_scale"]
    if hp["noise"] == "ou":
        scale *= nz.ou_stationary_std(hp["ou_theta"], hp["ou_sigma"])
    return mu + nz.gaussian(key, mu.shape, scale)


# ----------------------------------------------------------------------------------------
def _learn(algo: OffPolicyAlgorithm, p: OffPolicy, ps: Any, buf: rb.ReplayBuffer, key, iteration):
    """``updates_per_iteration`` gradient steps (a scan) once learning has started."""

    def run(ps, key):
        keys = jax.random.split(key, p.hp["updates_per_iteration"])
        ps, stats = jax.lax.scan(lambda c, k: algo.gradient_step(p, c, buf, k), ps, keys)
        return ps, jax.tree.map(jnp.mean, stats)

    shapes = jax.eval_shape(run, ps, key)[1]

    def skip(ps, key):
        return ps, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    return jax.lax.cond(iteration >= p.learn_from_iter, run, skip, ps, key)


def make_off_policy_trainer(
    config: Any, env: Any, env_params: Any, algo: OffPolicyAlgorithm
) -> Trainer:
    """Builds ``algo``'s `Trainer` for ``env`` (``jaxdrive.make(config.env_name)`` if None).

    Raises ``ValueError`` for unknown config keys, bad values, ``batch_size >
    buffer_size``, groups without a policy, non-`Box` action spaces or several devices.
    """
    run = cfg.resolve_run(
        config,
        env,
        env_params,
        algorithm=algo.name,
        algo_defaults=algo.algo_defaults,
        policy_defaults=algo.policy_defaults,
        rules=algo.rules,
    )
    if run.num_devices != 1:
        raise ValueError(
            f"{algo.label} runs on one device for now (config.num_devices={run.num_devices}); "
            "use num_devices=1, or PPO/A2C for data-parallel training"
        )
    env, env_params, num_iterations = run.env, run.env_params, run.num_iterations
    pols = _resolve(run, algo)
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
        policies = {
            n: algo.init_policy(k, p) for (n, p), k in zip(pols.items(), pkeys, strict=True)
        }
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
            last_return={g: jnp.zeros((), jnp.float32) for g in env.groups},
            returns_seen=jnp.zeros((), bool),
            key=jax.random.key_data(key),
            iteration=jnp.zeros((), jnp.int32),
        )

    # ---- acting -------------------------------------------------------------------
    def explore(key, policies, obs, noise, env_step):
        """Behaviour actions ``{g: [N, A_g, D]}`` (normalised) and the next noise state.

        ``env_step``: [] int32 per-env steps taken before this one.
        """
        actions, new_noise = {}, {}
        gkeys = jax.random.split(key, len(env.groups))
        for g, k in zip(env.groups, gkeys, strict=True):
            p = group_policy[g]
            if p.frozen:
                actions[g] = algo.mean_action(p, policies[p.name].actor, obs[g])
                new_noise[g] = noise[g]
                continue
            k_noise, k_rand = jax.random.split(k)
            a, new_noise[g] = algo.explore(p, policies[p.name], k_noise, obs[g], noise[g])
            if p.random_steps > 0:
                rand = jax.random.uniform(k_rand, a.shape, jnp.float32, -1.0, 1.0)
                a = jnp.where(env_step < p.random_steps, rand, a)
            actions[g] = a
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

    # ---- one iteration ------------------------------------------------------------
    def update(rs: RunnerState) -> tuple[RunnerState, dict[str, jax.Array]]:
        key = jax.random.wrap_key_data(rs.key)
        key, k_roll, k_learn = jax.random.split(key, 3)
        (env_state, ts, noise), traj = rollout(rs, k_roll)
        policies, buffers, stats = dict(rs.policies), {}, {}
        lkeys = jax.random.split(k_learn, max(len(learners), 1))
        for p, k in zip(learners, lkeys, strict=False):
            buffers[p.name] = rb.add_batch(rs.buffers[p.name], policy_batch(traj, p))
            policies[p.name], stats[p.name] = _learn(
                algo, p, rs.policies[p.name], buffers[p.name], k, rs.iteration
            )

        done = traj["done"].astype(jnp.float32)  # [T, N]
        n_done = jnp.sum(done)
        metrics: dict[str, jax.Array] = {}
        last_return, seen = {}, rs.returns_seen | (n_done > 0)  # NaN metric until one ends
        for g in env.groups:
            ret = jnp.mean(traj["episode_return"][g], axis=-1)  # [T, N]
            mean_ret = jnp.sum(ret * done) / jnp.maximum(n_done, 1.0)
            last_return[g] = jnp.where(n_done > 0, mean_ret, rs.last_return[g])
            metrics[f"episode_return/{g}"] = jnp.where(seen, last_return[g], jnp.nan)
        for name, st in stats.items():
            for k, v in st.items():
                if k != "q_mean":
                    metrics[f"loss/{name}/{k}"] = v
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
            returns_seen=seen,
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

        The policy's deterministic action when ``deterministic`` (and for frozen
        policies); else the algorithm's behaviour action without a noise state.
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
            if deterministic or p.frozen:
                a = algo.mean_action(p, params, obs[g])
            else:
                a = algo.sample_action(p, params, k, obs[g])
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
