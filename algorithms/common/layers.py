"""Dense layers and MLP torsos shared by the networks (Flax linen).

Dimension letters: ``...`` any leading batch axes; ``I`` a layer's input features (``I_pad``
with zero padding), ``H`` its output features.

* `MLP`: dense layers with orthogonal init (``sqrt(2)`` gain) and a named activation, in
  float32 or a lower compute dtype (mixed precision: parameters stay float32).
* `FusedDense`: ``nn.Dense`` computing in a lower dtype with float32 accumulation and
  float32 weight and bias gradients taken from the GEMMs (custom VJP).
* `dense_relu`: ``relu(x @ kernel + bias)`` for bfloat16 layers with the float32 bias and
  relu applied to the float32 accumulator before the one rounding to bfloat16, so XLA
  fuses them into the GEMM's epilogue instead of writing, re-reading and re-writing the
  ``[..., H]`` output (at least as accurate as rounding the GEMM output first). `MLP`
  uses it for the hidden layers after the first of bfloat16 relu torsos.
* `PaddedInputDense`: ``nn.Dense`` taking zero-padded inputs (aligned GEMMs) with the
  parameters of the unpadded layer, optionally carrying the bias as a constant input
  column.
* `cast_kernels`, `padded_size`, `flat_obs_size`, `activation_fn`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from algorithms.common.init import orthogonal
from jaxdrive.spaces import Space

__all__ = [
    "ACTIVATIONS",
    "MLP",
    "DenseParams",
    "FusedDense",
    "PaddedInputDense",
    "activation_fn",
    "affine",
    "cast_kernels",
    "dense_relu",
    "flat_obs_size",
    "padded_size",
]

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "tanh": jnp.tanh,
    "relu": nn.relu,
    "elu": nn.elu,
    "gelu": nn.gelu,
    "silu": nn.silu,
    "swish": nn.silu,
    "leaky_relu": nn.leaky_relu,
}


def activation_fn(name: str) -> Callable[[jax.Array], jax.Array]:
    """The activation called ``name`` (one of `ACTIVATIONS`); ``ValueError`` otherwise."""
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; known: {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def flat_obs_size(space: Space) -> int:
    """Number of features of one observation of ``space`` once flattened."""
    return int(np.prod(space.shape, dtype=np.int64)) if space.shape else 1


def padded_size(n: int, multiple: int) -> int:
    """``n`` rounded up to a multiple of ``multiple`` (>= 1)."""
    return -(-int(n) // int(multiple)) * int(multiple)


def _bias_grad(g: jax.Array) -> jax.Array:
    """``sum(g, 0)`` in float32 for ``g [M, H]``."""
    return jnp.sum(g.astype(jnp.float32), 0)


_DIMS = (((1,), (0,)), ((), ()))


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _dense(x: jax.Array, kernel: jax.Array, bias: jax.Array, dtype: Any, out_dtype: Any):
    """``x @ kernel + bias`` for ``x [..., I]``, float32 ``kernel [I, H]``, ``bias [H]``:
    the GEMM in ``dtype`` (float32 accumulation), the result in ``out_dtype``. Its VJP
    takes the weight and bias gradients from float32 GEMM outputs."""
    y = jax.lax.dot_general(
        x.astype(dtype).reshape(-1, x.shape[-1]),
        kernel.astype(dtype),
        _DIMS,
        preferred_element_type=out_dtype,
    )
    return (y + bias.astype(out_dtype)).reshape(*x.shape[:-1], kernel.shape[-1])


def _dense_fwd(x, kernel, bias, dtype, out_dtype):
    return _dense(x, kernel, bias, dtype, out_dtype), (x, kernel)


def _dense_bwd(dtype, out_dtype, res, g):
    x, kernel = res
    x2 = x.astype(dtype).reshape(-1, x.shape[-1])
    g2 = g.astype(dtype).reshape(-1, g.shape[-1])
    dx = jax.lax.dot_general(
        g2, kernel.astype(dtype), (((1,), (1,)), ((), ())), preferred_element_type=dtype
    )
    dk = jax.lax.dot_general(x2, g2, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)
    db = _bias_grad(g2)
    return dx.reshape(x.shape).astype(x.dtype), dk.astype(kernel.dtype), db


_dense.defvjp(_dense_fwd, _dense_bwd)


class FusedDense(nn.Module):
    """``nn.Dense`` (same parameters ``kernel [I, H]``, ``bias [H]``, same init) computing
    in ``dtype`` with a result in ``out_dtype`` (``None``: ``dtype``), float32
    accumulation, and float32 weight and bias gradients taken from the GEMMs."""

    features: int
    dtype: Any = jnp.float32
    out_dtype: Any = None
    kernel_init: Callable[..., jax.Array] = nn.initializers.lecun_normal()
    bias_init: Callable[..., jax.Array] = nn.initializers.zeros

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.param("kernel", self.kernel_init, (x.shape[-1], self.features))
        bias = self.param("bias", self.bias_init, (self.features,))
        out = self.dtype if self.out_dtype is None else self.out_dtype
        return _dense(x, kernel, bias, jnp.dtype(self.dtype), jnp.dtype(out))


class DenseParams(nn.Module):
    """The parameters of ``nn.Dense(features)`` (same names, shapes and init), returned
    as ``(kernel [I, F], bias [F])`` for ``in_features = I``, so that several heads can
    share one GEMM."""

    features: int
    kernel_init: Callable[..., jax.Array] = nn.initializers.lecun_normal()
    bias_init: Callable[..., jax.Array] = nn.initializers.zeros

    @nn.compact
    def __call__(self, in_features: int) -> tuple[jax.Array, jax.Array]:
        kernel = self.param("kernel", self.kernel_init, (in_features, self.features))
        return kernel, self.param("bias", self.bias_init, (self.features,))


def affine(x: jax.Array, kernel: jax.Array, bias: jax.Array, dtype: Any) -> jax.Array:
    """``x [..., I] @ kernel [I, F] + bias`` as float32: as ``nn.Dense`` for float32
    ``dtype``, else the GEMM in ``dtype`` with float32 accumulation (`FusedDense`)."""
    if jnp.dtype(dtype) == jnp.float32:
        x = x.astype(jnp.float32)
        return jax.lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ()))) + bias
    return _dense(x, kernel, bias, jnp.dtype(dtype), jnp.dtype(jnp.float32))


def _dense_relu_xla(x: jax.Array, kernel: jax.Array, bias: jax.Array, dtype: Any) -> jax.Array:
    """``relu(x @ kernel + bias)`` ``[M, N]`` in ``dtype`` for ``x [M, K]``: the GEMM on
    ``dtype`` inputs with float32 accumulation, the float32 bias and relu before one
    rounding."""
    acc = jax.lax.dot_general(
        x.astype(dtype), kernel.astype(dtype), _DIMS, preferred_element_type=jnp.float32
    )
    return jnp.maximum(acc + bias.astype(jnp.float32), 0.0).astype(dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def dense_relu(x: jax.Array, kernel: jax.Array, bias: jax.Array, dtype: Any) -> jax.Array:
    """``relu(x @ kernel + bias)`` for ``x [..., K]``, float32 ``kernel [K, N]``, ``bias
    [N]``: ``[..., N]`` in ``dtype``. The backward pass works from the saved input, kernel
    and output (the relu mask is ``y > 0``), with float32 weight and bias gradients."""
    y = _dense_relu_xla(x.reshape(-1, x.shape[-1]), kernel, bias, dtype)
    return y.reshape(*x.shape[:-1], kernel.shape[-1])


def _dense_relu_fwd(x, kernel, bias, dtype):
    y = dense_relu(x, kernel, bias, dtype)
    return y, (x, kernel, y)


def _dense_relu_bwd(dtype, res, g):
    x, kernel, y = res
    x2 = x.astype(dtype).reshape(-1, x.shape[-1])
    gm = jnp.where(y > 0, g, jnp.zeros((), g.dtype)).astype(dtype).reshape(-1, y.shape[-1])
    dx = jax.lax.dot_general(
        gm, kernel.astype(dtype), (((1,), (1,)), ((), ())), preferred_element_type=dtype
    )
    dk = jax.lax.dot_general(x2, gm, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)
    db = jnp.sum(gm.astype(jnp.float32), 0)
    return dx.reshape(x.shape).astype(x.dtype), dk.astype(kernel.dtype), db


dense_relu.defvjp(_dense_relu_fwd, _dense_relu_bwd)


class PaddedInputDense(nn.Module):
    """``nn.Dense`` whose input may carry zero padding: ``[..., I_pad] -> [..., H]``.

    Its parameters are those of ``nn.Dense(features)`` on ``[..., in_features]`` inputs
    (``kernel [in_features, H]``, ``bias [H]``, the same init), so checkpoints do not
    depend on the padding. Inputs with ``I_pad > in_features`` columns are multiplied by
    the kernel padded with ``I_pad − in_features`` zero rows: the trailing input columns
    are ignored and their (sliced-off) kernel rows get no gradient, while the GEMM sees
    an aligned contraction size. ``I_pad == in_features`` is a plain ``nn.Dense``.

    ``bias_column=True``: padded inputs carry the constant 1.0 in column ``in_features``
    (the first padding column) and the bias is that row of the padded kernel, so the GEMM
    adds it (no separate pass over ``[..., H]``) and the weight-gradient GEMM yields the
    bias gradient (no separate reduction over the batch).
    """

    features: int
    in_features: int
    kernel_init: Callable[..., jax.Array] = nn.initializers.lecun_normal()
    bias_init: Callable[..., jax.Array] = nn.initializers.zeros
    dtype: Any = jnp.float32  # computation dtype (inputs, kernel and output are cast)
    bias_column: bool = False  # padded inputs carry 1.0 in column in_features (see above)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        width = x.shape[-1]
        if width < self.in_features:
            raise ValueError(
                f"input has {width} features, fewer than the layer's in_features={self.in_features}"
            )
        kernel = self.param("kernel", self.kernel_init, (self.in_features, self.features))
        bias = self.param("bias", self.bias_init, (self.features,))
        x, kernel, bias = (a.astype(self.dtype) for a in (x, kernel, bias))
        dims = (((x.ndim - 1,), (0,)), ((), ()))
        extra = width - self.in_features
        if extra and self.bias_column:
            kernel = jnp.concatenate([kernel, bias[None], jnp.zeros_like(kernel[: extra - 1])])
            return jax.lax.dot_general(x, kernel, dims)
        if extra:
            kernel = jnp.pad(kernel, ((0, extra), (0, 0)))
        return jax.lax.dot_general(x, kernel, dims) + bias


def cast_kernels(params: Any, dtype: Any) -> Any:
    """``params`` (flax variables) with every ``kernel`` leaf cast to ``dtype`` when it is
    not float32, else ``params`` itself. The networks here cast kernels to their compute
    dtype before each GEMM, so applying them to the result gives the same outputs
    (bit for bit) without repeating the casts, e.g. at every step of a rollout."""
    if jnp.dtype(dtype) == jnp.float32:
        return params

    def cast(path: Any, leaf: jax.Array) -> jax.Array:
        last = path[-1]
        name = getattr(last, "key", getattr(last, "name", None))
        return leaf.astype(dtype) if name == "kernel" else leaf

    return jax.tree_util.tree_map_with_path(cast, params)


class MLP(nn.Module):
    """Dense layers ``hidden_sizes`` with ``activation`` after each: ``[..., I] -> [..., H]``.

    Orthogonal kernel init with gain ``sqrt(2)``, zero biases. With ``in_features`` set,
    the first layer is a `PaddedInputDense`: inputs ``[..., I_pad]`` may have zero columns
    after the first ``in_features`` (parameters as for ``[..., in_features]`` inputs);
    with ``bias_column`` the first of those columns is 1.0 and carries the first bias.
    ``dtype`` (``jnp.bfloat16`` for mixed precision): every layer's inputs, GEMMs and
    activations are cast to it (float32 accumulation); parameters stay float32. The
    hidden layers after the first of a bfloat16 relu MLP are `dense_relu` layers (bias
    and relu on the float32 accumulator), with the parameters of ``nn.Dense``.
    """

    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    in_features: int | None = None
    dtype: Any = jnp.float32
    bias_column: bool = False  # padded inputs carry 1.0 in column in_features

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = activation_fn(self.activation)
        fused = jnp.dtype(self.dtype) == jnp.bfloat16 and self.activation == "relu"
        x = x if x.dtype == jnp.dtype(self.dtype) else x.astype(jnp.float32)
        for i, h in enumerate(self.hidden_sizes):
            kw = dict(
                kernel_init=orthogonal(math.sqrt(2.0)),
                bias_init=nn.initializers.zeros,
                name=f"dense_{i}",
            )
            if fused and i > 0:
                kernel, bias = DenseParams(int(h), **kw)(x.shape[-1])
                x = dense_relu(x, kernel, bias, jnp.dtype(self.dtype))
                continue
            if i == 0 and self.in_features is not None:
                x = PaddedInputDense(
                    int(h),
                    int(self.in_features),
                    dtype=self.dtype,
                    bias_column=self.bias_column,
                    **kw,
                )(x)
            elif jnp.dtype(self.dtype) == jnp.float32:
                x = nn.Dense(int(h), **kw)(x)
            else:
                x = FusedDense(int(h), self.dtype, **kw)(x)
            x = act(x)
        return x
