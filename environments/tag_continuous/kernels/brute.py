"""The brute-force k-nearest search: every query against every candidate, ``O(M²)``.

Grid ``(N, ceil(M / BM))``: one program per env and block of ``BM = min(32,
next_pow2(M))`` query agents, **one query row per lane** (one warp). The program streams
the candidates ``j = 0, 1, …`` in increasing order, ``U`` per unrolled loop step (each a
scalar load of ``x_j, y_j`` that every lane shares), computes the ``[BM]`` distances and
inserts them into each lane's sorted list (`packed`): packed keys with ``k +
EXTRA_SLOTS`` slots, each step's ``U`` keys merged at once, when the indices fit in
`packed.MAX_KEY_BITS` bits, else the exact insertion. Because ``j`` only grows, the
exact insertion's strict ``<`` is exactly "ties by lower ``j``".

Masks cost nothing: the wrapper puts candidates out of the game, and the padding past
``M``, at ``+inf`` (distance ``+inf``, never inserted: ``inf < inf`` is false); compiled,
the candidate range is split in three loops so that only the block's own rows pay the
``j != i`` mask. The only memory traffic is the positions in and ``k`` indices per agent
out: at ``M`` in the hundreds the kernel is bound by the ``M²`` pairs' arithmetic, about
``5 + 5k`` simple operations each with exact lists, fewer with packed keys.

Interpret mode (the CPU) defaults to ``U = 1`` and one masked loop: the same lists, and a
much shorter trace.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from environments.tag_continuous.kernels import packed
from environments.tag_continuous.kernels.triton import (
    INF,
    any_lane,
    check_block,
    compiler_params,
    next_pow2,
    resolve_interpret,
    round_up,
)

__all__ = ["brute_lists", "brute_lists_padded", "brute_padding"]

#: Candidates per unrolled loop step ``U``, compiled (fixed).
_UNROLL = 16
#: Query rows per program ``BM`` at most, one per lane (fixed).
_BLOCK_ROWS = 32


def _nearest_k_kernel(
    xq_ref, yq_ref, xc_ref, yc_ref, out_ref, *, k, bm, unroll, mc, split, m, key_bits
):
    """One env, ``BM`` query rows (one per lane); writes their lists into the env's
    ``out [M·k]`` int32 (row-major ``[M, k]``, -1 = none; padding rows masked).

    ``xq/yq [BM]`` query positions; ``xc/yc [MC]`` candidate positions (``+inf`` when the
    candidate is out of the game or padding). ``split``: stream the candidates in three
    loops so that only the middle one (this block's own rows) applies the ``j != i``
    mask; otherwise one masked loop. ``key_bits``: search with packed keys of that many
    index bits, then exactly only if some lane's result is ambiguous; ``0``: the exact
    insertion only. With packed keys and ``unroll > 1`` each step's keys are merged at once.
    """
    b = pl.program_id(1)
    rows = b * bm + lax.broadcasted_iota(jnp.int32, (bm,), 0)  # [BM]
    xq = xq_ref[...]  # [BM]
    yq = yq_ref[...]  # [BM]

    def insert(lists, d, j):
        """Inserts ``(d [BM], j)`` into the sorted lists ``(ld, lj)`` (k-tuples of [BM]);
        candidates arrive in increasing ``j``, so the strict insertion keeps ties by ``j``."""
        return packed.insert_pair(*lists, d, j, False)

    def stream(ins, carry, batch=None):
        """Streams every candidate through ``ins(carry, d [BM], j)``, or each loop step's
        ``U`` candidates at once through ``batch(carry, [d [BM]], [j])``."""

        def steps(masked):
            def step(c, carry):
                ds, js = [], []
                for u in range(unroll):
                    j = c * unroll + u
                    dx = xq - xc_ref[j]
                    dy = yq - yc_ref[j]
                    d = dx * dx + dy * dy  # [BM]
                    if masked:
                        d = jnp.where(rows == j, INF, d)
                    if batch is None:
                        carry = ins(carry, d, j)
                    else:
                        ds.append(d)
                        js.append(j)
                return carry if batch is None else batch(carry, ds, js)

            return step

        num_steps = mc // unroll
        if split:
            lo = (b * bm) // unroll  # first step that may hold one of this block's rows
            hi = jnp.minimum(((b + 1) * bm + unroll - 1) // unroll, num_steps)
            carry = lax.fori_loop(0, lo, steps(False), carry)
            carry = lax.fori_loop(lo, hi, steps(True), carry)
            return lax.fori_loop(hi, num_steps, steps(False), carry)
        return lax.fori_loop(0, num_steps, steps(True), carry)

    def exact():
        init = (
            tuple(jnp.full((bm,), INF, jnp.float32) for _ in range(k)),
            tuple(jnp.full((bm,), -1, jnp.int32) for _ in range(k)),
        )
        ld, lj = stream(insert, init)
        return tuple(jnp.where(ld[s] < INF, lj[s], -1) for s in range(k))

    if key_bits:
        merge = None
        if unroll > 1:

            def merge(lk, ds, js):
                keys = [packed.packed_key(d, j, key_bits) for d, j in zip(ds, js, strict=True)]
                return packed.packed_merge(lk, keys)

        keys = stream(
            lambda lk, d, j: packed.packed_insert(lk, d, j, key_bits),
            tuple(
                jnp.full((bm,), packed.EMPTY_KEY, jnp.int32) for _ in range(k + packed.EXTRA_SLOTS)
            ),
            merge,
        )

        def dist(j):  # [BM] exact distances to candidates j [BM]
            dx = xq - xc_ref[j]
            dy = yq - yc_ref[j]
            return dx * dx + dy * dy

        lists, amb = packed.packed_lists(keys, k, key_bits, dist)
        lists = lax.cond(any_lane(amb & (rows < m)), exact, lambda: lists)
    else:
        lists = exact()
    packed.store_lists(out_ref, rows, lists, k, m)


def brute_padding(m: int, interpret: bool | None = None) -> tuple[int, int]:
    """``(MQ, MC)``: the lengths the brute-force kernel pads an env's ``M`` query and
    candidate positions to (`brute_lists_padded`)."""
    interpret = resolve_interpret(interpret)
    bm = min(_BLOCK_ROWS, next_pow2(m))
    return round_up(m, bm), round_up(m, 1 if interpret else _UNROLL)


def brute_lists_padded(
    xq: jax.Array,
    yq: jax.Array,
    xc: jax.Array,
    yc: jax.Array,
    m: int,
    k: int,
    *,
    interpret: bool | None = None,
) -> jax.Array:
    """The brute-force kernel's lists ``[N, M, k]`` int32 (``-1`` = none) from inputs
    already padded (`brute_padding`'s lengths): ``xq, yq [N, MQ]`` the positions (any
    value past ``M``), ``xc, yc [N, MC]`` the positions with ``+inf`` where an agent is
    out of the game and past ``M`` (what the search would pad; the batched Tag step writes
    them)."""
    mq, mc = brute_padding(m, interpret)
    n = xq.shape[0]
    if xq.shape != (n, mq) or yq.shape != (n, mq) or xc.shape != (n, mc) or yc.shape != (n, mc):
        raise ValueError(
            f"brute_lists_padded needs xq, yq [N, {mq}] and xc, yc [N, {mc}], got "
            f"{xq.shape}, {yq.shape}, {xc.shape}, {yc.shape}"
        )
    dummy = jnp.zeros((n, m), jnp.float32)
    return brute_lists(
        dummy, dummy, jnp.zeros((n, m), bool), k, interpret=interpret, padded=(xq, yq, xc, yc)
    )


def brute_lists(
    x: jax.Array,
    y: jax.Array,
    in_game: jax.Array,
    k: int,
    *,
    interpret: bool | None = None,
    unroll: int | None = None,
    split_self_range: bool | None = None,
    packed_keys: bool | None = None,
    padded: tuple[jax.Array, ...] | None = None,
) -> jax.Array:
    """The ``k`` nearest in-game agents of every agent by the brute-force kernel.

    Args:
      x, y: ``[N, M]`` float32 positions (finite); in_game: ``[N, M]`` bool (only agents
        in the game are candidates); k: neighbours per agent (static), ``k >= 1``.
      interpret: Pallas interpret mode; ``None``: when the default backend is the CPU.
      unroll: candidates per loop step ``U`` (power of two; default 16 compiled, 1 in
        interpret mode). split_self_range: three loops, only the block's own range masked
        (default: compiled yes, interpret no). packed_keys: ``None``, packed keys when the
        indices fit in `packed.MAX_KEY_BITS` bits. All three give the same lists; they
        exist so that interpret mode can run the compiled path's structure.
      padded: the kernel's inputs ``(xq, yq, xc, yc)`` already padded
        (`brute_lists_padded`); ``x, y, in_game`` then give shapes only.

    Returns:
      ``[N, M, k]`` int32: row ``i`` lists the ``j != i`` with ``in_game[j]`` by
      increasing float32 ``(x_i-x_j)² + (y_i-y_j)²``, ties by lower ``j``; ``-1`` past
      the candidates.
    """
    k, x, y, in_game = packed.check_inputs(x, y, in_game, k)
    n, m = x.shape
    interpret = resolve_interpret(interpret)
    bm = min(_BLOCK_ROWS, next_pow2(m))
    u = check_block("unroll", (1 if interpret else _UNROLL) if unroll is None else unroll)
    split = (not interpret) if split_self_range is None else bool(split_self_range)
    mq, mc = round_up(m, bm), round_up(m, u)
    if padded is not None:
        xq, yq, xc, yc = padded
    else:
        xq = jnp.pad(x, ((0, 0), (0, mq - m)))
        yq = jnp.pad(y, ((0, 0), (0, mq - m)))
        # Candidates out of the game and the padding sit at +inf: their distance is +inf.
        xc = jnp.pad(jnp.where(in_game, x, INF), ((0, 0), (0, mc - m)), constant_values=INF)
        yc = jnp.pad(jnp.where(in_game, y, INF), ((0, 0), (0, mc - m)), constant_values=INF)

    kernel = functools.partial(
        _nearest_k_kernel, k=k, bm=bm, unroll=u, mc=mc, split=split, m=m,
        key_bits=packed.key_bits(mc, packed_keys),
    )  # fmt: skip
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n, m * k), jnp.int32),
        grid=(n, mq // bm),
        in_specs=[
            pl.BlockSpec((None, bm), lambda e, b: (e, b)),
            pl.BlockSpec((None, bm), lambda e, b: (e, b)),
            pl.BlockSpec((None, mc), lambda e, b: (e, 0)),
            pl.BlockSpec((None, mc), lambda e, b: (e, 0)),
        ],
        out_specs=pl.BlockSpec((None, m * k), lambda e, b: (e, 0)),
        compiler_params=compiler_params(bm),
        cost_estimate=pl.CostEstimate(
            flops=int(n * mq * mc * (5 + 5 * k)),
            transcendentals=0,
            bytes_accessed=int(4 * n * (2 * mq + 2 * mc * (mq // bm) + k * mq)),
        ),
        interpret=interpret,
        name="tag_nearest_k",
    )(xq, yq, xc, yc)
    return out.reshape(n, m, k)
