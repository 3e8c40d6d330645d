"""Networks and action distributions shared by the algorithms (Flax linen).

Dimension letters: ``...`` any leading batch axes (envs, agents, time); ``O`` the flat
observation size; ``K`` categories of a `Discrete` head; ``D`` dimensions of a
`MultiDiscrete` or `Box` action; ``Kmax`` the largest ``nvec`` entry.

* `MLP`: dense layers with orthogonal init (``sqrt(2)`` gain) and a named activation.
* `ActionSpec`: the static description of a policy's action head, built from a space
  with `ActionSpec.from_space` (raises ``ValueError`` for what no head handles).
* Distributions (`Categorical`, `MultiCategorical`, `DiagGaussian`, `TanhGaussian`),
  pytrees with ``sample(key)``, ``log_prob(x)``, ``entropy()``, ``mode()`` and
  ``to_env(x)``. Samples are *raw* actions (what log-probs are taken of); ``to_env``
  maps them to the env's action space (identity for discrete heads, clipping to the
  bounds for `DiagGaussian`, an affine ``tanh`` squash for `TanhGaussian`).
* `ActorCritic`: an actor MLP with the head of an `ActionSpec` and a critic MLP with a
  scalar value. The critic reads ``critic_obs`` when given (a centralised critic, e.g.
  ``concat(global_state, own_obs)`` for MAPPO), else the actor's observation.
  ``shared_torso=True`` shares one MLP (WarpDrive's layout; not with ``critic_obs``).
* `ValueNetwork`, `QNetwork`, `DeterministicActor`: single-output MLPs other
  algorithms (DDPG) reuse.

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
import math
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxdrive.spaces import Box, Discrete, MultiDiscrete, Space

__all__ = [
    "ACTIVATIONS",
    "HEAD_IMPLS",
    "HEAD_KINDS",
    "MLP",
    "MLP_DENSE_IMPLS",
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
    "padded_size",
    "resolve_dense_impl",
]

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "tanh": jnp.tanh,
    "relu": nn.relu,
    "elu": nn.elu,
    "gelu": nn.gelu,
    "silu": nn.silu,
    "swish": nn.silu,
    "leaky_relu": nn.leaky_relu,
}

#: Continuous head kinds for `Box` actions.
HEAD_KINDS = ("gaussian", "tanh_gaussian")

_NEG = -1e9  # logit of a padded (impossible) category of a MultiCategorical
_LOG_2PI = math.log(2.0 * math.pi)


def activation_fn(name: str) -> Callable[[jax.Array], jax.Array]:
    """The activation called ``name`` (one of `ACTIVATIONS`); ``ValueError`` otherwise."""
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; known: {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def flat_obs_size(space: Space) -> int:
    """Number of features of one observation of ``space`` once flattened."""
    return int(np.prod(space.shape, dtype=np.int64)) if space.shape else 1


# ----------------------------------------------------------------------------------------
# Distributions
# ----------------------------------------------------------------------------------------
def _pick(lp: jax.Array, x: jax.Array) -> jax.Array:
    """``lp[..., x]``: ``lp [..., K]``, ``x [...]`` ints -> ``[...]`` (0 for x outside
    ``[0, K)``). A one-hot select-and-sum, exactly the gather's value, whose gradient is
    elementwise instead of a scatter-add over the batch."""
    hit = x[..., None].astype(jnp.int32) == jnp.arange(lp.shape[-1], dtype=jnp.int32)
    return jnp.sum(jnp.where(hit, lp, 0.0), axis=-1)


@jax.custom_vjp
def _categorical_lp_ent(logits: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(sum_d log p_d(x_d), sum_d H_d)`` for ``logits [..., D, K]``, ``x [..., D]`` ints.

    One pass over the logits forward and one backward: the VJP writes
    ``dlogits = g_lp · (onehot − p) − g_H · p · (log p + H_d)`` directly instead of
    differentiating the log-softmax, the pick and the entropy separately.
    """
    lp = jax.nn.log_softmax(logits, axis=-1)
    return jnp.sum(_pick(lp, x), -1), -jnp.sum(jnp.exp(lp) * lp, (-2, -1))


def _categorical_lp_ent_fwd(logits, x):
    return _categorical_lp_ent(logits, x), (logits, x)


def _categorical_lp_ent_bwd(res, g):
    logits, x = res
    g_lp, g_ent = g
    lp = jax.nn.log_softmax(logits, axis=-1)
    p = jnp.exp(lp)
    ent_d = -jnp.sum(p * lp, -1, keepdims=True)  # [..., D, 1]
    hit = x[..., None].astype(jnp.int32) == jnp.arange(logits.shape[-1], dtype=jnp.int32)
    d = g_lp[..., None, None] * (hit.astype(p.dtype) - p) - g_ent[..., None, None] * p * (
        lp + ent_d
    )
    return d.astype(logits.dtype), None


_categorical_lp_ent.defvjp(_categorical_lp_ent_fwd, _categorical_lp_ent_bwd)


def log_prob_and_entropy(dist: Any, x: jax.Array, impl: str = "xla") -> tuple[jax.Array, jax.Array]:
    """``(dist.log_prob(x), dist.entropy())``, both ``[...]``; categorical heads take them
    in one fused pass with a hand-written VJP (same values and gradients): in XLA
    (``impl="xla"``) or as two Pallas kernels reading the logits once each
    (``"pallas"``, `pallas_categorical`, experimental). Other heads ignore ``impl``."""
    if impl not in HEAD_IMPLS:
        raise ValueError(f"log_prob_and_entropy impl must be one of {HEAD_IMPLS}, got {impl!r}")
    fn = _categorical_lp_ent
    if impl == "pallas":  # imported here: `import algorithms` does not need Pallas
        from algorithms.common.pallas_categorical import categorical_lp_ent_pallas as fn
    if isinstance(dist, MultiCategorical):
        return fn(dist.logits, x)
    if isinstance(dist, Categorical):
        return fn(dist.logits[..., None, :], x[..., None])
    return dist.log_prob(x), dist.entropy()


@struct.dataclass
class Categorical:
    """One categorical per batch element over ``K`` classes."""

    logits: jax.Array  # [..., K] float32

    def _log_probs(self) -> jax.Array:
        return jax.nn.log_softmax(self.logits, axis=-1)

    def sample(self, key: jax.Array) -> jax.Array:
        """Draws ``[...]`` int32 classes."""
        return jax.random.categorical(key, self.logits, axis=-1).astype(jnp.int32)

    def log_prob(self, x: jax.Array) -> jax.Array:
        """``log p(x)`` for ``x: [...]`` ints; returns ``[...]``."""
        return _pick(self.logits, x) - jax.nn.logsumexp(self.logits, axis=-1)

    def entropy(self) -> jax.Array:
        """``[...]`` entropy in nats."""
        lp = self._log_probs()
        return -jnp.sum(jnp.exp(lp) * lp, axis=-1)

    def mode(self) -> jax.Array:
        return jnp.argmax(self.logits, axis=-1).astype(jnp.int32)

    def to_env(self, x: jax.Array) -> jax.Array:
        return x


@struct.dataclass
class MultiCategorical:
    """``D`` independent categoricals (a `MultiDiscrete` action), padded to ``Kmax``.

    Padded classes carry logit ``-1e9`` so they are never drawn and add nothing to
    the entropy. Log-probs and entropies are summed over the ``D`` dimensions.
    """

    logits: jax.Array  # [..., D, Kmax] float32 (padded entries -1e9)

    def _log_probs(self) -> jax.Array:
        return jax.nn.log_softmax(self.logits, axis=-1)

    def sample(self, key: jax.Array) -> jax.Array:
        """Draws ``[..., D]`` int32."""
        return jax.random.categorical(key, self.logits, axis=-1).astype(jnp.int32)

    def log_prob(self, x: jax.Array) -> jax.Array:
        """``sum_d log p_d(x_d)`` for ``x: [..., D]``; returns ``[...]``."""
        lse = jax.nn.logsumexp(self.logits, axis=-1)
        return jnp.sum(_pick(self.logits, x) - lse, axis=-1)

    def entropy(self) -> jax.Array:
        """``[...]``: the sum of the ``D`` entropies."""
        lp = self._log_probs()
        return -jnp.sum(jnp.exp(lp) * lp, axis=(-2, -1))

    def mode(self) -> jax.Array:
        return jnp.argmax(self.logits, axis=-1).astype(jnp.int32)

    def to_env(self, x: jax.Array) -> jax.Array:
        return x


@struct.dataclass
class DiagGaussian:
    """A diagonal Gaussian; ``to_env`` clips samples to the Box bounds."""

    mean: jax.Array  # [..., D]
    log_std: jax.Array  # [..., D] (or broadcastable to it)
    low: jax.Array  # [D] action lower bound (may be -inf)
    high: jax.Array  # [D] action upper bound (may be +inf)

    def sample(self, key: jax.Array) -> jax.Array:
        """Draws ``[..., D]`` unclipped float32 samples."""
        eps = jax.random.normal(key, self.mean.shape, jnp.float32)
        return self.mean + jnp.exp(self.log_std) * eps

    def log_prob(self, x: jax.Array) -> jax.Array:
        """Density of unclipped ``x: [..., D]``, summed over ``D``: ``[...]``."""
        log_std = jnp.broadcast_to(self.log_std, self.mean.shape)
        z = (x - self.mean) * jnp.exp(-log_std)
        return jnp.sum(-0.5 * z**2 - log_std - 0.5 * _LOG_2PI, axis=-1)

    def entropy(self) -> jax.Array:
        log_std = jnp.broadcast_to(self.log_std, self.mean.shape)
        return jnp.sum(log_std + 0.5 * (1.0 + _LOG_2PI), axis=-1)

    def mode(self) -> jax.Array:
        return self.mean

    def to_env(self, x: jax.Array) -> jax.Array:
        return jnp.clip(x, self.low, self.high)


@struct.dataclass
class TanhGaussian:
    """A Gaussian over raw ``u`` whose env action is ``low + (tanh(u)+1)/2·(high−low)``.

    ``log_prob(u)`` is the density of the squashed action (change of variables);
    ``entropy()`` returns the Gaussian's (pre-squash) entropy, a common stand-in since
    the squashed one has no closed form.
    """

    mean: jax.Array  # [..., D]
    log_std: jax.Array  # [..., D] (or broadcastable to it)
    low: jax.Array  # [D] finite lower bound
    high: jax.Array  # [D] finite upper bound

    def _base(self) -> DiagGaussian:
        return DiagGaussian(self.mean, self.log_std, self.low, self.high)

    def sample(self, key: jax.Array) -> jax.Array:
        """Draws raw pre-squash ``u: [..., D]``."""
        return self._base().sample(key)

    def log_prob(self, u: jax.Array) -> jax.Array:
        half = 0.5 * (self.high - self.low)
        # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable for large |u|.
        log_det = 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u)) + jnp.log(half)
        return self._base().log_prob(u) - jnp.sum(log_det, axis=-1)

    def entropy(self) -> jax.Array:
        return self._base().entropy()

    def mode(self) -> jax.Array:
        return self.mean

    def to_env(self, u: jax.Array) -> jax.Array:
        return self.low + (jnp.tanh(u) + 1.0) * 0.5 * (self.high - self.low)


# ----------------------------------------------------------------------------------------
# Action heads
# ----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ActionSpec:
    """Static, hashable description of an action head.

    kind: ``"discrete"`` (``sizes=(K,)``), ``"multi_discrete"`` (``sizes=nvec``),
    ``"gaussian"`` or ``"tanh_gaussian"`` (``sizes=(D,)``, bounds in ``low``/``high``).
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
            if continuous_head == "tanh_gaussian" and not (
                np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))
            ):
                raise ValueError(
                    f"action_head 'tanh_gaussian' needs finite Box bounds, got {space}; "
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
        return self.sizes[0]


def _bias_grad(g: jax.Array) -> jax.Array:
    """``sum(g, 0)`` in float32 for ``g [M, H]``. (A dot with a ones vector and a
    two-stage sum time the same on an H200.)"""
    return jnp.sum(g.astype(jnp.float32), 0)


_DIMS = (((1,), (0,)), ((), ()))


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _dense(x: jax.Array, kernel: jax.Array, bias: jax.Array, dtype: Any, out_dtype: Any):
    """``x @ kernel + bias`` for ``x [..., I]``, float32 ``kernel [I, H]``, ``bias [H]``:
    the GEMM in ``dtype`` (float32 accumulation), the result in ``out_dtype``. Its VJP
    takes the weight and bias gradients from float32 GEMM outputs."""
    y = jax.lax.dot_general(
        x.astype(dtype).reshape(-1, x.shape[-1]),
        kernel.astype(dtype),
        _DIMS,
        preferred_element_type=out_dtype,
    )
    return (y + bias.astype(out_dtype)).reshape(*x.shape[:-1], kernel.shape[-1])


def _dense_fwd(x, kernel, bias, dtype, out_dtype):
    return _dense(x, kernel, bias, dtype, out_dtype), (x, kernel)


def _dense_bwd(dtype, out_dtype, res, g):
    x, kernel = res
    x2 = x.astype(dtype).reshape(-1, x.shape[-1])
    g2 = g.astype(dtype).reshape(-1, g.shape[-1])
    dx = jax.lax.dot_general(
        g2, kernel.astype(dtype), (((1,), (1,)), ((), ())), preferred_element_type=dtype
    )
    dk = jax.lax.dot_general(x2, g2, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)
    db = _bias_grad(g2)
    return dx.reshape(x.shape).astype(x.dtype), dk.astype(kernel.dtype), db


_dense.defvjp(_dense_fwd, _dense_bwd)


class FusedDense(nn.Module):
    """``nn.Dense`` (same parameters ``kernel [I, H]``, ``bias [H]``, same init) computing
    in ``dtype`` with a result in ``out_dtype`` (``None``: ``dtype``), float32
    accumulation, and float32 weight and bias gradients taken from the GEMMs."""

    features: int
    dtype: Any = jnp.float32
    out_dtype: Any = None
    kernel_init: Callable[..., jax.Array] = nn.initializers.lecun_normal()
    bias_init: Callable[..., jax.Array] = nn.initializers.zeros

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.param("kernel", self.kernel_init, (x.shape[-1], self.features))
        bias = self.param("bias", self.bias_init, (self.features,))
        out = self.dtype if self.out_dtype is None else self.out_dtype
        return _dense(x, kernel, bias, jnp.dtype(self.dtype), jnp.dtype(out))


class _DenseParams(nn.Module):
    """The parameters of ``nn.Dense(features)`` (same names, shapes and init), returned
    as ``(kernel [I, F], bias [F])`` for ``in_features = I``, so that several heads can
    share one GEMM."""

    features: int
    kernel_init: Callable[..., jax.Array] = nn.initializers.lecun_normal()
    bias_init: Callable[..., jax.Array] = nn.initializers.zeros

    @nn.compact
    def __call__(self, in_features: int) -> tuple[jax.Array, jax.Array]:
        kernel = self.param("kernel", self.kernel_init, (in_features, self.features))
        return kernel, self.param("bias", self.bias_init, (self.features,))


def _affine(x: jax.Array, kernel: jax.Array, bias: jax.Array, dtype: Any) -> jax.Array:
    """``x [..., I] @ kernel [I, F] + bias`` as float32: as ``nn.Dense`` for float32
    ``dtype``, else the GEMM in ``dtype`` with float32 accumulation (`FusedDense`)."""
    if jnp.dtype(dtype) == jnp.float32:
        x = x.astype(jnp.float32)
        return jax.lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ()))) + bias
    return _dense(x, kernel, bias, jnp.dtype(dtype), jnp.dtype(jnp.float32))


class ActionHead(nn.Module):
    """Dense layer(s) mapping features ``[..., H]`` to the distribution of an `ActionSpec`.

    Logit/mean layers use orthogonal init with gain 0.01 (near-uniform start); the
    Gaussian ``log_std`` is a state-independent parameter ``[D]``.
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
        kernel, bias = _DenseParams(
            spec.num_outputs,
            kernel_init=nn.initializers.orthogonal(0.01),
            bias_init=nn.initializers.zeros,
            name="logits" if spec.is_discrete else "mean",
        )(x.shape[-1])
        if extra is None and joint is None:
            return self._dist(_affine(x, kernel, bias, self.dtype))
        if joint is not None:
            kernel, bias = joint
        else:
            kernel = jnp.concatenate([kernel, extra[0].astype(kernel.dtype)], axis=1)
            bias = jnp.concatenate([bias, extra[1].astype(bias.dtype)])
        out = _affine(x, kernel, bias, self.dtype)
        n = spec.num_outputs
        return self._dist(out[..., :n]), out[..., n:]

    def _dist(self, out: jax.Array) -> Any:
        spec = self.spec
        if spec.kind == "discrete":
            return Categorical(out)
        if spec.kind == "multi_discrete":
            kmax = max(spec.sizes)
            if all(n == kmax for n in spec.sizes):
                # Same as the slices below, without their gradients' pads [..., D·K].
                return MultiCategorical(out.reshape(*out.shape[:-1], len(spec.sizes), kmax))
            chunks, start = [], 0
            for n in spec.sizes:
                c = out[..., start : start + n]
                start += n
                if n < kmax:
                    pad = jnp.full((*c.shape[:-1], kmax - n), _NEG, c.dtype)
                    c = jnp.concatenate([c, pad], axis=-1)
                chunks.append(c)
            return MultiCategorical(jnp.stack(chunks, axis=-2))
        log_std = self.param(
            "log_std", nn.initializers.constant(spec.log_std_init), (spec.sizes[0],)
        )
        low = jnp.asarray(spec.low, jnp.float32)
        high = jnp.asarray(spec.high, jnp.float32)
        cls = DiagGaussian if spec.kind == "gaussian" else TanhGaussian
        return cls(out, jnp.broadcast_to(log_std, out.shape), low, high)


# ----------------------------------------------------------------------------------------
# Networks
# ----------------------------------------------------------------------------------------
class PaddedInputDense(nn.Module):
    """``nn.Dense`` whose input may carry zero padding: ``[..., I_pad] -> [..., H]``.

    Its parameters are those of ``nn.Dense(features)`` on ``[..., in_features]`` inputs
    (``kernel [in_features, H]``, ``bias [H]``, the same init), so checkpoints do not
    depend on the padding. Inputs with ``I_pad > in_features`` columns are multiplied by
    the kernel padded with ``I_pad − in_features`` zero rows: the trailing input columns
    are ignored and their (sliced-off) kernel rows get no gradient, while the GEMM sees
    an aligned contraction size. ``I_pad == in_features`` is a plain ``nn.Dense``.

    ``bias_column=True``: padded inputs carry the constant 1.0 in column ``in_features``
    (the first padding column) and the bias is that row of the padded kernel, so the GEMM
    adds it (no separate pass over ``[..., H]``) and the weight-gradient GEMM yields the
    bias gradient (no separate reduction over the batch).
    """

    features: int
    in_features: int
    kernel_init: Callable[..., jax.Array] = nn.initializers.lecun_normal()
    bias_init: Callable[..., jax.Array] = nn.initializers.zeros
    dtype: Any = jnp.float32  # computation dtype (inputs, kernel and output are cast)
    bias_column: bool = False  # padded inputs carry 1.0 in column in_features (see above)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        width = x.shape[-1]
        if width < self.in_features:
            raise ValueError(
                f"input has {width} features, fewer than the layer's in_features={self.in_features}"
            )
        kernel = self.param("kernel", self.kernel_init, (self.in_features, self.features))
        bias = self.param("bias", self.bias_init, (self.features,))
        x, kernel, bias = (a.astype(self.dtype) for a in (x, kernel, bias))
        dims = (((x.ndim - 1,), (0,)), ((), ()))
        extra = width - self.in_features
        if extra and self.bias_column:
            kernel = jnp.concatenate([kernel, bias[None], jnp.zeros_like(kernel[: extra - 1])])
            return jax.lax.dot_general(x, kernel, dims)
        if extra:
            kernel = jnp.pad(kernel, ((0, extra), (0, 0)))
        return jax.lax.dot_general(x, kernel, dims) + bias


def cast_kernels(params: Any, dtype: Any) -> Any:
    """``params`` (flax variables) with every ``kernel`` leaf cast to ``dtype`` when it is
    not float32, else ``params`` itself. The networks here cast kernels to their compute
    dtype before each GEMM, so applying them to the result gives the same outputs
    (bit for bit) without repeating the casts, e.g. at every step of a rollout."""
    if jnp.dtype(dtype) == jnp.float32:
        return params

    def cast(path: Any, leaf: jax.Array) -> jax.Array:
        last = path[-1]
        name = getattr(last, "key", getattr(last, "name", None))
        return leaf.astype(dtype) if name == "kernel" else leaf

    return jax.tree_util.tree_map_with_path(cast, params)


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


#: Values of `MLP.dense_impl` (a policy's ``dense_impl``).
MLP_DENSE_IMPLS = ("auto", "xla", "fused_xla", "pallas")


def resolve_dense_impl(dense_impl: str, dtype: Any, activation: str) -> str:
    """The hidden-layer form `MLP` uses: ``"auto"`` is ``"fused_xla"`` for bfloat16 relu
    layers and ``"xla"`` otherwise; the other values (`MLP_DENSE_IMPLS`) are returned
    as they are, after checking that a fused form gets bfloat16 and relu."""
    if dense_impl not in MLP_DENSE_IMPLS:
        raise ValueError(f"MLP dense_impl must be one of {MLP_DENSE_IMPLS}, got {dense_impl!r}")
    fusable = jnp.dtype(dtype) == jnp.bfloat16 and activation == "relu"
    if dense_impl == "auto":
        return "fused_xla" if fusable else "xla"
    if dense_impl != "xla" and not fusable:
        raise ValueError(
            f"dense_impl={dense_impl!r} needs dtype bfloat16 and activation relu, "
            f"got {jnp.dtype(dtype).name} and {activation!r}"
        )
    return dense_impl


#: Values of `log_prob_and_entropy`'s ``impl`` (a policy's ``head_impl``).
HEAD_IMPLS = ("xla", "pallas")


def padded_size(n: int, multiple: int) -> int:
    """``n`` rounded up to a multiple of ``multiple`` (>= 1)."""
    return -(-int(n) // int(multiple)) * int(multiple)


class MLP(nn.Module):
    """Dense layers ``hidden_sizes`` with ``activation`` after each: ``[..., I] -> [..., H]``.

    Orthogonal kernel init with gain ``sqrt(2)``, zero biases. With ``in_features`` set,
    the first layer is a `PaddedInputDense`: inputs ``[..., I_pad]`` may have zero columns
    after the first ``in_features`` (parameters as for ``[..., in_features]`` inputs);
    with ``bias_column`` the first of those columns is 1.0 and carries the first bias.
    ``dtype`` (``jnp.bfloat16`` for mixed precision): every layer's inputs, GEMMs and
    activations are cast to it (float32 accumulation); parameters stay float32.
    """

    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    in_features: int | None = None
    dtype: Any = jnp.float32
    bias_column: bool = False  # padded inputs carry 1.0 in column in_features
    # hidden layers after the first: "xla" (GEMM, then bias and activation), or the
    # GEMM with bias and relu before one rounding (bfloat16 + relu only): "fused_xla"
    # (in XLA, with `pallas_dense`'s backward) or "pallas" (the Pallas kernel,
    # experimental); "auto": `resolve_dense_impl`
    dense_impl: str = "xla"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = activation_fn(self.activation)
        dense_impl = resolve_dense_impl(self.dense_impl, self.dtype, self.activation)
        fused = dense_impl != "xla"
        x = x if x.dtype == jnp.dtype(self.dtype) else x.astype(jnp.float32)
        for i, h in enumerate(self.hidden_sizes):
            kw = dict(
                kernel_init=nn.initializers.orthogonal(math.sqrt(2.0)),
                bias_init=nn.initializers.zeros,
                name=f"dense_{i}",
            )
            if fused and i > 0:
                kernel, bias = _DenseParams(int(h), **kw)(x.shape[-1])
                impl = "pallas" if dense_impl == "pallas" else "xla"
                from algorithms.common.pallas_dense import dense_relu  # Pallas: only here

                x = dense_relu(x, kernel, bias, jnp.dtype(self.dtype), impl)
                continue
            if i == 0 and self.in_features is not None:
                x = PaddedInputDense(
                    int(h),
                    int(self.in_features),
                    dtype=self.dtype,
                    bias_column=self.bias_column,
                    **kw,
                )(x)
            elif jnp.dtype(self.dtype) == jnp.float32:
                x = nn.Dense(int(h), **kw)(x)
            else:
                x = FusedDense(int(h), self.dtype, **kw)(x)
            x = act(x)
        return x


def _value_head(x: jax.Array, name: str = "value") -> jax.Array:
    v = nn.Dense(
        1, kernel_init=nn.initializers.orthogonal(1.0), bias_init=nn.initializers.zeros, name=name
    )(x)
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
            kernel_init=nn.initializers.orthogonal(0.01),
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
    ``dense_impl``: how the torsos' hidden layers after the first run (`MLP.dense_impl`).
    """

    spec: ActionSpec
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    shared_torso: bool = False
    obs_features: int | None = None
    critic_features: int | None = None
    compute_dtype: Any = jnp.float32
    bias_column: bool = False
    dense_impl: str = "xla"  # the torsos' hidden layers (`MLP.dense_impl`)

    def setup(self) -> None:
        mlp = functools.partial(
            MLP,
            self.hidden_sizes,
            self.activation,
            dtype=self.compute_dtype,
            bias_column=self.bias_column,
            dense_impl=self.dense_impl,
        )
        if self.shared_torso:
            self.torso = mlp(in_features=self.obs_features)
        else:
            self.actor_torso = mlp(in_features=self.obs_features)
            self.critic_torso = mlp(in_features=self.critic_features)
        self.actor_head = ActionHead(self.spec, self.compute_dtype)
        self.value_head = _DenseParams(
            1, kernel_init=nn.initializers.orthogonal(1.0), bias_init=nn.initializers.zeros
        )

    def _value_of(self, h: jax.Array) -> jax.Array:
        return _affine(h, *self.value_head(h.shape[-1]), self.compute_dtype)[..., 0]

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
        which measured faster with their backward pass). ``joint``: that GEMM's kernel
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
                # bfloat16: two GEMMs measured faster than one (H200, Tag A2C: 1.033M vs
                # 1.025M env steps/s with the joint GEMM padded, 1.007M unpadded)
                return self.actor_head(h), self._value_of(h)
            # float32: one GEMM for the policy heads and the value head, its output
            # zero-padded to a multiple of 8 columns ([H, K + 1 + pad]; the padding is
            # constant, parameters unchanged): 734K -> 758K env steps/s on Tag A2C
            return self._joint_heads(h)
        return self.policy(obs), self.value(obs, critic_obs)
