"""The vmap-safe orthogonal init (`algorithms.common.init`): flax's ``orthogonal`` values
bit for bit, vmapped or not, and vmapped network inits whose QR calls are unbatched (a
batched CPU QR kernel can deadlock a vmapped program on a two-core machine)."""

from __future__ import annotations

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from algorithms.common.init import orthogonal
from algorithms.common.networks import ActionSpec, ActorCritic
from jaxdrive.spaces import Discrete


@settings(max_examples=8, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.lists(st.integers(1, 40), min_size=2, max_size=3),
    st.sampled_from([-1, 0]),
    st.floats(0.01, 3.0),
)
def test_same_values_as_flax(seed: int, shape: list[int], axis: int, scale: float) -> None:
    key = jax.random.key(seed)
    ours = orthogonal(scale, axis)(key, tuple(shape))
    flax = nn.initializers.orthogonal(scale, axis)(key, tuple(shape))
    assert ours.shape == flax.shape and ours.dtype == flax.dtype
    np.testing.assert_array_equal(ours, flax)


def test_vmapped_equals_unbatched_and_is_orthonormal() -> None:
    keys = jax.random.split(jax.random.key(0), 3)
    init = orthogonal(1.0)
    q = jax.jit(jax.vmap(jax.vmap(lambda k: init(k, (48, 32)))))(keys.reshape(3, 1))[:, 0]
    for b in range(3):
        np.testing.assert_array_equal(q[b], jax.jit(lambda k: init(k, (48, 32)))(keys[b]))
    np.testing.assert_allclose(
        jnp.einsum("bij,bik->bjk", q, q), np.broadcast_to(np.eye(32), (3, 32, 32)), atol=2e-6
    )
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        init(keys[0], (4,))


def test_vmapped_network_init_has_no_batched_qr() -> None:
    net = ActorCritic(ActionSpec.from_space(Discrete(5)), hidden_sizes=(32, 32))
    init = jax.vmap(lambda k: net.init(k, jnp.zeros((1, 18))))
    text = jax.jit(init).lower(jax.random.split(jax.random.key(0), 2)).as_text()
    qr_calls = [line for line in text.splitlines() if "geqrf" in line]
    assert qr_calls, "expected the init to factorise on the host's LAPACK (CPU)"
    assert all(re.search(r'num_batch_dims = "0"', line) for line in qr_calls)
