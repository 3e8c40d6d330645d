"""A2C loss pieces, pure and masked: inputs ``[M]``, ``mask [M]`` bool, scalar outputs.

* `policy_gradient_loss`: ``−mean(logp·A)`` (advantages are data, no gradient).
* `a2c_loss`: ``policy + vf_coef·0.5·mean((V − R)²) − ent_coef·mean(H)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from algorithms.ppo.losses import entropy_bonus, value_loss

__all__ = ["a2c_loss", "policy_gradient_loss"]


def policy_gradient_loss(
    logp: jax.Array, advantages: jax.Array, mask: jax.Array | None = None
) -> jax.Array:
    """The vanilla policy-gradient loss ``−mean(logp · stop_gradient(A))``."""
    x = logp * jax.lax.stop_gradient(advantages)
    if mask is None:
        return -jnp.mean(x)
    m = mask.astype(jnp.float32)
    return -jnp.sum(x * m) / jnp.maximum(jnp.sum(m), 1.0)


def a2c_loss(
    logp: jax.Array,
    entropy: jax.Array,
    values: jax.Array,
    mb: Mapping[str, jax.Array],
    hp: Mapping[str, Any],
    ent_coef: float | jax.Array,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The total A2C loss of a batch and its parts (an on-policy ``LossFn``)."""
    mask = mb["mask"]
    pg = policy_gradient_loss(logp, mb["advantage"], mask)
    vl = value_loss(values, mb["target"], mask=mask)
    ent = entropy_bonus(entropy, mask)
    total = pg + hp["vf_coef"] * vl - ent_coef * ent
    return total, {"policy": pg, "value": vl, "entropy": ent}
