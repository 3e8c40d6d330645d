"""The static side of the on-policy trainer: states, per-policy networks and inputs.

`build_setup` turns a checked `RunSpec` into an `OnPolicySetup`: everything about a run
that is fixed before tracing (networks, optimisers, schedules, sizes, the vectorised
env), plus the small pure helpers the rollout and the learning step share (network
inputs, per-env keys). `PolicyState` and `RunnerState` are the learner state.

Dimension letters: ``T`` steps per iteration, ``N`` envs (``NL = N / D`` on each of ``D``
devices), ``A_p`` agents of policy ``p``, ``O`` its flat observation size, ``O_pad`` that
padded to a multiple of ``input_pad_multiple``, ``C`` the centralised critic's
global-state size, ``S`` a recurrent core's carry size (`algorithms.common.recurrent`).

**Hyper-parameters as data.** The per-policy hyper-parameters that fix no shape
(`HPARAM_KEYS`: learning rate, entropy and value coefficients, clip ε, γ, λ, max grad
norm) live in the learner state as float32 scalars (`PolicyState.hparams`, initialised
from the config) and the learning step reads them from there, so ``jax.vmap`` of
``init``/``update`` over a member axis whose ``hparams`` differ trains a population with
different hyper-parameters in one program (`algorithms.population`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

import jaxdrive
from algorithms.common.config import PolicySpec, RunSpec
from algorithms.common.multi_policy import PolicyMap
from algorithms.common.networks import ActionSpec, ActorCritic, flat_obs_size, padded_size
from algorithms.common.normalization import RunningMeanStd
from algorithms.common.recurrent import RecurrentActorCritic, core_kinds, is_recurrent
from algorithms.common.schedules import make_schedule
from jaxdrive.agent_ids import agent_id_features
from jaxdrive.distributed import DEVICE_AXIS
from jaxdrive.types import TimeStep

__all__ = [
    "HPARAM_KEYS",
    "LossFn",
    "OnPolicySetup",
    "PolicySetup",
    "PolicyState",
    "RunnerState",
    "build_setup",
]

#: ``loss_fn(logp, entropy, value, mb, hp, ent_coef) -> (loss, aux)``: ``logp``,
#: ``entropy``, ``value`` and every ``mb`` entry (``old_logp``, ``old_value``,
#: ``advantage`` (already normalised if asked), ``target``, ``mask``) are ``[M]``;
#: ``aux`` must hold float32 scalars ``policy``, ``value``, ``entropy`` (more allowed).
LossFn = Callable[..., tuple[jax.Array, dict[str, jax.Array]]]

#: Hyper-parameters that may differ between members of a population: those of a
#: policy's config among these become ``PolicyState.hparams`` (float32 scalars).
HPARAM_KEYS = (
    "lr",
    "ent_coef",
    "vf_coef",
    "clip_eps",
    "value_clip_eps",
    "gamma",
    "gae_lambda",
    "max_grad_norm",
)


@struct.dataclass
class PolicyState:
    """One policy's learner state."""

    params: Any  # flax variables {"params": ...} of its ActorCritic
    opt_state: Any  # optax state of clip_by_global_norm + adam
    obs_norm: RunningMeanStd  # mean/var [O] of flat observations (used if normalize_obs)
    ret_norm: RunningMeanStd  # mean/var [] of discounted returns (used if normalize_rewards)
    ret_acc: jax.Array  # [N, A_p] float32 running discounted return per agent slot
    hparams: dict[str, jax.Array]  # {name: [] float32}, the HPARAM_KEYS of its config
    # recurrent policies: {"actor" | "critic": [N, A_p, S] float32} carries of the next
    # observation's step (zeros where an episode just ended); None for feed-forward ones
    carry: Any = None


@struct.dataclass
class RunnerState:
    """Everything one training run carries between iterations (checkpointable)."""

    policies: dict[str, PolicyState]  # by policy name
    env_state: Any  # batched env state, leaves [N, ...]
    timestep: TimeStep  # last batched timestep, leaves [N, ...]
    key: jax.Array  # [2] uint32 raw PRNG key
    iteration: jax.Array  # [] int32 iterations done


@dataclasses.dataclass(frozen=True, eq=False)
class PolicySetup:
    """The static parts of one policy and how its network inputs are built."""

    spec: PolicySpec
    action_spec: ActionSpec
    net: ActorCritic | RecurrentActorCritic
    obs_size: int  # O: flat observation size (the agent-ID features included)
    in_size: int  # O_pad: O padded to a multiple of input_pad_multiple
    epochs: int
    minibatches: int
    # dtype of the stored trajectory's observations: the network's compute dtype when
    # the network casts them to it first thing (no normalisation in between), else float32
    obs_dtype: Any
    num_updates: int  # gradient steps of the whole run (the lr schedule's length)
    num_iterations: int  # iterations of the whole run (the entropy schedule's length)
    # agent_ids: [A_p, F] float32 one-hot agent (and group) indices appended to the flat
    # observations (jaxdrive.agent_ids.agent_id_features over the policy's groups)
    id_features: np.ndarray | None = None

    @property
    def hp(self) -> dict[str, Any]:
        return self.spec.hp

    @property
    def recurrent(self) -> bool:
        """Whether the policy has a recurrent core (`algorithms.common.recurrent`)."""
        return is_recurrent(self.spec.hp)

    def with_ids(self, x: jax.Array) -> jax.Array:
        """Flat observations ``[..., A_p, O - F]`` with the agent-ID features appended:
        ``[..., A_p, O]`` (``x`` itself without ``agent_ids``)."""
        if self.id_features is None:
            return x
        ids = jnp.asarray(self.id_features, x.dtype)
        return jnp.concatenate([x, jnp.broadcast_to(ids, (*x.shape[:-1], ids.shape[1]))], -1)

    def initial_hparams(self) -> dict[str, jax.Array]:
        """``{name: [] float32}``: the config's values of the `HPARAM_KEYS` it has."""
        return {k: jnp.asarray(self.hp[k], jnp.float32) for k in HPARAM_KEYS if k in self.hp}

    def make_tx(self, hparams: dict[str, jax.Array]) -> optax.GradientTransformation:
        """``clip_by_global_norm(max_grad_norm)`` (none where it is 0) then Adam at
        ``lr`` (through the ``lr_schedule``), both read from ``hparams`` (traced values
        allowed); the state structure does not depend on the values."""
        lr = make_schedule(self.hp["lr_schedule"], hparams["lr"], 0.0, self.num_updates)
        max_norm = hparams["max_grad_norm"]
        return optax.chain(
            optax.clip_by_global_norm(jnp.where(max_norm > 0, max_norm, jnp.inf)),
            optax.adam(lr, eps=self.hp["adam_eps"]),
        )

    def ent_coef(self, hparams: dict[str, jax.Array], iteration: jax.Array) -> jax.Array:
        """The entropy coefficient of ``iteration``: ``hparams["ent_coef"]`` through the
        ``ent_schedule`` (to ``ent_coef_final``)."""
        hp = self.hp
        sched = make_schedule(
            hp["ent_schedule"], hparams["ent_coef"], hp["ent_coef_final"], self.num_iterations
        )
        return sched(iteration)

    def flat_obs(self, obs: jax.Array, lead: int) -> jax.Array:
        """``[*lead_dims, *O] -> [*lead_dims, O_pad]`` float32: padded with one 1.0 (the
        first layer's bias column, see `PaddedInputDense`) and then zeros. The last lead
        dimension is the agent axis ``A_p`` (agent-ID features are appended first)."""
        nf = 0 if self.id_features is None else self.id_features.shape[1]
        x = obs.reshape(*obs.shape[:lead], self.obs_size - nf).astype(jnp.float32)
        x = self.with_ids(x)
        extra = self.in_size - self.obs_size
        if extra:
            pad = jnp.zeros((extra,), jnp.float32).at[0].set(1.0)
            x = jnp.concatenate([x, jnp.broadcast_to(pad, (*x.shape[:-1], extra))], -1)
        return x

    def padded_norm(self, rms: RunningMeanStd) -> RunningMeanStd:
        """``rms`` ``[O]`` extended to ``[O_pad]`` (mean 0, var 1: the padding, its bias
        column's 1.0 included, is left as it is)."""
        extra = self.in_size - self.obs_size
        if not extra:
            return rms
        return RunningMeanStd(
            mean=jnp.pad(rms.mean, (0, extra)),
            var=jnp.pad(rms.var, (0, extra), constant_values=1.0),
            count=rms.count,
        )

    def normalize(self, rms: RunningMeanStd, x: jax.Array) -> jax.Array:
        """``x [..., O_pad]`` normalised if the policy asks (padding stays zero)."""
        return self.padded_norm(rms).normalize(x) if self.hp["normalize_obs"] else x

    def critic_input(self, gs: jax.Array, x: jax.Array) -> jax.Array:
        """``concat(gs, x without its padding)``: ``[..., C + O]``."""
        return jnp.concatenate([gs, x[..., : self.obs_size]], -1)

    def inputs(
        self, ps: PolicyState, obs: jax.Array, gs: jax.Array | None
    ) -> tuple[jax.Array, jax.Array | None]:
        """Network inputs: obs ``[..., O_pad]`` (flat), gs ``[..., C]`` (or ``None``)."""
        x = self.normalize(ps.obs_norm, obs)
        if self.hp["centralized_critic"]:
            return x, self.critic_input(jnp.broadcast_to(gs, (*x.shape[:-1], gs.shape[-1])), x)
        return x, None


@dataclasses.dataclass(frozen=True, eq=False)
class OnPolicySetup:
    """The static parts of one on-policy run."""

    run: RunSpec
    stats_env: Any  # EpisodeStats(env)
    venv: Any  # the vectorised, auto-resetting stats_env (used by init)
    # envs with `observations` (Tag) reset the state and build observations once per
    # step; the final observation is then rebuilt from the final state only when needed
    fast_reset: bool
    axis: str | None  # the device axis name; None on one device (no collectives)
    pmap: PolicyMap
    policies: dict[str, PolicySetup]
    gs_size: int  # C, 0 without a centralised critic
    loss_fn: LossFn

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.policies)

    @property
    def env(self) -> Any:
        return self.run.env

    @property
    def env_params(self) -> Any:
        return self.run.env_params

    @property
    def num_local_envs(self) -> int:
        """``NL``: envs per device (all ``N`` when ``axis`` is None: one device, or the
        global program that XLA partitions)."""
        return self.run.num_envs if self.axis is None else self.run.num_envs // self.run.num_devices

    @property
    def need_gs(self) -> bool:
        return any(bool(s.hp["centralized_critic"]) for s in self.policies.values())

    def global_state(self, env_state: Any) -> jax.Array:
        """``[NL, C]`` float32 global states of this device's envs."""
        gs = jax.vmap(self.stats_env.global_state, in_axes=(0, None))(env_state, self.env_params)
        return gs.reshape(gs.shape[0], -1).astype(jnp.float32)

    def env_ids(self) -> jax.Array:
        """``[NL]`` int32 global indices of this device's envs."""
        nl = self.num_local_envs
        ids = jnp.arange(nl, dtype=jnp.int32)
        return ids if self.axis is None else ids + jax.lax.axis_index(self.axis) * nl

    @staticmethod
    def env_keys(key: jax.Array, ids: jax.Array) -> jax.Array:
        """``[NL]`` keys ``fold_in(key, global env index)``: the same for any D."""
        return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, ids)


def _manual(run: RunSpec) -> bool:
    """Whether the trainer runs per device in ``shard_map`` (several devices, the
    ``"shard_map"`` partitioner), its code then seeing ``N/D`` envs."""
    return run.num_devices > 1 and run.partitioner == "shard_map"


def _check_policy(spec: PolicySpec, run: RunSpec, single_step: bool) -> ActionSpec:
    """The checks of one policy that need the env's sizes; returns its `ActionSpec`."""
    hp, where = spec.hp, f"policy {spec.name!r}"
    if hp["centralized_critic"] and hp["shared_torso"]:
        raise ValueError(f"{where}: shared_torso cannot be combined with centralized_critic")
    per_env = run.num_steps * spec.num_agents
    batch = per_env * run.num_envs
    if not single_step and not is_recurrent(hp):  # recurrent: `_check_recurrent`
        mbs = hp["num_minibatches"]
        if batch % mbs:
            raise ValueError(
                f"{where}: num_minibatches={mbs} does not divide its batch of "
                f"num_steps*num_envs*agents = {batch} samples"
            )
        if per_env % mbs and _manual(run):
            raise ValueError(
                f"{where}: num_minibatches={mbs} does not divide num_steps*agents = {per_env}, "
                "the samples of one env: with num_devices > 1 minibatches take an equal share "
                "of every env's samples (so that results do not depend on the device count)"
            )
    if is_recurrent(hp):
        _check_recurrent(spec, run, single_step)
    try:
        return ActionSpec.from_space(spec.action_space, hp["action_head"], hp["log_std_init"])
    except ValueError as e:
        raise ValueError(f"{where} (groups {list(spec.groups)}): {e}") from None


def _check_recurrent(spec: PolicySpec, run: RunSpec, single_step: bool) -> None:
    """Recurrent policies learn from whole sequences: minibatches split the
    ``N·A_p`` sequences (``N/D·A_p`` on each device), never the steps."""
    hp, where = spec.hp, f"policy {spec.name!r}"
    if hp["shared_torso"] and hp["critic_core"] != "same":
        raise ValueError(
            f"{where}: shared_torso shares the actor's core with the critic, so critic_core "
            f"must stay 'same', got {hp['critic_core']!r}"
        )
    local = run.num_envs // (run.num_devices if _manual(run) else 1) * spec.num_agents
    if not single_step and local % hp["num_minibatches"]:
        raise ValueError(
            f"{where}: num_minibatches={hp['num_minibatches']} does not divide the "
            f"{local} sequences (num_envs/num_devices*agents) of a recurrent policy: its "
            "minibatches take whole [num_steps] sequences of env agents"
        )


def _network(spec: PolicySpec, action_spec: ActionSpec, obs_size: int, padded: bool) -> Any:
    """The policy's `ActorCritic`, or its `RecurrentActorCritic` when it has a core."""
    hp = spec.hp
    kw = dict(
        obs_features=obs_size if padded else None,
        critic_features=obs_size if padded and not hp["centralized_critic"] else None,
        compute_dtype=jnp.dtype(hp["compute_dtype"]),
        bias_column=padded,
    )
    if is_recurrent(hp):
        actor, critic = core_kinds(hp)
        return RecurrentActorCritic(
            action_spec,
            hp["hidden_sizes"],
            hp["activation"],
            actor_kind=actor,
            critic_kind=critic,
            core_size=hp["core_size"],
            shared=hp["shared_torso"],
            post_sizes=tuple(hp["post_core_sizes"]),
            **kw,
        )
    return ActorCritic(action_spec, hp["hidden_sizes"], hp["activation"], hp["shared_torso"], **kw)


def _policy_setup(spec: PolicySpec, run: RunSpec, single_step: bool) -> PolicySetup:
    hp = spec.hp
    action_spec = _check_policy(spec, run, single_step)
    epochs = 1 if single_step else hp["num_epochs"]
    minibatches = 1 if single_step else hp["num_minibatches"]
    obs_size = flat_obs_size(spec.obs_space)
    ids = None
    if hp["agent_ids"]:
        counts = [run.env.num_agents(g) for g in spec.groups]
        ids = agent_id_features(counts, group_ids=len(counts) > 1)
        obs_size += ids.shape[1]
    in_size = padded_size(obs_size, hp["input_pad_multiple"])
    padded = in_size > obs_size
    net = _network(spec, action_spec, obs_size, padded)
    bf16 = hp["compute_dtype"] == "bfloat16" and not hp["normalize_obs"]
    n_iter = run.num_iterations
    return PolicySetup(
        spec=spec,
        action_spec=action_spec,
        net=net,
        obs_size=obs_size,
        in_size=in_size,
        epochs=epochs,
        minibatches=minibatches,
        obs_dtype=jnp.bfloat16 if bf16 else jnp.float32,
        num_updates=n_iter * epochs * minibatches,
        num_iterations=n_iter,
        id_features=ids,
    )


def _global_state_size(env: Any, env_params: Any) -> int:
    try:
        shape = jax.eval_shape(
            lambda k: env.global_state(env.reset(k, env_params)[0], env_params),
            jax.random.key(0),
        )
    except NotImplementedError as e:
        raise ValueError(
            f"centralized_critic needs env.global_state, which {env.name} lacks: {e}"
        ) from None
    return int(np.prod(shape.shape, dtype=np.int64))


def build_setup(run: RunSpec, loss_fn: LossFn, single_step: bool) -> OnPolicySetup:
    """The `OnPolicySetup` of a checked run; ``ValueError`` for what the env rules out."""
    env = run.env
    policies = {p: _policy_setup(s, run, single_step) for p, s in run.policies.items()}
    need_gs = any(bool(s.hp["centralized_critic"]) for s in run.policies.values())
    stats_env = jaxdrive.wrappers.EpisodeStats(env)
    fast_reset = stats_env.reset_by_select
    return OnPolicySetup(
        run=run,
        stats_env=stats_env,
        venv=jaxdrive.vectorize(
            stats_env, run.num_envs, auto_reset=True, keep_final_obs=not fast_reset
        ),
        fast_reset=fast_reset,
        axis=DEVICE_AXIS if _manual(run) else None,
        pmap=PolicyMap({p: s.groups for p, s in run.policies.items()}, env.agent_counts),
        policies=policies,
        gs_size=_global_state_size(env, run.env_params) if need_gs else 0,
        loss_fn=loss_fn,
    )
