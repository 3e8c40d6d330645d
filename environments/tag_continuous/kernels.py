"""Pallas kernels for TagContinuous's two neighbour searches (the env's hot paths).

They compute the functions of `environments.tag_continuous.neighbors` (the plain-JAX
reference; the tests compare them with it and with a brute-force NumPy search):

* `nearest_k` / `nearest_k_batched`: for every agent ``i``, the ``k`` nearest agents
  ``j != i`` with ``in_game[j]``, nearest first, ties by lower ``j``; padded with
  ``idx = i`` (the agent itself, so gathers stay in range) and ``valid = False`` when
  fewer than ``k`` qualify. The partial observation's neighbour list, ``O(M²)``.
* `nearest_tagger` / `nearest_tagger_batched`: for every runner, the index of its
  nearest tagger (lowest index on ties) and that squared distance. The tagging test,
  ``O(R·T)``.

"Distance" is the float32 ``dx*dx + dy*dy`` with ``dx = x_i - x_j`` (squared Euclidean,
no square root). Positions must be finite. A compiler may contract ``dx*dx + dy*dy``
into a fused multiply-add (XLA on CPU does, Triton on GPU may), which can move a
distance by one ulp against another compilation of the same formula: orders agree
except at near-ties of that size, and exactly on exactly representable inputs.

Dimension letters: ``N`` envs, ``M`` agents, ``T`` taggers, ``R`` runners, ``k``
neighbours, ``BM`` query rows per program, ``U`` candidates per loop step.

Design
------
Grid ``(N, ceil(M / BM))``: one program per env and block of ``BM`` query agents, **one
query row per lane** (``BM = 32`` rows on one warp by default). The program streams the
candidates ``j = 0, 1, …`` in increasing order (``U`` per loop step, unrolled; each a
scalar load of ``x_j, y_j`` that every lane shares), computes the ``[BM]`` distances and
inserts them into each row's sorted top-k list, held in registers as ``k`` separate
``[BM]`` vectors ``ld[0] <= … <= ld[k-1]`` (distances) and ``lj[s]`` (indices). The
insertion is a branch-free sorting network, elementwise across lanes::

    ld[s] <- min(ld[s], max(ld[s-1], d))          (2 ops)
    lj[s] <- d < ld[s-1] ? lj[s-1] : (d < ld[s] ? j : lj[s])    (1 compare, 2 selects)

Because ``j`` only grows, a candidate at the distance of a listed one goes after it:
that is exactly "ties by lower ``j``". Nothing is reduced across lanes, nothing
``[M, M]`` (nor even ``[BM, M]``) exists in memory, and the only traffic is the positions
in and ``k`` indices per agent out. Masks cost nothing: the wrapper puts candidates out
of the game, and the padding past ``M``, at ``+inf`` (distance ``+inf``, never inserted:
``inf < inf`` is false); the ``j == i`` mask is applied only in the loop over the
block's own rows (the candidate range is split in three loops when compiled).

Floors and cost, per env step and env: bytes in ``8M`` (query positions) plus ``8M``
per row block (candidate positions, from L1/L2), bytes out ``4kM``; work ``M²`` pairs at
about ``5 + 5k`` simple ops each (55 at ``k = 10``): compute-bound at ``M = 1000``.

Measured (H100, jax 0.11.2, Triton; default blocks, 90% of agents in game, timed in a
jitted loop; the XLA reference is `neighbors.nearest_k` vmapped over envs):

* 1000 envs x 110 agents, k = 10: 0.07 ms against 0.60 ms (8.6x; about 14M env steps/s)
* 2000 envs x 1000 agents, k = 4: 2.1 ms against 100 ms (47x)
* 2000 envs x 1000 agents, k = 10: 5.1 ms against 100 ms (19.5x; about 390k env steps/s)
* 2000 envs x 1000 agents, k = 16: 8.1 ms against 100 ms (12x)

At ``M = 1000`` that is about 390 G pairs/s, ~22 T simple ops/s, near the FP32 issue
rate: the time grows linearly in ``k`` (about 0.5 ms per slot) and block sizes hardly
matter (``BM`` 32..512, ``U`` 4..16, 1..8 warps all within 3%; at ``M = 110``, ``BM >=
256`` is 2x slower, too few programs). A first design that merged ``[BM, BC]`` distance
tiles into a running top-k by min-reductions over the tile (the textbook GPU
k-selection) ran 4-5x slower (23 ms and 0.35 ms at its best blocks): each reduction and
its broadcast back cross lanes, and a tile needs up to ``k`` rounds. Going much faster
needs fewer pairs (agents binned into grid cells, candidates visited cell by cell), not
a better merge.

`nearest_tagger` has the same layout with a running ``(d, j)`` minimum (strict ``<``,
so the lower tagger index wins ties) over taggers streamed ``U`` at a time. It is
``O(R·T)`` and memory/launch-bound: measured 0.025 ms (1000 x (10 + 100)) and 0.045 ms
(2000 x (5 + 995)) against 0.020 and 0.035-0.045 ms for the vmapped XLA reference,
which also fuses with its neighbours in the env step. Prefer the reference inside the
env unless profiling says otherwise.

Backends: ``interpret=None`` runs the kernels in Pallas interpret mode when the default
backend is the CPU (the test path) and compiles them with the Triton lowering otherwise
(the Triton `CompilerParams` are passed explicitly so Pallas does not pick Mosaic GPU).
Interpret mode defaults to ``U = 1`` and one masked loop (same results, much shorter
compile). Under `jax.vmap` Pallas adds a grid axis, so the one-env entry points work
inside a vmapped env step; the ``*_batched`` entry points put the env axis into the grid
directly (same kernel, same speed).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

__all__ = [
    "nearest_k",
    "nearest_k_batched",
    "nearest_tagger",
    "nearest_tagger_batched",
]

_INF = float("inf")


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _resolve_interpret(interpret: bool | None) -> bool:
    return jax.default_backend() == "cpu" if interpret is None else bool(interpret)


def _check_block(name: str, value: int) -> int:
    value = int(value)
    if value < 1 or value & (value - 1):
        raise ValueError(f"{name} must be a power of two >= 1 (Triton tiles), got {value}")
    return value


def _compiler_params(num_warps: int | None, num_stages: int | None, rows: int):
    if num_warps is None:
        num_warps = max(1, min(4, rows // 32))
    return pl_triton.CompilerParams(num_warps=int(num_warps), num_stages=num_stages)


# ------------------------------------------------------------------------------ nearest_k
def _nearest_k_kernel(xq_ref, yq_ref, xc_ref, yc_ref, out_ref, *, k, bm, unroll, mc, split):
    """One env, ``BM`` query rows (one per lane); writes ``out [k, BM]`` int32, -1 = none.

    ``xq/yq [BM]`` query positions; ``xc/yc [MC]`` candidate positions (``+inf`` when the
    candidate is out of the game or padding). ``split``: stream the candidates in three
    loops so that only the middle one (this block's own rows) applies the ``j != i``
    mask; otherwise one masked loop.
    """
    b = pl.program_id(1)
    rows = b * bm + lax.broadcasted_iota(jnp.int32, (bm,), 0)  # [BM]
    xq = xq_ref[...]  # [BM]
    yq = yq_ref[...]  # [BM]

    def insert(ld, lj, d, j):
        """Inserts ``(d [BM], j)`` into the sorted lists ``ld, lj`` (k-tuples of [BM])."""
        nd, nj = [], []
        before = None  # d < ld[s - 1]
        for s in range(k):
            here = d < ld[s]
            if s == 0:
                nd.append(jnp.minimum(ld[0], d))
                nj.append(jnp.where(here, j, lj[0]))
            else:
                nd.append(jnp.minimum(ld[s], jnp.maximum(ld[s - 1], d)))
                nj.append(jnp.where(before, lj[s - 1], jnp.where(here, j, lj[s])))
            before = here
        return tuple(nd), tuple(nj)

    def steps(masked):
        def step(c, carry):
            ld, lj = carry
            for u in range(unroll):
                j = c * unroll + u
                dx = xq - xc_ref[j]
                dy = yq - yc_ref[j]
                d = dx * dx + dy * dy  # [BM]
                if masked:
                    d = jnp.where(rows == j, _INF, d)
                ld, lj = insert(ld, lj, d, j)
            return ld, lj

        return step

    carry = (
        tuple(jnp.full((bm,), _INF, jnp.float32) for _ in range(k)),
        tuple(jnp.full((bm,), -1, jnp.int32) for _ in range(k)),
    )
    num_steps = mc // unroll
    if split:
        lo = (b * bm) // unroll  # first step that may hold one of this block's rows
        hi = jnp.minimum(((b + 1) * bm + unroll - 1) // unroll, num_steps)
        carry = lax.fori_loop(0, lo, steps(False), carry)
        carry = lax.fori_loop(lo, hi, steps(True), carry)
        ld, lj = lax.fori_loop(hi, num_steps, steps(False), carry)
    else:
        ld, lj = lax.fori_loop(0, num_steps, steps(True), carry)
    for s in range(k):
        out_ref[s, :] = jnp.where(ld[s] < _INF, lj[s], -1)


def nearest_k_batched(
    x: jax.Array,
    y: jax.Array,
    in_game: jax.Array,
    k: int,
    *,
    block_rows: int | None = None,
    block_cols: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    split_self_range: bool | None = None,
    interpret: bool | None = None,
) -> tuple[jax.Array, jax.Array]:
    """`nearest_k` for ``N`` envs at once, the env axis in the kernel's grid.

    Args:
      x, y: ``[N, M]`` float32 positions (finite).
      in_game: ``[N, M]`` bool; only agents with ``in_game[n, j]`` are candidates.
      k: neighbours per agent (static), ``k >= 1`` (``k > M - 1`` pads).
      block_rows: query rows per program ``BM``, one per lane (power of two; default
        ``min(32, next_pow2(M))``).
      block_cols: candidates per loop step ``U``, unrolled (power of two; default 8
        compiled, 1 in interpret mode).
      num_warps: Triton warps (default ``max(1, min(4, BM // 32))``); num_stages: Triton
        pipelining stages (default Triton's). Both ignored in interpret mode.
      split_self_range: stream candidates in three loops so only the block's own range
        pays the ``j != i`` mask (default: compiled yes, interpret no; same results).
      interpret: Pallas interpret mode; ``None``: only when the default backend is CPU.

    Returns:
      ``idx [N, M, k]`` int32 and ``valid [N, M, k]`` bool, as `nearest_k` per env.
    """
    k = int(k)
    if k < 1:
        raise ValueError(f"nearest_k needs k >= 1, got k={k}")
    x = jnp.asarray(x, jnp.float32)
    y = jnp.asarray(y, jnp.float32)
    in_game = jnp.asarray(in_game)
    if x.ndim != 2 or y.shape != x.shape or in_game.shape != x.shape:
        raise ValueError(
            "nearest_k_batched needs x, y, in_game of one shape [N, M], got "
            f"{x.shape}, {y.shape}, {in_game.shape}"
        )
    if in_game.dtype != jnp.bool_:
        raise ValueError(f"in_game must be bool, got {in_game.dtype}")
    n, m = x.shape
    if m < 1:
        raise ValueError("nearest_k needs at least one agent")
    interpret = _resolve_interpret(interpret)
    bm = _check_block("block_rows", min(32, _next_pow2(m)) if block_rows is None else block_rows)
    default_u = 1 if interpret else 8
    u = _check_block("block_cols", default_u if block_cols is None else block_cols)
    split = (not interpret) if split_self_range is None else bool(split_self_range)
    mq, mc = _round_up(m, bm), _round_up(m, u)
    xq = jnp.pad(x, ((0, 0), (0, mq - m)))
    yq = jnp.pad(y, ((0, 0), (0, mq - m)))
    # Candidates out of the game and the padding sit at +inf: their distance is +inf.
    xc = jnp.pad(jnp.where(in_game, x, _INF), ((0, 0), (0, mc - m)), constant_values=_INF)
    yc = jnp.pad(jnp.where(in_game, y, _INF), ((0, 0), (0, mc - m)), constant_values=_INF)

    kernel = functools.partial(_nearest_k_kernel, k=k, bm=bm, unroll=u, mc=mc, split=split)
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n, k, mq), jnp.int32),
        grid=(n, mq // bm),
        in_specs=[
            pl.BlockSpec((None, bm), lambda e, b: (e, b)),
            pl.BlockSpec((None, bm), lambda e, b: (e, b)),
            pl.BlockSpec((None, mc), lambda e, b: (e, 0)),
            pl.BlockSpec((None, mc), lambda e, b: (e, 0)),
        ],
        out_specs=pl.BlockSpec((None, k, bm), lambda e, b: (e, 0, b)),
        compiler_params=_compiler_params(num_warps, num_stages, bm),
        cost_estimate=pl.CostEstimate(
            flops=int(n * mq * mc * (5 + 5 * k)),
            transcendentals=0,
            bytes_accessed=int(4 * n * (2 * mq + 2 * mc * (mq // bm) + k * mq)),
        ),
        interpret=interpret,
        name="tag_nearest_k",
    )(xq, yq, xc, yc)
    out = jnp.swapaxes(out, 1, 2)[:, :m, :]  # [N, M, k]
    valid = out >= 0
    self_idx = jnp.arange(m, dtype=jnp.int32)[None, :, None]
    return jnp.where(valid, out, self_idx), valid


def nearest_k(
    x: jax.Array,
    y: jax.Array,
    in_game: jax.Array,
    k: int,
    *,
    block_rows: int | None = None,
    block_cols: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    split_self_range: bool | None = None,
    interpret: bool | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The ``k`` nearest other in-game agents of every agent of one env, nearest first.

    Args:
      x, y: ``[M]`` float32 positions (finite).
      in_game: ``[M]`` bool; only agents with ``in_game[j]`` are candidates.
      k: neighbours per agent (static), ``k >= 1``.
      block_rows, block_cols, num_warps, num_stages, split_self_range, interpret: as
        `nearest_k_batched`.

    Returns:
      ``idx [M, k]`` int32 and ``valid [M, k]`` bool. Row ``i`` lists the ``j != i`` with
      ``in_game[j]`` by increasing ``(x_i-x_j)² + (y_i-y_j)²`` (float32), ties by lower
      ``j``. When fewer than ``k`` qualify the row is padded with ``idx = i`` (the agent
      itself) and ``valid = False``. Rows of agents out of the game are computed alike.
      Works under `jax.vmap` (Pallas adds a grid axis).

    Example:
      >>> import jax.numpy as jnp
      >>> idx, valid = nearest_k(
      ...     jnp.array([0.0, 1.0, 3.0]), jnp.zeros(3), jnp.array([True, True, True]), 2
      ... )
      >>> idx.tolist(), valid.tolist()
      ([[1, 2], [0, 2], [1, 0]], [[True, True], [True, True], [True, True]])
    """
    x = jnp.asarray(x, jnp.float32)
    y = jnp.asarray(y, jnp.float32)
    in_game = jnp.asarray(in_game)
    if x.ndim != 1 or y.shape != x.shape or in_game.shape != x.shape:
        raise ValueError(
            f"nearest_k needs x, y, in_game of one shape [M], got {x.shape}, {y.shape}, "
            f"{in_game.shape}"
        )
    idx, valid = nearest_k_batched(
        x[None],
        y[None],
        in_game[None],
        k,
        block_rows=block_rows,
        block_cols=block_cols,
        num_warps=num_warps,
        num_stages=num_stages,
        split_self_range=split_self_range,
        interpret=interpret,
    )
    return idx[0], valid[0]


# ------------------------------------------------------------------------- nearest_tagger
def _nearest_tagger_kernel(xr_ref, yr_ref, xt_ref, yt_ref, idx_ref, d2_ref, *, br, unroll, tp):
    """One env, ``BR`` runners (one per lane); writes ``idx [BR]`` int32, ``d2 [BR]`` f32.

    Taggers are streamed in increasing index order; the strict ``<`` keeps the earlier
    (lower-index) tagger on ties. Padded taggers sit at ``+inf``.
    """
    xr = xr_ref[...]  # [BR]
    yr = yr_ref[...]  # [BR]

    def step(c, carry):
        best_d, best_j = carry
        for u in range(unroll):
            j = c * unroll + u
            dx = xr - xt_ref[j]
            dy = yr - yt_ref[j]
            d = dx * dx + dy * dy  # [BR]
            better = d < best_d
            best_d = jnp.where(better, d, best_d)
            best_j = jnp.where(better, j, best_j)
        return best_d, best_j

    init = (jnp.full((br,), _INF, jnp.float32), jnp.zeros((br,), jnp.int32))
    best_d, best_j = lax.fori_loop(0, tp // unroll, step, init)
    idx_ref[...] = best_j
    d2_ref[...] = best_d


def nearest_tagger_batched(
    x_r: jax.Array,
    y_r: jax.Array,
    x_t: jax.Array,
    y_t: jax.Array,
    *,
    block_rows: int | None = None,
    block_cols: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    interpret: bool | None = None,
) -> tuple[jax.Array, jax.Array]:
    """`nearest_tagger` for ``N`` envs at once, the env axis in the kernel's grid.

    Args:
      x_r, y_r: ``[N, R]`` float32 runner positions (finite).
      x_t, y_t: ``[N, T]`` float32 tagger positions (finite), ``T >= 1``.
      block_rows: runners per program ``BR``, one per lane (power of two; default
        ``min(128, next_pow2(R))``).
      block_cols: taggers per loop step, unrolled (power of two; default
        ``min(8, next_pow2(T))``).
      num_warps, num_stages, interpret: as `nearest_k_batched`.

    Returns:
      ``idx [N, R]`` int32 (index into the tagger arrays) and ``dist2 [N, R]`` float32.
    """
    x_r = jnp.asarray(x_r, jnp.float32)
    y_r = jnp.asarray(y_r, jnp.float32)
    x_t = jnp.asarray(x_t, jnp.float32)
    y_t = jnp.asarray(y_t, jnp.float32)
    if x_r.ndim != 2 or y_r.shape != x_r.shape:
        raise ValueError(
            f"nearest_tagger_batched needs x_r, y_r of one shape [N, R], got "
            f"{x_r.shape}, {y_r.shape}"
        )
    if x_t.ndim != 2 or y_t.shape != x_t.shape or x_t.shape[0] != x_r.shape[0]:
        raise ValueError(
            f"nearest_tagger_batched needs x_t, y_t of one shape [N, T] with the runners' N, "
            f"got {x_t.shape}, {y_t.shape} for runners {x_r.shape}"
        )
    n, r = x_r.shape
    t = x_t.shape[1]
    if t < 1:
        raise ValueError("nearest_tagger needs at least one tagger")
    if r < 1:
        raise ValueError("nearest_tagger needs at least one runner")
    br = _check_block("block_rows", min(128, _next_pow2(r)) if block_rows is None else block_rows)
    bt = _check_block("block_cols", min(8, _next_pow2(t)) if block_cols is None else block_cols)
    rp, tp = _round_up(r, br), _round_up(t, bt)
    xr = jnp.pad(x_r, ((0, 0), (0, rp - r)))
    yr = jnp.pad(y_r, ((0, 0), (0, rp - r)))
    xt = jnp.pad(x_t, ((0, 0), (0, tp - t)), constant_values=_INF)
    yt = jnp.pad(y_t, ((0, 0), (0, tp - t)), constant_values=_INF)

    kernel = functools.partial(_nearest_tagger_kernel, br=br, unroll=bt, tp=tp)
    idx, d2 = pl.pallas_call(
        kernel,
        out_shape=(
            jax.ShapeDtypeStruct((n, rp), jnp.int32),
            jax.ShapeDtypeStruct((n, rp), jnp.float32),
        ),
        grid=(n, rp // br),
        in_specs=[
            pl.BlockSpec((None, br), lambda e, b: (e, b)),
            pl.BlockSpec((None, br), lambda e, b: (e, b)),
            pl.BlockSpec((None, tp), lambda e, b: (e, 0)),
            pl.BlockSpec((None, tp), lambda e, b: (e, 0)),
        ],
        out_specs=(
            pl.BlockSpec((None, br), lambda e, b: (e, b)),
            pl.BlockSpec((None, br), lambda e, b: (e, b)),
        ),
        compiler_params=_compiler_params(num_warps, num_stages, br),
        cost_estimate=pl.CostEstimate(
            flops=int(n * rp * tp * 7),
            transcendentals=0,
            bytes_accessed=int(4 * n * (4 * rp + 2 * tp * (rp // br))),
        ),
        interpret=_resolve_interpret(interpret),
        name="tag_nearest_tagger",
    )(xr, yr, xt, yt)
    return idx[:, :r], d2[:, :r]


def nearest_tagger(
    x_r: jax.Array,
    y_r: jax.Array,
    x_t: jax.Array,
    y_t: jax.Array,
    *,
    block_rows: int | None = None,
    block_cols: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    interpret: bool | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The nearest tagger of every runner of one env.

    Args:
      x_r, y_r: ``[R]`` float32 runner positions (finite).
      x_t, y_t: ``[T]`` float32 tagger positions (finite), ``T >= 1``.
      block_rows, block_cols, num_warps, num_stages, interpret: as
        `nearest_tagger_batched`.

    Returns:
      ``idx [R]`` int32, the index (into the tagger arrays) of the tagger at the least
      ``dx*dx + dy*dy`` (float32), lowest index on ties; ``dist2 [R]`` float32, that
      squared distance. Works under `jax.vmap` (Pallas adds a grid axis).
    """
    x_r = jnp.asarray(x_r, jnp.float32)
    y_r = jnp.asarray(y_r, jnp.float32)
    x_t = jnp.asarray(x_t, jnp.float32)
    y_t = jnp.asarray(y_t, jnp.float32)
    if x_r.ndim != 1 or y_r.shape != x_r.shape or x_t.ndim != 1 or y_t.shape != x_t.shape:
        raise ValueError(
            "nearest_tagger needs x_r, y_r of one shape [R] and x_t, y_t of one shape [T], "
            f"got {x_r.shape}, {y_r.shape}, {x_t.shape}, {y_t.shape}"
        )
    idx, d2 = nearest_tagger_batched(
        x_r[None],
        y_r[None],
        x_t[None],
        y_t[None],
        block_rows=block_rows,
        block_cols=block_cols,
        num_warps=num_warps,
        num_stages=num_stages,
        interpret=interpret,
    )
    return idx[0], d2[0]
