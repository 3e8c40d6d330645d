"""The k-nearest neighbour searches' public entry points, and which search runs.

For every agent ``i`` of an env: the ``k`` nearest agents ``j != i`` with
``in_game[j]``, nearest first, ties by lower ``j`` — the functions of
`environments.tag_continuous.neighbors.nearest_k` (the plain-JAX reference), computed by
one of three exact Pallas searches that give the same lists bit for bit:

* ``"brute"`` (`brute`): every pair, ``O(M²)``; fastest for small ``M`` (no
  preparation, one launch).
* ``"grid"`` (`grid`): agents binned into cells, each query walks its own cells;
  ``M <= 1024``.
* ``"sorted"`` (`sorted`): agents along a Hilbert curve, candidate chunks pruned by their
  boxes per block of queries; any ``M``.

`select_method` picks by agent count (the env passes its thresholds from its kernel
configuration). "Distance" is the float32 ``dx*dx + dy*dy`` (squared Euclidean). A
compiler may contract it into a fused multiply-add (XLA on CPU does, Triton on GPU may),
which can move a distance by one ulp against another compilation of the same formula:
orders agree except at near-ties of that size, and exactly on exactly representable
inputs. Positions must be finite.

Backends: ``interpret=None`` runs the kernels in Pallas interpret mode when the default
backend is the CPU and compiles them with the Triton lowering otherwise. Under
`jax.vmap` Pallas adds a grid axis, so the one-env entry points work inside a vmapped
env step; the batched entry point puts the env axis into the grid directly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from environments.tag_continuous.kernels import brute, grid, packed
from environments.tag_continuous.kernels.brute import brute_lists_padded, brute_padding
from environments.tag_continuous.kernels.sorted import sorted_lists

__all__ = [
    "METHODS",
    "brute_lists_padded",
    "brute_padding",
    "lists_in_game_only",
    "nearest_k",
    "nearest_k_batched",
    "nearest_k_lists",
    "select_method",
]

#: The searches, by name.
METHODS = ("brute", "grid", "sorted")


def select_method(num_agents: int, *, brute_below: int = 256, grid_up_to: int = 1024) -> str:
    """The search for ``num_agents`` agents: ``"brute"`` below ``brute_below``, ``"grid"``
    up to ``grid_up_to`` (at most 1024, the grid search's limit), ``"sorted"`` above.

    Each wins in its range: the brute-force search needs no preparation and streams every
    pair from registers; the grid search streams fewest candidates per query; the sorted
    search has no size limit.

    Example:
      >>> select_method(110), select_method(1000), select_method(10_100)
      ('brute', 'grid', 'sorted')
    """
    if num_agents < brute_below:
        return "brute"
    if num_agents <= min(grid_up_to, grid.MAX_AGENTS):
        return "grid"
    return "sorted"


def _method(method: str | None, m: int) -> str:
    if method is None:
        return select_method(m)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS} or None, got {method!r}")
    return method


def lists_in_game_only(method: str, queries: str) -> bool:
    """Whether `nearest_k_lists` with ``method`` and ``queries`` leaves every row of an
    agent out of the game all ``-1`` (the grid search with ``queries="in_game"``; the
    other searches list those agents anyway)."""
    return queries == "in_game" and method == "grid"


def _lists(x, y, in_game, k, method, queries, interpret) -> jax.Array:
    """The chosen search's lists ``[N, M, k]`` int32, ``-1`` = none."""
    if queries not in grid.QUERIES:
        raise ValueError(f"queries must be one of {grid.QUERIES}, got {queries!r}")
    method = _method(method, jnp.shape(x)[-1] if jnp.ndim(x) == 2 else 0)
    if method == "grid":
        return grid.grid_lists(x, y, in_game, k, queries=queries, interpret=interpret)
    if method == "sorted":
        return sorted_lists(x, y, in_game, k, interpret=interpret)
    return brute.brute_lists(x, y, in_game, k, interpret=interpret)


def _one_env(x, y, in_game, name: str) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``x, y`` float32 and ``in_game`` of one env, checked to be ``[M]`` each."""
    x = jnp.asarray(x, jnp.float32)
    y = jnp.asarray(y, jnp.float32)
    in_game = jnp.asarray(in_game)
    if x.ndim != 1 or y.shape != x.shape or in_game.shape != x.shape:
        raise ValueError(
            f"{name} needs x, y, in_game of one shape [M], got {x.shape}, {y.shape}, "
            f"{in_game.shape}"
        )
    return x, y, in_game


def nearest_k_batched(
    x: jax.Array,
    y: jax.Array,
    in_game: jax.Array,
    k: int,
    *,
    method: str | None = None,
    interpret: bool | None = None,
) -> tuple[jax.Array, jax.Array]:
    """`nearest_k` for ``N`` envs at once, the env axis in the kernels' grid.

    Args:
      x, y: ``[N, M]`` float32 positions (finite).
      in_game: ``[N, M]`` bool; only agents with ``in_game[n, j]`` are candidates.
      k: neighbours per agent (static), ``k >= 1`` (``k > M - 1`` pads).
      method: ``"brute"``, ``"grid"`` or ``"sorted"``; ``None``: `select_method` with
        its default thresholds. The same results whichever.
      interpret: Pallas interpret mode; ``None``: when the default backend is the CPU.

    Returns:
      ``idx [N, M, k]`` int32 and ``valid [N, M, k]`` bool, as `nearest_k` per env.
    """
    return packed.finish(_lists(x, y, in_game, k, method, "all", interpret))


def nearest_k(
    x: jax.Array,
    y: jax.Array,
    in_game: jax.Array,
    k: int,
    *,
    method: str | None = None,
    interpret: bool | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The ``k`` nearest other in-game agents of every agent of one env, nearest first.

    Args:
      x, y: ``[M]`` float32 positions (finite).
      in_game: ``[M]`` bool; only agents with ``in_game[j]`` are candidates.
      k: neighbours per agent (static), ``k >= 1``.
      method, interpret: as `nearest_k_batched`.

    Returns:
      ``idx [M, k]`` int32 and ``valid [M, k]`` bool. Row ``i`` lists the ``j != i`` with
      ``in_game[j]`` by increasing ``(x_i-x_j)² + (y_i-y_j)²`` (float32), ties by lower
      ``j``. When fewer than ``k`` qualify the row is padded with ``idx = i`` (the agent
      itself) and ``valid = False``. Rows of agents out of the game are computed alike.
      Works under `jax.vmap`.

    Example:
      >>> import jax.numpy as jnp
      >>> idx, valid = nearest_k(
      ...     jnp.array([0.0, 1.0, 3.0]), jnp.zeros(3), jnp.array([True, True, True]), 2
      ... )
      >>> idx.tolist(), valid.tolist()
      ([[1, 2], [0, 2], [1, 0]], [[True, True], [True, True], [True, True]])
    """
    x, y, in_game = _one_env(x, y, in_game, "nearest_k")
    idx, valid = nearest_k_batched(
        x[None], y[None], in_game[None], k, method=method, interpret=interpret
    )
    return idx[0], valid[0]


def nearest_k_lists(
    x: jax.Array,
    y: jax.Array,
    in_game: jax.Array,
    k: int,
    *,
    method: str | None = None,
    queries: str = "all",
    interpret: bool | None = None,
) -> jax.Array:
    """`nearest_k`'s neighbour lists of one env as the kernels write them: ``[M, k]``
    int32, ``-1`` in the slots that `nearest_k` pads (``valid = False``); one pass over
    ``[M, k]`` fewer than `nearest_k`. Arguments as `nearest_k`, plus ``queries``:
    ``"all"`` (default) or ``"in_game"``, which lets the search leave the rows of agents
    out of the game all ``-1`` (the grid search does, `lists_in_game_only`; the others
    list them anyway). Vmaps over envs."""
    x, y, in_game = _one_env(x, y, in_game, "nearest_k_lists")
    return _lists(x[None], y[None], in_game[None], k, method, queries, interpret)[0]
