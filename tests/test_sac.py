"""SAC's pieces against NumPy references: the tanh-Gaussian log-density (change of
variables) against a numerical derivative of its CDF, the soft TD target and twin-critic
loss, the actor and temperature losses. (The trainer's tests, learning included, are in
tests/test_continuous_off_policy.py.)"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from algorithms.common.distributions import TanhGaussian, state_log_std
from algorithms.ddpg.buffer import Transition
from algorithms.sac import losses

B, D = 16, 2


def _normal_cdf(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))


def test_tanh_log_prob_matches_a_numerical_density():
    """log π(a) of a = tanh(u) equals log of d/da P(tanh(U) ≤ a), the derivative of the
    squashed CDF ``Φ((atanh(a) − μ)/σ)`` taken numerically, per dimension and summed."""
    rng = np.random.default_rng(0)
    mean = rng.normal(0, 1, (B, D))
    log_std = rng.uniform(-1.5, 0.5, (B, D))
    u = mean + np.exp(log_std) * rng.normal(0, 1, (B, D))
    dist = TanhGaussian(
        jnp.asarray(mean, jnp.float32),
        jnp.asarray(log_std, jnp.float32),
        -jnp.ones(D),
        jnp.ones(D),
    )
    got = np.asarray(dist.log_prob(jnp.asarray(u, jnp.float32)))
    a, h = np.tanh(u), 1e-6
    cdf = lambda x: _normal_cdf((np.arctanh(x) - mean) / np.exp(log_std))
    density = (cdf(a + h) - cdf(a - h)) / (2 * h)
    np.testing.assert_allclose(got, np.log(density).sum(-1), rtol=2e-4, atol=2e-3)
    # to_env is tanh for bounds ±1
    np.testing.assert_allclose(dist.to_env(jnp.asarray(u, jnp.float32)), a, atol=1e-6)


def test_state_log_std_is_log_of_softplus_plus_floor():
    raw = np.linspace(-30.0, 30.0, 13)
    want = np.log(np.log1p(np.exp(raw)) + 1e-3)
    np.testing.assert_allclose(state_log_std(jnp.asarray(raw)), want, rtol=1e-5)
    assert float(jnp.min(jnp.exp(state_log_std(jnp.asarray(raw))))) >= 1e-3 * (1 - 1e-6)


def _np_logp(mean, log_std, u):
    z = (u - mean) / np.exp(log_std)
    base = -0.5 * z**2 - log_std - 0.5 * math.log(2 * math.pi)
    return (base - np.log(1.0 - np.tanh(u) ** 2)).sum(-1)


@pytest.fixture(scope="module")
def stand_in():
    """Linear stand-in networks and a random batch (NumPy float64 copies)."""
    rng = np.random.default_rng(1)
    O = 3
    W = rng.normal(0, 0.3, (O, D))  # actor mean = obs @ W, log-std fixed
    log_std = np.array([-0.5, -1.0])
    V = rng.normal(0, 1, (2, O + D))  # critic k: [obs, a] @ V[k]
    Vt = rng.normal(0, 1, (2, O + D))  # target critics

    def dist_fn(params, obs):
        return TanhGaussian(obs @ params, jnp.broadcast_to(log_std, obs.shape[:-1] + (D,)),
                            -jnp.ones(D), jnp.ones(D))  # fmt: skip

    def critic_fn(params, obs, a):
        return jnp.einsum("bi,ki->kb", jnp.concatenate([obs, a], -1), params)  # [2, B]

    batch = Transition(
        obs=rng.normal(0, 1, (B, O)),
        action=rng.uniform(-1, 1, (B, D)),
        reward=rng.normal(0, 1, B),
        next_obs=rng.normal(0, 1, (B, O)),
        terminated=(rng.uniform(size=B) < 0.3).astype(float),
        active=(rng.uniform(size=B) < 0.8).astype(float),
    )
    jbatch = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), batch)
    return dict(W=W, log_std=log_std, V=V, Vt=Vt, dist_fn=dist_fn, critic_fn=critic_fn,
                batch=batch, jbatch=jbatch)  # fmt: skip


def _wmean(x, w):
    return (x * w).sum() / max(w.sum(), 1.0)


def test_critic_loss_soft_target_matches_numpy(stand_in):
    s, key, alpha, gamma = stand_in, jax.random.key(3), 0.3, 0.95
    b = s["batch"]
    loss, q_mean = losses.critic_loss(
        jnp.asarray(s["V"], jnp.float32), jnp.asarray(s["Vt"], jnp.float32),
        jnp.asarray(s["W"], jnp.float32), alpha, s["jbatch"], key, gamma,
        s["dist_fn"], s["critic_fn"],
    )  # fmt: skip
    # the same noise the loss draws: u' = μ(s') + σ ε
    eps = np.asarray(jax.random.normal(key, (B, D), jnp.float32), np.float64)
    mean = b.next_obs @ s["W"]
    u = mean + np.exp(s["log_std"]) * eps
    logp = _np_logp(mean, s["log_std"], u)
    xa = np.concatenate([b.next_obs, np.tanh(u)], -1)
    q_next = np.min(xa @ s["Vt"].T, axis=1)
    y = b.reward + gamma * (1 - b.terminated) * (q_next - alpha * logp)
    q = np.concatenate([b.obs, b.action], -1) @ s["V"].T  # [B, 2]
    want = 0.5 * sum(_wmean((q[:, k] - y) ** 2, b.active) for k in range(2))
    np.testing.assert_allclose(loss, want, rtol=1e-4)
    np.testing.assert_allclose(q_mean, _wmean(q[:, 0], b.active), rtol=1e-5)
    # the target is held fixed: no gradient into the actor or the target critics
    g, _ = jax.grad(losses.critic_loss, argnums=(1, 2), has_aux=True)(
        jnp.asarray(s["V"], jnp.float32), jnp.asarray(s["Vt"], jnp.float32),
        jnp.asarray(s["W"], jnp.float32), alpha, s["jbatch"], key, gamma,
        s["dist_fn"], s["critic_fn"],
    )  # fmt: skip
    assert all(float(jnp.max(jnp.abs(x))) == 0.0 for x in g)


def test_actor_and_temperature_losses_match_numpy(stand_in):
    s, key, alpha = stand_in, jax.random.key(4), 0.2
    b = s["batch"]
    loss, logp = losses.actor_loss(
        jnp.asarray(s["W"], jnp.float32), jnp.asarray(s["V"], jnp.float32), alpha,
        s["jbatch"], key, s["dist_fn"], s["critic_fn"],
    )  # fmt: skip
    eps = np.asarray(jax.random.normal(key, (B, D), jnp.float32), np.float64)
    mean = b.obs @ s["W"]
    u = mean + np.exp(s["log_std"]) * eps
    want_logp = _np_logp(mean, s["log_std"], u)
    q = np.min(np.concatenate([b.obs, np.tanh(u)], -1) @ s["V"].T, axis=1)
    np.testing.assert_allclose(logp, want_logp, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(loss, _wmean(alpha * want_logp - q, b.active), rtol=1e-4)
    # no gradient into the critics from the actor loss
    gq = jax.grad(lambda v: losses.actor_loss(
        jnp.asarray(s["W"], jnp.float32), v, alpha, s["jbatch"], key, s["dist_fn"],
        s["critic_fn"])[0])(jnp.asarray(s["V"], jnp.float32))  # fmt: skip
    assert float(jnp.max(jnp.abs(gq))) == 0.0
    # temperature: −log α · mean(log π + H̄); its gradient is −mean(log π + H̄)
    la, target = jnp.float32(math.log(alpha)), -float(D)
    t = losses.temperature_loss(la, logp, target, s["jbatch"].active)
    np.testing.assert_allclose(t, -math.log(alpha) * _wmean(want_logp + target, b.active),
                               rtol=1e-4)  # fmt: skip
    g = jax.grad(losses.temperature_loss)(la, logp, target, s["jbatch"].active)
    np.testing.assert_allclose(g, -_wmean(want_logp + target, b.active), rtol=1e-4)
