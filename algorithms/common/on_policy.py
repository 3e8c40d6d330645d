"""The on-policy actor-critic trainer shared by PPO and A2C.

`make_on_policy_trainer` builds a `jaxdrive.training.Trainer` whose ``update`` is one
whole iteration, pure and jittable:

1. **Rollout**: a `lax.scan` of ``T = num_steps`` steps of ``N = num_envs`` envs
   (``jaxdrive.vectorize(EpisodeStats(env), N, auto_reset=True, keep_final_obs=True)``).
   Each policy acts for the agents of its groups (concatenated on the agent axis,
   parameter sharing), storing ``[T, N, A_p, ...]`` observations, raw actions,
   behaviour log-probs, values, rewards, the ``active`` mask of the observation acted
   on, terminated/truncated flags and ``V(final_obs)`` for truncation bootstraps.
2. **Advantages** per policy: GAE(λ) over ``[T, N·A_p]`` (`algorithms.common.gae`),
   optionally on rewards scaled by a running std of discounted returns.
3. **Learning** per trained policy: ``num_epochs`` passes over ``num_minibatches``
   shuffled minibatches of the ``T·N·A_p`` samples (nested `lax.scan`), the algorithm's
   loss masked to active agents, ``clip_by_global_norm`` then Adam. Frozen policies
   act but are never updated (their normalisation statistics stay fixed too).

Observation normalisation (``normalize_obs``) keeps per-policy running statistics,
used unchanged for a whole iteration (rollout and learning) and updated at its end.

**Input padding** (``input_pad_multiple`` = m, per policy): flat observations ``[.., O]``
are zero-padded to ``O_pad`` = O rounded up to a multiple of m where the rollout builds
them (XLA fuses the pad into the observation's producer), and the trajectory stores
them padded, so the learning step's big GEMMs on ``[T·N·A_p, O_pad]`` need no pad of
their own and get 16-byte aligned operands (m = 8 turns Tag's O = 71 into 72). The
networks' first kernels stay ``[O, H]`` (`networks.PaddedInputDense`) and normalisation
statistics stay ``[O]``: parameters, checkpoints and results do not depend on m.
**Row padding**: each learning minibatch gets masked-out zero rows up to a multiple of
`row_multiple` (a power of two, ≤ 1.6% more rows), so GEMM row counts have a large
power-of-two factor (XLA otherwise pads the activations); every loss term is a masked
mean, so the update is unchanged.
A centralised critic (``centralized_critic``, MAPPO) reads
``concat(global_state, own normalised obs)``: the env's ``global_state`` broadcast to
every agent of the policy, then the agent's own observation (which identifies it).

**Several devices** (``config.num_devices`` = D > 1, `jaxdrive.distributed`): the env
batch is sharded over a 1-D mesh (axis ``"dev"``); each device runs the iteration on its
``N/D`` envs inside ``shard_map`` and the learning step combines devices exactly:
gradients, loss metrics and advantage-normalisation statistics are sums of per-device
masked sums divided by the global active count (``psum``), observation/return statistics
are pooled the same way, episode statistics are summed. Parameters and optimiser states
stay replicated (every device applies the same averaged gradient).

**Randomness does not depend on D**: every per-env random draw (action sampling, env
step and auto-reset) uses ``fold_in(key, global env index)``, and minibatches are
*stratified by env*: in each epoch every env permutes its own ``T·A_p`` samples (with
its own folded key) and minibatch ``j`` takes the ``j``-th slice of every env's
permutation. A device thus holds exactly its envs' share of every minibatch, and 1
device and D devices compute the same numbers up to floating-point summation order.
This needs ``num_minibatches`` to divide ``T·A_p``; when it does not (e.g. 25 steps ×
10 taggers in 4 minibatches) a single device shuffles the whole batch instead, and
several devices refuse the config.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

import jaxdrive
from algorithms.common.config import (
    COMPUTE_DTYPES,
    PolicySpec,
    as_dict,
    check_top_level,
    make_env,
    num_iterations,
    resolve_policies,
)
from algorithms.common.gae import bootstrap_values, gae_advantages
from algorithms.common.multi_policy import PolicyMap
from algorithms.common.networks import (
    HEAD_IMPLS,
    MLP_DENSE_IMPLS,
    ActionSpec,
    ActorCritic,
    activation_fn,
    cast_kernels,
    flat_obs_size,
    joint_head_params,
    log_prob_and_entropy,
    padded_size,
)
from algorithms.common.normalization import RunningMeanStd
from algorithms.common.schedules import SCHEDULES, make_schedule
from jaxdrive.distributed import (
    DEVICE_AXIS,
    make_mesh,
    maybe_psum,
    resolve_num_devices,
    shard_map,
)
from jaxdrive.training import Trainer
from jaxdrive.types import TimeStep
from jaxdrive.wrappers import merge_reset, select_tree

__all__ = [
    "LossFn",
    "PolicyState",
    "RunnerState",
    "make_on_policy_trainer",
    "masked_mean",
    "pad_minibatch_rows",
    "row_multiple",
]

#: ``loss_fn(logp, entropy, value, mb, hp, ent_coef) -> (loss, aux)``: ``logp``,
#: ``entropy``, ``value`` and every ``mb`` entry (``old_logp``, ``old_value``,
#: ``advantage`` (already normalised if asked), ``target``, ``mask``) are ``[M]``;
#: ``aux`` must hold float32 scalars ``policy``, ``value``, ``entropy`` (more allowed).
LossFn = Callable[..., tuple[jax.Array, dict[str, jax.Array]]]


def row_multiple(rows: int) -> int:
    """The row count a learning minibatch of ``rows`` samples is padded to a multiple of:
    the largest power of two ≤ ``rows / 64``, at most 4096 (≤ 1.6% extra rows).

    Measured on an H200 (Tag A2C, 2.5M rows): GEMMs whose row count has a large power of
    two factor run without XLA's activation pads, 427K → 482K env steps/s."""
    m = 1
    while m * 2 <= min(4096, rows // 64):
        m *= 2
    return m


def pad_minibatch_rows(mbs: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """Pads ``{k: [n_mb, rows, ...]}`` with masked-out zero rows (``mask`` False) up to a
    multiple of `row_multiple` ``(rows)``; every loss term is a masked mean, so the
    update is unchanged."""
    rows = mbs["mask"].shape[1]
    extra = -rows % row_multiple(rows)
    if extra == 0:
        return mbs
    return {k: jnp.pad(x, [(0, 0), (0, extra)] + [(0, 0)] * (x.ndim - 2)) for k, x in mbs.items()}


def masked_mean(x: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean of ``x`` over entries where ``mask`` (same shape) is True; 0 when none."""
    m = mask.astype(jnp.float32)
    return jnp.sum(x * m) / jnp.maximum(jnp.sum(m), 1.0)


@struct.dataclass
class PolicyState:
    """One policy's learner state."""

    params: Any  # flax variables {"params": ...} of its ActorCritic
    opt_state: Any  # optax state of clip_by_global_norm + adam
    obs_norm: RunningMeanStd  # mean/var [O] of flat observations (used if normalize_obs)
    ret_norm: RunningMeanStd  # mean/var [] of discounted returns (used if normalize_rewards)
    ret_acc: jax.Array  # [N, A_p] float32 running discounted return per agent slot


@struct.dataclass
class RunnerState:
    """Everything one training run carries between iterations (checkpointable)."""

    policies: dict[str, PolicyState]  # by policy name
    env_state: Any  # batched env state, leaves [N, ...]
    timestep: TimeStep  # last batched timestep, leaves [N, ...]
    key: jax.Array  # [2] uint32 raw PRNG key
    iteration: jax.Array  # [] int32 iterations done


def _rms_update(
    rms: RunningMeanStd, x: jax.Array, mask: jax.Array, axis_name: str | None
) -> RunningMeanStd:
    """``rms.update(x [M, *S], mask [M])`` pooled over the devices of ``axis_name``."""
    if axis_name is None:
        return rms.update(x, mask)
    x = x.astype(jnp.float32)
    w = mask.astype(jnp.float32).reshape(mask.shape + (1,) * (x.ndim - 1))
    n = jax.lax.psum(jnp.sum(mask.astype(jnp.float32)), axis_name)
    safe_n = jnp.maximum(n, 1.0)
    b_mean = jax.lax.psum(jnp.sum(x * w, axis=0), axis_name) / safe_n
    b_var = jax.lax.psum(jnp.sum(w * (x - b_mean) ** 2, axis=0), axis_name) / safe_n
    tot = rms.count + n
    delta = b_mean - rms.mean
    mean = rms.mean + delta * n / tot
    m2 = rms.var * rms.count + b_var * n + delta**2 * rms.count * n / tot
    return RunningMeanStd(mean=mean, var=m2 / tot, count=tot)


def _check_positive_int(hp: Mapping[str, Any], key: str, where: str) -> int:
    v = hp[key]
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
        raise ValueError(f"{where}.{key} must be a positive integer, got {v!r}")
    return int(v)


def _check_hparams(
    spec: PolicySpec, batch: int, fixed_steps: bool, per_env: int, num_devices: int
) -> ActionSpec:
    """Checks one policy's hyper-parameters; returns its `ActionSpec`."""
    hp = spec.hp
    where = f"policy {spec.name!r}"
    for k in ("gamma", "gae_lambda"):
        if not 0.0 <= float(hp[k]) <= 1.0:
            raise ValueError(f"{where}: {k} must lie in [0, 1], got {hp[k]}")
    for k in ("lr", "max_grad_norm", "adam_eps"):
        if not float(hp[k]) > 0.0:
            raise ValueError(f"{where}: {k} must be > 0, got {hp[k]}")
    for k in ("lr_schedule", "ent_schedule"):
        if hp[k] not in SCHEDULES:
            raise ValueError(f"{where}: {k} must be one of {SCHEDULES}, got {hp[k]!r}")
    activation_fn(hp["activation"])
    if not hp["hidden_sizes"]:
        raise ValueError(f"{where}: hidden_sizes must list at least one layer size")
    if hp["centralized_critic"] and hp["shared_torso"]:
        raise ValueError(f"{where}: shared_torso cannot be combined with centralized_critic")
    _check_positive_int(hp, "input_pad_multiple", where)
    if hp["compute_dtype"] not in COMPUTE_DTYPES:
        raise ValueError(
            f"{where}: compute_dtype must be one of {COMPUTE_DTYPES}, got {hp['compute_dtype']!r}"
        )
    if hp["head_impl"] not in HEAD_IMPLS:
        raise ValueError(f"{where}: head_impl must be one of {HEAD_IMPLS}, got {hp['head_impl']!r}")
    if hp["dense_impl"] not in MLP_DENSE_IMPLS:
        raise ValueError(
            f"{where}: dense_impl must be one of {MLP_DENSE_IMPLS}, got {hp['dense_impl']!r}"
        )
    if hp["dense_impl"] not in ("auto", "xla") and (
        hp["compute_dtype"] != "bfloat16" or hp["activation"] != "relu"
    ):
        raise ValueError(
            f"{where}: dense_impl={hp['dense_impl']!r} needs compute_dtype='bfloat16' and "
            f"activation='relu', got {hp['compute_dtype']!r} and {hp['activation']!r}"
        )
    if not fixed_steps:
        epochs = _check_positive_int(hp, "num_epochs", where)
        mbs = _check_positive_int(hp, "num_minibatches", where)
        del epochs
        if batch % mbs:
            raise ValueError(
                f"{where}: num_minibatches={mbs} does not divide its batch of "
                f"num_steps*num_envs*agents = {batch} samples"
            )
        if per_env % mbs and num_devices > 1:
            raise ValueError(
                f"{where}: num_minibatches={mbs} does not divide num_steps*agents = {per_env}, "
                "the samples of one env: with num_devices > 1 minibatches take an equal share "
                "of every env's samples (so that results do not depend on the device count)"
            )
    try:
        return ActionSpec.from_space(
            spec.action_space, hp["action_head"], float(hp["log_std_init"])
        )
    except ValueError as e:
        raise ValueError(f"{where} (groups {list(spec.groups)}): {e}") from None


def make_on_policy_trainer(
    config: Any,
    env: Any,
    env_params: Any,
    *,
    algo_name: str,
    algo_defaults: Mapping[str, Any],
    loss_fn: LossFn,
    single_step: bool = False,
) -> Trainer:
    """Builds the trainer (see the module docstring).

    ``single_step``: one gradient step on the whole batch per iteration (A2C); the
    ``num_epochs``/``num_minibatches`` keys are then not used.
    """
    check_top_level(config)
    if config["algorithm"] != algo_name:
        raise ValueError(
            f"config.algorithm is {config['algorithm']!r} but this is the {algo_name!r} "
            "trainer; use algorithms.make_train to dispatch"
        )
    if env is None:
        env, env_params = make_env(config)
    if env_params is None:
        env_params = env.default_params
    n_iter = num_iterations(config)
    N, T = int(config["num_envs"]), int(config["num_steps"])
    n_dev = resolve_num_devices(as_dict(config).get("num_devices", 1), N)
    axis = DEVICE_AXIS if n_dev > 1 else None  # collectives only on a real mesh
    NL = N // n_dev  # envs per device
    specs = resolve_policies(config, env, algo_defaults)
    if "run" in as_dict(config) and config["run"] is not None:
        as_dict(config["run"], "config.run")

    pmap = PolicyMap({p: s.groups for p, s in specs.items()}, env.agent_counts)
    names = tuple(specs)
    stats_env = jaxdrive.wrappers.EpisodeStats(env)
    # Envs with `observations` (Tag) reset the state and build observations once per step;
    # the final observation is then rebuilt from the final state only when needed.
    fast_reset = stats_env.reset_by_select
    venv = jaxdrive.vectorize(stats_env, N, auto_reset=True, keep_final_obs=not fast_reset)

    # ---- static per-policy setup -------------------------------------------------------
    nets: dict[str, ActorCritic] = {}
    txs: dict[str, optax.GradientTransformation] = {}
    action_specs: dict[str, ActionSpec] = {}
    obs_sizes: dict[str, int] = {}  # O: flat observation size
    in_sizes: dict[str, int] = {}  # O_pad: O padded to a multiple of input_pad_multiple
    epochs: dict[str, int] = {}
    minibatches: dict[str, int] = {}
    # dtype of the stored trajectory's observations: the network's compute dtype when the
    # network casts them to it first thing (no normalisation in between), else float32
    obs_dtypes: dict[str, Any] = {}
    for p, s in specs.items():
        hp = s.hp
        batch = T * N * s.num_agents
        action_specs[p] = _check_hparams(s, batch, single_step, T * s.num_agents, n_dev)
        epochs[p] = 1 if single_step else int(hp["num_epochs"])
        minibatches[p] = 1 if single_step else int(hp["num_minibatches"])
        obs_sizes[p] = flat_obs_size(s.obs_space)
        in_sizes[p] = padded_size(obs_sizes[p], int(hp["input_pad_multiple"]))
        padded = in_sizes[p] > obs_sizes[p]
        nets[p] = ActorCritic(
            action_specs[p],
            hp["hidden_sizes"],
            hp["activation"],
            bool(hp["shared_torso"]),
            obs_features=obs_sizes[p] if padded else None,
            critic_features=obs_sizes[p] if padded and not hp["centralized_critic"] else None,
            compute_dtype=jnp.dtype(hp["compute_dtype"]),
            bias_column=padded,
            dense_impl=hp["dense_impl"],
        )
        bf16 = hp["compute_dtype"] == "bfloat16" and not hp["normalize_obs"]
        obs_dtypes[p] = jnp.bfloat16 if bf16 else jnp.float32
        lr = make_schedule(
            hp["lr_schedule"], float(hp["lr"]), 0.0, n_iter * epochs[p] * minibatches[p]
        )
        txs[p] = optax.chain(
            optax.clip_by_global_norm(float(hp["max_grad_norm"])),
            optax.adam(lr, eps=float(hp["adam_eps"])),
        )
    ent_schedules = {
        p: make_schedule(
            s.hp["ent_schedule"], float(s.hp["ent_coef"]), float(s.hp["ent_coef_final"]), n_iter
        )
        for p, s in specs.items()
    }
    need_gs = any(bool(s.hp["centralized_critic"]) for s in specs.values())
    gs_size = 0
    if need_gs:
        try:
            shape = jax.eval_shape(
                lambda k: env.global_state(env.reset(k, env_params)[0], env_params),
                jax.random.key(0),
            )
        except NotImplementedError as e:
            raise ValueError(
                f"centralized_critic needs env.global_state, which {env.name} lacks: {e}"
            ) from None
        gs_size = int(np.prod(shape.shape, dtype=np.int64))

    def global_state(env_state: Any) -> jax.Array:
        gs = jax.vmap(stats_env.global_state, in_axes=(0, None))(env_state, env_params)
        return gs.reshape(gs.shape[0], -1).astype(jnp.float32)

    def env_ids() -> jax.Array:
        """``[NL]`` int32 global indices of this device's envs."""
        ids = jnp.arange(NL, dtype=jnp.int32)
        return ids if axis is None else ids + jax.lax.axis_index(axis) * NL

    def env_keys(key: jax.Array, ids: jax.Array) -> jax.Array:
        """``[NL]`` keys ``fold_in(key, global env index)``: the same for any D."""
        return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, ids)

    def reset_one(key: jax.Array):
        state, ts = stats_env.reset(key, env_params)
        if fast_reset:
            return state, ts
        return state, ts.replace(extras={**ts.extras, "final_obs": ts.obs})

    def env_step(key: jax.Array, ids: jax.Array, env_state: Any, actions: Any):
        """Steps this device's envs with per-env keys, auto-resetting finished ones
        (as `jaxdrive.vectorize` does). Returns ``(state, ts, final_obs)``:
        ``final_obs()`` gives the observations before the reset (call it only under a
        branch taken when some env is done: with ``fast_reset`` it rebuilds them)."""
        keys = jax.vmap(jax.random.split)(env_keys(key, ids))  # [NL, 2]
        state, ts = jax.vmap(stats_env.step, in_axes=(0, 0, 0, None))(
            keys[:, 0], env_state, actions, env_params
        )
        if fast_reset:
            r_state, r_ts = jax.vmap(reset_one)(keys[:, 1])
            final_state = state
            state = jax.vmap(select_tree)(ts.done, r_state, state)
            active = jax.vmap(select_tree)(ts.done, r_ts.active, ts.active)
            observe = jax.vmap(stats_env.observations, in_axes=(0, None))
            ts = ts.replace(obs=observe(state, env_params), active=active)
            return state, ts, lambda: observe(final_state, env_params)

        def with_reset(operand):
            state, ts = operand
            r_state, r_ts = jax.vmap(reset_one)(keys[:, 1])
            return jax.vmap(lambda d, s, t, rs, rt: merge_reset(d, s, t, rs, rt, True))(
                ts.done, state, ts, r_state, r_ts
            )

        def without_reset(operand):
            state, ts = operand
            return state, ts.replace(extras={**ts.extras, "final_obs": ts.obs})

        state, ts = jax.lax.cond(jnp.any(ts.done), with_reset, without_reset, (state, ts))
        return state, ts, lambda: ts.extras["final_obs"]

    def flat_obs(p: str, obs: jax.Array, lead: int) -> jax.Array:
        """``[*lead_dims, *O] -> [*lead_dims, O_pad]`` float32: padded with one 1.0 (the
        first layer's bias column, see `PaddedInputDense`) and then zeros."""
        x = obs.reshape(*obs.shape[:lead], obs_sizes[p]).astype(jnp.float32)
        extra = in_sizes[p] - obs_sizes[p]
        if extra:
            pad = jnp.zeros((extra,), jnp.float32).at[0].set(1.0)
            x = jnp.concatenate([x, jnp.broadcast_to(pad, (*x.shape[:-1], extra))], -1)
        return x

    def padded_norm(p: str, rms: RunningMeanStd) -> RunningMeanStd:
        """``rms`` ``[O]`` extended to ``[O_pad]`` (mean 0, var 1: the padding, its bias
        column's 1.0 included, is left as it is)."""
        extra = in_sizes[p] - obs_sizes[p]
        if not extra:
            return rms
        return RunningMeanStd(
            mean=jnp.pad(rms.mean, (0, extra)),
            var=jnp.pad(rms.var, (0, extra), constant_values=1.0),
            count=rms.count,
        )

    def normalize(p: str, rms: RunningMeanStd, x: jax.Array) -> jax.Array:
        """``x [..., O_pad]`` normalised if the policy asks (padding stays zero)."""
        return padded_norm(p, rms).normalize(x) if specs[p].hp["normalize_obs"] else x

    def critic_input(p: str, gs: jax.Array, x: jax.Array) -> jax.Array:
        """``concat(gs, x without its padding)``: ``[..., D + O]``."""
        return jnp.concatenate([gs, x[..., : obs_sizes[p]]], -1)

    def inputs(p: str, ps: PolicyState, obs: jax.Array, gs: jax.Array | None):
        """Network inputs of policy ``p``: obs ``[..., O_pad]`` (flat), gs ``[..., D]``."""
        x = normalize(p, ps.obs_norm, obs)
        if specs[p].hp["centralized_critic"]:
            return x, critic_input(p, jnp.broadcast_to(gs, (*x.shape[:-1], gs.shape[-1])), x)
        return x, None

    # ---- init --------------------------------------------------------------------------
    def init(key: jax.Array) -> RunnerState:
        key = jnp.asarray(key)
        if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
            key = jax.random.key_data(key)
        k_env, k_run, *k_pol = jax.random.split(jax.random.wrap_key_data(key), 2 + len(names))
        env_state, ts = venv.reset(k_env, env_params)
        pols = {}
        for p, k in zip(names, k_pol, strict=True):
            x = jnp.zeros((1, in_sizes[p]), jnp.float32)
            c = (
                jnp.zeros((1, gs_size + obs_sizes[p]))
                if specs[p].hp["centralized_critic"]
                else None
            )
            params = nets[p].init(k, x, c)
            pols[p] = PolicyState(
                params=params,
                opt_state=txs[p].init(params),
                obs_norm=RunningMeanStd.create((obs_sizes[p],)),
                ret_norm=RunningMeanStd.create(()),
                ret_acc=jnp.zeros((N, specs[p].num_agents), jnp.float32),
            )
        return RunnerState(
            policies=pols,
            env_state=env_state,
            timestep=ts,
            key=jax.random.key_data(k_run),
            iteration=jnp.zeros((), jnp.int32),
        )

    # ---- rollout -----------------------------------------------------------------------
    def rollout(rs: RunnerState, key: jax.Array):
        pols = rs.policies
        # kernels cast to the compute dtype once per rollout (XLA does not hoist the
        # network's casts out of the loop), and a shared torso's joint head built once
        act_params = {
            p: cast_kernels(pols[p].params, jnp.dtype(specs[p].hp["compute_dtype"])) for p in names
        }
        joints = {
            p: joint_head_params(act_params[p], action_specs[p])
            if specs[p].hp["shared_torso"]
            else None
            for p in names
        }

        ids = env_ids()

        def step(carry, k):
            env_state, ts = carry
            k_env, *k_pol = jax.random.split(k, 1 + len(names))
            gs = global_state(env_state) if need_gs else None  # [NL, D]
            gs_b = None if gs is None else gs[:, None, :]
            obs_p = pmap.to_policy(ts.obs, axis=1)
            active_p = pmap.to_policy(ts.active, axis=1)
            out, env_actions = {}, {}
            for p, kp in zip(names, k_pol, strict=True):
                obs = flat_obs(p, obs_p[p], 2)  # [NL, A_p, O]
                x, c = inputs(p, pols[p], obs, gs_b)

                def act_one(x, c, k, p=p):  # one env: x [A_p, O], c [A_p, C] or None
                    dist, value = nets[p].apply(act_params[p], x, c, joints[p], method="act")
                    raw = dist.sample(k)
                    return raw, dist.log_prob(raw), value, dist.to_env(raw)

                raw, logp, value, env_actions[p] = jax.vmap(act_one)(x, c, env_keys(kp, ids))
                out[p] = {
                    "obs": obs.astype(obs_dtypes[p]),
                    "action": raw,
                    "logp": logp,
                    "value": value,
                    "active": active_p[p],
                }
            env_state, nts, final_obs = env_step(
                k_env, ids, env_state, pmap.to_groups(env_actions, axis=1)
            )

            def final_values(_):
                final_p = pmap.to_policy(final_obs(), axis=1)
                vals = {}
                for p in names:
                    obs = flat_obs(p, final_p[p], 2)
                    x, c = inputs(p, pols[p], obs, gs_b)
                    vals[p] = nets[p].apply(act_params[p], x, c, method="value")
                return vals

            def no_values(_):
                return {p: jnp.zeros((NL, specs[p].num_agents), jnp.float32) for p in names}

            fv = jax.lax.cond(jnp.any(nts.done), final_values, no_values, None)
            rew_p = pmap.to_policy(nts.reward, axis=1)
            term_p = pmap.to_policy(nts.terminated, axis=1)
            trunc_p = pmap.to_policy(nts.truncated, axis=1)
            for p in names:
                out[p].update(
                    reward=rew_p[p].astype(jnp.float32),
                    terminated=term_p[p],
                    ends=term_p[p] | trunc_p[p] | nts.done[:, None],
                    final_value=fv[p],
                )
            done_f = nts.done.astype(jnp.float32)  # [NL]
            stats = {
                "episodes_done": jnp.sum(done_f),
                "episode_length": jnp.sum(done_f * nts.extras["episode_length"]),
            }
            for g in env.groups:
                ret = jnp.mean(nts.extras["episode_return"][g], axis=-1)
                stats[f"episode_return/{g}"] = jnp.sum(done_f * ret)
            if need_gs:
                out["_gs"] = gs
            return (env_state, nts), (out, stats)

        (env_state, ts), (traj, stats) = jax.lax.scan(
            step, (rs.env_state, rs.timestep), jax.random.split(key, T)
        )
        # Values of the observation after the last step, for the bootstrap.
        gs = global_state(env_state) if need_gs else None
        obs_p = pmap.to_policy(ts.obs, axis=1)
        last_values = {}
        for p in names:
            x, c = inputs(p, pols[p], flat_obs(p, obs_p[p], 2), None if gs is None else gs[:, None])
            last_values[p] = nets[p].apply(act_params[p], x, c, method="value")
        return env_state, ts, traj, stats, last_values, gs

    # ---- learning ----------------------------------------------------------------------
    def learn(p: str, ps: PolicyState, tr: dict, last_value, gs_all, ent_coef, key):
        """Advantages and the update epochs of policy ``p``; returns (state, metrics)."""
        hp = specs[p].hp
        A = specs[p].num_agents
        B = NL * A
        M = T * B

        def tb(x):  # [T, NL, A_p, ...] -> [T, B, ...]
            return x.reshape(T, B, *x.shape[3:])

        reward, value, active = tb(tr["reward"]), tb(tr["value"]), tb(tr["active"])
        ends, term = tb(tr["ends"]), tb(tr["terminated"])
        ret_norm, ret_acc = ps.ret_norm, ps.ret_acc
        if hp["normalize_rewards"]:

            def acc_body(acc, x):
                r, end = x
                acc = acc * hp["gamma"] + r
                return jnp.where(end, 0.0, acc), acc

            ret_acc, rets = jax.lax.scan(acc_body, ret_acc.reshape(B), (reward, ends))
            ret_acc = ret_acc.reshape(NL, A)
            ret_norm = _rms_update(ret_norm, rets.reshape(M), active.reshape(M), axis)
            reward = reward / ret_norm.std
        next_values = bootstrap_values(
            value, last_value.reshape(B), term, ends, tb(tr["final_value"])
        )
        adv, targets = gae_advantages(
            reward, value, next_values, ends, hp["gamma"], hp["gae_lambda"]
        )
        batch = {
            "obs": tr["obs"].reshape(M, in_sizes[p]),
            "action": tr["action"].reshape(M, *tr["action"].shape[3:]),
            "old_logp": tr["logp"].reshape(M),
            "old_value": value.reshape(M),
            "advantage": adv.reshape(M),
            "target": targets.reshape(M),
            "mask": active.reshape(M),
        }
        if hp["centralized_critic"]:
            batch["row"] = jnp.arange(M, dtype=jnp.int32) // A  # index into gs_all [T*NL, D]
        n_mb, n_ep = minibatches[p], epochs[p]
        net, tx = nets[p], txs[p]
        obs_norm = ps.obs_norm

        def gmean(x, mask):  # masked mean over the whole (all-device) batch
            m = mask.astype(jnp.float32)
            num = maybe_psum(jnp.sum(x * m), axis)
            return num / jnp.maximum(maybe_psum(jnp.sum(m), axis), 1.0)

        def loss(params, mb):
            x = normalize(p, obs_norm, mb["obs"])
            c = critic_input(p, gs_all[mb["row"]], x) if hp["centralized_critic"] else None
            dist, v = net.apply(params, x, c)
            logp, ent = log_prob_and_entropy(dist, mb["action"], hp["head_impl"])
            a = mb["advantage"]
            if hp["normalize_advantages"]:
                mu = gmean(a, mb["mask"])
                sd = jnp.sqrt(gmean((a - mu) ** 2, mb["mask"]))
                a = (a - mu) / (sd + 1e-8)
            total, aux = loss_fn(logp, ent, v, {**mb, "advantage": a}, hp, ent_coef)
            log_ratio = logp - mb["old_logp"]
            aux = dict(aux)
            aux["approx_kl"] = masked_mean(jnp.expm1(log_ratio) - log_ratio, mb["mask"])
            if axis is not None:
                # The loss is a masked mean over the minibatch: its all-device value is
                # the per-device values weighted by active counts (psum'd after grad).
                cnt = jnp.sum(mb["mask"].astype(jnp.float32))
                wgt = cnt / jnp.maximum(jax.lax.psum(cnt, axis), 1.0)
                total = total * wgt
                aux = {k: val * wgt for k, val in aux.items()}
            return total, aux

        grad_fn = jax.value_and_grad(loss, has_aux=True)

        def mb_step(carry, mb):
            params, opt_state = carry
            (_, aux), grads = grad_fn(params, mb)
            grads, aux = maybe_psum((grads, aux), axis)
            aux["grad_norm"] = optax.global_norm(grads)
            updates, opt_state = tx.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
            return (params, opt_state), aux

        S = T * A  # samples of one env
        ids = env_ids()

        def epoch(carry, k):
            if n_mb == 1 and n_ep == 1:
                mbs = jax.tree.map(lambda x: x[None], batch)
            elif S % n_mb:  # one device only (checked): shuffle the whole batch
                perm = jax.random.permutation(k, M)
                mbs = jax.tree.map(lambda x: x[perm].reshape(n_mb, M // n_mb, *x.shape[1:]), batch)
            else:
                # Stratified by env: env n's S samples permuted with fold_in(k, n); the
                # j-th minibatch is the j-th slice of every env's permutation.
                perm = jax.vmap(lambda kk: jax.random.permutation(kk, S))(env_keys(k, ids))

                def split(x):  # [M = T·NL·A, ...] -> [n_mb, NL·S/n_mb, ...]
                    x = x.reshape(T, NL, A, *x.shape[1:])
                    x = jnp.moveaxis(x, 1, 0).reshape(NL, S, *x.shape[3:])
                    x = jnp.take_along_axis(x, perm.reshape(NL, S, *([1] * (x.ndim - 2))), axis=1)
                    x = x.reshape(NL, n_mb, S // n_mb, *x.shape[2:])
                    return jnp.moveaxis(x, 1, 0).reshape(n_mb, NL * (S // n_mb), *x.shape[3:])

                mbs = jax.tree.map(split, batch)
            return jax.lax.scan(mb_step, carry, pad_minibatch_rows(mbs))

        (params, opt_state), aux = jax.lax.scan(
            epoch, (ps.params, ps.opt_state), jax.random.split(key, n_ep)
        )
        metrics = {f"loss/{p}/{k}": jnp.mean(v).astype(jnp.float32) for k, v in aux.items()}
        mask = batch["mask"]
        resid = batch["target"] - batch["old_value"]
        var_t = gmean((batch["target"] - gmean(batch["target"], mask)) ** 2, mask)
        var_r = gmean((resid - gmean(resid, mask)) ** 2, mask)
        metrics[f"loss/{p}/explained_variance"] = jnp.where(
            var_t > 0, 1.0 - var_r / jnp.maximum(var_t, 1e-12), 0.0
        ).astype(jnp.float32)
        metrics[f"loss/{p}/ent_coef"] = jnp.asarray(ent_coef, jnp.float32)
        if hp["normalize_obs"]:
            upd = _rms_update(padded_norm(p, obs_norm), batch["obs"], mask, axis)
            O = obs_sizes[p]
            obs_norm = RunningMeanStd(mean=upd.mean[:O], var=upd.var[:O], count=upd.count)
        new_ps = PolicyState(
            params=params,
            opt_state=opt_state,
            obs_norm=obs_norm,
            ret_norm=ret_norm,
            ret_acc=ret_acc,
        )
        return new_ps, metrics

    # ---- one iteration -----------------------------------------------------------------
    def update(rs: RunnerState) -> tuple[RunnerState, dict[str, jax.Array]]:
        key = jax.random.wrap_key_data(rs.key)
        key, k_roll, *k_learn = jax.random.split(key, 2 + len(names))
        env_state, ts, traj, stats, last_values, _ = rollout(rs, k_roll)
        gs_all = traj["_gs"].reshape(T * NL, gs_size) if need_gs else None
        metrics: dict[str, jax.Array] = {}
        new_pols = dict(rs.policies)
        for p, k in zip(names, k_learn, strict=True):
            if specs[p].frozen:
                continue
            ent_coef = ent_schedules[p](rs.iteration)
            new_pols[p], m = learn(p, rs.policies[p], traj[p], last_values[p], gs_all, ent_coef, k)
            metrics.update(m)
        stats = maybe_psum(jax.tree.map(jnp.sum, stats), axis)  # all devices' episodes
        n_done = stats["episodes_done"]
        denom = jnp.maximum(n_done, 1.0)
        metrics["episodes_done"] = n_done.astype(jnp.float32)
        metrics["episode_length"] = (stats["episode_length"] / denom).astype(jnp.float32)
        for g in env.groups:
            s = stats[f"episode_return/{g}"] / denom
            metrics[f"episode_return/{g}"] = s.astype(jnp.float32)
        metrics["env_steps"] = ((rs.iteration + 1).astype(jnp.float32) * float(N * T)).astype(
            jnp.float32
        )
        new_rs = RunnerState(
            policies=new_pols,
            env_state=env_state,
            timestep=ts,
            key=jax.random.key_data(key),
            iteration=rs.iteration + 1,
        )
        return new_rs, metrics

    # ---- acting ------------------------------------------------------------------------
    def get_params(rs: RunnerState) -> dict[str, Any]:
        """``{policy: {"params": flax variables, "obs_norm": RunningMeanStd}}``."""
        return {p: {"params": ps.params, "obs_norm": ps.obs_norm} for p, ps in rs.policies.items()}

    def act(
        params_by_policy: Mapping[str, Any],
        key: jax.Array,
        obs: Mapping[str, jax.Array],
        deterministic: bool = False,
    ) -> dict[str, jax.Array]:
        """Env actions ``{g: [..., A_g, *act_shape]}`` for ``obs {g: [..., A_g, *O_g]}``.

        ``deterministic`` takes each distribution's mode; otherwise samples with ``key``.
        """
        if not isinstance(obs, Mapping):
            obs = {env.groups[0]: obs}
        if jnp.asarray(key).dtype == jnp.uint32:
            key = jax.random.wrap_key_data(key)
        keys = jax.random.split(key, len(names))
        out = {}
        for p, k in zip(names, keys, strict=True):
            s = specs[p]
            nd = len(s.obs_space.shape)
            parts = [obs[g] for g in s.groups]
            lead = parts[0].ndim - nd  # [..., A_g]
            x = jnp.concatenate(parts, axis=lead - 1) if len(parts) > 1 else parts[0]
            x = x.reshape(*x.shape[:lead], obs_sizes[p]).astype(jnp.float32)
            if s.hp["normalize_obs"]:
                x = params_by_policy[p]["obs_norm"].normalize(x)
            dist = nets[p].apply(params_by_policy[p]["params"], x, method="policy")
            raw = dist.mode() if deterministic else dist.sample(k)
            a = dist.to_env(raw)
            start = 0
            for g in s.groups:
                n = env.num_agents(g)
                out[g] = jax.lax.slice_in_dim(a, start, start + n, axis=lead - 1)
                start += n
        return {g: out[g] for g in env.groups}

    if axis is not None:
        init, update = _shard_trainer(init, update, make_mesh(n_dev), names)

    return Trainer(
        init=init,
        update=update,
        num_iterations=n_iter,
        env_steps_per_iteration=N * T,
        config=config,
        get_params=get_params,
        act=act,
    )


def _state_specs(rs: RunnerState) -> RunnerState:
    """PartitionSpecs of a runner state: env parts split on the env axis, rest replicated."""
    from jax.sharding import PartitionSpec as P

    def rep(t):
        return jax.tree.map(lambda _: P(), t)

    def shd(t):
        return jax.tree.map(lambda _: P(DEVICE_AXIS), t)

    pols = {
        p: PolicyState(
            params=rep(ps.params),
            opt_state=rep(ps.opt_state),
            obs_norm=rep(ps.obs_norm),
            ret_norm=rep(ps.ret_norm),
            ret_acc=P(DEVICE_AXIS),
        )
        for p, ps in rs.policies.items()
    }
    return RunnerState(
        policies=pols,
        env_state=shd(rs.env_state),
        timestep=shd(rs.timestep),
        key=P(),
        iteration=P(),
    )


def _shard_trainer(init: Callable, update: Callable, mesh: Any, names: tuple[str, ...]):
    """``(init, update)`` over ``mesh``: ``init`` returns globally sharded states (the
    same global computation as one device), ``update`` runs per device in ``shard_map``."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    del names
    specs = _state_specs(jax.eval_shape(init, jax.random.PRNGKey(0)))
    shardings = jax.tree.map(lambda s: NamedSharding(mesh, s), specs)
    sharded_init = jax.jit(init, out_shardings=shardings)
    sharded_update = shard_map(update, mesh=mesh, in_specs=(specs,), out_specs=(specs, P()))
    return sharded_init, sharded_update
