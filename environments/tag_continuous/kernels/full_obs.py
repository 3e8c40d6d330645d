"""TagContinuous's full observation as one Pallas (Triton) kernel.

`full_obs_pallas` computes `environments.tag_continuous.obs_xla.full_obs_xla`'s ``[n,
D]`` rows (``D = 7(M−1)+1``) with the same float32 operations in the same order, written
once in their final layout as ``[BN, BD]`` tiles (masked at the edges), each element
gathering from the ``7M`` features (L1/L2 resident). The plain-JAX form writes the output
in several passes (a gather, a transpose, the arithmetic, the time column's
concatenation); this is the one pass its cost ``4nD`` bytes asks for.

Exactness: the division follows the reference's (``reciprocal``, see
`obs_xla.reference_uses_reciprocal`): a multiplication by ``1/scale`` computed by XLA
outside the kernel, or ``div.rn.f32`` on GPU (Triton's own ``/`` is approximate), as XLA
divides. So on the CPU (interpret mode) the kernel equals the reference bit for bit
(``−0.0`` included), which the tests check.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

from environments.tag_continuous.kernels.triton import div_rn, next_pow2, resolve_interpret
from environments.tag_continuous.obs_xla import (
    NUM_FEATURES,
    NUM_RELATIVE,
    check_features,
    full_obs_size,
    reference_uses_reciprocal,
    row_ids,
)

__all__ = ["full_obs_pallas", "scaled"]

#: The output tile: at most ``_BLOCK_ROWS × _BLOCK_COLS`` (fixed), 4 warps.
_BLOCK_ROWS = 16
_BLOCK_COLS = 256
_WARPS = 4


def scaled(diff: jax.Array, sc: jax.Array, reciprocal: bool, interpret: bool) -> jax.Array:
    """``diff · sc`` (``sc`` already ``1/scale``) with ``reciprocal``, else ``diff / sc``:
    `div_rn` compiled, ``/`` in interpret mode (the CPU's division is exact)."""
    if reciprocal:
        return diff * sc
    if interpret:
        return diff / sc
    return div_rn(diff, jnp.broadcast_to(sc, diff.shape))  # the asm takes equal shapes


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
    d = full_obs_size(m)
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
    q = scaled(diff, s, reciprocal, interpret)
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
    interpret: bool | None = None,
) -> jax.Array:
    """The full observation of agents ``rows``: ``[n, 7(M−1)+1]`` float32.

    Arguments as `obs_xla.full_obs_xla`, and:
      reciprocal: multiply by ``1/scale`` (computed by XLA outside the kernel) instead of
        dividing (``None``: as XLA compiles the reference for a traced scale,
        `obs_xla.reference_uses_reciprocal`).
      interpret: Pallas interpret mode; ``None``: only when the default backend is CPU.

    Grid ``(ceil(n/BN), ceil(D/BD))`` per env (Pallas prepends the env axis under vmap).
    """
    m = check_features(feats, scale, g, 2)
    ids, lo = row_ids(rows, m)
    n, d = ids.size, full_obs_size(m)
    interpret = resolve_interpret(interpret)
    bn = min(_BLOCK_ROWS, next_pow2(n))
    bd = min(_BLOCK_COLS, next_pow2(d))
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
        _full_obs_kernel, m=m, n=n, bn=bn, bd=bd, lo=lo, reciprocal=reciprocal,
        interpret=interpret,
    )  # fmt: skip
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n, d), jnp.float32),
        grid=(pl.cdiv(n, bn), pl.cdiv(d, bd)),
        compiler_params=pl_triton.CompilerParams(num_warps=_WARPS, num_stages=1),
        cost_estimate=pl.CostEstimate(
            flops=int(4 * n * d), transcendentals=0, bytes_accessed=int(4 * (n * d + 7 * m))
        ),
        interpret=interpret,
        name="tag_full_obs",
    )(*args)
