"""The sorted k-nearest search: Hilbert-sorted queries, candidate chunks pruned by boxes.

Per env the agents are sorted along a Hilbert curve (`sorted_prep`), so runs of
consecutive agents are compact patches of the plane. Queries are all agents in that
order; candidates are the in-game agents in the same order, cut into chunks of ``BC =
8`` (at most ``next_pow2(M)``), each with its bounding box. A program takes ``BM = 32``
consecutive queries (one per lane, one warp) and visits:

1. the chunks holding its own queries (the only ones that need the self mask);
2. then the others nearest box first: the squared box-to-box distance of every chunk
   from the block's bounding box is computed once, packed with the chunk index into one
   int32 key (a float ``>= 0`` orders like its bits; the low ``log2(NC)`` bits replaced
   by the index), so one min-reduction per visit gives the next chunk and a lower bound
   of its distance. The loop stops at the first chunk whose bound exceeds the block's
   worst ``k``-th distance (max over lanes, ``+inf`` while a list is not full); a chunk
   is also skipped when, for every lane, its point-to-box distance exceeds that lane's
   ``k``-th distance.

A visited chunk is streamed into per-lane sorted lists as in the brute-force search
(`packed`); each list is written at its agent's row, so nothing is un-sorted afterwards.

Ties: candidates no longer arrive in index order, so the lists must order by
``(distance, original index)``. With packed keys (indices in ``<= 10`` bits) the keys
hold the original index, and `packed.packed_lists` recovers the exact lists (an
ambiguous block searches again with the ``(d, j)``-ordered insertion). Otherwise the
search first runs the brute-force kernel's cheaper strict insertion with ``k + 1``
slots: exact unless two of a lane's ``k + 1`` best distances are equal (the extra slot
catches a tie at the ``k``-th place); a block where some lane has such a tie searches
again with the ordered insertion (on continuous positions a handful of blocks per
million, on lattices always).

Why exact: float32 rounding is monotone, so a bound computed from the boxes is never
above the float32 distance of a query/candidate pair it covers (a slack of ``2**-17``
relative covers a compiler contracting ``dx*dx + dy*dy`` into an FMA in one formula and
not the other); a skipped candidate is strictly farther than the lane's last kept entry
and could not have entered its list. Lists only improve, so testing against an older
bound is conservative; truncating a chunk's bound in its key only lowers it.

Cost: the preparation is ``O(M log M)`` per env; the kernel does ``O(NC)`` scalar box
tests per block and ``f·M²`` pairs, where ``f``, the visited fraction of (block, chunk)
pairs, is about the area of a block's patch grown by the ``k``-th neighbour radius and a
chunk's patch, over the whole area: it falls like ``1/M`` at a fixed density of blocks.
Clustered agents cost the same (the curve adapts to the bounding square). Memory:
``O(M·k)`` per env, nothing ``[M, M]`` nor ``[blocks, chunks]``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from environments.tag_continuous.kernels import packed
from environments.tag_continuous.kernels.sorted_prep import (
    PREP_MAX_AGENTS,
    prep_pallas,
    sorted_inputs,
)
from environments.tag_continuous.kernels.triton import (
    INF,
    any_lane,
    check_block,
    compiler_params,
    next_pow2,
    resolve_interpret,
    round_up,
)

__all__ = ["sorted_lists"]

#: Query rows per program ``BM`` at most, one per lane (fixed).
_BLOCK_ROWS = 32
#: Candidates per chunk ``BC`` at most (fixed).
_CHUNK = 8
#: Candidates per unrolled loop step ``U``, compiled (fixed; at most the chunk).
_UNROLL = 8
#: A chunk is skipped only when ``bound * _SLACK > k-th distance``: the slack (about 80
#: float32 ulps) covers a compiler contracting ``dx*dx + dy*dy`` into an FMA in one of
#: the two formulas (bound and distance) and not in the other.
_SLACK = 1.0 - 2.0**-17


class _Block:
    """One program of the sorted search: ``BM`` consecutive sorted queries, one per lane.

    ``refs``: the kernel's inputs (see `_sorted_knn_kernel`). ``mode`` of a search:
    ``"lex"`` / ``"strict"`` (`packed.insert_pair` with or without ``lex``; lists ``(ld,
    lj)``, tuples of ``[BM]``) or ``"packed"`` (`packed.packed_insert`; a tuple of
    ``[BM]`` keys). A search's carry is ``(lists, worst)``, ``worst`` the max over lanes of
    the last slot's distance."""

    def __init__(self, refs, *, m, bm, bc, unroll, nb, nc, ncp, key_bits):
        (self.cb_ref, xq_ref, yq_ref, qc_ref, self.xc_ref, self.yc_ref, self.oc_ref,
         self.bx0_ref, self.bx1_ref, self.by0_ref, self.by1_ref) = refs  # fmt: skip
        self.bm, self.bc, self.unroll, self.nc, self.ncp = bm, bc, unroll, nc, ncp
        self.key_bits = key_bits
        self.b = pl.program_id(1)
        self.xq = xq_ref[...]  # [BM]
        self.yq = yq_ref[...]  # [BM]
        self.qc = qc_ref[...]  # [BM]
        xq, yq = self.xq, self.yq
        self.qx0, self.qx1 = jnp.min(xq), jnp.max(xq)  # the block's bounding box (scalars)
        self.qy0, self.qy1 = jnp.min(yq), jnp.max(yq)
        c_lo, c_hi = self.cb_ref[self.b], self.cb_ref[self.b + 1]
        self.own_lo = c_lo // bc  # chunks holding the block's in-game queries
        self.own_hi = jnp.where(c_hi > c_lo, (c_hi - 1) // bc, self.own_lo - 1)
        self.nc_in = (self.cb_ref[nb] + bc - 1) // bc  # chunks past these are empty
        self.real = self.b * bm + lax.broadcasted_iota(jnp.int32, (bm,), 0) < m  # not padding

    # ---- list rules per mode
    def _rules(self, slots: int, mode: str):
        """``(ins, last, init)``: insert ``(d [BM], j)``, the lanes' last-slot distance
        bound ``[BM]``, and the empty lists."""
        bm = self.bm
        if mode == "packed":
            key_bits = self.key_bits
            low = (1 << key_bits) - 1

            def ins(lists, d, j):
                return packed.packed_insert(lists, d, j, key_bits)

            def last(lists):  # [BM]: no listed key's distance is above this
                key = lists[-1]
                top = lax.bitcast_convert_type(key | low, jnp.float32)
                return jnp.where(key >= packed.INF_KEY, INF, top)

            init = tuple(jnp.full((bm,), packed.EMPTY_KEY, jnp.int32) for _ in range(slots))
            return ins, last, init

        def ins(lists, d, j):
            return packed.insert_pair(*lists, d, j, mode == "lex")

        def last(lists):
            return lists[0][-1]

        init = (
            tuple(jnp.full((bm,), INF, jnp.float32) for _ in range(slots)),
            tuple(jnp.full((bm,), -1, jnp.int32) for _ in range(slots)),
        )
        return ins, last, init

    # ---- visiting chunks
    def _visit(self, c, masked: bool, mode: str, ins, last):
        """Streams chunk ``c`` into the carry's lists (``masked``: mask the pair (i, i))."""
        batched = mode == "packed" and self.unroll > 1

        def step(t, lists):
            keys = []
            for u in range(self.unroll):
                p = c * self.bc + t * self.unroll + u  # candidate position
                dx = self.xq - self.xc_ref[p]
                dy = self.yq - self.yc_ref[p]
                d = dx * dx + dy * dy  # [BM]
                if masked:  # the pair (i, i)
                    d = jnp.where(self.qc == p, INF, d)
                if batched:
                    keys.append(packed.packed_key(d, self.oc_ref[p], self.key_bits))
                else:
                    lists = ins(lists, d, self.oc_ref[p])
            return packed.packed_merge(lists, keys) if batched else lists

        def run(carry):
            lists = lax.fori_loop(0, self.bc // self.unroll, step, carry[0])
            return lists, jnp.max(last(lists))

        return run

    def _per_lane(self, c, masked: bool, carry, rules):
        """Visits chunk ``c`` if some lane's list may change (point-to-box bound)."""
        mode, ins, last = rules
        cx0, cx1 = self.bx0_ref[c], self.bx1_ref[c]
        cy0, cy1 = self.by0_ref[c], self.by1_ref[c]
        lx = jnp.maximum(jnp.maximum(cx0 - self.xq, self.xq - cx1), 0.0)
        ly = jnp.maximum(jnp.maximum(cy0 - self.yq, self.yq - cy1), 0.0)
        need = (lx * lx + ly * ly) * _SLACK <= last(carry[0])
        any_need = jnp.max(jnp.where(need, 1, 0)) > 0
        return lax.cond(any_need, self._visit(c, masked, mode, ins, last), lambda cr: cr, carry)

    def _consider_own(self, c, carry, rules):
        """Visits own chunk ``c`` (self pair masked) unless no lane can gain from it."""
        inside = (c >= 0) & (c < self.nc)
        cs = jnp.clip(c, 0, self.nc - 1)
        cx0, cx1 = self.bx0_ref[cs], self.bx1_ref[cs]
        cy0, cy1 = self.by0_ref[cs], self.by1_ref[cs]
        # Box-to-box lower bound: every candidate of the chunk is at least this far from
        # every query of the block (float rounding is monotone; see _SLACK).
        gx = jnp.maximum(jnp.maximum(cx0 - self.qx1, self.qx0 - cx1), 0.0)
        gy = jnp.maximum(jnp.maximum(cy0 - self.qy1, self.qy0 - cy1), 0.0)
        bound = (gx * gx + gy * gy) * _SLACK
        worst = carry[1]  # max over lanes of the last slot (+inf: a list not full)
        # An empty chunk has bound +inf: skipped even while some list is not full.
        go = inside & (bound <= worst) & (bound < INF)
        return lax.cond(go, lambda cr: self._per_lane(cs, True, cr, rules), lambda cr: cr, carry)

    def _nearest_first(self, carry, rules):
        """The other chunks, nearest box first, until the nearest unvisited one is beyond
        every lane (one packed (bound, chunk) key per chunk, one min per visit)."""
        ncp, nc = self.ncp, self.nc
        ci = lax.broadcasted_iota(jnp.int32, (ncp,), 0)
        cs = jnp.minimum(ci, nc - 1)
        # Box-to-box bounds of all chunks (+inf: empty, the block's own, padding).
        gx = jnp.maximum(jnp.maximum(self.bx0_ref[cs] - self.qx1, self.qx0 - self.bx1_ref[cs]), 0.0)
        gy = jnp.maximum(jnp.maximum(self.by0_ref[cs] - self.qy1, self.qy0 - self.by1_ref[cs]), 0.0)
        skip = (ci >= self.nc_in) | ((ci >= self.own_lo) & (ci <= self.own_hi))
        bounds = jnp.where(skip, INF, (gx * gx + gy * gy) * _SLACK)
        # One int32 key per chunk: the bound's bits with the low bits replaced by the
        # chunk index, so one min gives the nearest chunk and a lower bound of its bound
        # (truncation only lowers it: stopping when that exceeds the worst k-th distance
        # stays exact).
        low = ncp - 1
        done = jnp.int32(0x7FFFFFFF)
        vals = jnp.where(skip, done, (lax.bitcast_convert_type(bounds, jnp.int32) & ~low) | ci)

        def more(state):  # the nearest unvisited box may still matter
            vmin = state[2]
            lower = lax.bitcast_convert_type(vmin & ~low, jnp.float32)
            bound = jnp.where(vmin < packed.INF_KEY, lower, INF)
            return (bound < INF) & (bound <= state[0][1])

        def nearest(state):
            cr, v, vmin = state
            c = vmin & low
            cr = self._per_lane(c, False, cr, rules)
            v = jnp.where(ci == c, done, v)
            return cr, v, jnp.min(v)

        return lax.while_loop(more, nearest, (carry, vals, jnp.min(vals)))[0]

    def search(self, slots: int, mode: str):
        """Per lane the ``slots`` best candidates (lists as ``mode`` holds them)."""
        ins, last, init = self._rules(slots, mode)
        rules = (mode, ins, last)
        carry = (init, jnp.float32(INF))
        # The block's own chunks first (none when the block has no in-game query), then
        # the others nearest first: near neighbours come early and make the bounds tight.
        carry = lax.fori_loop(
            self.own_lo, self.own_hi + 1, lambda c, cr: self._consider_own(c, cr, rules), carry
        )
        return self._nearest_first(carry, rules)[0]


def _indices(lists, k: int):
    """``k`` slots of ``[BM]`` int32 (-1 = none) from exact lists ``(ld, lj)``."""
    ld, lj = lists
    return tuple(jnp.where(ld[s] < INF, lj[s], -1) for s in range(k))


def _sorted_knn_kernel(
    cb_ref, xq_ref, yq_ref, qc_ref, xc_ref, yc_ref, oc_ref, bx0_ref, bx1_ref, by0_ref,
    by1_ref, pq_ref, xo_ref, yo_ref, out_ref, *, k, m, bm, bc, unroll, nb, nc, ncp, key_bits,
):  # fmt: skip
    """One env, ``BM`` consecutive sorted query rows (one per lane); chunk-pruned search.

    ``cb [NB + 1]`` int32: ``cb[b]`` in-game agents before query block ``b`` (the
    block's in-game queries are candidates ``cb[b] .. cb[b+1]-1``; ``cb[NB]`` all of
    them). ``xq/yq [BM]``: the block's query positions; ``qc [BM]`` int32: each query's
    candidate position (``-1`` out of the game). ``xc/yc [MP]``: candidate positions,
    in-game agents in curve order then ``+inf``; ``oc [MP]`` int32: their original
    indices. ``bx0/bx1/by0/by1 [NC]``: each chunk's bounding box (``+inf/-inf`` when
    empty). ``pq [BM]`` int32: each query's original index (``M`` for padding);
    ``xo/yo [MP]``: positions by original index (the packed search's re-sort). Writes
    the queries' lists of original indices (``-1`` = none) at their original rows of the
    env's row-major ``out [M·k]``.

    ``key_bits`` (when not 0): packed keys with ``k + EXTRA_SLOTS`` slots, re-sorted
    exactly, and an ordered re-search where some lane stays ambiguous. Otherwise the
    strict insertion with ``k + 1`` slots and an ordered re-search where a lane has a tie.
    """
    refs = (cb_ref, xq_ref, yq_ref, qc_ref, xc_ref, yc_ref, oc_ref, bx0_ref, bx1_ref, by0_ref,
            by1_ref)  # fmt: skip
    blk = _Block(refs, m=m, bm=bm, bc=bc, unroll=unroll, nb=nb, nc=nc, ncp=ncp, key_bits=key_bits)

    def exact():
        return _indices(blk.search(k, "lex"), k)

    if key_bits:
        keys = blk.search(k + packed.EXTRA_SLOTS, "packed")

        def dist(j):  # [BM] exact distances to the agents j [BM] (original indices)
            dx = blk.xq - xo_ref[j]
            dy = blk.yq - yo_ref[j]
            return dx * dx + dy * dy

        resolved, amb = packed.packed_lists(keys, k, key_bits, dist)
        lists = lax.cond(any_lane(amb & blk.real), exact, lambda: resolved)
    else:
        ld, lj = blk.search(k + 1, "strict")
        tie = jnp.zeros((bm,), jnp.bool_)
        for s in range(k):
            tie = tie | ((ld[s] == ld[s + 1]) & (ld[s] < INF))
        any_tie = jnp.max(jnp.where(tie & blk.real, 1, 0)) > 0
        lists = lax.cond(any_tie, exact, lambda: _indices((ld[:k], lj[:k]), k))
    packed.store_lists(out_ref, pq_ref[...], lists, k, m)


def sorted_lists(
    x: jax.Array,
    y: jax.Array,
    in_game: jax.Array,
    k: int,
    *,
    interpret: bool | None = None,
    unroll: int | None = None,
    packed_keys: bool | None = None,
) -> jax.Array:
    """The ``k`` nearest in-game agents of every agent by the sorted, chunk-pruned search.

    Args:
      x, y: ``[N, M]`` float32 positions (finite); in_game: ``[N, M]`` bool (only agents
        in the game are candidates); k: neighbours per agent (static), ``k >= 1``.
      interpret: Pallas interpret mode; ``None``: when the default backend is the CPU.
      unroll: candidates per loop step ``U`` (power of two, at most the chunk; default 8
        compiled, 1 in interpret mode). packed_keys: ``None``, packed keys when the
        indices fit in `packed.MAX_KEY_BITS` bits. Both give the same lists; they exist
        so that interpret mode can run either compiled path.

    Returns:
      ``[N, M, k]`` int32, as `brute.brute_lists`: the same lists bit for bit (given the
      same float32 ``dx*dx + dy*dy``).
    """
    k, x, y, in_game = packed.check_inputs(x, y, in_game, k)
    n, m = x.shape
    interpret = resolve_interpret(interpret)
    bm = min(_BLOCK_ROWS, next_pow2(m))
    bc = min(_CHUNK, next_pow2(m))
    u = check_block("unroll", (1 if interpret else min(_UNROLL, bc)) if unroll is None else unroll)
    if u > bc:
        raise ValueError(f"unroll ({u}) must be at most the chunk size ({bc})")
    mp = round_up(m, max(bm, bc))
    nb, nc = mp // bm, mp // bc
    if next_pow2(mp) <= PREP_MAX_AGENTS:
        inputs, extra = prep_pallas(x, y, in_game, bm, bc, interpret)
    else:
        perm, inputs = sorted_inputs(x, y, in_game, bm, bc)
        extra = (
            jnp.pad(perm, ((0, 0), (0, mp - m)), constant_values=m),
            jnp.pad(x, ((0, 0), (0, mp - m))),
            jnp.pad(y, ((0, 0), (0, mp - m))),
        )
    kernel = functools.partial(
        _sorted_knn_kernel, k=k, m=m, bm=bm, bc=bc, unroll=u, nb=nb, nc=nc,
        ncp=next_pow2(nc), key_bits=packed.key_bits(m, packed_keys),
    )  # fmt: skip
    query_spec = pl.BlockSpec((None, bm), lambda e, b: (e, b))
    cand_spec = pl.BlockSpec((None, mp), lambda e, b: (e, 0))
    box_spec = pl.BlockSpec((None, nc), lambda e, b: (e, 0))
    outs = pl.pallas_call(
        kernel,
        out_shape=(jax.ShapeDtypeStruct((n, m * k), jnp.int32),),
        grid=(n, nb),
        in_specs=[pl.BlockSpec((None, nb + 1), lambda e, b: (e, 0))]
        + [query_spec] * 3
        + [cand_spec] * 3
        + [box_spec] * 4
        + [query_spec]
        + [cand_spec] * 2,
        # The kernel writes each list at its agent's row: no un-sorting pass afterwards.
        out_specs=(pl.BlockSpec((None, m * k), lambda e, b: (e, 0)),),
        compiler_params=compiler_params(bm),
        # Typical: ~15% of the pairs at ~8 + 5(k+1) simple ops.
        cost_estimate=pl.CostEstimate(
            flops=int(n * mp * mp * (13 + 5 * k) // 6),
            transcendentals=0,
            bytes_accessed=int(4 * n * (3 * mp + 3 * mp * nb // 6 + k * mp)),
        ),
        interpret=interpret,
        name="tag_nearest_k_sorted",
    )(*inputs, *extra)
    return outs[0].reshape(n, m, k)  # agent order
