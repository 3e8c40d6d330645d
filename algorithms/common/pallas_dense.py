"""A dense layer with its bias and relu in the GEMM's epilogue, as one Pallas (Triton)
kernel: ``relu(x @ kernel + bias)`` for bfloat16 policies' hidden layers.

Why: XLA hands the ``[rows, 256] × [256, 256]`` GEMM to cuBLAS, which does not add the
bias, so every hidden layer after the first writes its GEMM output, reads it back to add
the bias and apply relu, and writes it again (an H200 profile of Tag A2C: ≈ 0.8 ms per
iteration in the rollout and 0.76 ms in the learning forward for the second layer). Here
the accumulator gets the float32 bias and relu in registers and is rounded to bfloat16
once (XLA's form rounds the GEMM output to bfloat16 before adding the bias: this one is
at least as accurate; see the tests).

`dense_relu` is the differentiable layer (`jax.custom_vjp`): the forward pass is the
kernel (``impl="pallas"``) or the same arithmetic in XLA (``impl="xla"``, the reference
and the CPU path); the backward pass is XLA's, from the saved input, kernel and output
(the relu mask is ``y > 0``), with float32 weight and bias gradients.

Experimental and opt-in (``policies.<name>.dense_impl = "pallas"``) until it has been
timed on a GPU: ``python -m experiments.benchmarks.dense_probe``.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

__all__ = ["DENSE_IMPLS", "dense_relu", "dense_relu_pallas", "dense_relu_xla"]

#: Values of a policy's ``dense_impl``.
DENSE_IMPLS = ("xla", "pallas")


def _check(x: jax.Array, kernel: jax.Array, bias: jax.Array) -> tuple[int, int, int]:
    if x.ndim != 2 or kernel.ndim != 2 or bias.ndim != 1:
        raise ValueError(
            f"dense_relu takes x [M, K], kernel [K, N], bias [N]; got shapes {x.shape}, "
            f"{kernel.shape}, {bias.shape}"
        )
    m, k = x.shape
    if kernel.shape[0] != k or bias.shape[0] != kernel.shape[1]:
        raise ValueError(
            f"dense_relu: x {x.shape}, kernel {kernel.shape} and bias {bias.shape} do not fit"
        )
    return m, k, kernel.shape[1]


def dense_relu_xla(
    x: jax.Array, kernel: jax.Array, bias: jax.Array, dtype: Any = jnp.bfloat16
) -> jax.Array:
    """``relu(x @ kernel + bias)`` ``[M, N]`` in ``dtype``: the GEMM on ``dtype`` inputs
    with float32 accumulation, the float32 bias and relu before one rounding (the
    kernel's arithmetic, in XLA)."""
    _check(x, kernel, bias)
    acc = lax.dot_general(
        x.astype(dtype),
        kernel.astype(dtype),
        (((1,), (0,)), ((), ())),
        preferred_element_type=jnp.float32,
    )
    return jnp.maximum(acc + bias.astype(jnp.float32), 0.0).astype(dtype)


def _dense_relu_kernel(x_ref, w_ref, b_ref, o_ref, *, m, bm, bn, bk, nk):
    """One ``[bm, bn]`` output tile (rows ``i·bm …``, columns ``j·bn …``); the contraction
    in ``nk`` chunks of ``bk`` into a float32 accumulator; rows past ``m`` masked."""
    r0 = pl.program_id(0) * bm
    c0 = pl.program_id(1) * bn
    rows = r0 + lax.broadcasted_iota(jnp.int32, (bm, 1), 0)

    def body(c, acc):
        k0 = pl.multiple_of(c * bk, bk)
        xt = pl_triton.load(
            x_ref.at[pl.ds(r0, bm), pl.ds(k0, bk)],
            mask=jnp.broadcast_to(rows < m, (bm, bk)),
            other=0.0,
        )
        wt = w_ref[pl.ds(k0, bk), :]
        return acc + pl_triton.dot(xt, wt, allow_tf32=False)

    acc = lax.fori_loop(0, nk, body, jnp.zeros((bm, bn), jnp.float32))
    y = jnp.maximum(acc + b_ref[...][None, :], 0.0).astype(o_ref.dtype)
    pl_triton.store(
        o_ref.at[pl.ds(r0, bm), pl.ds(c0, bn)], y, mask=jnp.broadcast_to(rows < m, (bm, bn))
    )


def dense_relu_pallas(
    x: jax.Array,
    kernel: jax.Array,
    bias: jax.Array,
    dtype: Any = jnp.bfloat16,
    *,
    block_m: int = 128,
    block_n: int | None = None,
    block_k: int | None = None,
    num_warps: int = 4,
    num_stages: int = 3,
    interpret: bool | None = None,
) -> jax.Array:
    """The Pallas kernel: ``relu(x @ kernel + bias)`` ``[M, N]`` in ``dtype``, written once.

    ``x [M, K]`` (any M: the last row block is masked), ``kernel [K, N]``, ``bias [N]``
    (float32). ``block_n`` (default ``min(128, N)``) must divide N and ``block_k`` (default
    ``min(64, K)``) K, both powers of two ≥ 16 (Triton's dot; a 256-wide layer has them).
    Grid ``(ceil(M / block_m), N / block_n)``. ``interpret``: Pallas interpret mode;
    ``None``: only when the default backend is the CPU.
    """
    m, k, n = _check(x, kernel, bias)
    block_n = min(128, n) if block_n is None else int(block_n)
    block_k = min(64, k) if block_k is None else int(block_k)
    for name, b, dim in (("block_n", block_n, n), ("block_k", block_k, k)):
        if b < 16 or b & (b - 1) or dim % b:
            raise ValueError(f"{name}={b} must be a power of two >= 16 dividing {dim}")
    if block_m < 16 or block_m & (block_m - 1):
        raise ValueError(f"block_m={block_m} must be a power of two >= 16")
    interpret = jax.default_backend() == "cpu" if interpret is None else bool(interpret)
    kern = functools.partial(
        _dense_relu_kernel, m=m, bm=block_m, bn=block_n, bk=block_k, nk=k // block_k
    )
    return pl.pallas_call(
        kern,
        out_shape=jax.ShapeDtypeStruct((m, n), dtype),
        grid=(pl.cdiv(m, block_m), n // block_n),
        in_specs=[
            pl.BlockSpec(memory_space=pl.ANY),  # x: whole, tiles loaded with a row mask
            pl.BlockSpec((k, block_n), lambda i, j: (0, j)),
            pl.BlockSpec((block_n,), lambda i, j: (j,)),
        ],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),  # tiles stored with a row mask
        compiler_params=pl_triton.CompilerParams(num_warps=num_warps, num_stages=num_stages),
        cost_estimate=pl.CostEstimate(
            flops=2 * m * k * n,
            transcendentals=0,
            bytes_accessed=int(x.dtype.itemsize * m * k + 2 * k * n + 2 * m * n),
        ),
        interpret=interpret,
        name="dense_bias_relu",
    )(x.astype(dtype), kernel.astype(dtype), bias.astype(jnp.float32))


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def dense_relu(
    x: jax.Array, kernel: jax.Array, bias: jax.Array, dtype: Any, impl: str
) -> jax.Array:
    """``relu(x @ kernel + bias)`` for ``x [..., K]``, float32 ``kernel [K, N]``, ``bias
    [N]``: ``[..., N]`` in ``dtype``, forward by ``impl`` (`DENSE_IMPLS`), backward in XLA
    with float32 weight and bias gradients."""
    x2 = x.reshape(-1, x.shape[-1])
    if impl == "pallas":
        y = dense_relu_pallas(x2, kernel, bias, dtype)
    elif impl == "xla":
        y = dense_relu_xla(x2, kernel, bias, dtype)
    else:
        raise ValueError(f"dense_relu impl must be one of {DENSE_IMPLS}, got {impl!r}")
    return y.reshape(*x.shape[:-1], kernel.shape[-1])


def _dense_relu_fwd(x, kernel, bias, dtype, impl):
    y = dense_relu(x, kernel, bias, dtype, impl)
    return y, (x, kernel, y)


def _dense_relu_bwd(dtype, impl, res, g):
    del impl
    x, kernel, y = res
    x2 = x.astype(dtype).reshape(-1, x.shape[-1])
    gm = jnp.where(y > 0, g, jnp.zeros((), g.dtype)).astype(dtype).reshape(-1, y.shape[-1])
    dx = lax.dot_general(
        gm, kernel.astype(dtype), (((1,), (1,)), ((), ())), preferred_element_type=dtype
    )
    dk = lax.dot_general(x2, gm, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)
    db = jnp.sum(gm.astype(jnp.float32), 0)
    return dx.reshape(x.shape).astype(x.dtype), dk.astype(kernel.dtype), db


dense_relu.defvjp(_dense_relu_fwd, _dense_relu_bwd)
