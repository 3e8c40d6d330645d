"""The on-policy actor-critic trainer shared by PPO and A2C.

`make_on_policy_trainer` builds a `jaxdrive.training.Trainer` whose ``update`` is one
whole iteration, pure and jittable. The pieces: `algorithms.common.on_policy_setup`
(the static setup built from the checked config, and the learner state),
`algorithms.common.on_policy_rollout` (step 1) and `algorithms.common.on_policy_learn`
(steps 2 and 3).

1. **Rollout**: a `lax.scan` of ``T = num_steps`` steps of ``N = num_envs`` envs
   (``jaxdrive.vectorize(EpisodeStats(env), N, auto_reset=True, keep_final_obs=True)``).
   Each policy acts for the agents of its groups (concatenated on the agent axis,
   parameter sharing), storing ``[T, N, A_p, ...]`` observations, raw actions,
   behaviour log-probs, values, rewards, the ``active`` mask of the observation acted
   on, terminated/truncated flags and ``V(final_obs)`` for truncation bootstraps.
   Where the env gives action masks (`jaxdrive.types.TimeStep.action_mask`), actions
   are sampled from the masked distribution and the mask is stored for learning.
2. **Advantages** per policy: GAE(λ) over ``[T, N·A_p]`` (`algorithms.common.gae`),
   optionally on rewards scaled by a running std of discounted returns.
3. **Learning** per trained policy: ``num_epochs`` passes over ``num_minibatches``
   shuffled minibatches of the ``T·N·A_p`` samples (nested `lax.scan`), the algorithm's
   loss masked to active agents (log-probs and entropies of the action-masked
   distribution where the env gives masks), ``clip_by_global_norm`` then Adam. Frozen
   policies act but are never updated (their normalisation statistics stay fixed too).

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
stay replicated (every device applies the same averaged gradient). With
``config.partitioner = "auto"`` the update is instead the one-device program over all
``N`` envs, the runner state sharded the same way, and XLA's partitioner splits it and
inserts the collectives (for envs whose code XLA cannot compile inside ``shard_map``:
the MJX envs); the numbers are the same.

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

from collections import ChainMap
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from algorithms.common.config import POLICY_DEFAULTS as _COMMON_POLICY_DEFAULTS
from algorithms.common.config import resolve_run
from algorithms.common.config_rules import ON_POLICY_RULES, flag
from algorithms.common.networks import mask_actions
from algorithms.common.normalization import RunningMeanStd
from algorithms.common.on_policy_learn import learn, masked_mean, pad_minibatch_rows, row_multiple
from algorithms.common.on_policy_rollout import rollout
from algorithms.common.on_policy_setup import (
    LossFn,
    OnPolicySetup,
    PolicyState,
    RunnerState,
    build_setup,
)
from algorithms.common.recurrent import RECURRENT_POLICY_DEFAULTS, RECURRENT_RULES, initial_carry
from jaxdrive.distributed import DEVICE_AXIS, make_mesh, maybe_psum, shard_map
from jaxdrive.training import Trainer

__all__ = [
    "AGENT_ID_DEFAULTS",
    "POLICY_DEFAULTS",
    "POLICY_RULES",
    "LossFn",
    "PolicyState",
    "RunnerState",
    "make_on_policy_trainer",
    "masked_mean",
    "pad_minibatch_rows",
    "row_multiple",
]


#: The agent-ID policy key: ``agent_ids`` appends one-hot agent indices within the group
#: (and group indices when the policy serves several groups) to its observations
#: (`jaxdrive.agent_ids`).
AGENT_ID_DEFAULTS: dict[str, Any] = {"agent_ids": False}

#: Keys of one PPO/A2C policy's config and their defaults: the recurrent cores'
#: (`algorithms.common.recurrent.RECURRENT_POLICY_DEFAULTS`), `AGENT_ID_DEFAULTS` and
#: `algorithms.common.config.POLICY_DEFAULTS`, read live (each default in one place).
POLICY_DEFAULTS: Mapping[str, Any] = ChainMap(
    RECURRENT_POLICY_DEFAULTS, AGENT_ID_DEFAULTS, _COMMON_POLICY_DEFAULTS
)
#: Value rules of PPO's and A2C's hyper-parameters (`POLICY_DEFAULTS` and ``algo`` keys).
POLICY_RULES = {**ON_POLICY_RULES, **RECURRENT_RULES, "agent_ids": flag}


def make_on_policy_trainer(
    config: Any,
    env: Any,
    env_params: Any,
    *,
    algo_name: str,
    algo_defaults: Mapping[str, Any],
    loss_fn: LossFn,
    single_step: bool = False,
    hints: Mapping[str, str] | None = None,
) -> Trainer:
    """Builds the trainer (see the module docstring).

    ``single_step``: one gradient step on the whole batch per iteration (A2C); the
    ``num_epochs``/``num_minibatches`` keys are then not used. ``hints``: explanations
    for config keys of other algorithms (see `algorithms.common.config.resolve_run`).
    """
    run = resolve_run(
        config,
        env,
        env_params,
        algorithm=algo_name,
        algo_defaults=algo_defaults,
        policy_defaults=POLICY_DEFAULTS,
        rules=POLICY_RULES,
        hints=hints,
    )
    setup = build_setup(run, loss_fn, single_step)

    def init(key: jax.Array) -> RunnerState:
        return _init(setup, key)

    def update(rs: RunnerState) -> tuple[RunnerState, dict[str, jax.Array]]:
        return _update(setup, rs)

    def get_params(rs: RunnerState) -> dict[str, Any]:
        """``{policy: {"params": flax variables, "obs_norm": RunningMeanStd}}``."""
        return {p: {"params": ps.params, "obs_norm": ps.obs_norm} for p, ps in rs.policies.items()}

    def act(
        params_by_policy: Mapping[str, Any],
        key: jax.Array,
        obs: Mapping[str, jax.Array],
        deterministic: bool = False,
        action_mask: Mapping[str, jax.Array] | None = None,
        carry: Mapping[str, Any] | None = None,
    ) -> Any:
        """Env actions ``{g: [..., A_g, *act_shape]}`` for ``obs {g: [..., A_g, *O_g]}``.

        ``deterministic`` takes each distribution's mode; otherwise samples with ``key``.
        ``action_mask``: the timestep's ``{g: [..., A_g, K_g]}`` masks (`ts.action_mask`),
        honoured by both; ``None``: every action allowed. ``carry``: the recurrent
        policies' carries (from ``init_carry(...)`` or the previous call; reset them with
        `algorithms.common.recurrent.reset_carry` where episodes end): then returns
        ``(actions, carry)``. Recurrent policies need it.
        """
        return _act(setup, params_by_policy, key, obs, deterministic, action_mask, carry)

    def init_carry(lead: tuple[int, ...]) -> dict[str, Any]:
        """Zero carries ``{policy: {"actor" | "critic": [*lead, A_p, S]}}`` of the
        recurrent policies, for ``act(..., carry=...)`` on ``[*lead, A_g, ...]`` inputs."""
        return {
            p: initial_carry(ps.hp, (*lead, ps.spec.num_agents))
            for p, ps in setup.policies.items()
            if ps.recurrent
        }

    if run.num_devices > 1:
        mesh = make_mesh(run.num_devices)
        init, update = _shard_trainer(init, update, mesh, manual=setup.axis is not None)

    return Trainer(
        init=init,
        update=update,
        num_iterations=run.num_iterations,
        env_steps_per_iteration=run.num_envs * run.num_steps,
        config=config,
        get_params=get_params,
        act=act,
        init_carry=init_carry if any(ps.recurrent for ps in setup.policies.values()) else None,
    )


def _init(setup: OnPolicySetup, key: jax.Array) -> RunnerState:
    """A fresh runner state: reset envs, initial parameters, optimiser and statistics."""
    key = jnp.asarray(key)
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    names = setup.names
    k_env, k_run, *k_pol = jax.random.split(jax.random.wrap_key_data(key), 2 + len(names))
    env_state, ts = setup.venv.reset(k_env, setup.env_params)
    pols = {}
    for p, k in zip(names, k_pol, strict=True):
        ps = setup.policies[p]
        x = jnp.zeros((1, ps.in_size), jnp.float32)
        c = jnp.zeros((1, setup.gs_size + ps.obs_size)) if ps.hp["centralized_critic"] else None
        carry = None
        if ps.recurrent:  # sequences [T = 1, 1, ...]
            c = None if c is None else c[None]
            params = ps.net.init(k, initial_carry(ps.hp, (1,)), x[None], jnp.zeros((1, 1), bool), c)
            carry = initial_carry(ps.hp, (setup.run.num_envs, ps.spec.num_agents))
        else:
            params = ps.net.init(k, x, c)
        hparams = ps.initial_hparams()
        pols[p] = PolicyState(
            params=params,
            opt_state=ps.make_tx(hparams).init(params),
            obs_norm=RunningMeanStd.create((ps.obs_size,)),
            ret_norm=RunningMeanStd.create(()),
            ret_acc=jnp.zeros((setup.run.num_envs, ps.spec.num_agents), jnp.float32),
            carry=carry,
            hparams=hparams,
        )
    return RunnerState(
        policies=pols,
        env_state=env_state,
        timestep=ts,
        key=jax.random.key_data(k_run),
        iteration=jnp.zeros((), jnp.int32),
    )


def _update(setup: OnPolicySetup, rs: RunnerState) -> tuple[RunnerState, dict[str, jax.Array]]:
    """One whole iteration: the rollout, then every trained policy's learning step."""
    names, T, N = setup.names, setup.run.num_steps, setup.run.num_envs
    key = jax.random.wrap_key_data(rs.key)
    key, k_roll, *k_learn = jax.random.split(key, 2 + len(names))
    env_state, ts, traj, stats, last_values, _ = rollout(setup, rs, k_roll)
    gs_all = traj["_gs"].reshape(T * setup.num_local_envs, setup.gs_size) if setup.need_gs else None
    metrics: dict[str, jax.Array] = {}
    new_pols = dict(rs.policies)
    for p, k in zip(names, k_learn, strict=True):
        if setup.policies[p].spec.frozen:
            continue
        ent_coef = setup.policies[p].ent_coef(rs.policies[p].hparams, rs.iteration)
        new_pols[p], m = learn(
            setup, p, rs.policies[p], traj[p], last_values[p], gs_all, ent_coef, k
        )
        metrics.update(m)
    for p, carry in traj.get("_carry", {}).items():  # recurrent policies' next carries
        new_pols[p] = new_pols[p].replace(carry=carry)
    stats = maybe_psum(jax.tree.map(jnp.sum, stats), setup.axis)  # all devices' episodes
    n_done = stats["episodes_done"]
    denom = jnp.maximum(n_done, 1.0)
    metrics["episodes_done"] = n_done.astype(jnp.float32)
    metrics["episode_length"] = (stats["episode_length"] / denom).astype(jnp.float32)
    for g in setup.env.groups:
        s = stats[f"episode_return/{g}"] / denom
        metrics[f"episode_return/{g}"] = s.astype(jnp.float32)
    if "episodes_won" in stats:  # the fraction of this iteration's episodes won (0: none)
        metrics["win_rate"] = (stats["episodes_won"] / denom).astype(jnp.float32)
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


def _act(
    setup: OnPolicySetup,
    params_by_policy: Mapping[str, Any],
    key: jax.Array,
    obs: Any,
    deterministic: bool,
    action_mask: Mapping[str, jax.Array] | None = None,
    carry: Mapping[str, Any] | None = None,
) -> Any:
    """`Trainer.act`: each policy's actions for its groups' observations (and the new
    carries when ``carry`` is given)."""
    env, names = setup.env, setup.names
    if not isinstance(obs, Mapping):
        obs = {env.groups[0]: obs}
    if action_mask is not None and not isinstance(action_mask, Mapping):
        action_mask = {env.groups[0]: action_mask}
    if jnp.asarray(key).dtype == jnp.uint32:
        key = jax.random.wrap_key_data(key)
    keys = jax.random.split(key, len(names))
    out, new_carry = {}, {}
    for p, k in zip(names, keys, strict=True):
        ps = setup.policies[p]
        s = ps.spec
        nd = len(s.obs_space.shape)
        parts = [obs[g] for g in s.groups]
        lead = parts[0].ndim - nd  # [..., A_g]
        x = jnp.concatenate(parts, axis=lead - 1) if len(parts) > 1 else parts[0]
        nf = 0 if ps.id_features is None else ps.id_features.shape[1]
        x = ps.with_ids(x.reshape(*x.shape[:lead], ps.obs_size - nf).astype(jnp.float32))
        if s.hp["normalize_obs"]:
            x = params_by_policy[p]["obs_norm"].normalize(x)
        if ps.recurrent:
            if carry is None:
                raise ValueError(
                    f"policy {p!r} is recurrent: act needs carry= (trainer.init_carry(lead))"
                )
            new_carry[p], dist = ps.net.apply(
                params_by_policy[p]["params"], carry[p], x, method="policy_step"
            )
        else:
            dist = ps.net.apply(params_by_policy[p]["params"], x, method="policy")
        if action_mask is not None:
            m = [action_mask[g] for g in s.groups]
            m = jnp.concatenate(m, axis=lead - 1) if len(m) > 1 else m[0]
            dist = mask_actions(dist, m, ps.action_spec)
        raw = dist.mode() if deterministic else dist.sample(k)
        a = dist.to_env(raw)
        start = 0
        for g in s.groups:
            n = env.num_agents(g)
            out[g] = jax.lax.slice_in_dim(a, start, start + n, axis=lead - 1)
            start += n
    actions = {g: out[g] for g in env.groups}
    return actions if carry is None else (actions, new_carry)


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
            carry=shd(ps.carry),
            hparams=rep(ps.hparams),
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


def _shard_trainer(init: Callable, update: Callable, mesh: Any, *, manual: bool):
    """``(init, update)`` over ``mesh``: ``init`` returns globally sharded states (the
    same global computation as one device). ``manual``: ``update`` runs per device in
    ``shard_map`` (it was built for ``N/D`` envs with explicit collectives); otherwise
    ``update`` is the one-device program over all ``N`` envs, its output held to the same
    shardings, and XLA's partitioner splits it and inserts the collectives."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    specs = _state_specs(jax.eval_shape(init, jax.random.PRNGKey(0)))
    shardings = jax.tree.map(lambda s: NamedSharding(mesh, s), specs)
    sharded_init = jax.jit(init, out_shardings=shardings)
    if manual:
        return sharded_init, shard_map(update, mesh=mesh, in_specs=(specs,), out_specs=(specs, P()))

    def auto_update(state: RunnerState) -> tuple[RunnerState, Any]:
        state = jax.lax.with_sharding_constraint(state, shardings)
        new_state, metrics = update(state)
        return jax.lax.with_sharding_constraint(new_state, shardings), metrics

    return sharded_init, auto_update
