"""The categorical log-prob/entropy kernels (`algorithms.common.pallas_categorical`, Pallas
interpret mode here): values and VJPs equal the XLA form's (`networks._categorical_lp_ent`)
to float rounding for random shapes (padded classes included), both kernels lower to
Triton for CUDA, bad inputs are refused, and a Tag A2C policy with ``head_impl="pallas"``
trains like one with ``"xla"``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from algorithms.common import networks
from algorithms.common import pallas_categorical as pc


@settings(max_examples=6, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.integers(1, 70),
    st.integers(1, 3),
    st.integers(2, 23),
    st.booleans(),
)
def test_values_and_vjp_match_xla(seed: int, n: int, d: int, k: int, padded: bool) -> None:
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    logits = 3.0 * jax.random.normal(k1, (n, d, k))
    if padded and k > 2:  # MultiCategorical's padding of smaller dimensions
        logits = logits.at[:, 0, k - 2 :].set(-1e9)
    hi = k - 2 if padded and k > 2 else k
    x = jax.random.randint(k2, (n, d), 0, hi)
    g = jax.random.normal(k3, (2, n))

    def run(fn):
        (lp, ent), vjp = jax.vjp(lambda z: fn(z, x), logits)
        return lp, ent, vjp((g[0], g[1]))[0]

    got = run(lambda z, x: pc.categorical_lp_ent_pallas(z, x, block=256))
    ref = run(networks._categorical_lp_ent)
    for a, b in zip(got, ref, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=2e-5)


def test_leading_axes_and_errors() -> None:
    logits = jax.random.normal(jax.random.key(0), (3, 4, 2, 5))
    x = jnp.zeros((3, 4, 2), jnp.int32)
    lp, ent = pc.categorical_lp_ent_pallas(logits, x)
    assert lp.shape == ent.shape == (3, 4)
    with pytest.raises(ValueError, match=r"logits \[..., D, K\] and x \[..., D\]"):
        pc.categorical_lp_ent_pallas(logits, x[..., 0])
    dist = networks.MultiCategorical(logits)
    with pytest.raises(ValueError, match="impl must be one of"):
        networks.log_prob_and_entropy(dist, x, "cuda")


def test_kernels_lower_to_triton() -> None:
    logits = jnp.zeros((1000, 2, 21))
    x = jnp.zeros((1000, 2), jnp.int32)

    def both(z):
        (lp, ent), vjp = jax.vjp(lambda z: pc.categorical_lp_ent_pallas(z, x, interpret=False), z)
        return lp, ent, vjp((lp, ent))[0]

    text = jax.jit(both).trace(logits).lower(lowering_platforms=("cuda",)).as_text()
    assert text.count("__gpu$xla.gpu.triton") == 2


def test_tag_a2c_with_pallas_heads_trains_like_xla() -> None:
    import algorithms
    from algorithms.common.config import make_env
    from experiments.configs import tag_continuous

    out = {}
    for impl in ("xla", "pallas"):
        c = tag_continuous.get_config("tiny,a2c")
        c.total_env_steps = 2 * c.num_envs * c.num_steps
        for p in ("tagger", "runner"):
            c.policies[p].head_impl = impl
        rs, met = jax.jit(algorithms.make_train(c, *make_env(c)))(jax.random.PRNGKey(0))
        out[impl] = jax.device_get((rs.policies, met))
    for a, b in zip(jax.tree.leaves(out["pallas"]), jax.tree.leaves(out["xla"]), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
    c = tag_continuous.get_config("tiny,a2c")
    c.policies.runner.head_impl = "triton"
    with pytest.raises(ValueError, match=r"policy 'runner': head_impl must be one of"):
        algorithms.make_train(c, *make_env(c))
