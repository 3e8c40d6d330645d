"""The grid search and one group's observation writer sharing launches, pipelined over envs.

At 2000 envs × (5+995) the step's two largest kernels run one after the other: the grid
search (`grid_knn`, ≈ 305 µs, bound by instruction issue: 64% issue efficiency, L1
scoreboard stalls) and the runners' observation writer (`knn_obs`'s column-tile kernel,
≈ 273 µs, bound by the L1 data pipe at 83% of its peak). Each leaves the unit the other
needs partly idle. Here the envs are cut into ``C`` chunks, and launch ``j`` runs, in one
Pallas program grid, the search of chunk ``j`` and the writer of chunk ``j − 1`` (whose
lists launch ``j − 1`` wrote), their programs interleaved so that an SM holds both kinds
at once: ``C + 1`` launches instead of two. Each program runs the same kernel body as the
separate kernels (`grid_knn._grid_knn_kernel`, `knn_obs._knn_obs_cols_kernel`) on the
env's slices of flat buffers, so the lists and the observations are the same, bit for bit.

Dimension letters: ``N`` envs, ``M`` agents, ``k`` neighbours, ``n`` observing rows
(``lo … lo + n − 1``, one contiguous group), ``D = 7k + 1`` values per observation,
``C`` chunks of envs.

Limits: the grid search's (``M <= 1024``); queries in the game only (the lists of agents
out of the game are ``−1``, `grid_knn`'s ``queries="in_game"``), so the writer needs no
in-game flag (`knn_obs`'s ``lists_in_game``).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

from environments.tag_continuous import grid_knn, knn_obs
from environments.tag_continuous import kernels as kn
from environments.tag_continuous.full_obs import NUM_FEATURES

__all__ = ["CHUNKS", "search_and_observe"]

#: Env chunks ``C`` of the pipeline (``C + 1`` launches; 1: the search, then the writer).
CHUNKS = 4

_BM = 32  # queries per search program (one warp)
_TABLE = 1024  # grid tables per env


class _Shifted:
    """A flat ref seen from ``offset``: ``ref[i]`` and ``ref.at[i]`` address ``offset + i``
    (one env's slice of a buffer of all envs)."""

    __slots__ = ("_off", "_ref")

    def __init__(self, ref, offset):
        self._ref, self._off = ref, offset

    def __getitem__(self, idx):
        return self._ref[self._off + idx]

    @property
    def at(self):
        return _ShiftedAt(self._ref, self._off)


class _ShiftedAt:
    __slots__ = ("_off", "_ref")

    def __init__(self, ref, offset):
        self._ref, self._off = ref, offset

    def __getitem__(self, idx):
        return self._ref.at[self._off + idx]


def _schedule(s: int, w: int) -> tuple[int, int, int]:
    """``(group, ratio, programs)`` interleaving ``s`` search and ``w`` writer programs:
    each group of ``ratio + 1`` consecutive programs is one search program, then
    ``ratio`` writer programs (``ratio ≈ w / s``)."""
    if s and w:
        ratio = max(1, round(w / s))
        return ratio + 1, ratio, (ratio + 1) * max(s, -(-w // ratio))
    return 1, 0, s + w


def _shared_kernel(*refs, n_in, codes_input, s_env0, s_envs, w_env0, w_envs, search, writer,
                   sizes):  # fmt: skip
    """One program of a shared launch: a search block or a writer block (see `_schedule`).

    ``refs``: ``prm, cs, sat, xc, yc, oc, x, y, table, scale, time`` (flat, all envs),
    an optional ``codes`` (the writer's lists, when not the launch's own buffer), the
    aliased ``lists, obs`` inputs if any, then the ``lists, obs`` outputs.
    """
    prm, cs, sat, xc, yc, oc, x, y, table, scale, time = refs[:11]
    codes = refs[11] if codes_input else None
    lists, obs = refs[n_in:]
    m, mp, k, n, d, blocks, wblocks = (sizes[key] for key in ("m", "mp", "k", "n", "d", "b", "wb"))
    s, w = s_envs * blocks, w_envs * wblocks
    group, ratio, _ = _schedule(s, w)
    pid = pl.program_id(0)
    if s and w:
        q = pid // group
        r = pid - q * group
        is_s, s_idx = (r == 0) & (q < s), q
        w_idx = q * ratio + r - 1
        is_w = (r > 0) & (w_idx < w)
    elif s:
        is_s, s_idx, is_w, w_idx = pid < s, pid, None, None
    else:
        is_s, s_idx, is_w, w_idx = None, None, pid < w, pid

    if s:

        @pl.when(is_s)
        def _search():
            e = s_env0 + s_idx // blocks
            b = s_idx - (s_idx // blocks) * blocks
            search(
                _Shifted(prm, e * 8), _Shifted(cs, e * _TABLE), _Shifted(sat, e * _TABLE),
                _Shifted(xc, e * 2 * mp), _Shifted(yc, e * 2 * mp), _Shifted(oc, e * 2 * mp),
                _Shifted(x, e * m), _Shifted(y, e * m), _Shifted(lists, e * m * k), block=b,
            )  # fmt: skip

    if w:

        @pl.when(is_w)
        def _write():
            e = w_env0 + w_idx // wblocks
            rb = w_idx - (w_idx // wblocks) * wblocks
            src = lists if codes is None else codes
            writer(
                _Shifted(table, e * 8 * m), _Shifted(src, e * m * k), scale,
                _Shifted(time, e), _Shifted(obs, e * n * d), program=rb,
            )  # fmt: skip


def _launch(inputs, lists_obs, codes, *, s_range, w_range, search, writer, sizes, interpret):
    """One shared launch: the search of envs ``s_range`` and the writer of ``w_range``
    (``(first, count)`` each), into ``lists_obs`` (``None``: fresh buffers) or the
    given ``(lists, obs)`` buffers, aliased."""
    n_env = inputs[0].shape[0] // 8
    lists_shape = jax.ShapeDtypeStruct((n_env * sizes["m"] * sizes["k"],), jnp.int32)
    obs_shape = jax.ShapeDtypeStruct((n_env * sizes["n"] * sizes["d"],), jnp.float32)
    args = list(inputs) + ([] if codes is None else [codes])
    aliases = {}
    if lists_obs is not None:
        aliases = {len(args): 0, len(args) + 1: 1}
        args += list(lists_obs)
    s, w = s_range[1] * sizes["b"], w_range[1] * sizes["wb"]
    kernel = functools.partial(
        _shared_kernel, n_in=len(args), codes_input=codes is not None,
        s_env0=s_range[0], s_envs=s_range[1], w_env0=w_range[0], w_envs=w_range[1],
        search=search, writer=writer, sizes=sizes,
    )  # fmt: skip
    return pl.pallas_call(
        kernel,
        out_shape=(lists_shape, obs_shape),
        grid=(_schedule(s, w)[2],),
        input_output_aliases=aliases,
        compiler_params=pl_triton.CompilerParams(num_warps=1, num_stages=1),
        interpret=interpret,
        name="tag_grid_observe",
    )(*args)


def search_and_observe(
    x: jax.Array,
    y: jax.Array,
    in_game: jax.Array,
    table: jax.Array,
    time: jax.Array,
    scale: jax.Array,
    k: int,
    *,
    lo: int,
    n: int,
    reciprocal: bool,
    chunks: int | None = None,
    rows_per_program: int | None = None,
    independent_codes: jax.Array | None = None,
    interpret: bool | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The grid search's lists of all envs and the observations of rows ``lo … lo + n − 1``.

    Args:
      x, y: ``[N, M]`` float32 positions; in_game: ``[N, M]`` bool.
      table: ``[N, 8M]`` float32, the writer's agent-major feature table
        (`knn_obs._agent_major` per env; the batched Tag step writes it).
      time: ``[N]`` float32, ``t / E``. scale: ``[7]`` float32, the features' divisors.
      k: neighbours (static). lo, n: the observing rows (static).
      reciprocal: multiply by ``1/scale`` instead of dividing (as `knn_obs_pallas`).
      chunks: ``C`` (default `CHUNKS`), at most ``N``.
      rows_per_program: the writer's ``R`` (default `knn_obs.COLS_ROWS`).
      independent_codes: probe only: ``[N, M·k]`` lists for the writer to read instead of
        the launch's own (then one launch, ``chunks`` ignored, runs the search and the
        writer of every env: the two kinds of program with no dependency).
      interpret: Pallas interpret mode (default: on the CPU backend).

    Returns:
      ``lists [N, M, k]`` int32 (``-1``: none; rows of agents out of the game all
      ``-1``), as `kernels.nearest_k_lists` with ``queries="in_game"`` per env, and
      ``obs [N, n, D]`` float32, as `knn_obs.knn_obs_pallas` with ``lists_in_game``.
    """
    k, x, y, in_game = kn._check_batched_inputs(x, y, in_game, k)
    n_env, m = x.shape
    if m > grid_knn.GRID_MAX_AGENTS:
        raise ValueError(f"the grid search handles at most {grid_knn.GRID_MAX_AGENTS} agents")
    if table.shape != (n_env, 8 * m):
        raise ValueError(f"table must be [N, 8M] = [{n_env}, {8 * m}], got {table.shape}")
    if time.shape != (n_env,):
        raise ValueError(f"time must be [N] = [{n_env}], got {time.shape}")
    if scale.shape != (NUM_FEATURES,):
        raise ValueError(f"scale must be [{NUM_FEATURES}], got {scale.shape}")
    if not (0 <= lo and n >= 1 and lo + n <= m):
        raise ValueError(f"rows lo={lo}, n={n} must lie within the {m} agents")
    c = CHUNKS if chunks is None else int(chunks)
    if not 1 <= c <= n_env:
        raise ValueError(f"chunks must be between 1 and N={n_env}, got {c}")
    if knn_obs.LAYOUT != "cols":
        raise ValueError("search_and_observe shares launches with the 'cols' writer only")
    interpret = kn._resolve_interpret(interpret)
    mp = kn._round_up(m, _BM)
    d = knn_obs.obs_size(k)
    want = knn_obs.COLS_ROWS if rows_per_program is None else int(rows_per_program)
    rows = min(knn_obs._next_pow2(want), knn_obs._next_pow2(n))
    xc, yc, oc, cs, sat, prm = grid_knn._grid_prep(x, y, in_game, interpret)
    u = 1 if interpret else grid_knn.GRID_UNROLL
    search = functools.partial(
        grid_knn._grid_knn_kernel, k=k, m=m, mp=mp, unroll=u,
        target=math.ceil(float(grid_knn.GRID_TARGET) * k), in_game_only=True,
        key_bits=max(1, ((mp if grid_knn.GRID_POSITION_KEYS else m) - 1).bit_length()),
        stats=False, position_keys=bool(grid_knn.GRID_POSITION_KEYS),
        lane_rows=bool(grid_knn.GRID_LANE_ROWS),
    )  # fmt: skip
    writer = functools.partial(
        knn_obs._knn_obs_cols_kernel, m=m, k=k, n=n, lo=lo, rows=rows, reciprocal=reciprocal,
        raw=True, in_game_lists=True, interpret=interpret,
    )  # fmt: skip
    scale = scale.astype(jnp.float32)
    if reciprocal:
        scale = jnp.float32(1.0) / scale
    scale = jnp.concatenate([scale, jnp.ones((1,), jnp.float32)])  # [8]: the time column's
    flat = lambda a: a.reshape(-1)
    inputs = (
        flat(prm), flat(cs), flat(sat), flat(xc), flat(yc), flat(oc), flat(x), flat(y),
        flat(table.astype(jnp.float32)), scale, time.astype(jnp.float32),
    )  # fmt: skip
    sizes = dict(m=m, mp=mp, k=k, n=n, d=d, b=mp // _BM, wb=-(-n // rows))
    launch = functools.partial(_launch, search=search, writer=writer, sizes=sizes,
                               interpret=interpret)  # fmt: skip
    if independent_codes is not None:
        if independent_codes.shape != (n_env, m * k):
            raise ValueError(f"independent_codes must be [N, M·k], got {independent_codes.shape}")
        codes = flat(independent_codes.astype(jnp.int32))
        lists, obs = launch(inputs, None, codes, s_range=(0, n_env), w_range=(0, n_env))
    else:
        bounds = [j * n_env // c for j in range(c + 1)]
        state = None
        for j in range(c + 1):
            s_range = (bounds[j], bounds[j + 1] - bounds[j]) if j < c else (0, 0)
            w_range = (bounds[j - 1], bounds[j] - bounds[j - 1]) if j else (0, 0)
            state = launch(inputs, state, None, s_range=s_range, w_range=w_range)
        lists, obs = state
    return lists.reshape(n_env, m, k), obs.reshape(n_env, n, d)
