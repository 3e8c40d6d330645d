"""TagContinuous's k-nearest (partial) observation, built from the neighbour lists.

Given the neighbour search's ``idx, valid [M, k]`` (`neighbors.nearest_k` or
`kernels.nearest_k`, brute or sorted: any ``idx`` in ``[0, M)``), agent ``i`` observes,
feature-major (for each of the 7 features ``f``, its ``k`` neighbour slots ``s``)::

    out[i, f·k + s] = (feats[f, idx[i, s]] − feats[f, i]·rel_f) / scale[f] · mask[i, s]
    out[i, 7k]      = time · g[i]

with ``rel_f = 1`` for the five relative features ``f < 5`` (0 for type and in-game),
``g = in_game`` as 1.0/0.0 and ``mask = valid & in_game[i]`` (0 or 1): an agent out of
the game sees zeros, and so does an empty slot (``valid = False``; the search pads those
with ``idx = i``).

Dimension letters: ``M`` agents, ``k`` neighbours, ``n`` rows asked for (agents
observing), ``D = 7k+1`` values per observation, ``B`` output elements per Pallas program.

Two forms, same values:

* `knn_obs_xla`: the env's original formula (the reference): a gather ``feats[:, idx]``
  ``[7, n, k]``, a transpose, the arithmetic, a reshape and the concatenation of the
  time column. On an H200 (1000 envs × (10+100) agents, ``k = 10``) XLA spends about
  50 µs per step on it (the gather fused into the concatenation alone 35 µs for the
  runners' 28 MB, against ~7 µs to write them).
* `knn_obs_pallas`: a Pallas (Triton) kernel writing the ``[n, D]`` rows once, in their
  final layout. The output is seen as a flat ``[n·D]`` vector cut into blocks of ``B``
  consecutive elements (no padding lanes, coalesced stores, the tail masked); element
  ``e`` is row ``r = e // D``, column ``c = e % D``, feature ``f = c // k``, slot ``s =
  c % k``. Each element loads its slot's neighbour code (`_encode`: ``idx`` and
  ``valid`` in one int32, or the searches' own lists with ``−1`` in empty slots), then
  gathers ``feats[f, j]``, ``feats[f, i]``, ``g[i]`` and the scale from an agent-major
  copy of the features (`_agent_major`: agent ``j``'s 7 features and ``g[j]`` in one
  32-byte sector, so the lanes of a row that read the same neighbour's different
  features share a memory transaction; feature-major, as the env stacks them, each
  lane's gather touched its own sector). The time column is written by a second pass
  over the block's rows after a barrier (`TIME_PASS`), and where the caller guarantees
  that observers out of the game have empty lists (``lists_in_game``) an element needs
  neither the in-game flag nor the padding id. Interpret mode off GPU. All its loads are
  pointer-style gathers from 1-D refs with computed int32 index arrays and the store is
  a masked block store, the constructs of `environments.tag_continuous.full_obs`'s
  kernel. That is the ``"flat"`` layout; the default (`LAYOUT` ``"cols"``) computes
  the same elements as ``[R, W]`` tiles of ``R`` whole rows and ``W`` columns
  (`_column_pieces`: 64 and 8 at ``k = 10``), so the per-column quantities (feature,
  slot, scale, relative-feature select) are computed once per thread, not per element,
  the rows' once per row, and the time column is a select in the last piece; each
  element loads its code, the neighbour's and the observer's table value, and stores.

Division and bit-exactness: as documented in `environments.tag_continuous.full_obs`, XLA
compiles the reference's division by the broadcast scale into a multiplication by its
reciprocal on the CPU, and wherever the scale is a compile-time constant; otherwise it
divides. The kernel is told which (``reciprocal``, see
`full_obs.reference_uses_reciprocal`): it multiplies by ``1/scale`` (computed by XLA
outside the kernel), or divides with ``div.rn.f32`` on GPU (Triton's own ``/`` is
approximate). The other operations are exact or single roundings in the same order
(``feats·rel_f`` and ``·mask`` multiply by 0 or 1; with `LEAN_INDEX` the kernel selects
``feats`` or ``+0`` instead of ``feats·rel_f``, the same value when the non-relative
features are finite and non-negative, as Tag's type and in-game flags are), so the
forms agree bit for bit on the CPU (``−0.0`` included), which the tests check in
interpret mode; `experiments.benchmarks.knn_obs_probe` checks them on the GPU. One
exception: with one row and ``k = 1`` the reference's scale ``[1, 7, 1]`` needs no
broadcast, and XLA on the CPU then divides unless a `jax.vmap` with shared params adds
one; so the env builds that case with the XLA form (`TagContinuous._observe_knn`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

from environments.tag_continuous.full_obs import (
    NUM_FEATURES,
    NUM_RELATIVE,
    _check_block,
    _next_pow2,
    _own,
    _row_ids,
    _scale,
    reference_uses_reciprocal,
)

__all__ = [
    "COLS_ROWS",
    "DEFAULT_BLOCK",
    "EVICTIONS",
    "IMPLS",
    "LAYOUT",
    "LAYOUTS",
    "LEAN_INDEX",
    "SORTED_ROWS",
    "STORE_EVICTION",
    "TABLE_EVICTION",
    "TIME_PASS",
    "USE_IN_GAME_LISTS",
    "knn_obs",
    "knn_obs_pallas",
    "knn_obs_xla",
    "obs_size",
    "with_valid",
]

#: The implementations `knn_obs` dispatches to.
IMPLS = ("xla", "pallas")
#: Default output elements per Pallas program (capped at the next power of two of ``n·D``).
DEFAULT_BLOCK = 1024
#: Default Triton warps of the Pallas writer (``None``: ``max(1, min(4, B // 256))``).
DEFAULT_WARPS = None
#: Store each program's block through a start Triton cannot prove aligned (a runtime
#: zero added), so it issues one 4-byte store per element instead of vectors of 4: the
#: lanes of one instruction then hold consecutive elements (neighbouring slots of a row)
#: rather than every fourth. Same values.
OPAQUE_STORE = False
#: Fewer instructions per element, same values: unsigned divisions for the row and the
#: feature (all non-negative), one unsigned clamp of the neighbour id instead of two,
#: and a select instead of ``own · rel`` (``rel`` is 0 or 1, and ``own · 0 = +0`` when
#: the non-relative features are finite and non-negative: Tag's type and in-game flags).
#: H200, 2000 × (5+995): the runners' writer 43 → 32 registers per thread, 62.5% → 100%
#: occupancy, 380.6 → 355.9 µs per step; unchanged at 1000 × (10+100) (2026-11-24 run 45).
LEAN_INDEX = True
#: The env passes ``lists_in_game`` (one load fewer per element) when its search leaves
#: the lists of agents out of the game empty (`kernels.lists_in_game_only`). Same values.
USE_IN_GAME_LISTS = True
#: The time column by a second pass over each block's rows after a barrier, instead of
#: a compare, a product and a select per element (`_time_pass`); with ``lists_in_game``
#: also the lean block (`_in_game_block`: no padding id, no in-game flag). Same values.
TIME_PASS = True
#: The writer's layout: ``"flat"`` (`_knn_obs_kernel`: each program a block of ``B``
#: consecutive elements of the flat ``[n·D]`` output, every element's row, feature and
#: slot from two divisions, four loads per element) or ``"cols"`` (`_knn_obs_cols_kernel`:
#: each program ``R`` whole rows as ``[R, W]`` tiles of column pieces ``W`` a power of two,
#: ``7k+1 = 64 + 8 − 1`` at ``k = 10``; a thread's columns are the same in all its rows,
#: so the feature, slot, scale and the relative-feature select are computed once per
#: column, not per element, and the scale is not loaded per element). Same values.
#: H200, 2000 × (5+995), the runners' writer: 301.1 µs flat, 288.5 µs cols at ``R = 16``
#: (4 warps, 40 registers), **275.8 µs at ``R = 8``** (2 warps, 32 registers), 305.6 µs
#: at ``R = 4`` (one warp); the step −2.3% (2026-11-25 runs 69–70).
LAYOUTS = ("flat", "cols")
LAYOUT = "cols"
#: Rows per program of the ``"cols"`` layout when ``block_size`` is not given (a power
#: of two; ``block_size`` gives ``next_pow2(block_size // D)``). Triton warps default to
#: ``R · W / 256`` (``W`` the widest piece), between 1 and 4.
COLS_ROWS = 8
#: L2 eviction hints of the ``"cols"`` writer (Triton's ``eviction_policy``: ``None``,
#: ``"evict_first"`` or ``"evict_last"``): for its observation stores (written once,
#: never read back by the step) and for its feature-table gathers (read ``7k`` times per
#: row). Same values. H200, 2000 × (5+995), the runners' writer with ``"evict_last"``
#: gathers: 275.5 → 272.2 and 276.0 → 272.4 µs, the step −0.1% and −0.3% (2026-11-25
#: runs 73–74); ``"evict_first"`` stores: 275.5 → 278.9 µs.
STORE_EVICTION: str | None = None
TABLE_EVICTION: str | None = "evict_last"
EVICTIONS = (None, "evict_first", "evict_last")
#: The env passes the grid search's spatial order of the agents (`knn_obs_pallas`'s
#: ``row_order``) to the column-tile writer of a group of at least half the agents, so a
#: program's ``R`` rows are neighbours in space and share most of their neighbours'
#: table rows (fewer L2 sector reads: the writer ran at 85% of the L2's throughput and
#: 83% of the L1 data pipe, ncu 2026-11-24). Same values. Not yet measured, so off.
SORTED_ROWS = False
#: Probe-only ablation of the flat kernel (`experiments.benchmarks.env_ab_probe`'s
#: ``wablate``, with ``wlayout=flat``; the column-tile layout refuses it), giving wrong
#: values, to time parts of it: ``"self"`` (no neighbour codes or neighbour gathers:
#: every slot reads the observer's own row) or ``"const"`` (no loads but the time: the
#: stores alone).
_ABLATE = ""

_RELATIVE = np.array([1] * NUM_RELATIVE + [0] * (NUM_FEATURES - NUM_RELATIVE), np.float32)


def obs_size(k: int) -> int:
    """``D = 7k+1`` values per observation of ``k`` neighbours."""
    return NUM_FEATURES * int(k) + 1


def _check(
    feats: jax.Array,
    idx: jax.Array,
    valid: jax.Array | None,
    scale: jax.Array,
    in_game: jax.Array,
) -> tuple[int, int]:
    """Validates the shapes (``valid=None``: lists with ``−1`` in empty slots); returns
    ``(M, k)``."""
    if feats.ndim != 2 or feats.shape[0] != NUM_FEATURES or feats.shape[1] < 1:
        raise ValueError(f"feats must be [{NUM_FEATURES}, M] with M >= 1, got {feats.shape}")
    m = feats.shape[1]
    if idx.ndim != 2 or idx.shape[0] != m or idx.shape[1] < 1:
        raise ValueError(f"idx must be [M, k] = [{m}, k] with k >= 1, got {idx.shape}")
    if valid is None:
        pass
    elif valid.shape != idx.shape:
        raise ValueError(f"valid must have idx's shape {idx.shape}, got {valid.shape}")
    elif valid.dtype != jnp.bool_:
        raise ValueError(f"valid must be bool, got {valid.dtype}")
    if not jnp.issubdtype(idx.dtype, jnp.integer):
        raise ValueError(f"idx must be integer, got {idx.dtype}")
    if scale.shape != (NUM_FEATURES,):
        raise ValueError(f"scale must be [{NUM_FEATURES}], got {scale.shape}")
    if in_game.shape != (m,) or in_game.dtype != jnp.bool_:
        raise ValueError(f"in_game must be bool [M] = [{m}], got {in_game.dtype}{in_game.shape}")
    return m, idx.shape[1]


def with_valid(lists: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Neighbour lists ``[M, k]`` with ``−1`` in empty slots -> ``(idx, valid)`` with
    ``idx = i`` in row ``i``'s empty slots (`neighbors.nearest_k`'s convention)."""
    valid = lists >= 0
    own = jnp.arange(lists.shape[0], dtype=jnp.int32)[:, None]
    return jnp.where(valid, lists.astype(jnp.int32), own), valid


# ------------------------------------------------------------------------------------ xla
def knn_obs_xla(
    feats: jax.Array,
    idx: jax.Array,
    valid: jax.Array | None,
    rows: Sequence[int],
    scale: jax.Array,
    in_game: jax.Array,
    time: jax.Array,
) -> jax.Array:
    """The original form (the reference): ``[n, 7k+1]`` float32.

    Args:
      feats: ``[7, M]`` float32: x, y, speed, acceleration, direction, type, in-game.
      idx: ``[M, k]`` int32 neighbour ids in ``[0, M)`` (the search's, all agents).
      valid: ``[M, k]`` bool, which slots hold a neighbour; ``None``: ``idx`` holds
        ``−1`` in its empty slots (`kernels.nearest_k_lists`; read as padded with ``i``).
      rows: static agent ids observing (``n`` of them), e.g. ``range(lo, hi)``.
      scale: ``[7]`` float32 divisors of the features (1 for type and in-game).
      in_game: ``[M]`` bool.
      time: ``[]`` float32, ``t/E``.
    """
    m, k = _check(feats, idx, valid, scale, in_game)
    if valid is None:
        idx, valid = with_valid(idx)
    ids, lo = _row_ids(rows, m)
    n = ids.size
    relative = _RELATIVE[None, :, None]  # [1, 7, 1]
    own = _own(feats, ids, lo).T[:, :, None]  # [n, 7, 1]
    g_own = _own(in_game.astype(jnp.float32), ids, lo)[:, None, None]  # [n, 1, 1]
    idx_r = idx[lo : lo + n] if lo is not None else idx[ids]  # [n, k]
    valid_r = valid[lo : lo + n] if lo is not None else valid[ids]
    mask = (valid_r & _own(in_game, ids, lo)[:, None]).astype(jnp.float32)[:, None, :]
    other = jnp.transpose(feats[:, idx_r], (1, 0, 2))  # [n, 7, k]
    out = (other - own * relative) / scale[None, :, None] * mask  # [n, 7, k]
    return jnp.concatenate([out.reshape(n, -1), (time * g_own[:, 0])], axis=1)


# --------------------------------------------------------------------------------- pallas
#: Floats per agent in the kernel's agent-major feature table: the 7 features, in-game.
_ROW = NUM_FEATURES + 1


def _encode(idx: jax.Array, valid: jax.Array | None) -> jax.Array:
    """``idx`` where ``valid``, else ``−1 − idx`` (negative): both in one int32 ``[M·k]``;
    ``valid=None``: ``idx`` as it is (its empty slots hold ``−1``)."""
    idx = idx.astype(jnp.int32)
    if valid is not None:
        idx = jnp.where(valid, idx, -1 - idx)
    return idx.reshape(-1)


def _agent_major(feats: jax.Array, in_game: jax.Array) -> jax.Array:
    """``[M·8]`` float32: agent ``j``'s 7 features then ``in_game`` as 1.0/0.0 at
    ``8j … 8j+7`` (one 32-byte sector per agent)."""
    g = in_game.astype(jnp.float32)[None, :]
    return jnp.concatenate([feats.astype(jnp.float32), g], axis=0).T.reshape(-1)


def _knn_obs_kernel(
    table_ref, code_ref, scale_ref, time_ref, *refs, m, k, n, lo, block, reciprocal, raw,
    in_game_lists, interpret,
):  # fmt: skip
    """One block of ``B`` consecutive elements of one env's flat ``[n·D]`` observations.

    ``table_ref [8M]`` agent-major features (`_agent_major`), ``code_ref [M·k]``
    neighbour codes (`_encode`; with ``raw``, ``−1`` for an empty slot, which reads the
    observer's own row as the searches' padding ``idx = i`` does), ``scale_ref [7]`` (the scale, or
    ``1/scale`` with ``reciprocal``), ``time_ref [1]``, optional ``ids_ref [n]`` (rows not
    contiguous), ``out_ref [n·D]``.
    """
    if lo is None:
        ids_ref, out_ref = refs
    else:
        (out_ref,) = refs
    d = obs_size(k)
    total = n * d
    e0 = pl.program_id(0) * block
    e = e0 + lax.broadcasted_iota(jnp.int32, (block,), 0)  # [B] flat element
    inside = e < total
    ec = jnp.minimum(e, total - 1)  # loads stay in range past the end
    if LEAN_INDEX:  # non-negative: unsigned division (no sign fix-ups)
        u32 = jnp.uint32
        r = lax.div(ec.astype(u32), u32(d)).astype(jnp.int32)  # row
        c = ec - r * d  # column
        f = lax.div(c.astype(u32), u32(k)).astype(jnp.int32)  # feature, 7: time column
    else:
        r = lax.div(ec, jnp.int32(d))  # row (non-negative: truncation = floor)
        c = ec - r * d  # column
        f = lax.div(c, jnp.int32(k))  # feature, 7 in the time column
    s = c - f * k  # slot (0 in the time column)
    fc = jnp.minimum(f, NUM_FEATURES - 1)
    i = ids_ref[r] if lo is None else r + lo  # the observing agent
    if TIME_PASS and _ABLATE == "":
        _time_pass_block(
            table_ref, code_ref, scale_ref, time_ref, out_ref, ids_ref if lo is None else None,
            e0=e0, inside=inside, f=f, s=s, i=i, m=m, k=k, n=n, lo=lo, block=block,
            reciprocal=reciprocal, raw=raw, in_game_lists=in_game_lists, interpret=interpret,
        )  # fmt: skip
        return
    if _ABLATE == "const":
        val = time_ref[0] + (e + s).astype(jnp.float32)
        pl_triton.store(out_ref.at[pl.ds(e0, block)], val, mask=inside)
        return
    code = i if _ABLATE == "self" else code_ref[i * k + s]
    ok, own, q = _slot_value(
        table_ref, scale_ref, code, i, fc, f, m=m, raw=raw, any_row=False,
        reciprocal=reciprocal, interpret=interpret,
    )  # fmt: skip
    if in_game_lists:
        # An observer out of the game has no listed neighbour, so `ok` implies in_game[i];
        # the time column (fc = 6) reads in_game[i] as `own`.
        g_own = own
        mask = jnp.where(ok, jnp.float32(1.0), jnp.float32(0.0))
    else:
        g_own = table_ref[i * _ROW + NUM_FEATURES]
        mask = jnp.where(ok, g_own, jnp.float32(0.0))  # valid & in_game[i], as 1.0 / 0.0
    val = jnp.where(f == NUM_FEATURES, time_ref[0] * g_own, q * mask)
    if OPAQUE_STORE:  # t/E >= 0, so this adds 0; the compiler cannot know it
        e0 = e0 + (time_ref[0] < jnp.float32(-1.0)).astype(jnp.int32)
    pl_triton.store(out_ref.at[pl.ds(e0, block)], val, mask=inside)


def _slot_value(
    table_ref, scale_ref, code, i, col, f, *, m, raw, any_row, reciprocal, interpret,
    table_eviction=None,
):  # fmt: skip
    """``(ok, own, q)`` per element: whether the slot's ``code`` lists a neighbour, the
    observer's table column ``col``, and ``(other − own·rel_f) / scale[col]`` with
    ``other`` the neighbour's column ``col`` (an empty slot reads the observer's row, the
    searches' padding ``idx = i``, unless ``any_row``: then any row in range, for a
    caller that sets empty slots to ``+0.0`` itself). ``f``: the feature (``rel_f = f <
    5``)."""
    ok = code >= 0
    if any_row:
        j = jnp.minimum(code.astype(jnp.uint32), jnp.uint32(m - 1)).astype(jnp.int32)
    else:
        pad = i if raw else -1 - code  # an empty slot's idx (the masked value's zero sign)
        if LEAN_INDEX:  # one unsigned clamp: a negative id becomes large, then M - 1
            j = jnp.minimum(jnp.where(ok, code, pad).astype(jnp.uint32), jnp.uint32(m - 1))
            j = j.astype(jnp.int32)
        else:
            j = jnp.clip(jnp.where(ok, code, pad), 0, m - 1)
    if table_eviction is None:  # the flat writer's loads as measured
        other = table_ref[j * _ROW + col]
        own = table_ref[i * _ROW + col]
    else:
        other = pl_triton.load(table_ref.at[j * _ROW + col], eviction_policy=table_eviction)
        own = pl_triton.load(table_ref.at[i * _ROW + col], eviction_policy=table_eviction)
    if LEAN_INDEX:
        # own·1 = own; own·0 = +0 for type and in-game (never negative): a select.
        # (Tried: rel_f from a table after the scale, one fused multiply-add for the
        # compare and the select: 38 registers, 75% occupancy, 301 -> 330 µs; run 59.)
        diff = other - jnp.where(f < NUM_RELATIVE, own, jnp.float32(0.0))
    else:
        diff = other - own * (f < NUM_RELATIVE).astype(jnp.float32)
    return ok, own, _scale(diff, scale_ref[col], reciprocal, interpret)


def _time_pass_block(
    table_ref, code_ref, scale_ref, time_ref, out_ref, ids_ref, *, e0, inside, f, s, i, m, k,
    n, lo, block, reciprocal, raw, in_game_lists, interpret,
):  # fmt: skip
    """`_knn_obs_kernel`'s block with `TIME_PASS`: every element as a feature (the time
    column, ``f = 7``, reads the in-game column and a scale of 1: a wrong value), then
    the rows' time columns over it (`_time_pass`). ``scale_ref`` has 8 entries.

    With ``in_game_lists`` (the lists of observers out of the game are empty) an element
    with a neighbour is ``q`` and one without ``+0.0``, the value the reference gets from
    the padding ``idx = i``, bit for bit: neither the in-game flag nor the padding id is
    needed, and any id in range will do for an empty slot.
    """
    code = code_ref[i * k + s]
    # f <= 7: the time column reads within the agent's 8 floats (a value written over)
    ok, _, q = _slot_value(
        table_ref, scale_ref, code, i, f, f, m=m, raw=raw, any_row=in_game_lists,
        reciprocal=reciprocal, interpret=interpret,
    )  # fmt: skip
    if in_game_lists:
        val = jnp.where(ok, q, jnp.float32(0.0))
    else:
        g_own = table_ref[i * _ROW + NUM_FEATURES]
        val = q * jnp.where(ok, g_own, jnp.float32(0.0))  # mask: valid & in_game[i]
    pl_triton.store(out_ref.at[pl.ds(e0, block)], val, mask=inside)
    _time_pass(table_ref, time_ref, out_ref, ids_ref, e0=e0, k=k, n=n, lo=lo, block=block,
               interpret=interpret)  # fmt: skip


def _time_pass(table_ref, time_ref, out_ref, ids_ref, *, e0, k, n, lo, block, interpret):
    """Writes ``time · in_game[i]`` at the time column of every row that the block of
    ``B`` elements from ``e0`` touches, after a barrier (so over the block's own store)."""
    d = obs_size(k)
    if not interpret:
        pl_triton.debug_barrier()  # the block's stores land before the time column's
    rows = _next_pow2(block // d + 2)  # rows a block of B elements can touch
    r0 = e0 // d
    rr = r0 + lax.broadcasted_iota(jnp.int32, (rows,), 0)
    at = rr * d + NUM_FEATURES * k  # the rows' time columns
    keep = (rr < n) & (at >= e0) & (at < e0 + block)
    rc = jnp.minimum(rr, n - 1)
    ii = ids_ref[rc] if lo is None else rc + lo
    g = table_ref[ii * _ROW + NUM_FEATURES]
    # masked lanes: distinct indices past the end (interpret mode drops them)
    at = jnp.where(keep, at, n * d + rr - r0)
    pl_triton.store(out_ref.at[at], time_ref[0] * g, mask=keep)


def _column_pieces(d: int) -> tuple[tuple[int, int], ...]:
    """``D`` columns as pieces ``(c0, W)``, ``W`` a power of two: the largest one that
    fits, then the rest in one piece (``71 -> (0, 64), (64, 8)``; the last may be masked)."""
    w = 1 << (int(d).bit_length() - 1)
    rest = d - w
    return ((0, w),) if rest == 0 else ((0, w), (w, _next_pow2(rest)))


def _knn_obs_cols_kernel(
    table_ref, code_ref, scale_ref, time_ref, *refs, m, k, n, lo, rows, reciprocal, raw,
    in_game_lists, interpret, ordered=False,
):  # fmt: skip
    """``R`` whole rows of one env's ``[n, D]`` observations (`LAYOUT` ``"cols"``).

    Refs as `_knn_obs_kernel`, with ``scale_ref [8]`` (entry 7, the time column's, is 1).
    Each column piece ``(c0, W)`` of `_column_pieces` is a ``[R, W]`` tile: the column's
    feature ``f``, slot ``s``, scale and relative-feature select are ``[1, W]`` (once per
    thread), the observer's id and row offsets ``[R, 1]``, and per element one neighbour
    code, two table gathers (neighbour, observer) and one store. The time column (``f =
    7``) reads the in-game column (``own = g[i]``) and takes ``time · g[i]``.

    With ``ordered`` (contiguous rows only) the refs end with ``order_ref [M]``, a
    permutation of the agents, then ``out_ref``: the program's rows are the agents
    ``order[R·p …]`` (``M`` rows in all), each written at its own row ``i − lo`` and
    skipped where not among the ``n`` observed.
    """
    if ordered:
        order_ref, out_ref = refs
    elif lo is None:
        ids_ref, out_ref = refs
    else:
        (out_ref,) = refs
    d = obs_size(k)
    rl = lax.broadcasted_iota(jnp.int32, (rows, 1), 0)  # [R, 1] the program's rows
    r = pl.program_id(0) * rows + rl
    if ordered:
        i = order_ref[jnp.minimum(r, m - 1)]  # [R, 1] observing agents (any of the M)
        out_row = i - lo
        rin = (r < m) & (out_row >= 0) & (out_row < n)
    else:
        rin = r < n
        rc = jnp.minimum(r, n - 1)
        i = ids_ref[rc] if lo is None else rc + lo  # [R, 1] observing agents
        out_row = r
    g_own = None if in_game_lists else table_ref[i * _ROW + NUM_FEATURES]  # [R, 1]
    for c0, w in _column_pieces(d):
        c = c0 + lax.broadcasted_iota(jnp.int32, (1, w), 1)  # [1, W] columns
        cin = c < d
        cc = jnp.minimum(c, d - 1)
        f = lax.div(cc.astype(jnp.uint32), jnp.uint32(k)).astype(jnp.int32)  # 7: time
        s = cc - f * k  # slot (0 in the time column)
        code = code_ref[i * k + s]  # [R, W]
        # interpret mode, true division: a per-element scale (XLA on the CPU would turn a
        # division by a broadcast into a multiplication by its reciprocal)
        fe = jnp.broadcast_to(f, code.shape) if interpret and not reciprocal else f
        ok, own, q = _slot_value(
            table_ref, scale_ref, code, i, fe, f, m=m, raw=raw, any_row=in_game_lists,
            reciprocal=reciprocal, interpret=interpret,
            table_eviction=None if interpret else TABLE_EVICTION,
        )  # fmt: skip
        if in_game_lists:
            val = jnp.where(ok, q, jnp.float32(0.0))
            g = own  # the time column reads in_game[i] as `own`
        else:
            val = q * jnp.where(ok, g_own, jnp.float32(0.0))  # mask: valid & in_game[i]
            g = g_own
        if c0 + w > NUM_FEATURES * k:  # the piece holds the time column
            val = jnp.where(f == NUM_FEATURES, time_ref[0] * g, val)
        keep = rin & cin
        # masked lanes: distinct indices past the end (interpret mode drops them)
        at = jnp.where(keep, out_row * d + c, n * d + rl * w + (c - c0))
        evict = None if interpret else STORE_EVICTION
        pl_triton.store(out_ref.at[at], val, mask=keep, eviction_policy=evict)


def knn_obs_pallas(
    feats: jax.Array,
    idx: jax.Array,
    valid: jax.Array | None,
    rows: Sequence[int],
    scale: jax.Array,
    in_game: jax.Array,
    time: jax.Array,
    *,
    reciprocal: bool | None = None,
    block_size: int | None = None,
    num_warps: int | None = None,
    interpret: bool | None = None,
    table: jax.Array | None = None,
    lists_in_game: bool = False,
    row_order: jax.Array | None = None,
) -> jax.Array:
    """The Pallas (Triton) kernel: ``[n, 7k+1]`` float32, written once in its final layout.

    Arguments as `knn_obs_xla` (``valid=None``: ``idx`` marks empty slots with ``−1``,
    as `kernels.nearest_k_lists` returns them), and:
      reciprocal: multiply by ``1/scale`` (computed by XLA outside the kernel) instead of
        dividing (``div.rn.f32`` on GPU); ``None``: as XLA compiles the reference for a
        traced scale (`full_obs.reference_uses_reciprocal`).
      block_size: output elements per program ``B``, a power of two (default
        ``min(DEFAULT_BLOCK, next_pow2(n·D))``); grid ``ceil(n·D / B)`` per env (Pallas
        prepends the env axis under `jax.vmap`). With `LAYOUT` ``"cols"``: rows per
        program ``R = next_pow2(B // D)`` (default `COLS_ROWS`), grid ``ceil(n / R)``.
      num_warps: Triton warps (default `DEFAULT_WARPS`, else ``max(1, min(4, B // 256))``;
        with ``"cols"``, ``B`` is the rows' widest piece, ``R · W``).
      interpret: Pallas interpret mode; ``None``: only when the default backend is CPU.
      table: the agent-major feature table ``[8M]`` (`_agent_major(feats, in_game)`), if
        already built (the batched Tag step writes it); ``feats`` then gives shapes only.
      lists_in_game: the caller guarantees that the lists (``valid=None``) of agents
        out of the game are all ``-1`` (`kernels.lists_in_game_only`); the kernel then
        reads one value fewer per element (no in-game flag for the mask). Same values
        when the guarantee holds; wrong ones otherwise.
      row_order: ``[M]`` int32, a permutation of the agent ids (e.g. the grid search's
        spatial order, `kernels.nearest_k_lists_ordered`): the ``"cols"`` writer's
        programs take their rows in this order (``ceil(M / R)`` programs, rows outside
        ``rows`` skipped), so that a program's neighbour gathers share table rows; each
        row is still written at its place. Contiguous ``rows`` only. Same values for any
        permutation; rows are left unwritten if it is not one.
    """
    m, k = _check(feats, idx, valid, scale, in_game)
    if lists_in_game and valid is not None:
        raise ValueError("lists_in_game needs the searches' own lists (valid=None)")
    if table is not None and table.shape != (_ROW * m,):
        raise ValueError(f"table must be [{_ROW * m}], got {table.shape}")
    ids, lo = _row_ids(rows, m)
    n, d = ids.size, obs_size(k)
    if row_order is not None:
        if LAYOUT != "cols" or lo is None:
            raise ValueError("row_order needs the 'cols' layout and contiguous rows")
        if row_order.shape != (m,) or not jnp.issubdtype(row_order.dtype, jnp.integer):
            raise ValueError(f"row_order must be integer [M] = [{m}], got {row_order.shape}")
    total = n * d
    interpret = jax.default_backend() == "cpu" if interpret is None else bool(interpret)
    block = _check_block(
        "block_size",
        min(DEFAULT_BLOCK, _next_pow2(total)) if block_size is None else block_size,
    )
    if num_warps is None:
        num_warps = DEFAULT_WARPS
    warps = max(1, min(4, block // 256)) if num_warps is None else int(num_warps)
    reciprocal = reference_uses_reciprocal(False) if reciprocal is None else bool(reciprocal)
    scale = scale.astype(jnp.float32)
    if reciprocal:
        scale = jnp.float32(1.0) / scale
    cols = LAYOUT == "cols"
    if LAYOUT not in LAYOUTS:
        raise ValueError(f"knn_obs.LAYOUT must be one of {LAYOUTS}, got {LAYOUT!r}")
    if cols and _ABLATE:
        raise ValueError(
            f"knn_obs._ABLATE={_ABLATE!r} ablates the flat layout's kernel; set "
            "knn_obs.LAYOUT = 'flat' too (env_ab_probe: wlayout=flat)"
        )
    for name, hint in (("STORE_EVICTION", STORE_EVICTION), ("TABLE_EVICTION", TABLE_EVICTION)):
        if hint not in EVICTIONS:
            raise ValueError(f"knn_obs.{name} must be one of {EVICTIONS}, got {hint!r}")
    if TIME_PASS or cols:
        scale = jnp.concatenate([scale, jnp.ones((1,), jnp.float32)])  # [8]: f = 7 too
    args = [
        _agent_major(feats, in_game) if table is None else table.astype(jnp.float32),
        _encode(idx, valid),
        scale,
        jnp.reshape(time, (1,)).astype(jnp.float32),
    ]
    if lo is None:
        args.append(jnp.asarray(ids))
    if row_order is not None:
        args.append(row_order.astype(jnp.int32))
    if cols:
        want = COLS_ROWS if block_size is None else max(1, block // d)
        rows_per = min(_next_pow2(want), _next_pow2(n))
        kernel = functools.partial(
            _knn_obs_cols_kernel, m=m, k=k, n=n, lo=lo, rows=rows_per,
            reciprocal=reciprocal, raw=valid is None, in_game_lists=bool(lists_in_game),
            interpret=interpret, ordered=row_order is not None,
        )  # fmt: skip
        if num_warps is None:
            warps = max(1, min(4, rows_per * _column_pieces(d)[0][1] // 256))
        grid = (pl.cdiv(n if row_order is None else m, rows_per),)
    else:
        kernel = functools.partial(
            _knn_obs_kernel, m=m, k=k, n=n, lo=lo, block=block, reciprocal=reciprocal,
            raw=valid is None, in_game_lists=bool(lists_in_game), interpret=interpret,
        )  # fmt: skip
        grid = (pl.cdiv(total, block),)
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((total,), jnp.float32),
        grid=grid,
        compiler_params=pl_triton.CompilerParams(num_warps=warps, num_stages=1),
        cost_estimate=pl.CostEstimate(
            flops=int(5 * total),
            transcendentals=0,
            bytes_accessed=int(4 * (total + n * k + _ROW * m + 8)),
        ),
        interpret=interpret,
        name="tag_knn_obs",
    )(*args)
    return out.reshape(n, d)


# ------------------------------------------------------------------------------- dispatch
def knn_obs(
    impl: str,
    feats: jax.Array,
    idx: jax.Array,
    valid: jax.Array,
    rows: Sequence[int],
    scale: jax.Array,
    in_game: jax.Array,
    time: jax.Array,
    **kwargs,
) -> jax.Array:
    """``knn_obs_<impl>(feats, idx, valid, rows, scale, in_game, time, **kwargs)``:
    ``[n, 7k+1]``; ``impl`` in `IMPLS` (``kwargs``: `knn_obs_pallas`'s options)."""
    if impl == "xla":
        return knn_obs_xla(feats, idx, valid, rows, scale, in_game, time)
    if impl == "pallas":
        return knn_obs_pallas(feats, idx, valid, rows, scale, in_game, time, **kwargs)
    raise ValueError(f"knn_obs impl must be one of {IMPLS}, got {impl!r}")
