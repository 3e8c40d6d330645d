"""Policy and value networks shared by the algorithms (Flax linen).

Dimension letters: ``...`` any leading batch axes (envs, agents, time); ``O`` the flat
observation size; ``K`` the outputs of a policy head.

* `ActionSpec`: the static description of a policy's action head, built from a space
  with `ActionSpec.from_space` (raises ``ValueError`` for what no head handles).
* `ActionHead`: features ``[..., H]`` to a distribution of `algorithms.common.distributions`.
* `mask_actions`: a categorical head's distribution restricted by an env's action mask
  (`jaxdrive.types.TimeStep.action_mask`).
* `ActorCritic`: an actor MLP with the head of an `ActionSpec` and a critic MLP with a
  scalar value. The critic reads ``critic_obs`` when given (a centralised critic, e.g.
  ``concat(global_state, own_obs)`` for MAPPO), else the actor's observation.
  ``shared_torso=True`` shares one MLP (WarpDrive's layout; not with ``critic_obs``).
* `ValueNetwork`, `QNetwork`, `DeterministicActor`: single-output MLPs other
  algorithms (DDPG) reuse.

The layers (`MLP`, `PaddedInputDense`, `FusedDense`, …) live in
`algorithms.common.layers` and the distributions in `algorithms.common.distributions`;
both are re-exported here.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from jaxdrive.spaces import MultiDiscrete
    >>> spec = ActionSpec.from_space(MultiDiscrete([3, 5]))
    >>> net = ActorCritic(spec, hidden_sizes=(16,))
    >>> params = net.init(jax.random.key(0), jnp.zeros((4, 6)))
    >>> dist, value = net.apply(params, jnp.zeros((4, 6)))
    >>> dist.sample(jax.random.key(1)).shape, value.shape
    ((4, 2), (4,))
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from algorithms.common.distributions import (
    NEG_LOGIT,
    Categorical,
    DiagGaussian,
    MultiCategorical,
    TanhGaussian,
    log_prob_and_entropy,
    state_log_std,
)
from algorithms.common.init import orthogonal
from algorithms.common.layers import (
    ACTIVATIONS,
    MLP,
    DenseParams,
    FusedDense,
    PaddedInputDense,
    activation_fn,
    affine,
    cast_kernels,
    flat_obs_size,
    padded_size,
)
from jaxdrive.spaces import Box, Discrete, MultiDiscrete, Space

__all__ = [
    "ACTIVATIONS",
    "HEAD_KINDS",
    "MLP",
    "ActionHead",
    "ActionSpec",
    "ActorCritic",
    "Categorical",
    "DeterministicActor",
    "DiagGaussian",
    "FusedDense",
    "MultiCategorical",
    "PaddedInputDense",
    "QNetwork",
    "TanhGaussian",
    "ValueNetwork",
    "activation_fn",
    "cast_kernels",
    "flat_obs_size",
    "joint_head_params",
    "log_prob_and_entropy",
    "mask_actions",
    "padded_size",
    "split_dims",
]

#: Continuous head kinds for `Box` actions: a Gaussian clipped to the bounds and a
#: tanh-squashed one, both with a state-independent log-std parameter, and a tanh-squashed
#: one whose σ the network outputs (``softplus(raw) + MIN_STD``, Brax's PPO head).
HEAD_KINDS = ("gaussian", "tanh_gaussian", "tanh_gaussian_state_std")
_STATE_STD = "tanh_gaussian_state_std"


@dataclasses.dataclass(frozen=True)
class ActionSpec:
    """Static, hashable description of an action head.

    kind: ``"discrete"`` (``sizes=(K,)``), ``"multi_discrete"`` (``sizes=nvec``),
    or one of the continuous `HEAD_KINDS` (``sizes=(D,)``, bounds in ``low``/``high``).
    """

    kind: str
    sizes: tuple[int, ...]
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()
    log_std_init: float = 0.0

    @classmethod
    def from_space(
        cls, space: Space, continuous_head: str = "gaussian", log_std_init: float = 0.0
    ) -> ActionSpec:
        """The head for ``space``; ``ValueError`` for spaces no head handles."""
        if isinstance(space, Discrete):
            return cls("discrete", (space.n,))
        if isinstance(space, MultiDiscrete):
            return cls("multi_discrete", tuple(space.nvec))
        if isinstance(space, Box):
            if continuous_head not in HEAD_KINDS:
                raise ValueError(
                    f"unknown continuous action head {continuous_head!r}; known: {HEAD_KINDS}"
                )
            if len(space.shape) != 1:
                raise ValueError(
                    f"Box action spaces must be 1-D for the Gaussian heads, got shape {space.shape}"
                )
            low = tuple(float(v) for v in space.low)
            high = tuple(float(v) for v in space.high)
            if continuous_head.startswith("tanh") and not (
                np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))
            ):
                raise ValueError(
                    f"action_head {continuous_head!r} needs finite Box bounds, got {space}; "
                    "use 'gaussian'"
                )
            return cls(continuous_head, (space.shape[0],), low, high, float(log_std_init))
        raise ValueError(
            f"unsupported action space {space!r}: the on-policy heads handle Discrete, "
            "MultiDiscrete and 1-D Box"
        )

    @property
    def is_discrete(self) -> bool:
        return self.kind in ("discrete", "multi_discrete")

    @property
    def action_shape(self) -> tuple[int, ...]:
        """Shape of one raw action: ``()`` for discrete, ``(D,)`` otherwise."""
        return (
            ()
            if self.kind == "discrete"
            else (len(self.sizes) if self.is_discrete else self.sizes[0],)
        )

    @property
    def action_dtype(self) -> Any:
        return jnp.int32 if self.is_discrete else jnp.float32

    @property
    def num_outputs(self) -> int:
        """Number of outputs of the head's dense layer."""
        if self.kind == "discrete":
            return self.sizes[0]
        if self.kind == "multi_discrete":
            return int(sum(self.sizes))
        return 2 * self.sizes[0] if self.kind == _STATE_STD else self.sizes[0]


class ActionHead(nn.Module):
    """Dense layer(s) mapping features ``[..., H]`` to the distribution of an `ActionSpec`.

    Logit/mean layers use orthogonal init with gain 0.01 (near-uniform start); the
    Gaussian ``log_std`` is a state-independent parameter ``[D]``, except for the
    ``"tanh_gaussian_state_std"`` head, whose layer outputs ``[mean, raw σ]`` (``2D``
    columns; `state_log_std`, ``log_std_init`` unused).
    """

    spec: ActionSpec
    dtype: Any = jnp.float32  # GEMM input dtype; outputs are float32 whatever it is

    @nn.compact
    def __call__(
        self,
        x: jax.Array,
        extra: tuple[jax.Array, jax.Array] | None = None,
        joint: tuple[jax.Array, jax.Array] | None = None,
    ) -> Any:
        """The distribution for features ``x [..., H]``. With ``extra = (kernel [H, E],
        bias [E])`` (another head on the same features, e.g. the value head of a shared
        torso), one GEMM computes both: returns ``(dist, [..., E])``. ``joint``: that
        GEMM's ``(kernel [H, K + E], bias [K + E])`` already built (`joint_head_params`)
        instead of ``extra``."""
        spec = self.spec
        kernel, bias = DenseParams(
            spec.num_outputs,
            kernel_init=orthogonal(0.01),
            bias_init=nn.initializers.zeros,
            name="logits" if spec.is_discrete else "mean",
        )(x.shape[-1])
        if extra is None and joint is None:
            return self._dist(affine(x, kernel, bias, self.dtype))
        if joint is not None:
            kernel, bias = joint
        else:
            kernel = jnp.concatenate([kernel, extra[0].astype(kernel.dtype)], axis=1)
            bias = jnp.concatenate([bias, extra[1].astype(bias.dtype)])
        out = affine(x, kernel, bias, self.dtype)
        n = spec.num_outputs
        return self._dist(out[..., :n]), out[..., n:]

    def _dist(self, out: jax.Array) -> Any:
        spec = self.spec
        if spec.kind == "discrete":
            return Categorical(out)
        if spec.kind == "multi_discrete":
            return MultiCategorical(split_dims(out, spec.sizes, NEG_LOGIT))
        low = jnp.asarray(spec.low, jnp.float32)
        high = jnp.asarray(spec.high, jnp.float32)
        if spec.kind == _STATE_STD:
            mean, raw = jnp.split(out, 2, axis=-1)
            return TanhGaussian(mean, state_log_std(raw), low, high)
        log_std = self.param(
            "log_std", nn.initializers.constant(spec.log_std_init), (spec.sizes[0],)
        )
        cls = DiagGaussian if spec.kind == "gaussian" else TanhGaussian
        return cls(out, jnp.broadcast_to(log_std, out.shape), low, high)


def split_dims(x: jax.Array, sizes: tuple[int, ...], fill: Any) -> jax.Array:
    """``[..., sum(sizes)] -> [..., D, Kmax]``: dimension ``d``'s ``sizes[d]`` columns in
    row ``d``, padded with ``fill`` up to ``Kmax = max(sizes)`` (the `MultiCategorical`
    layout of a flat head output or a flat action mask)."""
    kmax = max(sizes)
    if all(n == kmax for n in sizes):
        # Same as the slices below, without their gradients' pads [..., D·K].
        return x.reshape(*x.shape[:-1], len(sizes), kmax)
    chunks, start = [], 0
    for n in sizes:
        c = x[..., start : start + n]
        start += n
        if n < kmax:
            pad = jnp.full((*c.shape[:-1], kmax - n), fill, c.dtype)
            c = jnp.concatenate([c, pad], axis=-1)
        chunks.append(c)
    return jnp.stack(chunks, axis=-2)


def mask_actions(dist: Any, mask: jax.Array | None, spec: ActionSpec) -> Any:
    """``dist`` restricted to the actions ``mask`` allows (`TimeStep.action_mask`'s layout:
    ``[..., K]`` bool, ``K = spec.num_outputs``, the dimensions of a `MultiDiscrete`
    concatenated); ``dist`` itself when ``mask`` is ``None`` (the computation is then
    exactly the unmasked one). ``ValueError`` for a continuous head given a mask."""
    if mask is None:
        return dist
    if spec.kind == "discrete":
        return dist.masked(mask)
    if spec.kind == "multi_discrete":
        return dist.masked(split_dims(mask, spec.sizes, False))
    raise ValueError(
        f"action masks are for Discrete and MultiDiscrete actions; this policy's head is "
        f"{spec.kind!r} (sizes {spec.sizes})"
    )


def joint_head_params(params: Any, spec: ActionSpec) -> tuple[jax.Array, jax.Array]:
    """A shared-torso `ActorCritic`'s policy and value heads as one layer: ``(kernel
    [H, K + 1 + pad], bias [K + 1 + pad])`` with ``K = spec.num_outputs`` and zero columns
    up to a multiple of 8, in the dtypes of ``params`` (flax variables), as ``act``
    builds them; pass it to ``act(..., joint=...)`` to build it once."""
    p = params["params"]
    head = p["actor_head"]["logits" if spec.is_discrete else "mean"]
    value = p["value_head"]
    pad = -(spec.num_outputs + 1) % 8
    kernel = jnp.concatenate(
        [
            head["kernel"],
            jnp.pad(value["kernel"], ((0, 0), (0, pad))).astype(head["kernel"].dtype),
        ],
        axis=1,
    )
    bias = jnp.concatenate([head["bias"], jnp.pad(value["bias"], (0, pad))])
    return kernel, bias


def _value_head(x: jax.Array, name: str = "value") -> jax.Array:
    v = nn.Dense(1, kernel_init=orthogonal(1.0), bias_init=nn.initializers.zeros, name=name)(x)
    return v[..., 0]


class ValueNetwork(nn.Module):
    """State-value MLP: ``[..., I] -> [...]``."""

    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return _value_head(MLP(self.hidden_sizes, self.activation, name="torso")(x))


class QNetwork(nn.Module):
    """Action-value MLP on ``concat(obs, action)``: ``([..., O], [..., D]) -> [...]``."""

    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([obs.astype(jnp.float32), action.astype(jnp.float32)], axis=-1)
        return _value_head(MLP(self.hidden_sizes, self.activation, name="torso")(x), "q")


class DeterministicActor(nn.Module):
    """``[..., O] -> [..., D]`` actions in ``[low, high]`` via a tanh output."""

    action_dim: int
    low: tuple[float, ...]
    high: tuple[float, ...]
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = MLP(self.hidden_sizes, self.activation, name="torso")(obs)
        x = nn.Dense(
            self.action_dim,
            kernel_init=orthogonal(0.01),
            bias_init=nn.initializers.zeros,
            name="action",
        )(x)
        low = jnp.asarray(self.low, jnp.float32)
        high = jnp.asarray(self.high, jnp.float32)
        return low + (jnp.tanh(x) + 1.0) * 0.5 * (high - low)


class ActorCritic(nn.Module):
    """Actor (a distribution per `ActionSpec`) and critic (a scalar value).

    ``__call__(obs [..., O], critic_obs [..., C] | None) -> (dist, value [...])``;
    ``policy(obs)`` and ``value(obs, critic_obs)`` compute one half each (use
    ``apply(..., method="policy")``). Separate actor and critic torsos unless
    ``shared_torso``.

    ``obs_features`` (the real observation size ``O``) lets ``obs`` arrive zero-padded to
    ``[..., O_pad]`` (e.g. ``O = 71`` padded to 72 so GEMMs on it are 16-byte aligned):
    the first layers' kernels stay ``[O, H]`` (see `PaddedInputDense`), so parameters,
    outputs and gradients equal those of the unpadded network. ``critic_features`` does
    the same for the critic torso (``None`` when it reads an unpadded ``critic_obs``).
    ``bias_column=True``: padded inputs carry 1.0 in column ``O`` (see `PaddedInputDense`).
    ``compute_dtype=jnp.bfloat16``: the torsos and heads compute in bfloat16 (see `MLP`),
    the heads' outputs (logits, means, values) and everything downstream are float32.
    """

    spec: ActionSpec
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    shared_torso: bool = False
    obs_features: int | None = None
    critic_features: int | None = None
    compute_dtype: Any = jnp.float32
    bias_column: bool = False

    def setup(self) -> None:
        mlp = functools.partial(
            MLP,
            self.hidden_sizes,
            self.activation,
            dtype=self.compute_dtype,
            bias_column=self.bias_column,
        )
        if self.shared_torso:
            self.torso = mlp(in_features=self.obs_features)
        else:
            self.actor_torso = mlp(in_features=self.obs_features)
            self.critic_torso = mlp(in_features=self.critic_features)
        self.actor_head = ActionHead(self.spec, self.compute_dtype)
        self.value_head = DenseParams(
            1, kernel_init=orthogonal(1.0), bias_init=nn.initializers.zeros
        )

    def _value_of(self, h: jax.Array) -> jax.Array:
        return affine(h, *self.value_head(h.shape[-1]), self.compute_dtype)[..., 0]

    def policy(self, obs: jax.Array) -> Any:
        """The action distribution for ``obs: [..., O]``."""
        h = self.torso(obs) if self.shared_torso else self.actor_torso(obs)
        return self.actor_head(h)

    def value(self, obs: jax.Array, critic_obs: jax.Array | None = None) -> jax.Array:
        """``[...]`` value of ``critic_obs`` (``[..., C]``) if given, else of ``obs``."""
        if self.shared_torso:
            if critic_obs is not None:
                raise ValueError("shared_torso cannot be used with a centralised critic input")
            h = self.torso(obs)
        else:
            h = self.critic_torso(obs if critic_obs is None else critic_obs)
        return self._value_of(h)

    def act(
        self,
        obs: jax.Array,
        critic_obs: jax.Array | None = None,
        joint: tuple[jax.Array, jax.Array] | None = None,
    ) -> tuple[Any, jax.Array]:
        """``__call__``'s ``(dist, value)`` for acting (no gradient taken): a shared torso's
        policy and value heads always in one GEMM, zero-padded to a multiple of 8
        columns (the layout ``__call__`` uses for float32; for bfloat16 it keeps two GEMMs,
        whose custom VJPs give float32 gradients). ``joint``: that GEMM's kernel
        and bias from `joint_head_params`, built once instead of at every call."""
        if not self.shared_torso:
            return self(obs, critic_obs)
        if critic_obs is not None:
            raise ValueError("shared_torso cannot be used with a centralised critic input")
        return self._joint_heads(self.torso(obs), joint)

    def _joint_heads(
        self, h: jax.Array, joint: tuple[jax.Array, jax.Array] | None = None
    ) -> tuple[Any, jax.Array]:
        kernel, bias = self.value_head(h.shape[-1])
        pad = -(self.spec.num_outputs + 1) % 8
        extra = (jnp.pad(kernel, ((0, 0), (0, pad))), jnp.pad(bias, (0, pad)))
        if joint is not None:
            dist, value = self.actor_head(h, joint=joint)
        else:
            dist, value = self.actor_head(h, extra)
        return dist, value[..., 0]

    def __call__(
        self, obs: jax.Array, critic_obs: jax.Array | None = None
    ) -> tuple[Any, jax.Array]:
        if self.shared_torso:
            if critic_obs is not None:
                raise ValueError("shared_torso cannot be used with a centralised critic input")
            h = self.torso(obs)
            if jnp.dtype(self.compute_dtype) != jnp.float32:
                # bfloat16: two GEMMs (each with its own float32-gradient custom VJP)
                return self.actor_head(h), self._value_of(h)
            # float32: one GEMM for the policy heads and the value head, its output
            # zero-padded to a multiple of 8 columns ([H, K + 1 + pad]; the padding is
            # constant, parameters unchanged): one pass over h instead of two
            return self._joint_heads(h)
        return self.policy(obs), self.value(obs, critic_obs)
