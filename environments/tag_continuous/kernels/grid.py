"""The per-query grid search for ``M <= 1024`` agents (Pallas; exact, the same lists).

The sorted search (`sorted`) prunes per block of 32 queries: a block streams every
candidate near any of its queries. Here each lane walks its own query's cells, so a lane
streams only the candidates near its query, at the price of per-lane loads and of
lanes waiting for the lane with the most steps.

Preparation (`_grid_prep_kernel`, one program per env): the in-game agents' bounding
square is cut into ``G × G`` cells, ``G = round(sqrt(n_in / 1.5))`` capped at 31, so about
1.5 in-game agents per cell whatever the number still in the game. Every agent gets the
key ``cy·32 + cx`` (in the game) or 1023 (out), and the keys are radix-sorted with the
agent id as tie-break (`_radix_passes_2bit`, two key bits per pass): the in-game agents
come first, row by row of cells, so **each row of a window of cells is one contiguous
run of candidates**. The program writes the sorted positions, the original ids, the cell
starts ``cs[c]`` (agents with a key below ``c``, by binary search in the sorted keys)
and a summed-area table of the in-game counts per cell (a rectangle's count in four
loads).

Search (`_grid_knn_kernel`, one program per env and block of 32 sorted queries, one
query per lane, as the other kernels):

1. **Window.** Each lane grows a square window of cells around its own cell, radius
   ``R = 1, 2, …``, until it holds at least ``ceil(2.5 · k)`` candidates besides the
   query, or covers the grid (summed-area counts; a scalar loop while some lane grows).
2. **Phase 1.** Each lane walks its own window rows: a loop step takes ``U`` candidates
   of the lane's current row segment ``cs[row·32 + x0] .. cs[row·32 + x1 + 1]`` into
   its packed top-``k + 2`` list (`packed.packed_merge`, keys holding the candidate's
   sorted position), and a lane whose segment ends moves to its next row; the loop runs
   for the lane with the most steps.
3. **Bound.** The ``k``-th key bounds the lane's true ``k``-th squared distance from
   above (it is the ``k``-th smallest over a subset; a key's truncation is lifted back
   with its low bits set). Every agent within that distance lies in the cells that the
   square ``[u ± r·s]`` touches (``u`` the query in cell units, with a margin of
   ``10⁻³`` cells and ``10⁻⁴`` relative on ``r`` against float rounding). A lane whose
   window does not contain that square (or whose list is not full: the whole grid)
   needs phase 2.
4. **Phase 2** (only if some lane needs it): the rows of the larger square, each as the
   part left and the part right of the phase-1 window (a whole row outside its rows),
   row by row, each row as long as its longest segment.
5. **Finish** as the sorted search: the exact re-sort of the packed list
   (`packed.packed_lists`, ties of equal distances broken by id since the keys hold
   positions), and, for a block where some lane's keys stay ambiguous, the same windows
   again with the exact ``(d, j)`` insertion (`packed.insert_pair`).

Why exact: after phase 2 each lane has streamed every candidate within its bound of the
true ``k``-th distance, so its ``k + 2`` smallest keys hold every candidate that can be
among its ``k`` nearest; the rest is the packed-key argument. The cells come from the
same float formula for queries and candidates, and the margins cover its rounding;
candidates sit in cells ``0 .. G - 1`` (clamped), so a window that reaches the grid's
edge misses nothing beyond it.

``queries="in_game"`` leaves the lists of agents out of the game empty (``-1``) instead
of searching them (the env's observation writer zeroes those rows anyway, and they are
the slowest queries: out of the game is where the taggers have cleared the runners).
The in-game queries are the first ``n_in`` sorted positions, so whole blocks past them
only write ``-1``.

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

from environments.tag_continuous.kernels import packed
from environments.tag_continuous.kernels.grid_prep import BM, ROW, TABLE, grid_prep
from environments.tag_continuous.kernels.triton import (
    INF,
    any_lane,
    check_block,
    resolve_interpret,
    round_up,
)

__all__ = ["MAX_AGENTS", "QUERIES", "grid_lists"]

#: The grid search handles up to this many agents (packed keys, 32 × 32 tables).
MAX_AGENTS = 1024
#: The ``queries`` choices: ``"all"`` (every agent's list) or ``"in_game"`` (the lists of
#: agents out of the game left empty; see the module doc).
QUERIES = ("all", "in_game")
#: A lane's first window grows until it holds ``ceil(_TARGET · k)`` candidates (fixed).
_TARGET = 2.5
#: Candidates per unrolled loop step ``U``, compiled (fixed).
_UNROLL = 4
_CELL_MARGIN = 1e-3  # cells
_RADIUS_SLACK = 1.0 + 1e-4


class _Lanes:
    """One program of the grid search: 32 consecutive sorted queries, one per lane.

    A list-update rule ``ins(lists, batch)`` takes a batch of ``(d [BM], j [BM])`` pairs:
    `packed_ins` (``j`` a sorted position) or the exact one of `exact` (``j`` an id)."""

    def __init__(self, refs, *, k, m, mp, unroll, target, in_game_only, key_bits):
        prm_ref, self.cs_ref, self.sat_ref, self.xc_ref, self.yc_ref, self.oc_ref = refs
        self.k, self.m, self.mp, self.unroll, self.key_bits = k, m, mp, unroll, key_bits
        self.b = pl.program_id(1)
        p = self.b * BM + lax.broadcasted_iota(jnp.int32, (BM,), 0)  # sorted positions
        x0, y0, self.s = prm_ref[0], prm_ref[1], prm_ref[2]
        self.cells_f = prm_ref[3]
        cells = self.cells_f.astype(jnp.int32)
        self.n_in = prm_ref[4].astype(jnp.int32)
        self.nq = self.n_in if in_game_only else m
        self.live = p < self.nq
        self.qx, self.qy = self.xc_ref[p], self.yc_ref[p]
        self.qc = jnp.where(p < self.n_in, p, -1)  # the query's own candidate position
        self.u = (self.qx - x0) * self.s
        self.v = (self.qy - y0) * self.s
        self.cx, self.cy = self.clamp_cell(jnp.floor(self.u)), self.clamp_cell(jnp.floor(self.v))
        self.top = cells - 1
        self.agent = jnp.where(p < m, self.oc_ref[p], m)
        self.target = target
        rad, _ = lax.while_loop(
            lambda st: any_lane(~st[1]), self._grow, (jnp.ones_like(p), self._enough(1))
        )
        self.w0 = self._window(rad)

    def clamp_cell(self, w):
        return jnp.clip(w, 0.0, self.cells_f - 1.0).astype(jnp.int32)

    # ---- the first window
    def _sat(self, r, c):  # in-game agents in cells (<= r, <= c); 0 for r or c = -1
        val = self.sat_ref[jnp.maximum(r, 0) * ROW + jnp.maximum(c, 0)]
        return jnp.where((r >= 0) & (c >= 0), val, 0)

    def _window(self, rad):  # [a, b] x [c, e], clipped
        cx, cy, top = self.cx, self.cy, self.top
        return (
            jnp.maximum(cx - rad, 0), jnp.minimum(cx + rad, top),
            jnp.maximum(cy - rad, 0), jnp.minimum(cy + rad, top),
        )  # fmt: skip

    def _enough(self, rad):  # the window holds `target` candidates, or is the whole grid
        a, bb, c, e = self._window(rad)
        sat, top = self._sat, self.top
        count = sat(e, bb) - sat(c - 1, bb) - sat(e, a - 1) + sat(c - 1, a - 1)
        count = count - (self.qc >= 0).astype(jnp.int32)
        whole = (a == 0) & (bb == top) & (c == 0) & (e == top)
        return (count >= self.target) | whole | ~self.live

    def _grow(self, state):
        rad, done = state
        rad = jnp.where(done, rad, rad + 1)
        return rad, self._enough(rad)

    # ---- streaming candidates
    def candidate(self, pos, ok, ins):
        """The ``(d, j)`` pair of the candidates at sorted positions ``pos [BM]`` (within
        the padded ``[2·MP]`` arrays): ``d`` is ``+inf`` where not ``ok`` and for the
        query itself; ``j`` is ``pos`` for `packed_ins`, else the candidate's id."""
        dx = self.qx - self.xc_ref[pos]
        dy = self.qy - self.yc_ref[pos]
        d = dx * dx + dy * dy
        d = jnp.where(ok & (pos != self.qc), d, INF)
        return d, pos if ins == self.packed_ins else self.oc_ref[pos]

    def _steps(self, ins) -> int:  # the rare exact re-search: one by one
        return self.unroll if ins == self.packed_ins else 1

    def _stream(self, lists, st, ln, ins):
        """Streams each lane's candidates ``st .. st + ln - 1`` (``[BM]`` each) into its
        list; the loop runs for the longest lane."""
        u_ins = self._steps(ins)
        steps = (jnp.max(ln) + u_ins - 1) // u_ins

        def body(t, lists):
            batch = []
            for i in range(u_ins):
                j = t * u_ins + i
                batch.append(self.candidate(st + j, j < ln, ins))
            return ins(lists, batch)

        return lax.fori_loop(0, steps, body, lists)

    def _segment(self, row, lo, hi, on):
        """Lane's candidates in cells ``lo .. hi`` of ``row`` (none where not ``on`` or
        ``hi < lo``): ``(start, length)``."""
        base = row * ROW
        st = self.cs_ref[base + jnp.clip(lo, 0, self.top)]
        en = self.cs_ref[base + jnp.clip(hi, -1, self.top) + 1]
        return st, jnp.where(on & (hi >= lo), jnp.maximum(en - st, 0), 0)

    def phase1(self, lists, ins):
        """Each lane walks its own rows ``c0 .. e0`` of its first window, ``U`` candidates
        of its current row per loop step, moving to its next row when one ends."""
        u_ins = self._steps(ins)
        a0, b0, c0, e0 = self.w0

        def seg(row):  # the lane's segment of `row`: (start, end); empty past e0
            st, ln = self._segment(row, a0, b0, self.live & (row <= e0))
            return st, st + ln

        st, en = seg(c0)

        def body(state):
            lists, row, p, end, done = state
            batch = [self.candidate(p + i, (p + i < end) & ~done, ins) for i in range(u_ins)]
            lists = ins(lists, batch)
            p = p + u_ins
            next_row = (p >= end) & ~done  # a finished lane stays on its last row + 1
            row = jnp.where(next_row, row + 1, row)
            done = done | (row > e0)
            st2, en2 = seg(row)  # row <= e0 + 1 <= 31: inside the tables
            p = jnp.where(next_row, st2, p)
            end = jnp.where(next_row, en2, end)
            return lists, row, p, end, done

        state = (lists, c0, st, en, ~self.live)
        return lax.while_loop(lambda s: any_lane(~s[4]), body, state)[0]

    def phase2(self, lists, ins, need, w1):
        """The rows of the larger window ``w1`` (lanes that ``need`` it), without the
        phase-1 window's cells, row by row."""
        a0, b0, c0, e0 = self.w0
        a1, b1, c1, e1 = w1
        lo_row = jnp.min(jnp.where(need, c1, self.top + 1))
        hi_row = jnp.max(jnp.where(need, e1, -1))

        def body(row, lists):
            on = need & (row >= c1) & (row <= e1)
            mid = (row >= c0) & (row <= e0)  # a row the phase-1 window covered
            for lo, hi, seg_on in (
                (a1, jnp.where(mid, jnp.minimum(a0 - 1, b1), b1), on),
                (jnp.maximum(b0 + 1, a1), b1, on & mid),
            ):
                st, ln = self._segment(row, lo, hi, seg_on)
                lists = self._stream(lists, st, ln, ins)
            return lists

        return lax.fori_loop(lo_row, hi_row + 1, body, lists)

    def phase2_if_needed(self, lists, ins, need, w1):
        """`phase2` when some lane needs it, else ``lists`` as they are."""
        return lax.cond(
            any_lane(need), lambda lc: self.phase2(lc, ins, need, w1), lambda lc: lc, lists
        )

    # ---- the searches
    def packed_ins(self, lists, batch):
        if len(batch) == 1:
            return packed.packed_insert(lists, batch[0][0], batch[0][1], self.key_bits)
        keys = [packed.packed_key(d, j, self.key_bits) for d, j in batch]
        return packed.packed_merge(lists, keys)

    def _second_window(self, keys):
        """The window that the lane's ``k``-th key's distance bound reaches, and which
        lanes need it (module doc, step 3)."""
        low = (1 << self.key_bits) - 1
        kth = keys[self.k - 1]
        bound = jnp.where(
            kth < packed.INF_KEY, lax.bitcast_convert_type(kth | low, jnp.float32), INF
        )
        reach = jnp.sqrt(bound) * jnp.float32(_RADIUS_SLACK) * self.s + jnp.float32(_CELL_MARGIN)
        u, v, clamp = self.u, self.v, self.clamp_cell
        w1 = (
            clamp(jnp.floor(u - reach)), clamp(jnp.floor(u + reach)),
            clamp(jnp.floor(v - reach)), clamp(jnp.floor(v + reach)),
        )  # fmt: skip
        a0, b0, c0, e0 = self.w0
        need = self.live & ((w1[0] < a0) | (w1[1] > b0) | (w1[2] < c0) | (w1[3] > e0))
        return w1, need

    def exact(self, need, w1):
        """The same windows with the exact ``(d, j)`` insertion: ``k`` slots of ids."""

        def lex_ins(pair, batch):
            ld, lj = pair
            for d, j in batch:
                ld, lj = packed.insert_pair(ld, lj, d, j, True)
            return ld, lj

        pair = (
            tuple(jnp.full((BM,), INF, jnp.float32) for _ in range(self.k)),
            tuple(jnp.full((BM,), -1, jnp.int32) for _ in range(self.k)),
        )
        pair = self.phase1(pair, lex_ins)
        ld, lj = self.phase2_if_needed(pair, lex_ins, need, w1)
        return tuple(jnp.where(ld[i] < INF, lj[i], -1) for i in range(self.k))

    def search(self):
        """The block's lists: the packed search, resolved exactly (module doc)."""
        slots = self.k + packed.EXTRA_SLOTS
        init = tuple(jnp.full((BM,), packed.EMPTY_KEY, jnp.int32) for _ in range(slots))
        keys = self.phase1(init, self.packed_ins)
        w1, need = self._second_window(keys)
        keys = self.phase2_if_needed(keys, self.packed_ins, need, w1)
        mp = self.mp

        def dist(j):  # exact distances to the candidates at positions j [BM]
            jj = jnp.minimum(j, mp - 1)
            dx = self.qx - self.xc_ref[jj]
            dy = self.qy - self.yc_ref[jj]
            return dx * dx + dy * dy

        def ids(j):
            return self.oc_ref[jnp.minimum(j, mp - 1)]

        lists, amb = packed.packed_lists(keys, self.k, self.key_bits, dist, ids)
        return lax.cond(any_lane(amb & self.live), lambda: self.exact(need, w1), lambda: lists)


def _grid_knn_kernel(
    prm_ref, cs_ref, sat_ref, xc_ref, yc_ref, oc_ref, out_ref, *, k, m, mp, unroll, target,
    in_game_only, key_bits,
):  # fmt: skip
    """One env, 32 consecutive sorted queries (one per lane): see the module doc.

    Inputs as `grid_prep.grid_prep` writes them (``xc, yc, oc`` padded to ``2·MP``).
    Writes each query's list of ids (``-1`` = none) at its row of the env's row-major
    ``out [M·k]``.
    """
    lanes = _Lanes(
        (prm_ref, cs_ref, sat_ref, xc_ref, yc_ref, oc_ref), k=k, m=m, mp=mp, unroll=unroll,
        target=target, in_game_only=in_game_only, key_bits=key_bits,
    )  # fmt: skip

    def empty():
        return tuple(jnp.full((BM,), -1, jnp.int32) for _ in range(k))

    lists = lax.cond(lanes.b * BM < lanes.nq, lanes.search, empty)
    lists = tuple(jnp.where(lanes.live, lst, -1) for lst in lists)
    packed.store_lists(out_ref, lanes.agent, lists, k, m)


def grid_lists(
    x: jax.Array,
    y: jax.Array,
    in_game: jax.Array,
    k: int,
    *,
    queries: str = "all",
    interpret: bool | None = None,
    unroll: int | None = None,
) -> jax.Array:
    """The ``k`` nearest in-game agents of every agent by the per-query grid search.

    Args:
      x, y: ``[N, M]`` float32 positions (finite), ``M <= 1024``; in_game: ``[N, M]``
        bool (only agents in the game are candidates); k: neighbours per agent (static),
        ``k >= 1``.
      queries: ``"all"`` (every agent's list) or ``"in_game"`` (agents out of the game
        get empty lists).
      interpret: Pallas interpret mode; ``None``: when the default backend is the CPU.
      unroll: candidates per loop step ``U`` (power of two; default 4 compiled, 1 in
        interpret mode; the same lists).

    Returns:
      ``[N, M, k]`` int32, as `brute.brute_lists` (with ``queries="in_game"``, rows of
      agents out of the game all ``-1``).
    """
    k, x, y, in_game = packed.check_inputs(x, y, in_game, k)
    if queries not in QUERIES:
        raise ValueError(f"queries must be one of {QUERIES}, got {queries!r}")
    n, m = x.shape
    if m > MAX_AGENTS:
        raise ValueError(f"the grid search handles at most {MAX_AGENTS} agents, got M={m}")
    interpret = resolve_interpret(interpret)
    u = check_block("unroll", (1 if interpret else _UNROLL) if unroll is None else unroll)
    mp = round_up(m, BM)
    xc, yc, oc, cs, sat, prm = grid_prep(x, y, in_game, interpret)
    kernel = functools.partial(
        _grid_knn_kernel, k=k, m=m, mp=mp, unroll=u, target=math.ceil(_TARGET * k),
        in_game_only=queries == "in_game", key_bits=max(1, (mp - 1).bit_length()),
    )  # fmt: skip
    env = lambda length: pl.BlockSpec((None, length), lambda e, b: (e, 0))
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n, m * k), jnp.int32),
        grid=(n, mp // BM),
        in_specs=[env(8), env(TABLE), env(TABLE), env(2 * mp), env(2 * mp), env(2 * mp)],
        out_specs=env(m * k),
        compiler_params=pl_triton.CompilerParams(num_warps=1, num_stages=None),
        # Typical: ~60 candidates per query at ~45 simple ops.
        cost_estimate=pl.CostEstimate(
            flops=int(n * mp * 60 * 45),
            transcendentals=0,
            bytes_accessed=int(4 * n * (mp * 60 * 3 + k * m)),
        ),
        interpret=interpret,
        name="tag_nearest_k_grid",
    )(prm, cs, sat, xc, yc, oc)
    return out.reshape(n, m, k)
