"""TagContinuous's k-nearest (partial) observation written by one Pallas (Triton) kernel.

`knn_obs_pallas` computes `environments.tag_continuous.obs_xla.knn_obs_xla`'s ``[n, D]``
rows (``D = 7k+1``) from the neighbour lists, once, in their final layout. The plain-JAX
form gathers ``feats[:, idx]`` ``[7, n, k]``, transposes, computes, reshapes and
concatenates the time column: several passes over the output; this kernel is one.

Dimension letters: ``M`` agents, ``k`` neighbours, ``n`` rows asked for (agents
observing), ``D = 7k+1`` values per observation, ``R`` rows per program, ``W`` a column
piece's width.

Layout: each program writes ``R`` whole rows as ``[R, W]`` tiles, one per column piece
``(c0, W)`` of `_column_pieces` (``W`` a power of two: ``71 = 64 + 8 − 1`` at ``k =
10``). A thread's columns are the same in all its rows, so a column's feature ``f``, slot
``s``, scale and relative-feature select are computed once per thread, not per element;
the observer's id once per row. Per element: one neighbour code (`_encode`: ``idx`` and
``valid`` in one int32, or the searches' own lists with ``−1`` in empty slots), two
gathers from an agent-major feature table (`agent_major`: agent ``j``'s 7 features and
its in-game flag in one 32-byte sector, so the lanes of a row that read one neighbour's
different features share a memory transaction), one store. The time column (``f = 7``)
reads the in-game column and is a select in the last piece. The table's gathers carry an
``evict_last`` L2 hint (each table row is read ``7k`` times per observer row).

Where the caller guarantees that observers out of the game have empty lists
(``lists_in_game``, the grid search asked for in-game queries) an element needs neither
the in-game flag nor the padding id: a listed neighbour implies an observer in the game,
and an empty slot is ``+0.0``, the value the reference gets from the padding ``idx = i``.

Exactness: the division follows the reference's (``reciprocal``, see
`obs_xla.reference_uses_reciprocal`): a multiplication by ``1/scale`` (computed by XLA
outside the kernel) or ``div.rn.f32`` on GPU. The other operations are exact or single
roundings in the reference's order: ``feats·rel_f`` becomes a select of ``feats`` or
``+0`` (the same value, as the non-relative features, type and in-game, are finite and
non-negative), and ``·mask`` multiplies by 0 or 1. So on the CPU (interpret mode) the
kernel equals the reference bit for bit, ``−0.0`` included (tests). One exception: with
one row and ``k = 1`` the reference's scale ``[1, 7, 1]`` needs no broadcast, and XLA on
the CPU then divides or not depending on the context, so the env builds that case with
the plain-JAX form.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

from environments.tag_continuous.kernels.full_obs import scaled
from environments.tag_continuous.kernels.triton import next_pow2, resolve_interpret
from environments.tag_continuous.obs_xla import (
    NUM_FEATURES,
    NUM_RELATIVE,
    check_features,
    check_lists,
    knn_obs_size,
    reference_uses_reciprocal,
    row_ids,
)

__all__ = ["TABLE_ROW", "agent_major", "knn_obs_pallas"]

#: Floats per agent in the agent-major feature table: the 7 features, then in-game.
TABLE_ROW = NUM_FEATURES + 1
#: Rows per program (fixed); Triton warps ``R · W / 256`` for the widest piece ``W``,
#: between 1 and 4.
_ROWS = 8
#: L2 eviction hint of the feature table's gathers (compiled kernels).
_TABLE_EVICTION = "evict_last"


def agent_major(feats: jax.Array, in_game: jax.Array) -> jax.Array:
    """``[M·8]`` float32: agent ``j``'s 7 features then ``in_game`` as 1.0/0.0 at
    ``8j … 8j+7`` (one 32-byte sector per agent)."""
    g = in_game.astype(jnp.float32)[None, :]
    return jnp.concatenate([feats.astype(jnp.float32), g], axis=0).T.reshape(-1)


def _encode(idx: jax.Array, valid: jax.Array | None) -> jax.Array:
    """``idx`` where ``valid``, else ``−1 − idx`` (negative): both in one int32 ``[M·k]``;
    ``valid=None``: ``idx`` as it is (its empty slots hold ``−1``)."""
    idx = idx.astype(jnp.int32)
    if valid is not None:
        idx = jnp.where(valid, idx, -1 - idx)
    return idx.reshape(-1)


def _column_pieces(d: int) -> tuple[tuple[int, int], ...]:
    """``D`` columns as pieces ``(c0, W)``, ``W`` a power of two: the largest one that
    fits, then the rest in one piece (``71 -> (0, 64), (64, 8)``; the last may be masked)."""
    w = 1 << (int(d).bit_length() - 1)
    rest = d - w
    return ((0, w),) if rest == 0 else ((0, w), (w, next_pow2(rest)))


def _slot_value(table_ref, scale_ref, code, i, col, f, *, m, raw, any_row, reciprocal, interpret):
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
        # one unsigned clamp: a negative id becomes large, then M - 1
        j = jnp.minimum(jnp.where(ok, code, pad).astype(jnp.uint32), jnp.uint32(m - 1))
        j = j.astype(jnp.int32)
    if interpret:
        other = table_ref[j * TABLE_ROW + col]
        own = table_ref[i * TABLE_ROW + col]
    else:
        hint = _TABLE_EVICTION
        other = pl_triton.load(table_ref.at[j * TABLE_ROW + col], eviction_policy=hint)
        own = pl_triton.load(table_ref.at[i * TABLE_ROW + col], eviction_policy=hint)
    # own·1 = own; own·0 = +0 for type and in-game (never negative): a select.
    diff = other - jnp.where(f < NUM_RELATIVE, own, jnp.float32(0.0))
    return ok, own, scaled(diff, scale_ref[col], reciprocal, interpret)


def _knn_obs_kernel(
    table_ref, code_ref, scale_ref, time_ref, *refs, m, k, n, lo, rows, reciprocal, raw,
    in_game_lists, interpret,
):  # fmt: skip
    """``R`` whole rows of one env's ``[n, D]`` observations.

    ``table_ref [8M]`` (`agent_major`), ``code_ref [M·k]`` neighbour codes (`_encode`;
    with ``raw``, ``−1`` for an empty slot, which reads the observer's own row as the
    searches' padding ``idx = i`` does), ``scale_ref [8]`` (the scale or its reciprocal,
    then 1 for the time column), ``time_ref [1]``, optional ``ids_ref [n]`` (rows not
    contiguous), ``out_ref [n·D]``. Each column piece ``(c0, W)`` is a ``[R, W]`` tile:
    the column's feature ``f``, slot ``s``, scale and relative-feature select are ``[1,
    W]``, the observer's id ``[R, 1]``. The time column (``f = 7``) reads the in-game
    column (``own = g[i]``) and takes ``time · g[i]``.
    """
    if lo is None:
        ids_ref, out_ref = refs
    else:
        (out_ref,) = refs
    d = knn_obs_size(k)
    rl = lax.broadcasted_iota(jnp.int32, (rows, 1), 0)  # [R, 1] the program's rows
    r = pl.program_id(0) * rows + rl
    rin = r < n
    rc = jnp.minimum(r, n - 1)
    i = ids_ref[rc] if lo is None else rc + lo  # [R, 1] observing agents
    g_own = None if in_game_lists else table_ref[i * TABLE_ROW + NUM_FEATURES]  # [R, 1]
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
        at = jnp.where(keep, r * d + c, n * d + rl * w + (c - c0))
        pl_triton.store(out_ref.at[at], val, mask=keep)


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
    interpret: bool | None = None,
    table: jax.Array | None = None,
    lists_in_game: bool = False,
) -> jax.Array:
    """The k-nearest observation of agents ``rows``: ``[n, 7k+1]`` float32.

    Arguments as `obs_xla.knn_obs_xla` (``valid=None``: ``idx`` marks empty slots with
    ``−1``, as the kernels' searches return them), and:
      reciprocal: multiply by ``1/scale`` (computed by XLA outside the kernel) instead of
        dividing (``div.rn.f32`` on GPU); ``None``: as XLA compiles the reference for a
        traced scale (`obs_xla.reference_uses_reciprocal`).
      interpret: Pallas interpret mode; ``None``: only when the default backend is CPU.
      table: the agent-major feature table ``[8M]`` (`agent_major(feats, in_game)`), if
        already built (the batched Tag step writes it); ``feats`` then gives shapes only.
      lists_in_game: the caller guarantees that the lists (``valid=None``) of agents
        out of the game are all ``-1``; the kernel then reads one value fewer per element
        (no in-game flag for the mask). Same values when the guarantee holds.

    Grid ``ceil(n / R)`` per env (Pallas prepends the env axis under `jax.vmap`).
    """
    m = check_features(feats, scale, in_game, 1)
    k = check_lists(idx, valid, m)
    if in_game.dtype != jnp.bool_:
        raise ValueError(f"in_game must be bool, got {in_game.dtype}")
    if lists_in_game and valid is not None:
        raise ValueError("lists_in_game needs the searches' own lists (valid=None)")
    if table is not None and table.shape != (TABLE_ROW * m,):
        raise ValueError(f"table must be [{TABLE_ROW * m}], got {table.shape}")
    ids, lo = row_ids(rows, m)
    n, d = ids.size, knn_obs_size(k)
    interpret = resolve_interpret(interpret)
    reciprocal = reference_uses_reciprocal(False) if reciprocal is None else bool(reciprocal)
    scale = scale.astype(jnp.float32)
    if reciprocal:
        scale = jnp.float32(1.0) / scale
    scale = jnp.concatenate([scale, jnp.ones((1,), jnp.float32)])  # [8]: f = 7 too
    args = [
        agent_major(feats, in_game) if table is None else table.astype(jnp.float32),
        _encode(idx, valid),
        scale,
        jnp.reshape(time, (1,)).astype(jnp.float32),
    ]
    if lo is None:
        args.append(jnp.asarray(ids))
    rows_per = min(_ROWS, next_pow2(n))
    kernel = functools.partial(
        _knn_obs_kernel, m=m, k=k, n=n, lo=lo, rows=rows_per, reciprocal=reciprocal,
        raw=valid is None, in_game_lists=bool(lists_in_game), interpret=interpret,
    )  # fmt: skip
    warps = max(1, min(4, rows_per * _column_pieces(d)[0][1] // 256))
    total = n * d
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((total,), jnp.float32),
        grid=(pl.cdiv(n, rows_per),),
        compiler_params=pl_triton.CompilerParams(num_warps=warps, num_stages=1),
        cost_estimate=pl.CostEstimate(
            flops=int(5 * total),
            transcendentals=0,
            bytes_accessed=int(4 * (total + n * k + TABLE_ROW * m + 8)),
        ),
        interpret=interpret,
        name="tag_knn_obs",
    )(*args)
    return out.reshape(n, d)
