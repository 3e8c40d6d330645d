"""A per-query grid search for `nearest_k` (Pallas; exact, same lists as the others).

`kernels.nearest_k_sorted_batched` prunes per block of 32 queries: a block streams every
candidate near any of its queries, about 124 per query at 2000 envs × 1000 agents,
``k = 10``. Here each lane walks its own query's cells, so a lane streams only the
candidates near its query (about 37 on Tag states), at the price of per-lane loads and
of lanes waiting for the busiest lane of each row of cells: about 60 loads per block of
32 queries (H200, `grid_search_stats`). Measured there: the search kernel 449 → 324 µs
per step of 2000 × (5+995), the env step 1.10 → 0.96 ms (`experiments/benchmarks/NOTES.md`).

Preparation (`_grid_prep_kernel`, one program per env): the in-game agents' bounding
square is cut into ``G × G`` cells, ``G = round(sqrt(n_in / GRID_CELL_AGENTS))`` capped
at `GRID_MAX_CELLS` (31), so about 1.5 in-game agents per cell whatever the number still
in the game. Every agent gets the key ``cy·32 + cx`` (in the game) or 1023 (out), and
the keys are radix-sorted with the agent id as tie-break (`_radix_passes_2bit`, two key
bits per pass; `GRID_PREP_RADIX_BITS`): the in-game agents come first, row by row of
cells, so **each row of a window of cells is one contiguous run of candidates**. The
program writes the sorted positions, the original ids, the cell starts ``cs[c]`` (agents
with a key below ``c``, by binary search or from the runs of equal keys:
`GRID_PREP_CELL_STARTS`) and a summed-area table of the in-game counts per cell (a
rectangle's count in four loads).

Search (`_grid_knn_kernel`, one program per env and block of 32 sorted queries, one
query per lane, as the other kernels):

1. **Window.** Each lane grows a square window of cells around its own cell, radius
   ``R = 1, 2, …``, until it holds at least ``ceil(GRID_TARGET · k)`` candidates besides
   the query, or covers the grid (summed-area counts; a scalar loop while some lane
   grows).
2. **Phase 1.** For each row of cells some lane's window covers (a scalar loop), each
   lane streams its row segment, ``cs[row·32 + x0] .. cs[row·32 + x1 + 1]``, into its
   packed top-``k + 2`` list (`kernels._packed_insert` / `_packed_merge`); a row costs
   the longest segment among the lanes, ``U`` candidates per unrolled step.
3. **Bound.** The ``k``-th key bounds the lane's true ``k``-th squared distance from
   above (it is the ``k``-th smallest over a subset; a key's truncation is lifted back
   with its low bits set). Every agent within that distance lies in the cells that the
   square ``[u ± r·s]`` touches (``u`` the query in cell units, with a margin of
   ``10⁻³`` cells and ``10⁻⁴`` relative on ``r`` against float rounding). A lane whose
   window does not contain that square (or whose list is not full: the whole grid)
   needs phase 2.
4. **Phase 2** (only if some lane needs it): the rows of the larger square, each as the
   part left and the part right of the phase-1 window (a whole row outside its rows).
5. **Finish** as the sorted search: the exact re-sort of the packed list
   (`kernels._packed_lists`), and, for a block where some lane's keys stay ambiguous,
   the same windows again with the exact ``(d, j)`` insertion (`kernels._insert_pair`).

Why exact: after phase 2 each lane has streamed every candidate within its bound of the
true ``k``-th distance, so its ``k + 2`` smallest keys hold every candidate that can be
among its ``k`` nearest; the rest is the sorted search's packed-key argument. The cells
come from the same float formula for queries and candidates, and the margins cover its
rounding; candidates sit in cells ``0 .. G - 1`` (clamped), so a window that reaches the
grid's edge misses nothing beyond it.

``queries="in_game"`` leaves the lists of agents out of the game empty (``-1``) instead
of searching them: the env's observation writer zeroes those rows' neighbour features
anyway (``mask = valid & in_game[i]``), and they are the search's slowest queries (out
of the game is where the taggers have cleared the runners). The in-game queries are the
first ``n_in`` sorted positions, so whole blocks past them only write ``-1``.

Limits: ``M <= 1024`` (the packed keys' 10 index bits, and the tables' 32 × 32 cells).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

from environments.tag_continuous import kernels as kn

__all__ = [
    "GRID_CELL_AGENTS",
    "GRID_LANE_ROWS",
    "GRID_MAX_AGENTS",
    "GRID_MAX_CELLS",
    "GRID_POSITION_KEYS",
    "GRID_PREP_BOOL",
    "GRID_PREP_CELL_STARTS",
    "GRID_PREP_CELL_STARTS_FORMS",
    "GRID_PREP_RADIX_BITS",
    "GRID_PREP_WARPS",
    "GRID_QUERIES",
    "GRID_STAGES",
    "GRID_TARGET",
    "GRID_UNROLL",
    "GRID_XY_INTERLEAVED",
    "grid_search_stats",
    "nearest_k_grid_batched",
]

#: Target in-game agents per cell (``G = round(sqrt(n_in / this))``). A NumPy model of
#: the search on Tag states (2000 × (5+995), steps 0–400) streamed the fewest candidates
#: per query between 1 and 1.5.
GRID_CELL_AGENTS = 1.5
#: Cells per axis at most (the tables are 32 × 32; row 31 and column 31 stay empty, and
#: the key 1023 marks agents out of the game).
GRID_MAX_CELLS = 31
#: A lane's first window grows until it holds ``ceil(GRID_TARGET · k)`` candidates.
#: The NumPy model: 2.0 → ≈ 5% of lanes need phase 2, 2.5 → ≈ 1%, 3.0 → ≈ 0.2%.
GRID_TARGET = 2.5
#: Candidates per unrolled loop step ``U`` (compiled; interpret mode uses 1), merged into
#: the list by `kernels._packed_merge`. H200, 2000 × (5+995), the search kernel: 386 µs
#: (``U = 2``), 355 µs (4), with id keys (2026-11-24 run 47).
GRID_UNROLL = 4
#: The packed keys' low bits: ``True``, the candidate's sorted position (no id load per
#: candidate; ids are gathered for the ``k`` listed ones, and the exact re-sort breaks
#: ties by id explicitly); ``False``, its id, as the other searches. Same lists.
GRID_POSITION_KEYS = True
#: Triton warps of the preparation kernel (one program per env).
GRID_PREP_WARPS = 4
#: Phase 1 with each lane walking its own window rows (`_grid_knn_kernel`'s
#: ``phase1_lane_rows``): the loop runs for the lane with the most steps instead of, row
#: by row, for the longest segment (``False``). A NumPy model (1000 agents in the game,
#: G = 26) gives 58.1 instead of 79.6 candidate slots per block of 32 queries at ``U = 4``,
#: for a few more instructions per step. Same lists. H200, 2000 × (5+995), the search
#: kernel: 324.0 → 304.8 µs (predicted ≈ −45 µs), the step −1.9% (2026-11-25 run 68).
GRID_LANE_ROWS = True
#: The preparation loads the in-game flags as the state's bools, instead of an int32
#: copy that XLA converts first (H200, 2000 × (5+995): a 3.6 µs kernel per step).
GRID_PREP_BOOL = True
#: Key bits per pass of the preparation's radix sort: 1 (`kernels._radix_passes`: ten
#: passes, each a row scan, a row sum, a scatter and a barrier) or 2 (`_radix_passes_2bit`:
#: five passes, the three digits' counts packed in one int32 scan and one sum).
GRID_PREP_RADIX_BITS = 2
#: How the preparation finds the cell starts ``cs``: ``"search"`` (1024 lower-bound binary
#: searches in the sorted keys, ten dependent loads each) or ``"runs"`` (`_cell_starts_runs`:
#: each run of equal keys marks its start and end in two ``[1024]`` tables, and ``cs`` is
#: the exclusive cumulative sum of the run lengths: two neighbour loads, two scatters and
#: one scan). Same values. H200 ncu (2026-11-26 run 85): the binary searches hold 39% of
#: the preparation's warp stall samples (≈ 19 of its 50 µs); ``"runs"`` is predicted
#: at ≈ 5 µs. Not yet measured on a GPU, so off.
GRID_PREP_CELL_STARTS = "search"
GRID_PREP_CELL_STARTS_FORMS = ("search", "runs")
#: The preparation writes the sorted positions as one interleaved ``[4·MP]`` array
#: (``x`` at ``2q``, ``y`` at ``2q + 1``) instead of ``xc, yc [2·MP]``, so a candidate's
#: two coordinates share a 32-byte sector. A lane streaming its row segment then keeps
#: one 128-byte L1 line in use instead of two (≈ 115 instead of ≈ 230 KB of lines per SM
#: at 28 resident blocks, about the L1's size), and a step's ``U = 4`` candidates touch
#: 1.75 sectors instead of 2.75; the sectors streamed in all are the same, so it helps
#: only if lines are now evicted between a lane's steps (the search ran the L2 at 68% of
#: its peak, ncu 2026-11-26 run 85). Same lists. Not yet measured.
GRID_XY_INTERLEAVED = False
#: Triton pipelining stages of the search kernel's loops (``None``: Triton's default).
#: H200: 1, 2 and the default give the same kernel, 323.6 µs (2026-11-24 run 52).
GRID_STAGES: int | None = None
#: The ``queries`` choices: ``"all"`` (`nearest_k`'s contract) or ``"in_game"`` (the lists
#: of agents out of the game left empty; see the module doc). The env's choice is
#: `kernels.ENV_QUERIES`.
GRID_QUERIES = ("all", "in_game")
#: The grid search handles up to this many agents (packed keys, 32 × 32 tables).
GRID_MAX_AGENTS = 1024

_TABLE = 1024  # 32 × 32 cells
_ROW = 32  # table stride of a cell row
_OUT_KEY = 1023  # key of agents out of the game
_CELL_MARGIN = 1e-3  # cells
_RADIUS_SLACK = 1.0 + 1e-4
_BM = 32  # queries per program, one per lane (one warp)


# ----------------------------------------------------------------------------- prep
def _radix_passes_2bit(packed, bufs, lo: int, nbits: int, *, interpret: bool):
    """`kernels._radix_passes` with two bits per pass: sorts the ``[P]`` int32 keys
    ``packed`` (``P <= 1024``, non-negative) stably by their bits ``lo .. lo + nbits - 1``
    (``nbits`` even); the result lands in ``bufs[1]`` and is returned as ``[P]``.

    Each pass counts the digits 0, 1 and 2 before each lane in one int32 scan of bit
    fields (bits 0-10, 11-21, 22-31; digit 3's count is the rest), and their totals in
    one sum. An exclusive count is below ``P <= 1024``, so it fits any field; only the
    total of digit 2 can overflow its 10 bits, when every lane holds a 2, and then no
    lane reads the place after digit 2's (digit 3's base)."""
    if nbits % 2:
        raise ValueError(f"_radix_passes_2bit needs an even number of bits, got {nbits}")
    if packed.shape[0] > 1024:
        raise ValueError(f"_radix_passes_2bit sorts at most 1024 lanes, got {packed.shape[0]}")
    p = lax.broadcasted_iota(jnp.int32, packed.shape, 0)
    passes = nbits // 2
    for t, d in enumerate(range(lo, lo + nbits, 2)):
        digit = (packed >> d) & 3
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
        pl_triton.store(buf.at[pos], packed)
        if not interpret:
            pl_triton.debug_barrier()
        packed = buf[p]
    return packed


def _cell_starts_runs(packed, buf1, cs_ref, sat_ref, id_bits: int, *, interpret: bool):
    """The cell starts ``cs [1024]`` (sorted agents with a key below ``c``) from the sorted
    packed keys (``packed [P]``: lane ``p``'s, and in ``buf1``, visible to every lane),
    without a search: lane ``p`` compares its key with its neighbours' and, where a run
    of equal keys starts (ends), writes ``p`` (``p + 1``) at the key's entry of a zeroed
    table; a key's run length is then ``end − start`` (0 for a key no agent has), and
    ``cs`` is their exclusive cumulative sum. ``cs_ref`` and ``sat_ref [1024]`` serve as
    the two tables (the summed-area table is written after). Returns ``cs [1024]``."""
    p2 = packed.shape[0]
    p = lax.broadcasted_iota(jnp.int32, (p2,), 0)
    key = packed >> id_bits
    prev = jnp.where(p > 0, buf1[jnp.maximum(p - 1, 0)] >> id_bits, -1)
    nxt = jnp.where(p < p2 - 1, buf1[jnp.minimum(p + 1, p2 - 1)] >> id_bits, _TABLE)
    c = lax.broadcasted_iota(jnp.int32, (_TABLE,), 0)
    zero = jnp.zeros((_TABLE,), jnp.int32)
    pl_triton.store(cs_ref.at[c], zero)
    pl_triton.store(sat_ref.at[c], zero)
    if not interpret:
        pl_triton.debug_barrier()
    starts, ends = key != prev, key != nxt
    # masked lanes: distinct indices past the tables' end (interpret mode drops them)
    pl_triton.store(sat_ref.at[jnp.where(starts, key, _TABLE + p)], p, mask=starts)
    pl_triton.store(cs_ref.at[jnp.where(ends, key, _TABLE + p)], p + 1, mask=ends)
    if not interpret:
        pl_triton.debug_barrier()
    length = cs_ref[c] - sat_ref[c]  # [1024]: agents with key c
    if not interpret:
        pl_triton.debug_barrier()  # every lane has read the tables before cs overwrites
    return jnp.cumsum(length) - length


class _Pairs:
    """A ref of interleaved pairs seen as one of its two halves: ``ref[i]`` reads
    ``ref[2i + half]`` (`GRID_XY_INTERLEAVED`)."""

    __slots__ = ("_half", "_ref")

    def __init__(self, ref, half: int):
        self._ref, self._half = ref, half

    def __getitem__(self, idx):
        return self._ref[2 * idx + self._half]


def _grid_prep_kernel(
    x_ref, y_ref, g_ref, *outs, m, mp, cell_agents, max_cells, radix_bits, cell_starts,
    interleaved, interpret,
):  # fmt: skip
    """One env: cells, the sort, the tables.

    ``x, y [M]`` float32, ``g [M]`` bool (or int32, 1: in the game). Writes ``xc, yc [2·MP]``
    (the first ``MP``: the agents' positions in sorted order: in-game agents by (cell
    row, cell column, id), then the others by id), ``oc [2·MP]`` int32 (their ids; ``M``
    for padding; the tails are left unwritten), ``cs [1024]`` int32 (``cs[c]``: sorted
    agents with a key below ``c``; ``cs[1023]`` is the number in the game), ``sat
    [1024]`` int32 (in-game agents in cells ``(≤ cy, ≤ cx)``
    at ``cy·32 + cx``) and ``prm [8]`` float32 ``(x0, y0, s, G, n_in, 0, 0, 0)``: the
    cell of a position is ``floor((x - x0)·s)`` clamped to ``[0, G - 1]``. ``buf0,
    buf1 [P]`` int32: the radix sort's buffers. With ``interleaved`` the outputs begin
    with one ``xy [4·MP]`` (``x`` at ``2q``, ``y`` at ``2q + 1``) instead of ``xc, yc``.
    """
    if interleaved:
        xy_ref, oc_ref, cs_ref, sat_ref, prm_ref, buf0, buf1 = outs
    else:
        xc_ref, yc_ref, oc_ref, cs_ref, sat_ref, prm_ref, buf0, buf1 = outs
    p2 = buf0.shape[0]
    p = lax.broadcasted_iota(jnp.int32, (p2,), 0)
    real = p < m
    own = jnp.minimum(p, m - 1)
    x, y = x_ref[own], y_ref[own]
    g = g_ref[own]
    gin = real & (g if g.dtype == jnp.bool_ else g != 0)
    n_in = jnp.sum(gin.astype(jnp.int32))
    x0 = jnp.min(jnp.where(gin, x, kn._INF))
    y0 = jnp.min(jnp.where(gin, y, kn._INF))
    wx = jnp.max(jnp.where(gin, x, -kn._INF)) - x0
    wy = jnp.max(jnp.where(gin, y, -kn._INF)) - y0
    some = n_in > 0
    x0 = jnp.where(some, x0, jnp.float32(0.0))
    y0 = jnp.where(some, y0, jnp.float32(0.0))
    ext = jnp.maximum(jnp.where(some, jnp.maximum(wx, wy), 1.0), jnp.float32(1e-30))
    cells = jnp.floor(jnp.sqrt(n_in.astype(jnp.float32) / cell_agents) + 0.5)
    cells = jnp.clip(cells, 1.0, float(max_cells))
    # Slightly under G / ext, so the farthest agent's cell is G - 1, not G (clamped anyway).
    s = cells * jnp.float32(1.0 - 2.0**-20) / ext

    def cell(v, lo):
        return jnp.clip(jnp.floor((v - lo) * s), 0.0, cells - 1.0).astype(jnp.int32)

    key = jnp.where(gin, cell(y, y0) * _ROW + cell(x, x0), _OUT_KEY)
    id_bits = max(1, (p2 - 1).bit_length())
    packed = (key << id_bits) | p  # padding lanes: key 1023, ids past M, so last
    radix = kn._radix_passes if radix_bits == 1 else _radix_passes_2bit
    packed = radix(packed, (buf0, buf1), id_bits, 10, interpret=interpret)
    sid = packed & ((1 << id_bits) - 1)
    ok = sid < m
    agent = jnp.minimum(sid, m - 1)
    inside = p < mp
    at = p  # masked lanes (p >= MP) keep distinct indices (interpret mode's masked scatter)
    xs, ys = jnp.where(ok, x_ref[agent], 0.0), jnp.where(ok, y_ref[agent], 0.0)
    if interleaved:
        pl_triton.store(xy_ref.at[2 * at], xs, mask=inside)
        pl_triton.store(xy_ref.at[2 * at + 1], ys, mask=inside)
    else:
        pl_triton.store(xc_ref.at[at], xs, mask=inside)
        pl_triton.store(yc_ref.at[at], ys, mask=inside)
    pl_triton.store(oc_ref.at[at], jnp.where(ok, sid, m), mask=inside)
    c = lax.broadcasted_iota(jnp.int32, (_TABLE,), 0)
    if cell_starts == "runs":
        lo = _cell_starts_runs(packed, buf1, cs_ref, sat_ref, id_bits, interpret=interpret)
    else:
        # A lower-bound binary search of c << id_bits in the sorted keys (buf1, complete
        # and visible after the last pass's barrier).
        target = c << id_bits
        lo = jnp.zeros((_TABLE,), jnp.int32)
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
    prefix = cs_ref[jnp.minimum(c + 1, _TABLE - 1)] - cs_ref[c - (c & (_ROW - 1))]
    sat = jnp.cumsum(prefix.reshape(_ROW, _ROW), axis=0).reshape(_TABLE)
    pl_triton.store(sat_ref.at[c], sat)
    i = lax.broadcasted_iota(jnp.int32, (8,), 0)
    vals = (x0, y0, s, cells, n_in.astype(jnp.float32))
    prm = jnp.zeros((8,), jnp.float32)
    for t, v in enumerate(vals):
        prm = jnp.where(i == t, v, prm)
    pl_triton.store(prm_ref.at[i], prm)


def _grid_prep(x, y, in_game, interpret: bool):
    """`_grid_prep_kernel` over ``N`` envs: ``(xc, yc, oc, cs, sat, prm)``; with
    `GRID_XY_INTERLEAVED`, ``xc`` and ``yc`` are both the interleaved ``xy [N, 4·MP]``."""
    if GRID_PREP_RADIX_BITS not in (1, 2):
        raise ValueError(f"GRID_PREP_RADIX_BITS must be 1 or 2, got {GRID_PREP_RADIX_BITS!r}")
    if GRID_PREP_CELL_STARTS not in GRID_PREP_CELL_STARTS_FORMS:
        raise ValueError(
            f"GRID_PREP_CELL_STARTS must be one of {GRID_PREP_CELL_STARTS_FORMS}, "
            f"got {GRID_PREP_CELL_STARTS!r}"
        )
    n, m = x.shape
    mp = kn._round_up(m, _BM)
    p2 = max(kn._next_pow2(mp), 2)
    row = lambda length: pl.BlockSpec((None, length), lambda e: (e, 0))
    f32 = lambda length: jax.ShapeDtypeStruct((n, length), jnp.float32)
    i32 = lambda length: jax.ShapeDtypeStruct((n, length), jnp.int32)
    # xc, yc, oc padded to 2·MP: a lane past its segment reads at most MP - 1 positions
    # past the in-game ones (masked), so the search's loads need no clamp.
    interleaved = bool(GRID_XY_INTERLEAVED)
    positions = (f32(4 * mp),) if interleaved else (f32(2 * mp), f32(2 * mp))
    shapes = positions + (i32(2 * mp), i32(_TABLE), i32(_TABLE), f32(8), i32(p2), i32(p2))
    kernel = functools.partial(
        _grid_prep_kernel, m=m, mp=mp, cell_agents=float(GRID_CELL_AGENTS),
        max_cells=int(GRID_MAX_CELLS), radix_bits=int(GRID_PREP_RADIX_BITS),
        cell_starts=GRID_PREP_CELL_STARTS, interleaved=interleaved, interpret=interpret,
    )  # fmt: skip
    outs = pl.pallas_call(
        kernel,
        out_shape=shapes,
        grid=(n,),
        in_specs=[row(m)] * 3,
        out_specs=tuple(row(sh.shape[1]) for sh in shapes),
        compiler_params=pl_triton.CompilerParams(num_warps=int(GRID_PREP_WARPS)),
        interpret=interpret,
        name="tag_nearest_k_grid_prep",
    )(x, y, in_game if GRID_PREP_BOOL else in_game.astype(jnp.int32))
    if interleaved:
        return (outs[0], *outs[:5])  # xy for both xc and yc
    return outs[:6]


# --------------------------------------------------------------------------- search
def _grid_knn_kernel(
    prm_ref, cs_ref, sat_ref, xc_ref, yc_ref, oc_ref, x_ref, y_ref, *out_refs,
    k, m, mp, unroll, target, in_game_only, key_bits, stats, position_keys, lane_rows,
    xy_interleaved=False,
):  # fmt: skip
    """One env, 32 consecutive sorted queries (one per lane): see the module doc.

    Inputs as `_grid_prep_kernel` writes them (``xc, yc, oc`` padded to ``2·MP``; with
    ``xy_interleaved`` both ``xc`` and ``yc`` are the interleaved ``xy [4·MP]``), plus
    ``x, y [M]`` (positions by id, for the exact re-sort with id keys). Writes each
    query's list of ids (``-1`` = none) at its row of the env's row-major ``out [M·k]``
    and, with ``stats``, ``trips [32]`` (candidate loads per lane, every lane the same:
    the block's cost).
    """
    if xy_interleaved:  # both refs are the interleaved xy [4·MP]
        xc_ref, yc_ref = _Pairs(xc_ref, 0), _Pairs(yc_ref, 1)
    b = pl.program_id(1)
    p = b * _BM + lax.broadcasted_iota(jnp.int32, (_BM,), 0)  # sorted positions
    x0, y0, s = prm_ref[0], prm_ref[1], prm_ref[2]
    cells_f = prm_ref[3]
    cells = cells_f.astype(jnp.int32)
    n_in = prm_ref[4].astype(jnp.int32)
    nq = n_in if in_game_only else m
    live = p < nq
    qx, qy = xc_ref[p], yc_ref[p]
    qc = jnp.where(p < n_in, p, -1)  # the query's own candidate position
    u = (qx - x0) * s
    v = (qy - y0) * s

    def clamp_cell(w):
        return jnp.clip(w, 0.0, cells_f - 1.0).astype(jnp.int32)

    cx, cy = clamp_cell(jnp.floor(u)), clamp_cell(jnp.floor(v))
    top = cells - 1
    agent = jnp.where(p < m, oc_ref[p], m)
    low = (1 << key_bits) - 1
    slots = k + kn.PACKED_EXTRA_SLOTS

    def sat(r, c):  # in-game agents in cells (<= r, <= c); 0 for r or c = -1
        val = sat_ref[jnp.maximum(r, 0) * _ROW + jnp.maximum(c, 0)]
        return jnp.where((r >= 0) & (c >= 0), val, 0)

    def window(rad):  # [a, b] x [c, e], clipped
        return (
            jnp.maximum(cx - rad, 0), jnp.minimum(cx + rad, top),
            jnp.maximum(cy - rad, 0), jnp.minimum(cy + rad, top),
        )  # fmt: skip

    def enough(rad):  # the window holds `target` candidates, or is the whole grid
        a, bb, c, e = window(rad)
        count = sat(e, bb) - sat(c - 1, bb) - sat(e, a - 1) + sat(c - 1, a - 1)
        count = count - (qc >= 0).astype(jnp.int32)
        whole = (a == 0) & (bb == top) & (c == 0) & (e == top)
        return (count >= target) | whole | ~live

    def grow(state):
        rad, done = state
        rad = jnp.where(done, rad, rad + 1)
        return rad, enough(rad)

    rad, _ = lax.while_loop(lambda st: kn._any(~st[1]), grow, (jnp.ones_like(p), enough(1)))
    a0, b0, c0, e0 = window(rad)

    def candidate(pos, ok, ins):
        """The ``(d, j)`` pair of the candidates at sorted positions ``pos [BM]`` (within
        the padded ``[2·MP]`` arrays): ``d`` is ``+inf`` where not ``ok`` and for the
        query itself; ``j`` as `stream` says."""
        dx = qx - xc_ref[pos]
        dy = qy - yc_ref[pos]
        d = dx * dx + dy * dy
        d = jnp.where(ok & (pos != qc), d, kn._INF)
        return d, pos if ins is packed_ins and position_keys else oc_ref[pos]

    def stream(lists, st, ln, ins, count):
        """Streams each lane's candidates ``st .. st + ln - 1`` (``[BM]`` each) into its
        list as ``(d, j)`` pairs (``j``: the candidate's id, or its sorted position when
        ``ins`` takes position keys); the loop runs for the longest lane."""
        u_ins = unroll if ins is packed_ins else 1  # the rare exact re-search: one by one
        longest = jnp.max(ln)
        steps = (longest + u_ins - 1) // u_ins

        def body(t, lists):
            batch = []
            for i in range(u_ins):
                j = t * u_ins + i
                batch.append(candidate(st + j, j < ln, ins))
            return ins(lists, batch)

        return lax.fori_loop(0, steps, body, lists), count + longest

    def segment(row, lo, hi, on):
        """Lane's candidates in cells ``lo .. hi`` of ``row`` (none where not ``on`` or
        ``hi < lo``): ``(start, length)``."""
        base = row * _ROW
        st = cs_ref[base + jnp.clip(lo, 0, top)]
        en = cs_ref[base + jnp.clip(hi, -1, top) + 1]
        return st, jnp.where(on & (hi >= lo), jnp.maximum(en - st, 0), 0)

    def rows(lists, ins, count, lo_row, hi_row, segs):
        def body(row, carry):
            lists, count = carry
            for lo, hi, on in segs(row):
                st, ln = segment(row, lo, hi, on)
                lists, count = stream(lists, st, ln, ins, count)
            return lists, count

        return lax.fori_loop(lo_row, hi_row + 1, body, (lists, count))

    def phase1(lists, ins, count):
        if lane_rows:
            return phase1_lane_rows(lists, ins, count)
        lo_row = jnp.min(jnp.where(live, c0, top + 1))
        hi_row = jnp.max(jnp.where(live, e0, -1))
        return rows(
            lists, ins, count, lo_row, hi_row,
            lambda row: [(a0, b0, live & (row >= c0) & (row <= e0))],
        )  # fmt: skip

    def phase1_lane_rows(lists, ins, count):
        """`phase1` with each lane walking its own rows ``c0 .. e0``: a loop step takes
        ``U`` candidates of the lane's current row, and a lane whose row ends moves to its
        next one. The loop runs for the lane with the most steps, not for the sum over the
        block's rows of each row's longest segment (`GRID_LANE_ROWS`). Same candidates,
        in the same order per lane."""
        u_ins = unroll if ins is packed_ins else 1

        def seg(row):  # the lane's segment of `row`: (start, end); empty past e0
            st, ln = segment(row, a0, b0, live & (row <= e0))
            return st, st + ln

        st, en = seg(c0)
        done = ~live

        def body(state):
            lists, cnt, row, p, end, done = state
            batch = [candidate(p + i, (p + i < end) & ~done, ins) for i in range(u_ins)]
            lists = ins(lists, batch)
            p = p + u_ins
            next_row = (p >= end) & ~done  # a finished lane stays on its last row + 1
            row = jnp.where(next_row, row + 1, row)
            done = done | (row > e0)
            st2, en2 = seg(row)  # row <= e0 + 1 <= 31: inside the tables
            p = jnp.where(next_row, st2, p)
            end = jnp.where(next_row, en2, end)
            return lists, cnt + u_ins, row, p, end, done

        state = (lists, count, c0, st, en, done)
        state = lax.while_loop(lambda s: kn._any(~s[5]), body, state)
        return state[0], state[1]

    def phase2(lists, ins, count, need, w1):
        a1, b1, c1, e1 = w1
        lo_row = jnp.min(jnp.where(need, c1, top + 1))
        hi_row = jnp.max(jnp.where(need, e1, -1))

        def segs(row):
            on = need & (row >= c1) & (row <= e1)
            mid = (row >= c0) & (row <= e0)  # a row the phase-1 window covered
            return [
                (a1, jnp.where(mid, jnp.minimum(a0 - 1, b1), b1), on),
                (jnp.maximum(b0 + 1, a1), b1, on & mid),
            ]

        return rows(lists, ins, count, lo_row, hi_row, segs)

    def phase2_if_needed(lists, ins, count, need, w1):
        """`phase2` when some lane needs it, else ``(lists, count)`` as they are."""
        return lax.cond(
            kn._any(need),
            lambda lc: phase2(lc[0], ins, lc[1], need, w1),
            lambda lc: lc,
            (lists, count),
        )

    # ---- packed search
    def packed_ins(lists, batch):
        if len(batch) == 1:
            return kn._packed_insert(lists, batch[0][0], batch[0][1], key_bits)
        keys = [kn._packed_key(d, j, key_bits) for d, j in batch]
        return kn._packed_merge(lists, keys)

    init = tuple(jnp.full((_BM,), kn._EMPTY_KEY, jnp.int32) for _ in range(slots))
    zero = jnp.minimum(b, 0)  # a traced 0 (a literal cannot leave a Triton cond branch)

    def search():
        keys, count = phase1(init, packed_ins, zero)
        kth = keys[k - 1]
        bound = jnp.where(
            kth < kn._INF_KEY, lax.bitcast_convert_type(kth | low, jnp.float32), kn._INF
        )
        reach = jnp.sqrt(bound) * jnp.float32(_RADIUS_SLACK) * s + jnp.float32(_CELL_MARGIN)
        w1 = (
            clamp_cell(jnp.floor(u - reach)), clamp_cell(jnp.floor(u + reach)),
            clamp_cell(jnp.floor(v - reach)), clamp_cell(jnp.floor(v + reach)),
        )  # fmt: skip
        need = live & ((w1[0] < a0) | (w1[1] > b0) | (w1[2] < c0) | (w1[3] > e0))
        keys, count = phase2_if_needed(keys, packed_ins, count, need, w1)

        if position_keys:

            def dist(j):  # exact distances to the candidates at positions j [BM]
                jj = jnp.minimum(j, mp - 1)
                dx = qx - xc_ref[jj]
                dy = qy - yc_ref[jj]
                return dx * dx + dy * dy

            def ids(j):
                return oc_ref[jnp.minimum(j, mp - 1)]

        else:
            ids = None

            def dist(j):  # exact distances to the agents j [BM] (ids; junk ids clamped)
                jj = jnp.clip(j, 0, m - 1)
                dx = qx - x_ref[jj]
                dy = qy - y_ref[jj]
                return dx * dx + dy * dy

        lists, amb = kn._packed_lists(keys, k, key_bits, dist, ids)

        def exact():  # the same windows with the (d, j) insertion
            def lex_ins(pair, batch):
                ld, lj = pair
                for d, j in batch:
                    ld, lj = kn._insert_pair(ld, lj, d, j, True)
                return ld, lj

            pair = (
                tuple(jnp.full((_BM,), kn._INF, jnp.float32) for _ in range(k)),
                tuple(jnp.full((_BM,), -1, jnp.int32) for _ in range(k)),
            )
            pair, c2 = phase1(pair, lex_ins, count)
            pair, c2 = phase2_if_needed(pair, lex_ins, c2, need, w1)
            ld, lj = pair
            return tuple(jnp.where(ld[i] < kn._INF, lj[i], -1) for i in range(k)), c2

        return lax.cond(kn._any(amb & live), exact, lambda: (lists, count))

    def empty():
        return tuple(jnp.full((_BM,), -1, jnp.int32) for _ in range(k)), zero

    lists, count = lax.cond(b * _BM < nq, search, empty)
    lists = tuple(jnp.where(live, lst, -1) for lst in lists)
    kn._store_lists(out_refs[0], agent, lists, k, m)
    if stats:
        out_refs[1][...] = jnp.full((_BM,), count, jnp.int32)


def _grid_search(
    x, y, in_game, k, *, queries="all", block_cols=None, interpret=None, stats=False,
    with_order=False,
):  # fmt: skip
    k, x, y, in_game = kn._check_batched_inputs(x, y, in_game, k)
    if queries not in GRID_QUERIES:
        raise ValueError(f"queries must be one of {GRID_QUERIES}, got {queries!r}")
    n, m = x.shape
    if m > GRID_MAX_AGENTS:
        raise ValueError(f"the grid search handles at most {GRID_MAX_AGENTS} agents, got M={m}")
    interpret = kn._resolve_interpret(interpret)
    u = 1 if interpret else GRID_UNROLL
    u = kn._check_block("block_cols", u if block_cols is None else block_cols)
    mp = kn._round_up(m, _BM)
    xc, yc, oc, cs, sat, prm = _grid_prep(x, y, in_game, interpret)
    kernel = functools.partial(
        _grid_knn_kernel, k=k, m=m, mp=mp, unroll=u,
        target=math.ceil(float(GRID_TARGET) * k), in_game_only=queries == "in_game",
        key_bits=max(1, ((mp if GRID_POSITION_KEYS else m) - 1).bit_length()), stats=stats,
        position_keys=bool(GRID_POSITION_KEYS), lane_rows=bool(GRID_LANE_ROWS),
        xy_interleaved=bool(GRID_XY_INTERLEAVED),
    )  # fmt: skip
    env = lambda length: pl.BlockSpec((None, length), lambda e, b: (e, 0))
    pos_len = (4 if GRID_XY_INTERLEAVED else 2) * mp
    out_shape = [jax.ShapeDtypeStruct((n, m * k), jnp.int32)]
    out_specs = [env(m * k)]
    if stats:
        out_shape.append(jax.ShapeDtypeStruct((n, mp), jnp.int32))
        out_specs.append(pl.BlockSpec((None, _BM), lambda e, b: (e, b)))
    outs = pl.pallas_call(
        kernel,
        out_shape=tuple(out_shape),
        grid=(n, mp // _BM),
        in_specs=[env(8), env(_TABLE), env(_TABLE), env(pos_len), env(pos_len), env(2 * mp)]
        + [env(m), env(m)],
        out_specs=tuple(out_specs),
        compiler_params=pl_triton.CompilerParams(num_warps=1, num_stages=GRID_STAGES),
        # Typical: ~60 candidates per query at ~45 simple ops.
        cost_estimate=pl.CostEstimate(
            flops=int(n * mp * 60 * 45),
            transcendentals=0,
            bytes_accessed=int(4 * n * (mp * 60 * 3 + k * m)),
        ),
        interpret=interpret,
        name="tag_nearest_k_grid",
    )(prm, cs, sat, xc, yc, oc, x, y)
    out = outs[0].reshape(n, m, k)
    if stats:
        return out, outs[1][:, ::_BM].astype(jnp.float32)  # [N, blocks]: trips per block
    if with_order:  # the first M sorted positions are the M agents (padding sorts last)
        return out, oc[:, :m]
    return out


def nearest_k_grid_batched(
    x: jax.Array,
    y: jax.Array,
    in_game: jax.Array,
    k: int,
    *,
    queries: str = "all",
    block_cols: int | None = None,
    interpret: bool | None = None,
) -> tuple[jax.Array, jax.Array]:
    """`kernels.nearest_k_batched` by the per-query grid search (module doc).

    Args:
      x, y: ``[N, M]`` float32 positions (finite), ``M <= 1024``.
      in_game: ``[N, M]`` bool; only agents with ``in_game[n, j]`` are candidates.
      k: neighbours per agent (static), ``k >= 1``.
      queries: ``"all"`` (every agent's list, as `kernels.nearest_k`) or ``"in_game"``
        (agents out of the game get empty lists: ``valid`` all ``False``).
      block_cols: candidates per unrolled step ``U`` (power of two; default
        `GRID_UNROLL` compiled, 1 in interpret mode).
      interpret: Pallas interpret mode (default: on the CPU backend).

    Returns:
      ``idx [N, M, k]`` int32 and ``valid [N, M, k]`` bool, as `kernels.nearest_k` per
      env (with ``queries="in_game"``, rows of agents out of the game are padding).
    """
    out = _grid_search(
        x, y, in_game, k, queries=queries, block_cols=block_cols, interpret=interpret
    )
    return kn._finish(out)


def grid_search_stats(
    x: jax.Array, y: jax.Array, in_game: jax.Array, k: int, **options
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`nearest_k_grid_batched` plus its cost: ``idx, valid`` and ``trips [N, blocks]``
    float32, each block's candidate loads per lane (the longest lane's, summed over its
    row segments; re-searches count again)."""
    out, trips = _grid_search(x, y, in_game, k, stats=True, **options)
    idx, valid = kn._finish(out)
    return idx, valid, trips
