"""TagContinuous's full observation, in several formulations of one function.

`TagContinuous.observe` with ``use_full_observation=True`` gives every agent ``i`` the
array ``[7, M−1]`` (feature-major: for each of the 7 features ``f``, the ``M−1`` other
agents ``j`` in id order skipping ``i``), flattened, then the time: ``[7(M−1)+1]``::

    out[i, f·(M−1) + j'] = (feats[f, j] − feats[f, i]·rel_f) / scale[f] · keep_if
    out[i, 7(M−1)]       = time · g[i]

with ``j = j' + (j' >= i)``, ``rel_f = 1`` for the five relative features ``f < 5`` (0
for type and in-game), ``keep_if = g[i]`` for ``f < 5`` and 1 otherwise (an agent out of
the game sees zeros in its relative features and time). Every form below computes these
float32 values with the same operations in the same order (the division as below), so
they agree bit for bit (``−0.0`` included) with `full_obs_gather`, the env's original.

Dimension letters: ``M`` agents, ``n`` rows asked for (agents observing), ``D =
7(M−1)+1`` values per observation, ``BN × BD`` the Pallas kernel's output tile.

Forms (one env; the env vmaps them over envs; the cost is writing ``4nD`` bytes):

* `full_obs_gather`: the original: a static gather ``feats[:, others]`` ``[7, n, M−1]``,
  a transpose to ``[n, 7, M−1]``, the arithmetic, a reshape and a concatenation of the
  time column. Under `jax.vmap` the gather's output has the env axis minor (JAX batches a
  gather with unbatched indices that way); XLA writes the output in several passes (on
  the CPU: the gather fusion, then one concatenate-and-slice pass per group).
* `full_obs_iota`: elementwise over ``[n, D]`` and gather-free: each term a broadcast of
  a per-column ``[D]`` vector (feature ``f = c // (M−1)`` and slot ``j' = c % (M−1)`` as
  constants, ``feats[f, j']``, ``feats[f, j'+1]``, the scale) or of a per-row ``[n]``
  vector (the observing agent's own features). One loop fusion per group, env axis
  leading, output written once (CPU HLO).
* `full_obs_take`: the same with the values gathered from the flat ``feats`` at
  ``f·M + j`` on an ``[n, D]`` iota. One fusion on the CPU, but under `jax.vmap` the
  gathers produce the env axis minor and the fusion ends in a transpose.
* `full_obs_select`: in ``[n, 7, M−1]`` layout: ``feats[f, j]`` is a select between the
  two shifted rows ``feats[:, :−1]`` and ``feats[:, 1:]`` on ``j' >= i``; then reshape,
  pad and the time column by a select. One loop fusion per group (CPU HLO).
* `full_obs_pallas`: a Pallas (Triton) kernel writing ``[BN, BD]`` tiles of the output in
  its final layout (masked at the edges), gathering from the ``7M`` features (L1/L2
  resident). Interpret mode off GPU.

``rows`` is a static sequence of agent ids (``range(lo, hi)`` for a contiguous group, or
any ids, e.g. a group with non-contiguous tagger ids); row ``r`` of the result observes
agent ``rows[r]``.

Division and bit-exactness: XLA's algebraic simplifier turns ``x / broadcast(s)`` into
``x * broadcast(1/s)`` on the CPU backend only (``executing_on_cpu``; XLA's own TODO says
it should apply everywhere), and ``x / constant`` into ``x * (1/constant)`` on every
backend. The two can differ by one ulp. So the reference (`full_obs_gather`, dividing by
a ``[7]`` scale broadcast) is computed as ``x * (1/scale)`` on the CPU, or where the
scale is a compile-time constant (params closed over rather than passed in), and as a
true division otherwise (GPU with traced params). The other forms make that choice
explicit (``reciprocal``, see `reference_uses_reciprocal`) instead of relying on XLA's
pattern matching, which also depends on shapes (a broadcast to ``[1, D]`` is simplified
to a reshape first). On GPU the Pallas kernel divides with ``div.rn.f32`` (Triton's own
``/`` is the approximate ``div.full.f32``), as XLA does. The tests check every form bit
for bit on the CPU; `experiments.benchmarks.full_obs_probe` checks them on the GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

__all__ = [
    "IMPLS",
    "NUM_FEATURES",
    "NUM_RELATIVE",
    "full_obs",
    "full_obs_gather",
    "full_obs_iota",
    "full_obs_pallas",
    "full_obs_select",
    "full_obs_take",
    "obs_size",
    "reference_uses_reciprocal",
]

#: The implementations `full_obs` dispatches to.
IMPLS = ("gather", "iota", "take", "select", "pallas")
#: Features per other agent: Δx, Δy, Δspeed, Δacceleration, Δθ, type, in-game.
NUM_FEATURES = 7
#: The first ``NUM_RELATIVE`` features are relative (``value_j − value_i``, scaled).
NUM_RELATIVE = 5

_RELATIVE = np.array([1] * NUM_RELATIVE + [0] * (NUM_FEATURES - NUM_RELATIVE), np.float32)


def obs_size(num_agents: int) -> int:
    """``D = 7(M−1)+1`` values per full observation of ``M`` agents."""
    return NUM_FEATURES * (num_agents - 1) + 1


def reference_uses_reciprocal(constant_scale: bool, backend: str | None = None) -> bool:
    """Whether XLA compiles `full_obs_gather`'s ``x / broadcast(scale)`` into
    ``x * broadcast(1/scale)``: on the CPU backend always, elsewhere only when the scale is
    a compile-time constant (see the module docstring). ``backend`` defaults to
    `jax.default_backend`."""
    backend = jax.default_backend() if backend is None else backend
    return bool(constant_scale) or backend == "cpu"


def _scaled(diff: jax.Array, scale: jax.Array, reciprocal: bool | None) -> jax.Array:
    """``diff / scale`` (``scale`` broadcastable), or ``diff * (1/scale)`` with
    ``reciprocal``; ``None``: `reference_uses_reciprocal` for a traced scale."""
    if reciprocal is None:
        reciprocal = reference_uses_reciprocal(False)
    if reciprocal:
        return diff * (jnp.float32(1.0) / scale)
    return diff / scale


def _row_ids(rows: Sequence[int], m: int) -> tuple[np.ndarray, int | None]:
    """``rows`` as an int32 array ``[n]`` and its first id if contiguous (else None)."""
    ids = np.asarray(tuple(rows), np.int32).reshape(-1)
    if ids.size == 0 or np.any(ids < 0) or np.any(ids >= m) or np.unique(ids).size != ids.size:
        raise ValueError(f"rows must be distinct agent ids in [0, {m - 1}], got {tuple(rows)}")
    contiguous = bool(np.all(np.diff(ids) == 1))
    return ids, (int(ids[0]) if contiguous else None)


def _check(feats: jax.Array, scale: jax.Array, g: jax.Array) -> int:
    if feats.ndim != 2 or feats.shape[0] != NUM_FEATURES or feats.shape[1] < 2:
        raise ValueError(f"feats must be [{NUM_FEATURES}, M] with M >= 2, got {feats.shape}")
    m = feats.shape[1]
    if scale.shape != (NUM_FEATURES,):
        raise ValueError(f"scale must be [{NUM_FEATURES}], got {scale.shape}")
    if g.shape != (m,):
        raise ValueError(f"g must be [M] = [{m}], got {g.shape}")
    return m


def _own(x: jax.Array, ids: np.ndarray, lo: int | None) -> jax.Array:
    """``x[..., rows]`` along the last axis: a static slice when contiguous."""
    if lo is not None:
        return x[..., lo : lo + ids.size]
    return x[..., ids]


def _row_iota(ids: np.ndarray, lo: int | None, shape: tuple[int, ...], axis: int) -> jax.Array:
    """The observing agent id ``i`` of each row, broadcast to ``shape`` (rows on ``axis``)."""
    if lo is not None:
        return _iota(shape, axis) + jnp.int32(lo)
    bshape = [1] * len(shape)
    bshape[axis] = ids.size
    return jnp.broadcast_to(jnp.asarray(ids.reshape(bshape)), shape)


def _iota(shape: tuple[int, ...], axis: int) -> jax.Array:
    """An int32 iota of ``shape`` along ``axis``."""
    return jax.lax.broadcasted_iota(jnp.int32, shape, axis)


# --------------------------------------------------------------------------------- gather
def full_obs_gather(
    feats: jax.Array, rows: Sequence[int], scale: jax.Array, g: jax.Array, time: jax.Array
) -> jax.Array:
    """The original form (the reference): ``[n, D]`` float32.

    Args:
      feats: ``[7, M]`` float32: x, y, speed, acceleration, direction, type, in-game.
      rows: static agent ids observing (``n`` of them), e.g. ``range(M)``.
      scale: ``[7]`` float32 divisors of the features (1 for type and in-game).
      g: ``[M]`` float32 in-game flags (1 or 0).
      time: ``[]`` float32, ``t/E``.
    """
    m = _check(feats, scale, g)
    ids, lo = _row_ids(rows, m)
    n = ids.size
    relative = _RELATIVE[None, :, None]  # [1, 7, 1]
    own = _own(feats, ids, lo).T[:, :, None]  # [n, 7, 1]
    g_own = _own(g, ids, lo)[:, None, None]  # [n, 1, 1]
    # neighbour slot j' of agent i is agent j' + (j' >= i): one static gather.
    cols = jnp.arange(m - 1, dtype=jnp.int32)[None, :]
    rows_i = (jnp.arange(lo, lo + n, dtype=jnp.int32) if lo is not None else jnp.asarray(ids))[
        :, None
    ]
    others = cols + (cols >= rows_i)  # [n, M-1]
    other = jnp.transpose(feats[:, others], (1, 0, 2))  # [n, 7, M-1]
    keep = jnp.where(relative > 0, g_own, 1.0)  # out of game: relative parts zero
    out = (other - own * relative) / scale[None, :, None] * keep  # [n, 7, M-1]
    return jnp.concatenate([out.reshape(n, -1), (time * g_own[:, 0])], axis=1)


# ----------------------------------------------------------------------------------- iota
def _columns(feats: jax.Array, scale: jax.Array) -> tuple[jax.Array, ...]:
    """Per-column ``[D]`` vectors: feature ``f`` (7 in the time column) and slot ``j'``
    (NumPy constants), the values ``feats[f, j']`` and ``feats[f, j'+1]`` (0 in the time
    column) and the scale (1 in the time column)."""
    m = feats.shape[1]
    c = np.arange(obs_size(m), dtype=np.int32)  # static: constants of the program
    f = c // (m - 1)
    jp = c - f * (m - 1)
    lo_v = jnp.pad(feats[:, :-1].reshape(-1), (0, 1))
    hi_v = jnp.pad(feats[:, 1:].reshape(-1), (0, 1))
    scale_c = jnp.concatenate([jnp.repeat(scale, m - 1), jnp.ones((1,), scale.dtype)])
    return f, jp, lo_v, hi_v, scale_c


def full_obs_iota(
    feats: jax.Array,
    rows: Sequence[int],
    scale: jax.Array,
    g: jax.Array,
    time: jax.Array,
    *,
    reciprocal: bool | None = None,
) -> jax.Array:
    """Elementwise over ``[n, D]``, gather-free: ``[n, D]`` float32.

    Arguments as `full_obs_gather`; ``reciprocal``: multiply by ``1/scale`` instead of
    dividing (``None``: as XLA compiles the reference for a traced scale, see
    `reference_uses_reciprocal`). Every term is a broadcast of a per-column ``[D]``
    vector (`_columns`) or a per-row ``[n]`` vector (the observing agents' own features):
    ``feats[f, j]`` is ``hi[c]`` where ``j' >= i`` else ``lo[c]``, the own feature
    ``feats[f, i]`` a select over the 7 row vectors on ``f``, the time column a select on
    ``c = D−1``. No gather, transpose, reshape or concatenation of ``[n, D]`` arrays, so
    under `jax.vmap` too the output is one elementwise loop with the env axis leading.
    """
    m = _check(feats, scale, g)
    ids, lo = _row_ids(rows, m)
    n = ids.size
    f, jp, lo_v, hi_v, scale_c = (x[None, :] for x in _columns(feats, scale))  # [1, D]
    i = _row_iota(ids, lo, (n, 1), 0)  # [n, 1] observing agent
    own_rows = _own(feats, ids, lo)  # [7, n]
    g_own = _own(g, ids, lo)[:, None]  # [n, 1]
    own = own_rows[NUM_FEATURES - 1][:, None]  # [n, 1] -> [n, D] below
    for k in range(NUM_FEATURES - 2, -1, -1):
        own = jnp.where(f == k, own_rows[k][:, None], own)
    other = jnp.where(jp >= i, hi_v, lo_v)  # [n, D]
    relative = f < NUM_RELATIVE  # [1, D]
    keep = jnp.where(relative, g_own, 1.0)
    val = _scaled(other - own * relative.astype(jnp.float32), scale_c, reciprocal) * keep
    return jnp.where(f == NUM_FEATURES, time * g_own, val)


# ----------------------------------------------------------------------------------- take
def full_obs_take(
    feats: jax.Array,
    rows: Sequence[int],
    scale: jax.Array,
    g: jax.Array,
    time: jax.Array,
    *,
    reciprocal: bool | None = None,
) -> jax.Array:
    """Elementwise over an ``[n, D]`` iota with flat gathers: ``[n, D]`` float32.

    Arguments as `full_obs_iota`. Per element ``(r, c)``: ``i = rows[r]``, ``f = c //
    (M−1)``, ``j' = c − f(M−1)``, ``j = j' + (j' >= i)``; the value ``feats.ravel()[f·M + j]``
    (``f`` clamped to 6 in the time column, which a select replaces). Under `jax.vmap`
    JAX batches a gather with unbatched indices by making the env axis the minor axis of
    the gather's output, so XLA transposes it back (inside the same fusion on the CPU).
    """
    m = _check(feats, scale, g)
    ids, lo = _row_ids(rows, m)
    n, d = ids.size, obs_size(m)
    shape = (n, d)
    i = _row_iota(ids, lo, shape, 0)  # [n, D] observing agent
    c = _iota(shape, 1)  # [n, D] column
    f = jnp.minimum(c // (m - 1), NUM_FEATURES - 1)  # feature (6 in the time column)
    jp = c - f * (m - 1)
    j = jnp.minimum(jp + (jp >= i).astype(jnp.int32), m - 1)  # the other agent
    flat = feats.reshape(-1)  # [7M]
    other = flat.at[f * m + j].get(mode="promise_in_bounds")  # [n, D]
    own = flat.at[f * m + i].get(mode="promise_in_bounds")  # [n, D]
    relative = f < NUM_RELATIVE
    g_own = g.at[i].get(mode="promise_in_bounds")  # [n, D]
    keep = jnp.where(relative, g_own, 1.0)
    scale_c = _columns(feats, scale)[4][None, :]  # [1, D]
    val = _scaled(other - own * relative.astype(jnp.float32), scale_c, reciprocal) * keep
    return jnp.where(c == d - 1, time * g_own, val)


# --------------------------------------------------------------------------------- select
def full_obs_select(
    feats: jax.Array,
    rows: Sequence[int],
    scale: jax.Array,
    g: jax.Array,
    time: jax.Array,
    *,
    reciprocal: bool | None = None,
) -> jax.Array:
    """Gather-free: a select between the shifted rows, ``[n, D]`` float32.

    Arguments as `full_obs_iota`. ``feats[f, j' + (j' >= i)]`` is ``feats[f, j'+1]``
    where ``j' >= i`` else ``feats[f, j']``: two static slices broadcast over the rows.
    """
    m = _check(feats, scale, g)
    ids, lo = _row_ids(rows, m)
    n, d = ids.size, obs_size(m)
    relative = _RELATIVE[None, :, None]  # [1, 7, 1]
    own = _own(feats, ids, lo).T[:, :, None]  # [n, 7, 1]
    g_own = _own(g, ids, lo)[:, None, None]  # [n, 1, 1]
    shape3 = (n, NUM_FEATURES, m - 1)
    jp = _iota(shape3, 2)
    i = _row_iota(ids, lo, shape3, 0)
    other = jnp.where(jp >= i, feats[None, :, 1:], feats[None, :, :-1])  # [n, 7, M-1]
    keep = jnp.where(relative > 0, g_own, 1.0)
    out = _scaled(other - own * relative, scale[None, :, None], reciprocal) * keep
    out = jnp.pad(out.reshape(n, d - 1), ((0, 0), (0, 1)))  # [n, D]
    c = _iota((n, d), 1)
    return jnp.where(c == d - 1, time * g_own[:, 0], out)


# --------------------------------------------------------------------------------- pallas
def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def _check_block(name: str, value: int) -> int:
    value = int(value)
    if value < 1 or value & (value - 1):
        raise ValueError(f"{name} must be a power of two >= 1 (Triton tiles), got {value}")
    return value


def _div_rn(x: jax.Array, y: jax.Array) -> jax.Array:
    """IEEE round-to-nearest float32 division on GPU (Triton's ``/`` is approximate)."""
    [out] = pl_triton.elementwise_inline_asm(
        "div.rn.f32 $0, $1, $2;",
        args=[x, y],
        constraints="=f,f,f",
        pack=1,
        result_shape_dtypes=[jax.ShapeDtypeStruct(x.shape, jnp.float32)],
    )
    return out


def _scale(diff: jax.Array, sc: jax.Array, reciprocal: bool, interpret: bool) -> jax.Array:
    """``diff · sc`` (``sc`` already ``1/scale``) with ``reciprocal``, else ``diff / sc``:
    `_div_rn` compiled, ``/`` in interpret mode (the CPU's division is exact)."""
    if reciprocal:
        return diff * sc
    if interpret:
        return diff / sc
    return _div_rn(diff, jnp.broadcast_to(sc, diff.shape))  # the asm takes equal shapes


def _full_obs_kernel(
    feats_ref, scale_ref, g_ref, time_ref, *refs, m, n, bn, bd, lo, reciprocal, interpret
):
    """One ``[BN, BD]`` tile of one env's ``[n, D]`` observations (masked at the edges).

    ``feats_ref [7M]`` flat features, ``scale_ref [8]`` (the scale, or ``1/scale`` with
    ``reciprocal``; then 1 for the time column), ``g_ref [M]``, ``time_ref [1]``,
    optional ``ids_ref [n]`` (rows not contiguous), ``out_ref [n, D]``.
    """
    if lo is None:
        ids_ref, out_ref = refs
    else:
        (out_ref,) = refs
    d = obs_size(m)
    r0 = pl.program_id(0) * bn
    c0 = pl.program_id(1) * bd
    rr = r0 + jax.lax.broadcasted_iota(jnp.int32, (bn, bd), 0)  # [BN, BD] local row
    c = c0 + jax.lax.broadcasted_iota(jnp.int32, (bn, bd), 1)  # [BN, BD] column
    inside = (rr < n) & (c < d)
    if lo is None:
        i = ids_ref[jnp.minimum(rr, n - 1)]
    else:
        i = jnp.minimum(rr, n - 1) + lo
    f = jnp.minimum(c // (m - 1), NUM_FEATURES)  # 7 in the time column (and past it)
    fc = jnp.minimum(f, NUM_FEATURES - 1)
    jp = c - fc * (m - 1)
    j = jnp.clip(jp + (jp >= i).astype(jnp.int32), 0, m - 1)
    other = feats_ref[fc * m + j]
    own = feats_ref[fc * m + i]
    g_own = g_ref[i]
    s = scale_ref[f]
    relative = f < NUM_RELATIVE
    keep = jnp.where(relative, g_own, 1.0)
    diff = other - own * relative.astype(jnp.float32)
    q = _scale(diff, s, reciprocal, interpret)
    val = jnp.where(f == NUM_FEATURES, time_ref[0] * g_own, q * keep)
    pl_triton.store(out_ref.at[pl.ds(r0, bn), pl.ds(c0, bd)], val, mask=inside)


def full_obs_pallas(
    feats: jax.Array,
    rows: Sequence[int],
    scale: jax.Array,
    g: jax.Array,
    time: jax.Array,
    *,
    reciprocal: bool | None = None,
    block_rows: int | None = None,
    block_cols: int | None = None,
    num_warps: int | None = None,
    interpret: bool | None = None,
) -> jax.Array:
    """The Pallas (Triton) kernel: ``[n, D]`` float32, written once in its final layout.

    Arguments as `full_obs_iota` (``reciprocal``: multiply by ``1/scale``, computed by
    XLA outside the kernel, instead of dividing with ``div.rn.f32``), and:
      block_rows, block_cols: the ``[BN, BD]`` output tile, powers of two (default
        ``min(16, next_pow2(n))`` × ``min(256, next_pow2(D))``); grid
        ``(ceil(n/BN), ceil(D/BD))`` per env (Pallas prepends the env axis under vmap).
      num_warps: Triton warps (default 4).
      interpret: Pallas interpret mode; ``None``: only when the default backend is CPU.
    """
    m = _check(feats, scale, g)
    ids, lo = _row_ids(rows, m)
    n, d = ids.size, obs_size(m)
    interpret = jax.default_backend() == "cpu" if interpret is None else bool(interpret)
    bn = _check_block("block_rows", min(16, _next_pow2(n)) if block_rows is None else block_rows)
    bd = _check_block("block_cols", min(256, _next_pow2(d)) if block_cols is None else block_cols)
    reciprocal = reference_uses_reciprocal(False) if reciprocal is None else bool(reciprocal)
    scale = scale.astype(jnp.float32)
    if reciprocal:
        scale = jnp.float32(1.0) / scale
    scale8 = jnp.concatenate([scale, jnp.ones((1,), jnp.float32)])  # [8], 1 for the time
    args = [
        feats.astype(jnp.float32).reshape(-1),
        scale8,
        g.astype(jnp.float32),
        jnp.reshape(time, (1,)).astype(jnp.float32),
    ]
    if lo is None:
        args.append(jnp.asarray(ids))
    kernel = functools.partial(
        _full_obs_kernel,
        m=m,
        n=n,
        bn=bn,
        bd=bd,
        lo=lo,
        reciprocal=reciprocal,
        interpret=interpret,
    )
    grid = (pl.cdiv(n, bn), pl.cdiv(d, bd))
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n, d), jnp.float32),
        grid=grid,
        compiler_params=pl_triton.CompilerParams(
            num_warps=4 if num_warps is None else int(num_warps), num_stages=1
        ),
        cost_estimate=pl.CostEstimate(
            flops=int(4 * n * d), transcendentals=0, bytes_accessed=int(4 * (n * d + 7 * m))
        ),
        interpret=interpret,
        name="tag_full_obs",
    )(*args)


# ------------------------------------------------------------------------------- dispatch
def full_obs(
    impl: str,
    feats: jax.Array,
    rows: Sequence[int],
    scale: jax.Array,
    g: jax.Array,
    time: jax.Array,
    **kwargs,
) -> jax.Array:
    """``full_obs_<impl>(feats, rows, scale, g, time, **kwargs)``; ``impl`` in `IMPLS`."""
    fns = {
        "gather": full_obs_gather,
        "iota": full_obs_iota,
        "take": full_obs_take,
        "select": full_obs_select,
        "pallas": full_obs_pallas,
    }
    if impl not in fns:
        raise ValueError(f"full_obs impl must be one of {IMPLS}, got {impl!r}")
    return fns[impl](feats, rows, scale, g, time, **kwargs)
