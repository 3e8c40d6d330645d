"""The grid search's preparation: cells, the agents sorted by cell, the cell tables.

One Pallas program per env (`grid_prep`, see `grid` for the search it serves) works on
``P = next_pow2(MP)`` lanes, one agent each:

1. The in-game agents' bounding square is cut into ``G × G`` cells, ``G =
   round(sqrt(n_in / 1.5))`` clamped to ``[1, 31]``. Each agent's key is ``cy·32 + cx``
   (in the game) or 1023 (out), with its id in the low bits.
2. `_radix_passes_2bit` sorts the keys stably, two key bits per pass (five passes): the
   in-game agents come first by (cell row, cell column, id), then the others by id.
3. The sorted positions and ids are written; ``cs[c]`` (sorted agents with a key below
   ``c``) comes from a lower-bound binary search per cell in the sorted keys; a
   summed-area table of the in-game counts per cell (each row's prefix counts, then a
   cumulative sum down the rows) gives any rectangle's count in four loads.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

from environments.tag_continuous.kernels.triton import INF, next_pow2, round_up

__all__ = ["BM", "ROW", "TABLE", "grid_prep"]

#: Entries of the cell tables (32 × 32 cells; key 1023 marks agents out of the game).
TABLE = 1024
#: Table stride of a cell row.
ROW = 32
#: Queries per search program, one per lane (one warp); also the padding of ``M``.
BM = 32
_OUT_KEY = 1023  # key of agents out of the game
#: Target in-game agents per cell (``G = round(sqrt(n_in / this))``, fixed).
_CELL_AGENTS = 1.5
#: Cells per axis at most (row 31 and column 31 of the tables stay empty).
_MAX_CELLS = 31
#: Triton warps of the preparation program (fixed).
_WARPS = 4


def _radix_passes_2bit(keys, bufs, lo: int, nbits: int, *, interpret: bool):
    """Sorts the ``[P]`` int32 keys ``keys`` (``P <= 1024``, non-negative) stably by their
    bits ``lo .. lo + nbits - 1`` (``nbits`` even), two bits per pass; the result lands
    in ``bufs[1]`` and is returned as ``[P]``.

    Each pass counts the digits 0, 1 and 2 before each lane in one int32 scan of bit
    fields (bits 0-10, 11-21, 22-31; digit 3's count is the rest), and their totals in
    one sum; a scatter into the other buffer and a barrier move every key. An exclusive
    count is below ``P <= 1024``, so it fits any field; only the total of digit 2 can
    overflow its 10 bits, when every lane holds a 2, and then no lane reads the place
    after digit 2's (digit 3's base)."""
    if nbits % 2:
        raise ValueError(f"_radix_passes_2bit needs an even number of bits, got {nbits}")
    if keys.shape[0] > 1024:
        raise ValueError(f"_radix_passes_2bit sorts at most 1024 lanes, got {keys.shape[0]}")
    p = lax.broadcasted_iota(jnp.int32, keys.shape, 0)
    passes = nbits // 2
    for t, d in enumerate(range(lo, lo + nbits, 2)):
        digit = (keys >> d) & 3
        v = jnp.where(digit == 3, 0, jnp.left_shift(jnp.int32(1), 11 * digit))
        before = jnp.cumsum(v) - v  # digits 0-2 before lane p, as bit fields
        total = jnp.sum(v)
        b0, b1, b2 = before & 2047, (before >> 11) & 2047, (before >> 22) & 1023
        t0, t1, t2 = total & 2047, (total >> 11) & 2047, (total >> 22) & 1023
        pos = jnp.where(
            digit < 2,
            jnp.where(digit == 0, b0, t0 + b1),
            jnp.where(digit == 2, t0 + t1 + b2, t0 + t1 + t2 + (p - b0 - b1 - b2)),
        )
        buf = bufs[(t - passes) % 2]  # the last pass writes bufs[1]
        pl_triton.store(buf.at[pos], keys)
        if not interpret:
            pl_triton.debug_barrier()
        keys = buf[p]
    return keys


def _cells(x, y, gin, n_in):
    """``(x0, y0, s, G)``: the cell of a position is ``floor((x - x0)·s)`` clamped to
    ``[0, G - 1]`` (float32 scalars), over the in-game agents' bounding square."""
    x0 = jnp.min(jnp.where(gin, x, INF))
    y0 = jnp.min(jnp.where(gin, y, INF))
    wx = jnp.max(jnp.where(gin, x, -INF)) - x0
    wy = jnp.max(jnp.where(gin, y, -INF)) - y0
    some = n_in > 0
    x0 = jnp.where(some, x0, jnp.float32(0.0))
    y0 = jnp.where(some, y0, jnp.float32(0.0))
    ext = jnp.maximum(jnp.where(some, jnp.maximum(wx, wy), 1.0), jnp.float32(1e-30))
    cells = jnp.floor(jnp.sqrt(n_in.astype(jnp.float32) / _CELL_AGENTS) + 0.5)
    cells = jnp.clip(cells, 1.0, float(_MAX_CELLS))
    # Slightly under G / ext, so the farthest agent's cell is G - 1, not G (clamped anyway).
    s = cells * jnp.float32(1.0 - 2.0**-20) / ext
    return x0, y0, s, cells


def _grid_prep_kernel(x_ref, y_ref, g_ref, *outs, m, mp, interpret):
    """One env: cells, the sort, the tables.

    ``x, y [M]`` float32, ``g [M]`` bool. Writes ``xc, yc [2·MP]`` (the first ``MP``: the
    agents' positions in sorted order: in-game agents by (cell row, cell column, id),
    then the others by id), ``oc [2·MP]`` int32 (their ids; ``M`` for padding; the tails
    are left unwritten), ``cs [1024]`` int32 (``cs[c]``: sorted agents with a key below
    ``c``; ``cs[1023]`` is the number in the game), ``sat [1024]`` int32 (in-game agents
    in cells ``(≤ cy, ≤ cx)`` at ``cy·32 + cx``) and ``prm [8]`` float32 ``(x0, y0, s, G,
    n_in, 0, 0, 0)`` (`_cells`). ``buf0, buf1 [P]`` int32: the radix sort's buffers.
    """
    xc_ref, yc_ref, oc_ref, cs_ref, sat_ref, prm_ref, buf0, buf1 = outs
    p2 = buf0.shape[0]
    p = lax.broadcasted_iota(jnp.int32, (p2,), 0)
    real = p < m
    own = jnp.minimum(p, m - 1)
    x, y = x_ref[own], y_ref[own]
    gin = real & g_ref[own]
    n_in = jnp.sum(gin.astype(jnp.int32))
    x0, y0, s, cells = _cells(x, y, gin, n_in)

    def cell(v, lo):
        return jnp.clip(jnp.floor((v - lo) * s), 0.0, cells - 1.0).astype(jnp.int32)

    key = jnp.where(gin, cell(y, y0) * ROW + cell(x, x0), _OUT_KEY)
    id_bits = max(1, (p2 - 1).bit_length())
    keys = (key << id_bits) | p  # padding lanes: key 1023, ids past M, so last
    keys = _radix_passes_2bit(keys, (buf0, buf1), id_bits, 10, interpret=interpret)
    sid = keys & ((1 << id_bits) - 1)
    ok = sid < m
    agent = jnp.minimum(sid, m - 1)
    inside = p < mp
    at = p  # masked lanes (p >= MP) keep distinct indices (interpret mode's masked scatter)
    xs, ys = jnp.where(ok, x_ref[agent], 0.0), jnp.where(ok, y_ref[agent], 0.0)
    pl_triton.store(xc_ref.at[at], xs, mask=inside)
    pl_triton.store(yc_ref.at[at], ys, mask=inside)
    pl_triton.store(oc_ref.at[at], jnp.where(ok, sid, m), mask=inside)
    c = lax.broadcasted_iota(jnp.int32, (TABLE,), 0)
    # A lower-bound binary search of c << id_bits in the sorted keys (buf1, complete and
    # visible after the last pass's barrier).
    target = c << id_bits
    lo = jnp.zeros((TABLE,), jnp.int32)
    step = p2 // 2
    while step >= 1:  # static: log2(P) steps
        lo = jnp.where(buf1[lo + (step - 1)] < target, lo + step, lo)
        step //= 2
    lo = jnp.where(buf1[lo] < target, lo + 1, lo)
    pl_triton.store(cs_ref.at[c], lo)
    if not interpret:
        pl_triton.debug_barrier()
    # Summed-area table: each row's prefix counts, then a cumsum down the rows (rows and
    # columns past G - 1 hold garbage that no lookup reads).
    prefix = cs_ref[jnp.minimum(c + 1, TABLE - 1)] - cs_ref[c - (c & (ROW - 1))]
    sat = jnp.cumsum(prefix.reshape(ROW, ROW), axis=0).reshape(TABLE)
    pl_triton.store(sat_ref.at[c], sat)
    i = lax.broadcasted_iota(jnp.int32, (8,), 0)
    vals = (x0, y0, s, cells, n_in.astype(jnp.float32))
    prm = jnp.zeros((8,), jnp.float32)
    for t, v in enumerate(vals):
        prm = jnp.where(i == t, v, prm)
    pl_triton.store(prm_ref.at[i], prm)


def grid_prep(
    x: jax.Array, y: jax.Array, in_game: jax.Array, interpret: bool
) -> tuple[jax.Array, ...]:
    """`_grid_prep_kernel` over ``N`` envs (``x, y [N, M]`` float32, ``in_game [N, M]``
    bool): ``(xc, yc, oc [N, 2·MP], cs, sat [N, 1024], prm [N, 8])``, ``MP`` = ``M``
    rounded up to `BM`."""
    n, m = x.shape
    mp = round_up(m, BM)
    p2 = max(next_pow2(mp), 2)
    row = lambda length: pl.BlockSpec((None, length), lambda e: (e, 0))
    f32 = lambda length: jax.ShapeDtypeStruct((n, length), jnp.float32)
    i32 = lambda length: jax.ShapeDtypeStruct((n, length), jnp.int32)
    # xc, yc, oc padded to 2·MP: a lane past its segment reads at most MP - 1 positions
    # past the in-game ones (masked), so the search's loads need no clamp.
    shapes = (f32(2 * mp), f32(2 * mp), i32(2 * mp), i32(TABLE), i32(TABLE), f32(8))
    shapes += (i32(p2), i32(p2))
    kernel = functools.partial(_grid_prep_kernel, m=m, mp=mp, interpret=interpret)
    outs = pl.pallas_call(
        kernel,
        out_shape=shapes,
        grid=(n,),
        in_specs=[row(m)] * 3,
        out_specs=tuple(row(sh.shape[1]) for sh in shapes),
        compiler_params=pl_triton.CompilerParams(num_warps=_WARPS),
        interpret=interpret,
        name="tag_nearest_k_grid_prep",
    )(x, y, in_game)
    return outs[:6]
