"""A tournament leaderboard kept on the device: the ``K`` best evaluated snapshots.

A snapshot is a member's learner state (every policy's parameters, optimiser state,
normalisation statistics and hyper-parameters; not its envs). `update` merges ``P``
candidates into the ``K`` entries and keeps the ``K`` highest scores, best first:

* entries are sorted by score, descending; valid entries come before empty ones;
* ties keep the older entry first, then candidates in member order;
* a candidate with a NaN score is never entered.

The result is thus the top ``K`` of the union of the old entries and the candidates.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

__all__ = ["Leaderboard", "empty_leaderboard", "update_leaderboard"]


@struct.dataclass
class Leaderboard:
    """``K`` snapshots, best first."""

    snapshots: Any  # learner states, leaves [K, ...]
    score: jax.Array  # [K] float32, -inf where empty
    env_steps: jax.Array  # [K] float32 env steps of the member when it was entered
    member: jax.Array  # [K] int32 slot of the member it came from (-1 where empty)
    generation: jax.Array  # [K] int32 selection round it was entered in (-1 where empty)
    valid: jax.Array  # [K] bool


def empty_leaderboard(snapshot: Any, size: int) -> Leaderboard:
    """An empty leaderboard of ``size`` entries shaped like one ``snapshot``."""
    return Leaderboard(
        snapshots=jax.tree.map(lambda x: jnp.zeros((size, *x.shape), x.dtype), snapshot),
        score=jnp.full((size,), -jnp.inf, jnp.float32),
        env_steps=jnp.zeros((size,), jnp.float32),
        member=jnp.full((size,), -1, jnp.int32),
        generation=jnp.full((size,), -1, jnp.int32),
        valid=jnp.zeros((size,), bool),
    )


def update_leaderboard(
    lb: Leaderboard,
    snapshots: Any,
    scores: jax.Array,
    env_steps: jax.Array,
    generation: jax.Array,
) -> Leaderboard:
    """``lb`` with the ``P`` candidates (``snapshots`` leaves ``[P, ...]``, ``scores``
    and ``env_steps`` ``[P]``) merged in; see the module docstring."""
    K, P = lb.score.shape[0], scores.shape[0]
    ok = ~jnp.isnan(scores)
    score = jnp.concatenate([lb.score, jnp.where(ok, scores, -jnp.inf).astype(jnp.float32)])
    valid = jnp.concatenate([lb.valid, ok])
    # sort key: valid first, then score descending; stable keeps old entries first
    key = jnp.where(valid, -score, jnp.inf)
    order = jnp.argsort(key, stable=True)[:K]

    def pick(old, new):
        return jnp.concatenate([old, new.astype(old.dtype)])[order]

    return Leaderboard(
        snapshots=jax.tree.map(pick, lb.snapshots, snapshots),
        score=score[order],
        env_steps=pick(lb.env_steps, env_steps),
        member=pick(lb.member, jnp.arange(P, dtype=jnp.int32)),
        generation=pick(lb.generation, jnp.full((P,), generation, jnp.int32)),
        valid=valid[order],
    )
