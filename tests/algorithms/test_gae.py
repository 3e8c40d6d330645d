"""GAE and discounted returns against numbers worked out by hand."""

import jax
import jax.numpy as jnp
import numpy as np

from algorithms.common.gae import bootstrap_values, discounted_returns, gae_advantages

GAMMA, LAM = 0.9, 0.5

# Two sequences (B = 2) of T = 4 steps, time-major [T, B].
# Column 0: step 1 is terminated (no bootstrap), step 3 is truncated (bootstrap from the
#   final observation's value 3.0, not from last_value, which belongs to the next episode).
# Column 1: no episode end; the rollout's end bootstraps from last_value = 2.0.
REWARDS = np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0], [4.0, 1.0]], np.float32)
VALUES = np.array([[0.5, 0.0], [1.0, 0.0], [1.5, 0.0], [2.0, 0.0]], np.float32)
TERMINATED = np.array([[0, 0], [1, 0], [0, 0], [0, 0]], bool)
ENDS = np.array([[0, 0], [1, 0], [0, 0], [1, 0]], bool)
FINAL_VALUES = np.array([[99.0, 99.0], [99.0, 99.0], [99.0, 99.0], [3.0, 99.0]], np.float32)
LAST_VALUE = np.array([10.0, 2.0], np.float32)

# By hand, column 0:
#   next values: [v1, 0 (terminated), v3, 3.0 (truncated)] = [1.0, 0.0, 2.0, 3.0]
#   deltas: 1 + .9*1 - .5 = 1.4; 2 + 0 - 1 = 1.0; 3 + .9*2 - 1.5 = 3.3; 4 + .9*3 - 2 = 4.7
#   A3 = 4.7; A2 = 3.3 + .45*4.7 = 5.415; A1 = 1.0 (ends); A0 = 1.4 + .45*1.0 = 1.85
# Column 1: next values [0, 0, 0, 2]; deltas [0, 0, 0, 1 + .9*2 = 2.8]
#   A3 = 2.8; A2 = .45*2.8 = 1.26; A1 = .567; A0 = .25515
NEXT_VALUES = np.array([[1.0, 0.0], [0.0, 0.0], [2.0, 0.0], [3.0, 2.0]], np.float32)
ADVANTAGES = np.array([[1.85, 0.25515], [1.0, 0.567], [5.415, 1.26], [4.7, 2.8]], np.float32)
RETURNS = ADVANTAGES + VALUES
# Discounted returns (λ = 1), column 0: G3 = 4 + .9*3 = 6.7; G2 = 3 + .9*6.7 = 9.03;
#   G1 = 2 (terminated); G0 = 1 + .9*2 = 2.8. Column 1: 2.8, 2.52, 2.268, 2.0412.
DISCOUNTED = np.array([[2.8, 2.0412], [2.0, 2.268], [9.03, 2.52], [6.7, 2.8]], np.float32)


def test_bootstrap_values_by_hand():
    nv = bootstrap_values(
        jnp.asarray(VALUES),
        jnp.asarray(LAST_VALUE),
        jnp.asarray(TERMINATED),
        jnp.asarray(ENDS),
        jnp.asarray(FINAL_VALUES),
    )
    np.testing.assert_allclose(np.asarray(nv), NEXT_VALUES, rtol=1e-6)


def test_gae_by_hand():
    adv, ret = jax.jit(gae_advantages, static_argnums=(4, 5))(
        jnp.asarray(REWARDS),
        jnp.asarray(VALUES),
        jnp.asarray(NEXT_VALUES),
        jnp.asarray(ENDS),
        GAMMA,
        LAM,
    )
    np.testing.assert_allclose(np.asarray(adv), ADVANTAGES, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ret), RETURNS, rtol=1e-5)
    assert adv.dtype == jnp.float32 and adv.shape == (4, 2)


def test_discounted_returns_by_hand():
    g = discounted_returns(jnp.asarray(REWARDS), jnp.asarray(NEXT_VALUES), jnp.asarray(ENDS), GAMMA)
    np.testing.assert_allclose(np.asarray(g), DISCOUNTED, rtol=1e-5)


def test_gae_lambda_one_is_discounted_return_minus_value():
    rng = np.random.default_rng(0)
    T, B = 7, 5
    r = rng.normal(size=(T, B)).astype(np.float32)
    v = rng.normal(size=(T, B)).astype(np.float32)
    ends = rng.random((T, B)) < 0.3
    term = ends & (rng.random((T, B)) < 0.5)
    final = rng.normal(size=(T, B)).astype(np.float32)
    # Telescoping needs next_values[t] = values[t+1] inside an episode.
    nv = bootstrap_values(v, rng.normal(size=B).astype(np.float32), term, ends, final)
    adv, ret = gae_advantages(r, v, nv, ends, 0.95, 1.0)
    g = discounted_returns(r, nv, ends, 0.95)
    np.testing.assert_allclose(np.asarray(ret), np.asarray(g), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(adv), np.asarray(g) - v, rtol=1e-5, atol=1e-5)


def test_gae_lambda_zero_is_td_error():
    rng = np.random.default_rng(1)
    r, v, nv = (rng.normal(size=(6, 3)).astype(np.float32) for _ in range(3))
    ends = rng.random((6, 3)) < 0.3
    adv, _ = gae_advantages(r, v, nv, ends, 0.9, 0.0)
    np.testing.assert_allclose(np.asarray(adv), r + 0.9 * nv - v, rtol=1e-5, atol=1e-6)
