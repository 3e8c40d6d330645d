"""Neighbour searches of TagContinuous in plain JAX (the reference for its Pallas kernels).

Two searches, both for one environment (vmap them over a batch of envs):

* `nearest_k`: for every agent, its ``k`` nearest *other* agents still in the game, the
  partial observation's neighbour list (``O(M²)`` distances per step).
* `nearest_tagger`: for every runner, its nearest tagger and the squared distance, the
  tagging test (``O(R·T)`` distances per step).

Both order by squared Euclidean distance computed in float32 as ``dx*dx + dy*dy`` and
break ties by the lower index. Neither builds a full ``[M, M]`` matrix when ``M`` is
large: rows are processed in blocks of ``block_rows`` (`lax.map` over blocks), so the
live distance tile is ``[block_rows, M]`` (about ``2**20`` float32 values, 4 MiB, per env
by default) whatever ``M`` is. Under `jax.vmap` over ``N`` envs the tile becomes
``[N, block_rows, M]``.

Dimension letters: ``M`` agents, ``T`` taggers, ``R`` runners, ``k`` neighbours.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["DEFAULT_TILE_ELEMENTS", "block_rows_for", "nearest_k", "nearest_tagger"]

#: Elements of one live distance tile (rows × columns) when ``block_rows`` is not given.
DEFAULT_TILE_ELEMENTS = 1 << 20


def block_rows_for(num_rows: int, num_cols: int, tile_elements: int = DEFAULT_TILE_ELEMENTS) -> int:
    """Rows per block so that a ``[rows, num_cols]`` tile holds about ``tile_elements``."""
    return int(max(1, min(num_rows, tile_elements // max(num_cols, 1))))


def _map_row_blocks(fn, num_rows: int, block_rows: int):
    """Applies ``fn(rows [B] int32) -> tuple of [B, ...]`` over all rows in blocks.

    Returns the tuple concatenated over rows, cut back to ``num_rows``.
    """
    b = int(block_rows)
    if b >= num_rows:
        return fn(jnp.arange(num_rows, dtype=jnp.int32))
    nb = -(-num_rows // b)
    rows = jnp.arange(nb * b, dtype=jnp.int32).reshape(nb, b)
    outs = jax.lax.map(fn, rows)
    return tuple(o.reshape(nb * b, *o.shape[2:])[:num_rows] for o in outs)


def nearest_k(
    x: jax.Array,
    y: jax.Array,
    in_game: jax.Array,
    k: int,
    *,
    block_rows: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The ``k`` nearest other in-game agents of every agent, nearest first.

    Args:
      x, y: ``[M]`` float32 positions.
      in_game: ``[M]`` bool; only agents with ``in_game[j]`` are candidates.
      k: neighbours per agent (static), ``1 <= k``.
      block_rows: rows per block (static); default keeps a tile near ``2**20`` elements.

    Returns:
      ``idx [M, k]`` int32 and ``valid [M, k]`` bool. Row ``i`` lists the ``j != i`` with
      ``in_game[j]`` by increasing ``(x_i-x_j)² + (y_i-y_j)²`` (float32), ties by lower
      ``j``. When fewer than ``k`` candidates exist the row is padded with ``idx = i``
      (the agent itself, so gathers stay in range) and ``valid = False``. Rows of
      agents that are themselves out of the game are computed the same way.

    Cost per env: ``M²`` distances and one `lax.top_k` per row (a partial sort, about
    ``O(M² log k)`` work), with a live ``[block_rows, M]`` float32 tile (4 MiB by
    default), never ``[M, M]``.
    """
    k = int(k)
    if k < 1:
        raise ValueError(f"nearest_k needs k >= 1, got k={k}")
    x = jnp.asarray(x, jnp.float32)
    y = jnp.asarray(y, jnp.float32)
    in_game = jnp.asarray(in_game, bool)
    m = x.shape[0]
    b = block_rows_for(m, m) if block_rows is None else int(block_rows)
    cols = jnp.arange(m, dtype=jnp.int32)

    def block(rows: jax.Array) -> tuple[jax.Array, jax.Array]:  # rows [B]
        safe = jnp.minimum(rows, m - 1)
        dx = x[safe][:, None] - x[None, :]
        dy = y[safe][:, None] - y[None, :]
        d2 = dx * dx + dy * dy  # [B, M]
        cand = in_game[None, :] & (cols[None, :] != rows[:, None])
        neg = jnp.where(cand, -d2, -jnp.inf)
        # lax.top_k puts the lower index first among equal values: ties by lower index.
        val, idx = jax.lax.top_k(neg, kk)  # [B, kk]
        ok = val > -jnp.inf
        return jnp.where(ok, idx.astype(jnp.int32), safe[:, None]), ok

    kk = min(k, m)
    idx, ok = _map_row_blocks(block, m, b)
    if kk < k:  # more slots than agents: pad
        pad = k - kk
        self_idx = jnp.broadcast_to(jnp.arange(m, dtype=jnp.int32)[:, None], (m, pad))
        idx = jnp.concatenate([idx, self_idx], axis=1)
        ok = jnp.concatenate([ok, jnp.zeros((m, pad), bool)], axis=1)
    return idx, ok


def nearest_tagger(
    x_r: jax.Array,
    y_r: jax.Array,
    x_t: jax.Array,
    y_t: jax.Array,
    *,
    block_rows: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The nearest tagger of every runner.

    Args:
      x_r, y_r: ``[R]`` float32 runner positions.
      x_t, y_t: ``[T]`` float32 tagger positions, ``T >= 1``.
      block_rows: runners per block (static); default keeps a tile near ``2**20``.

    Returns:
      ``idx [R]`` int32, the index (into the tagger arrays) of the tagger at the least
      ``dx*dx + dy*dy`` (float32), lowest index on ties; and ``dist2 [R]`` float32, that
      squared distance. Whether a runner is in the game is the caller's business.

    Cost per env: ``R·T`` distances, a live ``[block_rows, T]`` tile.
    """
    x_r = jnp.asarray(x_r, jnp.float32)
    y_r = jnp.asarray(y_r, jnp.float32)
    x_t = jnp.asarray(x_t, jnp.float32)
    y_t = jnp.asarray(y_t, jnp.float32)
    r, t = x_r.shape[0], x_t.shape[0]
    if t < 1:
        raise ValueError("nearest_tagger needs at least one tagger")
    b = block_rows_for(r, t) if block_rows is None else int(block_rows)

    def block(rows: jax.Array) -> tuple[jax.Array, jax.Array]:  # rows [B]
        safe = jnp.minimum(rows, r - 1)
        dx = x_r[safe][:, None] - x_t[None, :]
        dy = y_r[safe][:, None] - y_t[None, :]
        d2 = dx * dx + dy * dy  # [B, T]
        j = jnp.argmin(d2, axis=1).astype(jnp.int32)
        return j, jnp.take_along_axis(d2, j[:, None], axis=1)[:, 0]

    return _map_row_blocks(block, r, b)
