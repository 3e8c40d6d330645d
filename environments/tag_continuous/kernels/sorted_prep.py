"""The sorted search's preparation: the agents along a Hilbert curve, in chunks with boxes.

Per env, the agents are ordered by the Hilbert index of their positions quantised to a
``2**B × 2**B`` grid over the env's bounding square (so the order adapts to clustered
agents), ties by agent id. Consecutive agents in that order form compact patches of the
plane, which is what lets the search (`sorted`) skip most (query block, candidate chunk)
pairs. Any permutation gives the same search results: the order only decides the speed.

From the order the preparation builds the search's inputs: the queries (every agent,
along the curve), the candidates (the in-game agents in the same order, a stable
partition, then ``+inf`` padding), each candidate's original index, the in-game count
before each query block, and each chunk of ``BC`` candidates' bounding box.

Two implementations, chosen by size (same values given the same order):

* `prep_pallas` (up to `PREP_MAX_AGENTS` padded agents): one Pallas program per env holds
  its agents in one ``[P = next_pow2(MP)]`` vector. It computes packed keys (the Hilbert
  index of a 5-bit-per-axis grid above the agent id, `sort_bits`) and sorts them itself
  by an LSD radix sort of one-bit stable partitions (`radix_passes`: a cumsum gives each
  lane its place, a scatter and a barrier move it), partitions the candidates with
  another cumsum, scatters them and reads them back for the boxes. On 32 × 32 cells (about
  one agent per cell at ``M = 1000``) the pruning is as good as on finer grids, and ten
  passes are few.
* `sorted_inputs` (above): `spatial_order` (one XLA sort of packed keys) and XLA
  gathers, a cumsum, scatters and reductions.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

from environments.tag_continuous.kernels.triton import (
    INF,
    div_rn,
    next_pow2,
    round_up,
    spill_index,
)

__all__ = [
    "PREP_MAX_AGENTS",
    "hilbert_index",
    "prep_pallas",
    "radix_passes",
    "sort_bits",
    "sorted_inputs",
    "spatial_order",
]

#: The Pallas preparation holds an env's padded agents in one ``[next_pow2(MP)]`` vector,
#: up to this many; `sorted_inputs` (XLA) above.
PREP_MAX_AGENTS = 4096
#: Bits per axis of the quantised positions whose Hilbert index orders the agents.
_HILBERT_BITS = 15
#: Below this many bits per axis the packed curve key is too coarse: `spatial_order`
#: argsorts the Hilbert index and the ids as two operands.
_MIN_PACKED_AXIS_BITS = 5
#: Bits per axis of the Pallas preparation's Hilbert grid (fixed: 10 radix passes).
_PREP_SORT_BITS = 5


def hilbert_index(qx: jax.Array, qy: jax.Array, bits: int) -> jax.Array:
    """Hilbert-curve index of integer cell coordinates ``qx, qy`` in ``[0, 2**bits)``.

    Elementwise (any shape), int32, in ``[0, 4**bits)``: consecutive indices are
    neighbouring cells, so a run of consecutive agents is a compact patch of the plane.
    """
    n = 1 << bits
    d = jnp.zeros_like(qx)
    s = n >> 1
    while s > 0:  # static: `bits` steps
        rx = (qx & s) > 0
        ry = (qy & s) > 0
        d = d + s * s * ((3 * rx.astype(jnp.int32)) ^ ry.astype(jnp.int32))
        flip = ~ry & rx
        qx = jnp.where(flip, n - 1 - qx, qx)
        qy = jnp.where(flip, n - 1 - qy, qy)
        qx, qy = jnp.where(ry, qx, qy), jnp.where(ry, qy, qx)
        s >>= 1
    return d


def _curve_key_bits(m: int) -> tuple[int, int]:
    """``(id bits, Hilbert bits per axis)`` of the packed int32 curve keys for ``M``
    agents: the index in the low bits, at most `_HILBERT_BITS` per axis above it."""
    id_bits = max(1, (m - 1).bit_length())
    return id_bits, min(_HILBERT_BITS, (31 - id_bits) // 2)


def sort_bits(m: int) -> tuple[int, int]:
    """``(id bits, Hilbert bits per axis)`` of the Pallas preparation's keys: the curve
    keys' bits with the Hilbert bits capped at 5."""
    id_bits, bits = _curve_key_bits(m)
    return id_bits, max(1, min(bits, _PREP_SORT_BITS))


def spatial_order(x: jax.Array, y: jax.Array) -> jax.Array:
    """Per env, a permutation of the agents along a Hilbert curve (XLA).

    Args:
      x, y: ``[N, M]`` float32 positions (finite).

    Returns:
      ``perm [N, M]`` int32: ``perm[n, p]`` is the agent at sorted position ``p``, by the
      Hilbert index of the positions quantised to ``2**B`` cells per axis over the env's
      bounding square; equal keys keep index order. One int32 ``index · 2**b + agent``
      per agent is sorted (``b`` bits for the agent ids, ``B = min(15, (31 − b) // 2)``),
      or, when that leaves ``B < 5``, a stable argsort of 15-bit-per-axis indices.
    """
    m = x.shape[1]
    id_bits, bits = _curve_key_bits(m)
    is_packed = bits >= _MIN_PACKED_AXIS_BITS
    if not is_packed:
        bits = _HILBERT_BITS
    n_cells = 1 << bits
    x0 = jnp.min(x, axis=1, keepdims=True)  # [N, 1]
    y0 = jnp.min(y, axis=1, keepdims=True)
    ext = jnp.maximum(
        jnp.maximum(jnp.max(x, axis=1, keepdims=True) - x0, jnp.max(y, axis=1, keepdims=True) - y0),
        1e-30,
    )  # square cells

    def quantise(v, lo):
        q = jnp.floor((v - lo) * ((n_cells - 1) / ext))
        return jnp.clip(q, 0, n_cells - 1).astype(jnp.int32)

    key = hilbert_index(quantise(x, x0), quantise(y, y0), bits)  # < 2**(2 bits)
    if is_packed:  # < 2**31: one operand to sort, ties by agent id as the stable argsort
        ids = jnp.arange(m, dtype=jnp.int32)[None, :]
        return jnp.sort((key << id_bits) | ids, axis=1) & jnp.int32((1 << id_bits) - 1)
    return jnp.argsort(key, axis=1, stable=True).astype(jnp.int32)


def sorted_inputs(
    x: jax.Array,
    y: jax.Array,
    in_game: jax.Array,
    bm: int,
    bc: int,
    perm: jax.Array | None = None,
) -> tuple[jax.Array, tuple[jax.Array, ...]]:
    """The sorted search's preparation in XLA: curve order, candidates, chunk boxes.

    Args:
      x, y: ``[N, M]`` float32 positions; in_game: ``[N, M]`` bool.
      bm, bc: query block ``BM`` and chunk ``BC`` sizes (powers of two).
      perm: the query order ``[N, M]`` (default `spatial_order`'s).

    Returns:
      ``perm [N, M]`` int32 (the query order) and the kernel's inputs ``(cb [N, NB+1],
      xq, yq [N, MP], qc [N, MP], xc, yc [N, MP], oc [N, MP], bx0, bx1, by0, by1 [N,
      NC])`` with ``MP = M`` rounded up to ``max(BM, BC)``, ``NB = MP/BM``, ``NC =
      MP/BC`` (see `sorted._sorted_knn_kernel`).
    """
    n, m = x.shape
    mp = round_up(m, max(bm, bc))
    nb, nc = mp // bm, mp // bc
    rows = jnp.arange(n)[:, None]
    p = jnp.arange(m, dtype=jnp.int32)[None, :]
    # Queries: every agent, along the curve.
    perm = spatial_order(x, y) if perm is None else perm  # [N, M]
    xs = jnp.take_along_axis(x, perm, axis=1)
    ys = jnp.take_along_axis(y, perm, axis=1)
    gs = jnp.take_along_axis(in_game, perm, axis=1)
    # Candidates: the in-game agents in the same order (a stable partition), then the
    # others (at +inf). cpos [N, M]: the candidate position of sorted query p.
    before = jnp.cumsum(gs, axis=1, dtype=jnp.int32) - gs  # in-game agents before p
    num_in = before[:, -1:] + gs[:, -1:]  # [N, 1]
    cpos = jnp.where(gs, before, num_in + p - before)
    pad = ((0, 0), (0, mp - m))
    # Query padding repeats the last agent (keeps the last block's box unchanged).
    xq = jnp.pad(xs, pad, mode="edge")
    yq = jnp.pad(ys, pad, mode="edge")
    qc = jnp.pad(jnp.where(gs, cpos, -1), pad, constant_values=-1)
    cb = jnp.concatenate([before, num_in], axis=1)[:, ::bm]  # block starts
    cb = jnp.concatenate([cb, jnp.broadcast_to(num_in, (n, nb + 1 - cb.shape[1]))], axis=1)
    xc = jnp.full((n, mp), INF, jnp.float32).at[rows, cpos].set(jnp.where(gs, xs, INF))
    yc = jnp.full((n, mp), INF, jnp.float32).at[rows, cpos].set(jnp.where(gs, ys, INF))
    oc = jnp.full((n, mp), m, jnp.int32).at[rows, cpos].set(perm)
    xcb = xc.reshape(n, nc, bc)
    ycb = yc.reshape(n, nc, bc)
    real = jnp.isfinite(xcb)
    bx0 = jnp.min(xcb, axis=2)  # [N, NC]; +inf when empty
    bx1 = jnp.max(jnp.where(real, xcb, -INF), axis=2)  # -inf when empty
    by0 = jnp.min(ycb, axis=2)
    by1 = jnp.max(jnp.where(real, ycb, -INF), axis=2)
    return perm, (cb, xq, yq, qc, xc, yc, oc, bx0, bx1, by0, by1)


def _radix_order(x_ref, y_ref, bufs, *, m, p2, interpret):
    """In a preparation program: the curve order of its env's ``M`` agents, written to
    ``bufs[1]`` (``[P]`` int32 packed keys, agent id in the low bits), which it returns.

    The keys are the Hilbert index of the quantised position over the env's bounding
    square (`sort_bits`), then the agent id; `radix_passes` sorts them by ``(Hilbert
    index, id)``. Lanes past ``M`` carry the largest key, so they stay last.
    """
    id_bits, bits = sort_bits(m)
    p = lax.broadcasted_iota(jnp.int32, (p2,), 0)
    real = p < m
    own = jnp.minimum(p, m - 1)
    x, y = x_ref[own], y_ref[own]
    x0 = jnp.min(jnp.where(real, x, INF))
    y0 = jnp.min(jnp.where(real, y, INF))
    wx = jnp.max(jnp.where(real, x, -INF)) - x0
    wy = jnp.max(jnp.where(real, y, -INF)) - y0
    ext = jnp.maximum(jnp.maximum(wx, wy), jnp.float32(1e-30))  # square cells
    n_cells = 1 << bits
    if interpret:
        scale = jnp.float32(n_cells - 1) / ext
    else:  # IEEE division, as XLA's
        scale = div_rn(jnp.full((1,), n_cells - 1, jnp.float32), jnp.reshape(ext, (1,)))[0]

    def quantise(v, lo):
        q = jnp.floor((v - lo) * scale)
        return jnp.clip(q, 0, n_cells - 1).astype(jnp.int32)

    key = hilbert_index(quantise(x, x0), quantise(y, y0), bits)
    top = ((1 << (2 * bits)) - 1) << id_bits | ((1 << id_bits) - 1)
    keys = jnp.where(real, (key << id_bits) | p, top)
    radix_passes(keys, bufs, id_bits, 2 * bits, interpret=interpret)
    return bufs[1]


def radix_passes(keys: jax.Array, bufs, lo: int, nbits: int, *, interpret: bool) -> jax.Array:
    """Sorts the ``[P]`` int32 keys ``keys`` (one per lane, non-negative) stably by their
    bits ``lo .. lo + nbits - 1``: an LSD radix sort, one bit per pass (a cumsum gives
    each lane its place in the stable partition, a scatter into the other of the two
    ``[P]`` int32 ``bufs`` and a barrier, then every lane reads its new value). ``nbits``
    must be even (the result lands in ``bufs[1]``); returns it as ``[P]``."""
    if nbits % 2:
        raise ValueError(f"radix_passes needs an even number of bits, got {nbits}")
    p = lax.broadcasted_iota(jnp.int32, keys.shape, 0)
    for t, d in enumerate(range(lo, lo + nbits)):
        one = (keys >> d) & 1
        zero = 1 - one
        before = jnp.cumsum(zero) - zero  # zeros before lane p
        pos = jnp.where(one == 0, before, jnp.sum(zero) + p - before)
        buf = bufs[t % 2]
        pl_triton.store(buf.at[pos], keys)
        if not interpret:
            pl_triton.debug_barrier()
        keys = buf[p]
    return keys


def _prep_kernel(x_ref, y_ref, g_ref, *outs, m, mp, bm, bc, interpret):
    """One env's `sorted_inputs` (the same values for its own order) and the search's
    ``pq, xo, yo``.

    ``x, y [M]`` float32, ``g [M]`` int32 (in the game: 1). Writes ``cb [NB+1]``, ``xq,
    yq, qc, xc, yc, oc, pq, xo, yo [MP]`` and the chunk boxes ``[NC]`` (see
    `sorted._sorted_knn_kernel`); the last two outputs are the radix sort's ``[P]``
    buffers. Works on ``P = next_pow2(MP)`` lanes: sorted position ``p`` gathers its
    agent, an exclusive cumsum of the in-game flags gives each in-game agent's candidate
    position (the stable partition), the candidates are scattered there, and after a
    barrier the program reads them back in chunks of ``BC`` for the boxes.
    """
    p2 = next_pow2(mp)
    bufs = outs[-2:]
    last = _radix_order(x_ref, y_ref, bufs, m=m, p2=p2, interpret=interpret)
    id_mask = (1 << sort_bits(m)[0]) - 1
    (cb_ref, xq_ref, yq_ref, qc_ref, xc_ref, yc_ref, oc_ref, bx0_ref, bx1_ref, by0_ref,
     by1_ref, pq_ref, xo_ref, yo_ref) = outs[:14]  # fmt: skip
    p = lax.broadcasted_iota(jnp.int32, (p2,), 0)
    inside = p < mp
    real = p < m
    own = jnp.minimum(p, m - 1)
    agent = last[own] & id_mask  # padding repeats the last sorted agent
    xs = x_ref[agent]
    ys = y_ref[agent]
    gs = real & (g_ref[agent] != 0)
    gi = gs.astype(jnp.int32)
    before = jnp.cumsum(gi) - gi  # in-game agents before sorted position p
    num_in = jnp.sum(gi)
    cpos = jnp.where(gs, before, num_in + p - before)

    # Masked lanes (p >= MP) keep their own index past the end (`spill_index`).
    def put(ref, val, at=None):
        idx = p if at is None else spill_index(inside, at, p)
        pl_triton.store(ref.at[idx], val, mask=inside)

    put(xq_ref, xs)
    put(yq_ref, ys)
    put(qc_ref, jnp.where(gs, cpos, -1))
    put(pq_ref, jnp.where(real, agent, m))
    put(xo_ref, jnp.where(real, x_ref[own], jnp.float32(0.0)))
    put(yo_ref, jnp.where(real, y_ref[own], jnp.float32(0.0)))
    dst = jnp.where(real, cpos, p)  # a permutation of 0 .. MP-1
    put(xc_ref, jnp.where(gs, xs, INF), dst)
    put(yc_ref, jnp.where(gs, ys, INF), dst)
    put(oc_ref, jnp.where(real, agent, m), dst)
    # Block starts: in-game agents before each block of BM sorted positions.
    nb, nbp = mp // bm, p2 // bm
    counts = jnp.sum(gi.reshape(nbp, bm), axis=1)  # [NBP]
    ends = jnp.cumsum(counts)  # cb[b + 1]
    b = lax.broadcasted_iota(jnp.int32, (nbp,), 0)
    pl_triton.store(cb_ref.at[b + 1], ends, mask=b < nb)
    pl_triton.store(cb_ref.at[b], jnp.zeros((nbp,), jnp.int32), mask=b == 0)
    # Chunk boxes, from the candidates as written (+inf / -inf when a chunk is empty).
    if not interpret:
        pl_triton.debug_barrier()  # the scatters above, visible to every lane
    nc, ncp = mp // bc, p2 // bc
    c = lax.broadcasted_iota(jnp.int32, (ncp,), 0)
    for src, lo_ref, hi_ref in ((xc_ref, bx0_ref, bx1_ref), (yc_ref, by0_ref, by1_ref)):
        v = pl_triton.load(src.at[jnp.minimum(p, mp - 1)], mask=inside, other=INF)
        v = v.reshape(ncp, bc)
        lo = jnp.min(v, axis=1)
        hi = jnp.max(jnp.where(v < INF, v, -INF), axis=1)
        pl_triton.store(lo_ref.at[c], lo, mask=c < nc)
        pl_triton.store(hi_ref.at[c], hi, mask=c < nc)


def prep_pallas(
    x: jax.Array, y: jax.Array, in_game: jax.Array, bm: int, bc: int, interpret: bool
) -> tuple[tuple[jax.Array, ...], tuple[jax.Array, ...]]:
    """`sorted_inputs`' kernel inputs (for the preparation's own curve order) by one
    Pallas program per env, plus ``(pq, xo, yo) [N, MP]``: each sorted query's agent
    (``M`` for padding) and the positions by agent id (the search's last three inputs).
    Needs ``next_pow2(MP) <= PREP_MAX_AGENTS``."""
    n, m = x.shape
    mp = round_up(m, max(bm, bc))
    nb, nc = mp // bm, mp // bc
    row = lambda length: pl.BlockSpec((None, length), lambda e: (e, 0))
    f32 = lambda length: jax.ShapeDtypeStruct((n, length), jnp.float32)
    i32 = lambda length: jax.ShapeDtypeStruct((n, length), jnp.int32)
    p2 = next_pow2(mp)
    shapes = (
        i32(nb + 1), f32(mp), f32(mp), i32(mp), f32(mp), f32(mp), i32(mp),
        f32(nc), f32(nc), f32(nc), f32(nc), i32(mp), f32(mp), f32(mp),
        i32(p2), i32(p2),  # the radix sort's two buffers
    )  # fmt: skip
    kernel = functools.partial(_prep_kernel, m=m, mp=mp, bm=bm, bc=bc, interpret=interpret)
    outs = pl.pallas_call(
        kernel,
        out_shape=shapes,
        grid=(n,),
        in_specs=[row(m)] * 3,
        out_specs=tuple(row(sh.shape[1]) for sh in shapes),
        compiler_params=pl_triton.CompilerParams(num_warps=max(1, min(8, p2 // 256))),
        interpret=interpret,
        name="tag_nearest_k_prep",
    )(x, y, in_game.astype(jnp.int32))
    return outs[:11], outs[11:14]
