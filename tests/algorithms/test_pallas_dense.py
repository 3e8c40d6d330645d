"""The fused dense + bias + relu layer (`algorithms.common.pallas_dense`): the Pallas
kernel (interpret mode here) is within a bfloat16 ulp of its XLA form (the contraction is
summed in another order), both are at least as close
to a float32 reference as XLA's unfused bfloat16 layer, gradients equal autodiff of the
reference, bad shapes and blocks are refused, the kernel lowers to Triton for CUDA, and a
policy with ``dense_impl="pallas"`` trains like one with ``"xla"``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from algorithms.common import config, networks
from algorithms.common import pallas_dense as pd


def _inputs(seed: int, m: int, k: int = 64, n: int = 32):
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.normal(k1, (m, k)).astype(jnp.bfloat16)
    w = jax.random.normal(k2, (k, n)) * (2.0 / k) ** 0.5
    b = 0.1 * jax.random.normal(k3, (n,))
    return x, w, b


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([1, 17, 64, 100, 257]))
def test_kernel_equals_xla_form_and_is_accurate(seed: int, m: int) -> None:
    x, w, b = _inputs(seed, m)
    got = pd.dense_relu_pallas(x, w, b, block_m=64, block_n=16, block_k=16, interpret=True)
    ref = pd.dense_relu_xla(x, w, b)
    assert got.shape == (m, 32) and got.dtype == jnp.bfloat16
    # the same arithmetic, the contraction summed in another order: ≤ 1 bfloat16 ulp
    np.testing.assert_allclose(
        np.asarray(got, np.float32), np.asarray(ref, np.float32), rtol=2**-7, atol=2**-12
    )
    exact = np.maximum(
        np.asarray(x, np.float64) @ np.asarray(w.astype(jnp.bfloat16), np.float64)
        + np.asarray(b, np.float64),
        0.0,
    )
    # XLA's unfused bfloat16 layer: GEMM rounded to bfloat16, bias added in bfloat16
    unfused = networks._dense(x, w, b, jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.bfloat16))
    unfused = np.asarray(jax.nn.relu(unfused), np.float64)
    err_fused = np.abs(np.asarray(got, np.float64) - exact).max()
    err_unfused = np.abs(unfused - exact).max()
    assert err_fused <= err_unfused + 1e-12
    # one bfloat16 rounding (half an ulp, 2^-9 relative) of a float32 accumulation, whose
    # own error is at most K·2^-24 of the terms' magnitude: a result that cancels to near
    # zero (seed 251, m 100: 5.4e-6 from terms of 7.7) is judged against the latter
    xw = np.abs(np.asarray(x, np.float64)) @ np.abs(np.asarray(w.astype(jnp.bfloat16), np.float64))
    acc_err = x.shape[1] * 2.0**-24 * (xw + np.abs(np.asarray(b, np.float64)))
    err = np.abs(np.asarray(got, np.float64) - exact)
    assert np.all(err <= np.abs(exact) * 2**-8 + 2 * acc_err)


@pytest.mark.parametrize("impl", pd.DENSE_IMPLS)
def test_gradients_match_autodiff_of_the_reference(impl: str) -> None:
    x, w, b = _inputs(1, 40)
    x = x.astype(jnp.float32).reshape(4, 10, 64)
    g = jax.random.normal(jax.random.key(7), (4, 10, 32))

    def loss(fn, x, w, b):
        return jnp.sum(fn(x, w, b).astype(jnp.float32) * g)

    def bf(a):
        return a.astype(jnp.bfloat16).astype(jnp.float32)

    def ref_fn(x, w, b):
        return jax.nn.relu(jnp.dot(bf(x), bf(w)) + b)

    def fused(x, w, b):
        return pd.dense_relu(x, w, b, jnp.bfloat16, impl)

    got = jax.grad(lambda *a: loss(fused, *a), (0, 1, 2))(x, w, b)
    ref = jax.grad(lambda *a: loss(ref_fn, *a), (0, 1, 2))(x, w, b)
    for a, r in zip(got, ref, strict=True):
        assert a.dtype == r.dtype and a.shape == r.shape
        np.testing.assert_allclose(np.asarray(a), np.asarray(r), rtol=3e-2, atol=3e-2)


def test_errors() -> None:
    x, w, b = _inputs(0, 8)
    with pytest.raises(ValueError, match="block_n=24 must be a power of two"):
        pd.dense_relu_pallas(x, w, b, block_n=24)
    with pytest.raises(ValueError, match="block_k=128 must be a power of two >= 16 dividing 64"):
        pd.dense_relu_pallas(x, w, b, block_k=128)
    with pytest.raises(ValueError, match="do not fit"):
        pd.dense_relu_xla(x, w[:32], b)
    with pytest.raises(ValueError, match="impl must be one of"):
        pd.dense_relu(x, w, b, jnp.bfloat16, "cuda")


def test_kernel_lowers_to_triton() -> None:
    x, w, b = _inputs(0, 300, 256, 256)
    fn = lambda x, w, b: pd.dense_relu_pallas(x, w, b, interpret=False)
    text = jax.jit(fn).trace(x, w, b).lower(lowering_platforms=("cuda",)).as_text()
    assert text.count("__gpu$xla.gpu.triton") == 1


def test_mlp_dense_impl_pallas_matches_xla() -> None:
    """An MLP with ``dense_impl="pallas"`` (hidden layers after the first fused) has the
    same parameters as the default (``"xla"``), outputs equal to the fused layer's XLA form
    (``"fused_xla"``), and outputs and gradients close to the unfused layers'."""
    obs = jax.random.normal(jax.random.key(0), (12, 8))
    mods = {
        impl: networks.MLP((32, 32, 32), "relu", dtype=jnp.bfloat16, dense_impl=impl)
        for impl in networks.MLP_DENSE_IMPLS
    }
    params = mods["xla"].init(jax.random.key(1), obs)
    for impl in ("fused_xla", "pallas"):
        p2 = mods[impl].init(jax.random.key(1), obs)
        assert jax.tree.structure(p2) == jax.tree.structure(params)
    out = {k: m.apply(params, obs) for k, m in mods.items()}
    np.testing.assert_allclose(
        np.asarray(out["fused_xla"], np.float32),
        np.asarray(out["pallas"], np.float32),
        rtol=2**-6,
        atol=2**-10,
    )
    np.testing.assert_allclose(
        np.asarray(out["pallas"], np.float32), np.asarray(out["xla"], np.float32), atol=5e-2
    )

    def sq(p, m):
        return jnp.sum(m.apply(p, obs).astype(jnp.float32) ** 2)

    grads = {k: jax.grad(sq)(params, m) for k, m in mods.items()}
    for a, b in zip(jax.tree.leaves(grads["pallas"]), jax.tree.leaves(grads["xla"]), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0.1, atol=0.1)
    with pytest.raises(ValueError, match="dense_impl"):
        networks.MLP((32,), "relu", dense_impl="triton").init(jax.random.key(0), obs)
    with pytest.raises(ValueError, match="needs dtype bfloat16 and activation relu"):
        networks.MLP((32, 32), "tanh", jnp.bfloat16, dense_impl="pallas").init(
            jax.random.key(0), obs
        )


def test_tag_a2c_with_pallas_dense_trains_like_xla() -> None:
    """Tiny Tag A2C, bfloat16 relu policies with two hidden layers: ``dense_impl``
    "pallas" (interpret mode) and "fused_xla" train close to "xla" over two iterations;
    config errors name the policy and the problem."""
    import algorithms
    from algorithms.common.config import make_env
    from experiments.configs import tag_continuous

    out = {}
    for impl in ("xla", "fused_xla", "pallas"):
        c = tag_continuous.get_config("tiny,a2c")
        c.total_env_steps = 2 * c.num_envs * c.num_steps
        for p in ("tagger", "runner"):
            c.policies[p].hidden_sizes = (16, 16)
            c.policies[p].compute_dtype = "bfloat16"
            c.policies[p].dense_impl = impl
        trainer = algorithms.make_train(c, *make_env(c))
        rs, met = jax.jit(trainer)(jax.random.PRNGKey(0))
        out[impl] = jax.device_get((rs.policies["runner"].params, met))
    for impl in ("fused_xla", "pallas"):
        for a, b in zip(jax.tree.leaves(out[impl]), jax.tree.leaves(out["xla"]), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=5e-2, atol=5e-3)
    c = tag_continuous.get_config("tiny,a2c")
    c.policies.runner.dense_impl = "pallas"  # float32 policy
    with pytest.raises(ValueError, match=r"policy 'runner': dense_impl='pallas' needs compute_dt"):
        algorithms.make_train(c, *make_env(c))
    c.policies.runner.dense_impl = "cuda"
    with pytest.raises(ValueError, match=r"policy 'runner': dense_impl must be one of"):
        algorithms.make_train(c, *make_env(c))


def test_dense_probe_layer_alone_tiny() -> None:
    """The GPU probe's layer-alone rows at a tiny size: every form runs, and the fused
    forms are at least as accurate as the unfused layer."""
    from experiments.benchmarks import dense_probe

    recs = dense_probe.layer_alone(300, 64, 2, 1, ["64x64x32w4s2"])
    by = {r["form"]: r for r in recs}
    assert set(by) == {"xla", "fused_xla", "pallas 64x64x32w4s2"}
    assert all(r["us_per_layer"] > 0 for r in recs)
    assert by["pallas 64x64x32w4s2"]["max_err"] <= by["xla"]["max_err"]
    assert by["fused_xla"]["max_err"] <= by["xla"]["max_err"]


def test_dense_impl_auto_is_fused_xla_for_bfloat16_relu_only() -> None:
    """The default ``dense_impl="auto"`` is the fused XLA layer for bfloat16 relu MLPs
    (same outputs bit for bit) and the plain layer otherwise; explicit fused forms on
    other dtypes or activations, and unknown names, are errors naming the problem."""
    assert config.POLICY_DEFAULTS["dense_impl"] == "auto"
    resolve = networks.resolve_dense_impl
    assert resolve("auto", jnp.bfloat16, "relu") == "fused_xla"
    assert resolve("auto", jnp.float32, "relu") == "xla"
    assert resolve("auto", jnp.bfloat16, "tanh") == "xla"
    assert resolve("pallas", "bfloat16", "relu") == "pallas"
    with pytest.raises(ValueError, match="needs dtype bfloat16 and activation relu"):
        resolve("fused_xla", jnp.float32, "relu")
    with pytest.raises(ValueError, match="must be one of"):
        resolve("cublas", jnp.bfloat16, "relu")
    obs = jax.random.normal(jax.random.key(2), (9, 8))
    for dtype, act, same_as in (
        (jnp.bfloat16, "relu", "fused_xla"),
        (jnp.float32, "relu", "xla"),
        (jnp.bfloat16, "tanh", "xla"),
    ):
        auto = networks.MLP((16, 16, 16), act, dtype=dtype, dense_impl="auto")
        ref = networks.MLP((16, 16, 16), act, dtype=dtype, dense_impl=same_as)
        params = ref.init(jax.random.key(3), obs)
        np.testing.assert_array_equal(
            np.asarray(auto.apply(params, obs), np.float32),
            np.asarray(ref.apply(params, obs), np.float32),
        )
