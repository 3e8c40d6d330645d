"""The LAPACK-free orthogonal init (`algorithms.common.init`): the same matrices as
flax's ``orthogonal`` from the same key (float32 rounding apart), orthonormal under
``vmap``, and network inits that lower to no QR custom call (the batched CPU QR kernel
can deadlock a vmapped program on a two-core machine)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from algorithms.common.init import orthogonal, orthonormal_columns
from algorithms.common.networks import ActionSpec, ActorCritic
from jaxdrive.spaces import Discrete


@settings(max_examples=8, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.lists(st.integers(1, 40), min_size=2, max_size=3),
    st.sampled_from([-1, 0]),
    st.floats(0.01, 3.0),
)
def test_same_matrices_as_flax(seed: int, shape: list[int], axis: int, scale: float) -> None:
    key = jax.random.key(seed)
    ours = orthogonal(scale, axis)(key, tuple(shape))
    flax = nn.initializers.orthogonal(scale, axis)(key, tuple(shape))
    assert ours.shape == flax.shape and ours.dtype == flax.dtype
    np.testing.assert_allclose(ours, flax, atol=2e-6 * scale, rtol=0)


def test_orthonormal_under_vmap_and_refuses_wide_matrices() -> None:
    keys = jax.random.split(jax.random.key(0), 3)
    q = jax.jit(jax.vmap(lambda k: orthogonal()(k, (96, 96))))(keys)
    np.testing.assert_allclose(
        jnp.einsum("bij,bik->bjk", q, q), np.broadcast_to(np.eye(96), (3, 96, 96)), atol=3e-6
    )
    with pytest.raises(ValueError, match="rows >= columns"):
        orthonormal_columns(jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        orthogonal()(keys[0], (4,))


def test_vmapped_network_init_has_no_qr_call() -> None:
    net = ActorCritic(ActionSpec.from_space(Discrete(5)), hidden_sizes=(32, 32))
    init = jax.vmap(lambda k: net.init(k, jnp.zeros((1, 18))))
    text = jax.jit(init).lower(jax.random.split(jax.random.key(0), 2)).as_text()
    assert "geqrf" not in text and "householder" not in text.lower()
