"""Exploit and explore, as pure array functions of scores and random draws.

Dimension letters: ``P`` members, ``H`` varied hyper-parameter slots, ``K`` leaderboard
entries, ``F`` perturbation factors.

* **Truncation selection** (`truncation_plan`): members are ranked by score (ascending,
  ties by member index, NaN lowest); the ``n = max(1, floor(q·P))`` lowest copy a member
  of the ``n`` highest, member ``b`` taking the ``floor(u_b·n)``-th of them (in rank
  order) with its own uniform draw ``u_b``; a source without a score (NaN: no episode
  ended yet) is not copied.
* **Explore** (`explore`): each copied member's value of each slot is, with probability
  ``resample_prob``, a fresh draw from the slot's range, else the copied value times one
  of the ``F`` factors (chosen uniformly) clipped to the range.
* **Pick by rank** (`rank_pick`): an index into ``K`` valid-first leaderboard entries,
  entry ``r`` (0 = best) drawn with probability proportional to ``1/(r+1)`` among the
  valid ones.

The draws come from `draws` so that a reference can reproduce every decision.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from algorithms.population.hparams import Slot, clip_to_ranges, from_unit

__all__ = ["draws", "explore", "rank_order", "rank_pick", "truncation_plan"]


def draws(key: jax.Array, num_members: int, num_slots: int, num_factors: int) -> dict:
    """The random draws of one exploit/explore step: ``pick [P]`` uniform (which source),
    ``resample [P, H]`` uniform (resample if below the probability), ``factor [P, H]``
    int32 in ``[0, F)``, ``fresh [P, H]`` uniform (the resampled value's position)."""
    k1, k2, k3, k4 = jax.random.split(key, 4)
    P, H = num_members, num_slots
    return {
        "pick": jax.random.uniform(k1, (P,), jnp.float32),
        "resample": jax.random.uniform(k2, (P, H), jnp.float32),
        "factor": jax.random.randint(k3, (P, H), 0, num_factors, jnp.int32),
        "fresh": jax.random.uniform(k4, (P, H), jnp.float32),
    }


def rank_order(scores: jax.Array) -> jax.Array:
    """``[P]`` member indices from the lowest score to the highest (NaN lowest, ties by
    index)."""
    s = jnp.where(jnp.isnan(scores), -jnp.inf, scores)
    return jnp.argsort(s, stable=True).astype(jnp.int32)


def truncation_plan(
    scores: jax.Array, pick: jax.Array, fraction: float
) -> tuple[jax.Array, jax.Array]:
    """``(src [P] int32, copied [P] bool)``: member ``i`` takes the state of ``src[i]``
    (itself unless copied). See the module docstring."""
    P = scores.shape[0]
    n = max(1, int(fraction * P))
    order = rank_order(scores)
    bottom, top = order[:n], order[P - n :]
    which = jnp.minimum((pick[bottom] * n).astype(jnp.int32), n - 1)
    ok = ~jnp.isnan(scores[top[which]])
    src = jnp.arange(P, dtype=jnp.int32).at[bottom].set(jnp.where(ok, top[which], bottom))
    copied = jnp.zeros((P,), bool).at[bottom].set(ok)
    return src, copied


def explore(
    values: jax.Array,
    changed: jax.Array,
    d: dict,
    slots: Sequence[Slot],
    factors: Sequence[float],
    resample_prob: float,
) -> jax.Array:
    """``values [P, H]`` explored where ``changed [P]``: resampled or perturbed (see the
    module docstring); the other rows are returned unchanged."""
    if not slots:
        return values
    f = jnp.asarray(factors, jnp.float32)[d["factor"]]
    perturbed = clip_to_ranges(values * f, slots)
    fresh = from_unit(d["fresh"], slots)
    new = jnp.where(d["resample"] < resample_prob, fresh, perturbed)
    return jnp.where(changed[:, None], new, values)


def rank_pick(valid: jax.Array, u: jax.Array) -> jax.Array:
    """``[P]`` int32 entries of a leaderboard sorted best first with ``valid [K]``
    (valid entries first), entry ``r`` drawn with weight ``1/(r+1)`` among the valid
    ones, by inverse CDF of the uniforms ``u [P]``; 0 where none is valid."""
    K = valid.shape[0]
    w = jnp.where(valid, 1.0 / jnp.arange(1, K + 1, dtype=jnp.float32), 0.0)
    cdf = jnp.cumsum(w) / jnp.maximum(jnp.sum(w), 1e-30)
    idx = jnp.sum(u[:, None] >= cdf[None, :], axis=1).astype(jnp.int32)
    n_valid = jnp.maximum(jnp.sum(valid.astype(jnp.int32)), 1)
    return jnp.minimum(idx, n_valid - 1)
