"""Categorical log-probability and entropy (forward and VJP) as Pallas (Triton) kernels,
one pass over the logits each.

`networks.log_prob_and_entropy` computes, for ``logits [N, D, K]`` (``D`` categoricals of
``K`` classes per sample) and actions ``x [N, D]``, ``lp = Σ_d log p_d(x_d)`` and ``H = Σ_d
H_d``, with a hand-written VJP ``dlogits = g_lp·(onehot − p) − g_H·p·(log p + H_d)``. XLA
compiles its forward into a log-softmax plus two reductions and its backward into a
log-softmax, a reduction and an elementwise pass, each reading or writing the whole
``[N, D, K]`` float32 array (an H200 profile of Tag A2C: ≈ 1.1 ms per iteration for
``[2.5M, 2, 21]``, 420 MB). Here each row's max, ``Σ exp``, ``Σ exp·logit`` and the
picked logit are taken in registers: the forward reads the logits once and writes
``[N]`` twice; the backward reads them once and writes the gradient once.

Experimental and opt-in (``policies.<name>.head_impl = "pallas"``) until it has been timed
on a GPU (``python -m experiments.benchmarks.dense_probe``'s training rows).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

__all__ = ["categorical_lp_ent_pallas"]

_LOW = -1e30  # padding lanes' logit: exp underflows to 0, no inf - inf


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _tile(logits_ref, n0, *, n, d, k, bn, dp, kp):
    """``[bn, dp, kp]`` logits of samples ``n0 …`` (``dp``, ``kp``: ``d``, ``k`` padded to
    powers of two; padding lanes, rows and samples read ``_LOW``), their flat indices
    (``n·d·k``, out of bounds, where masked: never written) and the mask."""
    i = n0 + lax.broadcasted_iota(jnp.int32, (bn, dp, kp), 0)
    j = lax.broadcasted_iota(jnp.int32, (bn, dp, kp), 1)
    c = lax.broadcasted_iota(jnp.int32, (bn, dp, kp), 2)
    ok = (i < n) & (j < d) & (c < k)
    flat = jnp.where(ok, (i * d + j) * k + c, n * d * k)
    return pl_triton.load(logits_ref.at[flat], mask=ok, other=_LOW), flat, ok, c


def _row_stats(z, c, x_ref, n0, *, n, d, bn, dp):
    """Per ``[bn, dp]`` row: ``lse``, ``Σ p·z``, the picked logit ``z[x]``, the actions
    and the real-row mask (``d`` of the ``dp`` rows, samples before ``n``)."""
    m = jnp.max(z, axis=2, keepdims=True)
    e = jnp.exp(z - m)
    s = jnp.sum(e, axis=2)
    t = jnp.sum(e * z, axis=2)
    lse = m[:, :, 0] + jnp.log(s)
    i = n0 + lax.broadcasted_iota(jnp.int32, (bn, dp), 0)
    j = lax.broadcasted_iota(jnp.int32, (bn, dp), 1)
    real = (i < n) & (j < d)
    xs = pl_triton.load(x_ref.at[jnp.where(real, i * d + j, n * d)], mask=real, other=0)
    picked = jnp.sum(jnp.where(c == xs[:, :, None], z, 0.0), axis=2)
    return lse, t / s, picked, xs, real


def _fwd_kernel(logits_ref, x_ref, lp_ref, ent_ref, *, n, d, k, bn, dp, kp):
    n0 = pl.program_id(0) * bn
    z, _, _, c = _tile(logits_ref, n0, n=n, d=d, k=k, bn=bn, dp=dp, kp=kp)
    lse, mean_z, picked, _, real = _row_stats(z, c, x_ref, n0, n=n, d=d, bn=bn, dp=dp)
    rows = n0 + lax.broadcasted_iota(jnp.int32, (bn,), 0)
    inside = rows < n
    lp = jnp.sum(jnp.where(real, picked - lse, 0.0), axis=1)
    ent = jnp.sum(jnp.where(real, lse - mean_z, 0.0), axis=1)
    pl_triton.store(lp_ref.at[pl.ds(n0, bn)], lp, mask=inside)
    pl_triton.store(ent_ref.at[pl.ds(n0, bn)], ent, mask=inside)


def _bwd_kernel(logits_ref, x_ref, glp_ref, gent_ref, out_ref, *, n, d, k, bn, dp, kp):
    n0 = pl.program_id(0) * bn
    z, flat, ok, c = _tile(logits_ref, n0, n=n, d=d, k=k, bn=bn, dp=dp, kp=kp)
    lse, mean_z, _, xs, _ = _row_stats(z, c, x_ref, n0, n=n, d=d, bn=bn, dp=dp)
    rows = n0 + lax.broadcasted_iota(jnp.int32, (bn,), 0)
    inside = rows < n
    g_lp = pl_triton.load(glp_ref.at[pl.ds(n0, bn)], mask=inside, other=0.0)
    g_h = pl_triton.load(gent_ref.at[pl.ds(n0, bn)], mask=inside, other=0.0)
    lp = z - lse[:, :, None]
    p = jnp.exp(lp)
    ent_d = (lse - mean_z)[:, :, None]
    hit = (c == xs[:, :, None]).astype(jnp.float32)
    grad = g_lp[:, None, None] * (hit - p) - g_h[:, None, None] * p * (lp + ent_d)
    pl_triton.store(out_ref.at[flat], grad, mask=ok)


def _call(kernel, args, out_shape, n, d, k, block, interpret, name):
    dp, kp = _pow2(d), _pow2(k)
    bn = _pow2(max(1, block // (dp * kp)))
    kern = functools.partial(kernel, n=n, d=d, k=k, bn=bn, dp=dp, kp=kp)
    return pl.pallas_call(
        kern,
        out_shape=out_shape,
        grid=(pl.cdiv(n, bn),),
        compiler_params=pl_triton.CompilerParams(num_warps=4, num_stages=1),
        interpret=interpret,
        name=name,
    )(*args)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _lp_ent(logits, x, block, interpret):
    n, d, k = logits.shape
    out = jax.ShapeDtypeStruct((n,), jnp.float32)
    args = (logits.reshape(-1), x.astype(jnp.int32).reshape(-1))
    return _call(_fwd_kernel, args, (out, out), n, d, k, block, interpret, "categorical_lp_ent")


def _lp_ent_fwd(logits, x, block, interpret):
    return _lp_ent(logits, x, block, interpret), (logits, x)


def _lp_ent_bwd(block, interpret, res, g):
    logits, x = res
    n, d, k = logits.shape
    args = (
        logits.reshape(-1),
        x.astype(jnp.int32).reshape(-1),
        g[0].astype(jnp.float32),
        g[1].astype(jnp.float32),
    )
    out = jax.ShapeDtypeStruct((n * d * k,), jnp.float32)
    grad = _call(_bwd_kernel, args, out, n, d, k, block, interpret, "categorical_lp_ent_vjp")
    return grad.reshape(n, d, k), None


_lp_ent.defvjp(_lp_ent_fwd, _lp_ent_bwd)


def categorical_lp_ent_pallas(
    logits: jax.Array, x: jax.Array, *, block: int = 4096, interpret: bool | None = None
) -> tuple[jax.Array, jax.Array]:
    """``(Σ_d log p_d(x_d), Σ_d H_d)``, both ``[...]``, for float32 ``logits [..., D, K]``
    and int ``x [..., D]``, differentiable in ``logits`` (the VJP is the second kernel).
    ``block``: logits lanes per program (rows of ``K`` padded to a power of two);
    ``interpret``: Pallas interpret mode, ``None``: only when the default backend is the
    CPU."""
    if logits.ndim < 2 or x.shape != logits.shape[:-1]:
        raise ValueError(
            f"categorical_lp_ent_pallas takes logits [..., D, K] and x [..., D]; got "
            f"{logits.shape} and {x.shape}"
        )
    lead = logits.shape[:-2]
    d, k = logits.shape[-2:]
    interpret = jax.default_backend() == "cpu" if interpret is None else bool(interpret)
    lp, ent = _lp_ent(
        logits.astype(jnp.float32).reshape(-1, d, k), x.reshape(-1, d), int(block), interpret
    )
    return lp.reshape(lead), ent.reshape(lead)
