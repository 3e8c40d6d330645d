"""Action distributions of the policy heads, as pytrees.

Dimension letters: ``...`` any leading batch axes (envs, agents, time); ``K`` categories
of a `Discrete` head; ``D`` dimensions of a `MultiDiscrete` or `Box` action; ``Kmax`` the
largest ``nvec`` entry.

Each distribution has ``sample(key)``, ``log_prob(x)``, ``entropy()``, ``mode()`` and
``to_env(x)``. Samples are *raw* actions (what log-probs are taken of); ``to_env`` maps
them to the env's action space (identity for discrete heads, clipping to the bounds for
`DiagGaussian`, an affine ``tanh`` squash for `TanhGaussian`).
`log_prob_and_entropy` gives both terms of a learning step, for categorical heads in one
fused pass with a hand-written VJP.

**Action masks**: ``masked(mask)`` of a categorical head sets the logits of forbidden
classes to `NEG_LOGIT`, a large negative *finite* value: their probability is exactly 0
in float32 (``exp(NEG_LOGIT − logsumexp)`` underflows), so they are never sampled, never
the mode and add nothing to the entropy, while log-softmax, entropy and their gradients
stay finite (``0 · NEG_LOGIT = 0``, where ``−inf`` would give ``0 · −inf = nan``). The
gradient to a masked logit is 0. Sampling draws ``argmax(logits + Gumbel noise)``, and
the noise of `jax.random.categorical` is bounded far below ``|NEG_LOGIT|``.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

__all__ = [
    "MIN_STD",
    "NEG_LOGIT",
    "Categorical",
    "DiagGaussian",
    "MultiCategorical",
    "TanhGaussian",
    "log_prob_and_entropy",
    "state_log_std",
]

#: Logit of an impossible category: a padded one of a `MultiCategorical`, or one an
#: action mask forbids.
NEG_LOGIT = -1e9
#: Smallest standard deviation of a state-dependent Gaussian head (`state_log_std`).
MIN_STD = 1e-3
_LOG_2PI = math.log(2.0 * math.pi)


def state_log_std(raw: jax.Array, min_std: float = MIN_STD) -> jax.Array:
    """``log(softplus(raw) + min_std)``: the log-std of a Gaussian whose σ a network
    outputs (``raw [..., D]``, unconstrained). σ is smooth in ``raw`` and never below
    ``min_std``, so log-probs stay bounded without clipping (Brax's parameterisation of
    its tanh-normal heads)."""
    return jnp.log(jax.nn.softplus(raw) + min_std)


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


def log_prob_and_entropy(dist: Any, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(dist.log_prob(x), dist.entropy())``, both ``[...]``. Categorical heads take them
    in one fused pass with a hand-written VJP (the same values and gradients as
    differentiating the log-softmax, the pick and the entropy separately)."""
    if isinstance(dist, MultiCategorical):
        return _categorical_lp_ent(dist.logits, x)
    if isinstance(dist, Categorical):
        return _categorical_lp_ent(dist.logits[..., None, :], x[..., None])
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

    def masked(self, mask: jax.Array) -> Categorical:
        """The distribution restricted to the classes where ``mask [..., K]`` (bool) is
        True: the others get logit `NEG_LOGIT` (probability 0)."""
        return Categorical(jnp.where(mask, self.logits, NEG_LOGIT))


@struct.dataclass
class MultiCategorical:
    """``D`` independent categoricals (a `MultiDiscrete` action), padded to ``Kmax``.

    Padded classes carry logit `NEG_LOGIT` so they are never drawn and add nothing to
    the entropy. Log-probs and entropies are summed over the ``D`` dimensions.
    """

    logits: jax.Array  # [..., D, Kmax] float32 (padded entries NEG_LOGIT)

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

    def masked(self, mask: jax.Array) -> MultiCategorical:
        """The distribution restricted to the classes where ``mask [..., D, Kmax]`` (bool,
        in the padded layout) is True: the others get logit `NEG_LOGIT`."""
        return MultiCategorical(jnp.where(mask, self.logits, NEG_LOGIT))


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
