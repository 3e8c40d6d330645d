"""TagContinuous's observations of a state, assembled per group (functions of the env's
static configuration).

With the plain-JAX backend the neighbour lists come from `neighbors.nearest_k` and the
rows from `obs_xla`; with the kernels, from `kernels.search.nearest_k_lists` (the method
of the env's `TagKernelConfig`) and the Pallas writers (`kernels.obs_writer`,
`kernels.full_obs`), which give the same values (see their docstrings for why). Each
group's rows are built directly (one search per state), except for the plain-JAX forms
where the groups' ids are not contiguous, or the full observation: there all ``M`` rows
are built at once and split, as XLA writes one ``[M, D]`` pass faster than two gathers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from environments.tag_continuous import neighbors, obs_xla
from environments.tag_continuous.params import TagContinuousParams, TagState, is_concrete_scale

if TYPE_CHECKING:
    from environments.tag_continuous.env import TagContinuous

__all__ = [
    "features",
    "global_state",
    "group_observations",
    "nearest_lists",
    "observe",
    "observe_knn",
    "observe_knn_groups",
    "observe_nearest",
]

_TWO_PI = np.float32(2.0 * np.pi)
_EPS = np.float32(1e-10)
_SQRT2 = np.float32(np.sqrt(2.0))
#: The queries the env asks the Pallas searches for: ``"in_game"`` lets a search leave
#: the lists of agents out of the game empty (the writer zeroes those rows anyway).
_QUERIES = "in_game"


def features(env: TagContinuous, state: TagState) -> jax.Array:
    """``[7, M]``: x, y, speed, acceleration, direction (the five relative features),
    then type and in-game (float32)."""
    types = jnp.asarray(env.is_tagger, jnp.float32)
    return jnp.stack(
        [state.x, state.y, state.speed, state.acceleration, state.direction]
        + [types, state.in_game.astype(jnp.float32)]
    )


def _scale(params: TagContinuousParams) -> jax.Array:
    """``[7]`` float32: the features' divisors ``√2 L, √2 L, max_speed + 1e-10`` (twice),
    ``2π``, then 1 for type and in-game."""
    p = jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), params)
    diag = p.grid_length * _SQRT2
    ms = p.max_speed + _EPS
    one = jnp.float32(1.0)
    return jnp.stack([diag, diag, ms, ms, jnp.float32(_TWO_PI), one, one])


def _time(env: TagContinuous, state: TagState) -> jax.Array:
    return state.t.astype(jnp.float32) / jnp.float32(env.episode_length)


def nearest_lists(env: TagContinuous, state: TagState) -> tuple[jax.Array, jax.Array | None]:
    """The neighbour lists of all agents: ``idx, valid [M, k]`` (`neighbors.nearest_k`),
    or with the kernels their own lists ``[M, k]`` with ``-1`` in empty slots and
    ``valid = None`` (one pass fewer)."""
    k = env.num_other_agents_observed
    if not env.uses_kernels:
        return neighbors.nearest_k(state.x, state.y, state.in_game, k)
    from environments.tag_continuous.kernels import search

    lists = search.nearest_k_lists(
        state.x, state.y, state.in_game, k, method=env.search_method, queries=_QUERIES,
        interpret=env.interpret,
    )  # fmt: skip
    return lists, None


def _lists_in_game(env: TagContinuous, valid: jax.Array | None) -> bool:
    """Whether `nearest_lists`' lists leave the rows of agents out of the game all ``-1``."""
    if valid is not None:
        return False
    from environments.tag_continuous.kernels import search

    return bool(search.lists_in_game_only(env.search_method, _QUERIES))


def observe_knn(
    env: TagContinuous,
    state: TagState,
    params: TagContinuousParams,
    rows: Sequence[int],
    idx: jax.Array,
    valid: jax.Array | None,
    *,
    alone: bool = True,
    time: jax.Array | None = None,
    table: jax.Array | None = None,
) -> jax.Array:
    """Partial observations of the agent ids ``rows`` (static, any order) from the
    neighbour lists (`nearest_lists`): ``[n, 7k+1]`` float32. ``time``: ``t / E`` if
    already computed; ``table``: the writer's feature table, if already built (both
    written by the batched step kernel).

    The kernel is told whether XLA compiles the reference's division into a
    multiplication by the reciprocal. One case takes the plain-JAX form instead: a single
    row with ``k = 1`` that the plain-JAX path would build ``alone`` (not as part of all
    ``M`` rows): there the reference divides by an un-broadcast ``[1, 7, 1]`` scale,
    which XLA on the CPU divides or multiplies by the reciprocal depending on the
    context, so no fixed choice would match it bit for bit.
    """
    kernel = env.uses_kernels and not (alone and len(rows) * env.num_other_agents_observed == 1)
    if time is None:
        time = _time(env, state)
    feats = features(env, state)
    if not kernel:
        return obs_xla.knn_obs_xla(feats, idx, valid, rows, _scale(params), state.in_game, time)
    from environments.tag_continuous.kernels import obs_writer

    return obs_writer.knn_obs_pallas(
        feats, idx, valid, rows, _scale(params), state.in_game, time,
        reciprocal=obs_xla.reference_uses_reciprocal(is_concrete_scale(params)),
        interpret=env.interpret, table=table, lists_in_game=_lists_in_game(env, valid),
    )  # fmt: skip


def observe_knn_groups(
    env: TagContinuous,
    state: TagState,
    params: TagContinuousParams,
    idx: jax.Array,
    valid: jax.Array | None,
    **options: jax.Array,
) -> dict[str, jax.Array]:
    """Every group's partial observation: `observe_knn` of each group's rows
    (``options``: its ``time`` and ``table``)."""
    ids, contiguous = env.group_rows()
    return {
        g: observe_knn(env, state, params, i, idx, valid, alone=contiguous, **options)
        for g, i in ids.items()
    }


def observe_nearest(
    env: TagContinuous, state: TagState, params: TagContinuousParams, **options: jax.Array
) -> dict[str, jax.Array]:
    """Every group's partial observation from one search of ``state``."""
    idx, valid = nearest_lists(env, state)
    return observe_knn_groups(env, state, params, idx, valid, **options)


def _observe_full(
    env: TagContinuous, state: TagState, params: TagContinuousParams, rows: Sequence[int]
) -> jax.Array:
    """Full observations of the agent ids ``rows`` (static, any order): ``[n, 7(M−1)+1]``
    float32. The kernel is told whether XLA compiles the reference's division into a
    multiplication by the reciprocal (on the CPU, or when the scale is a compile-time
    constant: params not traced), so they agree bit for bit."""
    args = (features(env, state), rows, _scale(params), state.in_game.astype(jnp.float32))
    if not env.uses_kernels:
        return obs_xla.full_obs_xla(*args, _time(env, state))
    from environments.tag_continuous.kernels import full_obs

    reciprocal = obs_xla.reference_uses_reciprocal(is_concrete_scale(params))
    return full_obs.full_obs_pallas(
        *args, _time(env, state), reciprocal=reciprocal, interpret=env.interpret
    )


def observe(
    env: TagContinuous,
    state: TagState,
    params: TagContinuousParams,
    rows: tuple[int, int] | None = None,
) -> jax.Array:
    """Observations of agents ``rows = (lo, hi)`` (default all), in id order: ``[hi − lo,
    obs_size]`` float32."""
    lo, hi = (0, env.num_agents_total) if rows is None else rows
    if env.use_full_observation:
        return _observe_full(env, state, params, range(lo, hi))
    idx, valid = nearest_lists(env, state)
    return observe_knn(env, state, params, range(lo, hi), idx, valid)


def group_observations(
    env: TagContinuous, state: TagState, params: TagContinuousParams
) -> dict[str, jax.Array]:
    """``{"tagger": [T, D], "runner": [R, D]}``: every group's observation of ``state``."""
    ids, contiguous = env.group_rows()
    if env.use_full_observation and env.uses_kernels:
        return {g: _observe_full(env, state, params, i) for g, i in ids.items()}
    if not env.use_full_observation and (contiguous or env.uses_kernels):
        return observe_nearest(env, state, params)
    return env.split_groups(observe(env, state, params))


def global_state(env: TagContinuous, state: TagState, params: TagContinuousParams) -> jax.Array:
    """A flat ``[7M+1]`` float32 view: ``x/L, y/L, speed/max_speed, θ/(2π),
    a/max_speed, type, in_game`` (each ``[M]``, id order), then ``t/E``."""
    p = jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), params)
    ms = p.max_speed + _EPS
    return jnp.concatenate(
        [
            state.x / p.grid_length,
            state.y / p.grid_length,
            state.speed / ms,
            state.direction / _TWO_PI,
            state.acceleration / ms,
            jnp.asarray(env.is_tagger, jnp.float32),
            state.in_game.astype(jnp.float32),
            _time(env, state)[None],
        ]
    )
