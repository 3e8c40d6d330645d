"""The fused bfloat16 dense + bias + relu layer (`algorithms.common.layers.dense_relu`)
against a plain reference: values as accurate as one rounding of the exact result,
gradients equal to autodiff of the unfused layer, and `MLP` using it exactly where it
applies (bfloat16 relu torsos, hidden layers after the first)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from algorithms.common import layers


def _inputs(seed: int, m: int, k: int = 64, n: int = 32):
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.normal(k1, (m, k)).astype(jnp.bfloat16)
    w = jax.random.normal(k2, (k, n)) * (2.0 / k) ** 0.5
    b = 0.1 * jax.random.normal(k3, (n,))
    return x, w, b


@settings(max_examples=5, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([1, 17, 100]))
def test_dense_relu_is_one_rounding_of_the_exact_layer(seed: int, m: int) -> None:
    """Against float64 ``relu(x @ bf16(w) + b)``: within half a bfloat16 ulp plus the
    float32 accumulation's error, and never worse than XLA's unfused bfloat16 layer
    (GEMM rounded to bfloat16, then the bias added in bfloat16)."""
    x, w, b = _inputs(seed, m)
    got = layers.dense_relu(x, w, b, jnp.dtype(jnp.bfloat16))
    assert got.shape == (m, 32) and got.dtype == jnp.bfloat16
    x64, w64 = np.asarray(x, np.float64), np.asarray(w.astype(jnp.bfloat16), np.float64)
    exact = np.maximum(x64 @ w64 + np.asarray(b, np.float64), 0.0)
    err = np.abs(np.asarray(got, np.float64) - exact)
    acc_err = x.shape[1] * 2.0**-24 * (np.abs(x64) @ np.abs(w64) + np.abs(np.asarray(b)))
    assert np.all(err <= np.abs(exact) * 2**-8 + 2 * acc_err)
    unfused = layers.FusedDense(32, jnp.bfloat16).apply({"params": {"kernel": w, "bias": b}}, x)
    err_unfused = np.abs(np.asarray(jax.nn.relu(unfused), np.float64) - exact)
    assert err.max() <= err_unfused.max() + 1e-12


def test_dense_relu_gradients_match_autodiff_of_the_reference() -> None:
    """Input, kernel and bias gradients (leading axes ``[4, 10]``) equal those of
    ``relu(bf16(x) @ bf16(w) + b)`` differentiated by JAX, up to bfloat16 rounding."""
    x, w, b = _inputs(1, 40)
    x = x.astype(jnp.float32).reshape(4, 10, 64)
    g = jax.random.normal(jax.random.key(7), (4, 10, 32))

    def bf(a):
        return a.astype(jnp.bfloat16).astype(jnp.float32)

    def loss(fn, x, w, b):
        return jnp.sum(fn(x, w, b).astype(jnp.float32) * g)

    def ref(x, w, b):
        return jax.nn.relu(jnp.dot(bf(x), bf(w)) + b)

    def fused(x, w, b):
        return layers.dense_relu(x, w, b, jnp.dtype(jnp.bfloat16))

    got = jax.grad(lambda *a: loss(fused, *a), (0, 1, 2))(x, w, b)
    want = jax.grad(lambda *a: loss(ref, *a), (0, 1, 2))(x, w, b)
    for a, r in zip(got, want, strict=True):
        assert a.dtype == r.dtype and a.shape == r.shape
        np.testing.assert_allclose(np.asarray(a), np.asarray(r), rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize(
    ("dtype", "activation", "fused"),
    [(jnp.bfloat16, "relu", True), (jnp.float32, "relu", False), (jnp.bfloat16, "tanh", False)],
)
def test_mlp_fuses_only_bfloat16_relu_hidden_layers(dtype, activation, fused) -> None:
    """`MLP` equals the same layers composed by hand: the first a plain dense layer, the
    later ones `dense_relu` exactly when the MLP is bfloat16 relu; parameters are those
    of ``nn.Dense`` either way."""
    obs = jax.random.normal(jax.random.key(2), (9, 8))
    mlp = layers.MLP((16, 16, 16), activation, dtype=dtype)
    params = mlp.init(jax.random.key(3), obs)
    p = params["params"]
    assert set(p) == {"dense_0", "dense_1", "dense_2"}
    assert all(set(v) == {"kernel", "bias"} for v in p.values())
    act = layers.activation_fn(activation)

    def plain(i, x):
        d = p[f"dense_{i}"]
        if jnp.dtype(dtype) == jnp.float32:
            return nn.Dense(16).apply({"params": d}, x)
        return layers.FusedDense(16, dtype).apply({"params": d}, x)

    x = act(plain(0, obs.astype(jnp.float32)))
    for i in (1, 2):
        d = p[f"dense_{i}"]
        if fused:
            x = layers.dense_relu(x, d["kernel"], d["bias"], jnp.dtype(dtype))
        else:
            x = act(plain(i, x))
    np.testing.assert_array_equal(
        np.asarray(mlp.apply(params, obs), np.float32), np.asarray(x, np.float32)
    )
