"""PPO loss pieces, pure and masked: every input is ``[M]`` (a minibatch of samples);
``mask [M]`` bool leaves inactive agents out; each function returns a float32 scalar.

* `clipped_policy_loss`: ``−mean(min(ρ·A, clip(ρ, 1−ε, 1+ε)·A))``, ``ρ = exp(logp − old_logp)``.
* `value_loss`: ``0.5·mean((V − R)²)``, or with ``clip_eps`` the clipped form
  ``0.5·mean(max((V − R)², (V_old + clip(V − V_old, ±ε) − R)²))``.
* `entropy_bonus`: ``mean(H)``.
* `ppo_loss`: ``policy + vf_coef·value − ent_coef·entropy`` with its parts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["clip_fraction", "clipped_policy_loss", "entropy_bonus", "ppo_loss", "value_loss"]


def _mean(x: jax.Array, mask: jax.Array | None) -> jax.Array:
    if mask is None:
        return jnp.mean(x)
    m = mask.astype(jnp.float32)
    return jnp.sum(x * m) / jnp.maximum(jnp.sum(m), 1.0)


def clipped_policy_loss(
    logp: jax.Array,
    old_logp: jax.Array,
    advantages: jax.Array,
    clip_eps: float | jax.Array,
    mask: jax.Array | None = None,
) -> jax.Array:
    """PPO's clipped surrogate, negated (to minimise)."""
    ratio = jnp.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    return -_mean(jnp.minimum(unclipped, clipped), mask)


def clip_fraction(
    logp: jax.Array, old_logp: jax.Array, clip_eps: float | jax.Array, mask: jax.Array | None = None
) -> jax.Array:
    """Fraction of samples whose ratio lies outside ``[1−ε, 1+ε]``."""
    ratio = jnp.exp(logp - old_logp)
    return _mean((jnp.abs(ratio - 1.0) > clip_eps).astype(jnp.float32), mask)


def value_loss(
    values: jax.Array,
    targets: jax.Array,
    old_values: jax.Array | None = None,
    clip_eps: float | jax.Array | None = None,
    mask: jax.Array | None = None,
) -> jax.Array:
    """Half squared error to the targets, clipped around ``old_values`` if ``clip_eps``."""
    sq = (values - targets) ** 2
    if clip_eps is not None:
        v_clip = old_values + jnp.clip(values - old_values, -clip_eps, clip_eps)
        sq = jnp.maximum(sq, (v_clip - targets) ** 2)
    return 0.5 * _mean(sq, mask)


def entropy_bonus(entropy: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """Mean entropy."""
    return _mean(entropy, mask)


def ppo_loss(
    logp: jax.Array,
    entropy: jax.Array,
    values: jax.Array,
    mb: Mapping[str, jax.Array],
    hp: Mapping[str, Any],
    ent_coef: float | jax.Array,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The total PPO loss of a minibatch and its parts (an on-policy ``LossFn``).

    ``mb``: ``old_logp``, ``old_value``, ``advantage``, ``target``, ``mask``, all ``[M]``;
    ``hp``: ``clip_eps``, ``clip_value``, ``value_clip_eps``, ``vf_coef``.
    """
    mask = mb["mask"]
    pg = clipped_policy_loss(logp, mb["old_logp"], mb["advantage"], hp["clip_eps"], mask)
    vclip = hp["value_clip_eps"] if hp["clip_value"] else None
    vl = value_loss(values, mb["target"], mb["old_value"], vclip, mask)
    ent = entropy_bonus(entropy, mask)
    total = pg + hp["vf_coef"] * vl - ent_coef * ent
    aux = {
        "policy": pg,
        "value": vl,
        "entropy": ent,
        "clip_frac": clip_fraction(logp, mb["old_logp"], hp["clip_eps"], mask),
    }
    return total, aux
