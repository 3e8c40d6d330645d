"""Changing the number of members of a saved population (at a resume).

The rule: members are ranked by their last score (best first, NaN last, ties by
index). Going from ``P`` to ``P'`` members keeps the ``min(P, P')`` best in their old
order; each added member ``j = 0, 1, ...`` copies the ``(j mod P)``-th best old member
whole (learner state, envs, iteration) and then explores its hyper-parameters as a PBT
copy does; its PRNG key becomes ``fold_in(key, P + j)`` of the copied one, so it
follows its own trajectory. The leaderboard, the selection key and the round count
carry over.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from algorithms.population.selection import draws, explore

__all__ = ["resize", "resized_target"]


def resized_target(pop: Any, state: Any, old_size: int) -> Any:
    """The abstract restore target of a saved population of ``old_size`` members shaped
    like ``state`` otherwise (on the first device)."""
    dev = jax.sharding.SingleDeviceSharding(jax.devices()[0])

    def leaf(x, member):
        shape = (old_size, *x.shape[1:]) if member else x.shape
        return jax.ShapeDtypeStruct(shape, x.dtype, sharding=dev)

    return state.replace(
        members=jax.tree.map(lambda x: leaf(x, True), state.members),
        scores=leaf(state.scores, True),
        parent=leaf(state.parent, True),
        leaderboard=jax.tree.map(lambda x: leaf(x, False), state.leaderboard),
        key=leaf(state.key, False),
        generation=leaf(state.generation, False),
    )


def resize(pop: Any, old: Any, like: Any) -> Any:
    """``old`` (``P`` members) resized to ``pop.size`` by the module's rule, in the
    structure of ``like`` (a fresh or abstract state of ``pop``), split over ``pop``'s
    devices where it has several."""
    P, new = old.scores.shape[0], pop.size
    s = np.asarray(old.scores, np.float64)
    order = sorted(range(P), key=lambda i: (-(s[i] if np.isfinite(s[i]) else -np.inf), i))
    keep = sorted(order[: min(P, new)])
    added = [order[j % P] for j in range(max(new - P, 0))]
    idx = jnp.asarray(keep + added, jnp.int32)
    members = jax.tree.map(lambda x: x[idx], old.members)
    is_new = jnp.arange(new) >= len(keep)
    key, k_draw = jax.random.split(jax.random.wrap_key_data(old.key))
    if added:
        sub = jax.vmap(lambda kd, j: jax.random.key_data(
            jax.random.fold_in(jax.random.wrap_key_data(kd), j)
        ))  # fmt: skip
        folded = sub(members.key, jnp.arange(new, dtype=jnp.int32) + P - len(keep))
        members = members.replace(key=jnp.where(is_new[:, None], folded, members.key))
        sp = pop.spec
        d = draws(k_draw, new, len(pop.slots), len(sp.perturb_factors))
        values = explore(
            pop.hparams(members), is_new, d, pop.slots, sp.perturb_factors, sp.resample_prob
        )
        members = pop.with_hparams(members, values)
    state = like.replace(
        members=members,
        scores=old.scores[idx],
        parent=jnp.full((new,), -1, jnp.int32),
        leaderboard=old.leaderboard,
        key=jax.random.key_data(key),
        generation=old.generation,
    )
    sh = pop.shardings(like)
    return state if sh is None else jax.device_put(state, sh)
