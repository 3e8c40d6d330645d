"""TD3's losses against NumPy references on random inputs: target policy smoothing (noise
clip, action clip) and the clipped double-Q target of the twin critics. (The trainer's
tests, delayed actor updates and learning included, are in
tests/test_continuous_off_policy.py.)"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from algorithms.ddpg.buffer import Transition
from algorithms.td3 import losses

B, D, O = 32, 3, 4


def test_target_smoothing_clips_noise_then_action():
    rng = np.random.default_rng(0)
    mu = rng.uniform(-1, 1, (B, D)).astype(np.float32)
    key, sigma, c = jax.random.key(5), 0.8, 0.5  # large σ: both clips are active
    got = np.asarray(losses.smoothed_target_action(jnp.asarray(mu), key, sigma, c))
    eps = sigma * np.asarray(jax.random.normal(key, (B, D), jnp.float32))
    want = np.clip(mu + np.clip(eps, -c, c), -1.0, 1.0)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert np.any(np.abs(eps) > c) and np.any(np.abs(mu + np.clip(eps, -c, c)) > 1)
    assert np.all(np.abs(got - mu) <= c + 1e-6) and np.all(np.abs(got) <= 1.0)
    # no noise: the target action is μ'(s') itself
    np.testing.assert_array_equal(losses.smoothed_target_action(jnp.asarray(mu), key, 0.0, c), mu)


def test_critic_loss_matches_numpy():
    rng = np.random.default_rng(1)
    Wt = rng.normal(0, 0.5, (O, D))  # the target actor: tanh(obs @ Wt)
    V, Vt = rng.normal(0, 1, (2, O + D)), rng.normal(0, 1, (2, O + D))  # twin critics

    def actor_fn(w, obs):
        return jnp.tanh(obs @ w)

    def critic_fn(v, obs, a):
        return jnp.einsum("bi,ki->kb", jnp.concatenate([obs, a], -1), v)  # [2, B]

    b = Transition(
        obs=rng.normal(0, 1, (B, O)),
        action=rng.uniform(-1, 1, (B, D)),
        reward=rng.normal(0, 1, B),
        next_obs=rng.normal(0, 1, (B, O)),
        terminated=(rng.uniform(size=B) < 0.3).astype(float),
        active=(rng.uniform(size=B) < 0.8).astype(float),
    )
    jb = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), b)
    f32 = lambda x: jnp.asarray(x, jnp.float32)
    key, gamma, sigma, c = jax.random.key(2), 0.9, 0.2, 0.5
    args = (f32(V), f32(Wt), f32(Vt), jb, key, gamma, sigma, c, actor_fn, critic_fn)
    loss, q_mean = losses.critic_loss(*args)
    eps = sigma * np.asarray(jax.random.normal(key, (B, D), jnp.float32), np.float64)
    a2 = np.clip(np.tanh(b.next_obs @ Wt) + np.clip(eps, -c, c), -1, 1)
    q_next = np.min(np.concatenate([b.next_obs, a2], -1) @ Vt.T, axis=1)
    y = b.reward + gamma * (1 - b.terminated) * q_next
    q = np.concatenate([b.obs, b.action], -1) @ V.T

    def wmean(x):
        return (x * b.active).sum() / b.active.sum()

    want = 0.5 * (wmean((q[:, 0] - y) ** 2) + wmean((q[:, 1] - y) ** 2))
    np.testing.assert_allclose(loss, want, rtol=1e-4)
    np.testing.assert_allclose(q_mean, wmean(q[:, 0]), rtol=1e-5)
    # no gradient into the target networks
    g, _ = jax.grad(losses.critic_loss, argnums=(1, 2), has_aux=True)(*args)
    assert all(float(jnp.max(jnp.abs(x))) == 0.0 for x in g)
