"""PPO and A2C loss pieces against NumPy references on random inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from algorithms.a2c.losses import a2c_loss, policy_gradient_loss
from algorithms.ppo.losses import (
    clip_fraction,
    clipped_policy_loss,
    entropy_bonus,
    ppo_loss,
    value_loss,
)

M = 257


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    f = lambda *s: rng.normal(size=s).astype(np.float32)
    return {
        "logp": f(M) * 0.3 - 1.0,
        "old_logp": f(M) * 0.3 - 1.0,
        "adv": f(M),
        "values": f(M),
        "old_values": f(M),
        "targets": f(M),
        "entropy": np.abs(f(M)),
        "mask": rng.random(M) < 0.7,
    }


def np_mean(x, mask):
    return float(np.sum(x * mask) / max(mask.sum(), 1))


def np_clipped(logp, old_logp, adv, eps, mask):
    ratio = np.exp(logp.astype(np.float64) - old_logp)
    surr = np.minimum(ratio * adv, np.clip(ratio, 1 - eps, 1 + eps) * adv)
    return -np_mean(surr, mask)


def np_value(v, t, old_v, eps, mask):
    sq = (v - t) ** 2
    if eps is not None:
        vc = old_v + np.clip(v - old_v, -eps, eps)
        sq = np.maximum(sq, (vc - t) ** 2)
    return 0.5 * np_mean(sq, mask)


@pytest.mark.parametrize("eps", [0.1, 0.2])
def test_clipped_policy_loss(data, eps):
    d = data
    got = clipped_policy_loss(d["logp"], d["old_logp"], d["adv"], eps, d["mask"])
    want = np_clipped(d["logp"], d["old_logp"], d["adv"], eps, d["mask"])
    np.testing.assert_allclose(float(got), want, rtol=1e-5)
    # Without a mask it is the plain mean.
    got = clipped_policy_loss(d["logp"], d["old_logp"], d["adv"], eps)
    want = np_clipped(d["logp"], d["old_logp"], d["adv"], eps, np.ones(M))
    np.testing.assert_allclose(float(got), want, rtol=1e-5)
    ratio = np.exp(d["logp"] - d["old_logp"])
    frac = np_mean((np.abs(ratio - 1) > eps).astype(np.float32), d["mask"])
    np.testing.assert_allclose(float(clip_fraction(d["logp"], d["old_logp"], eps, d["mask"])), frac)


def test_clipped_policy_gradient_vanishes_outside_the_clip():
    # Positive advantage, ratio above 1+eps: clipped, no gradient; below: full gradient.
    logp = jnp.array([np.log(1.5), np.log(1.05)], jnp.float32)
    g = jax.grad(lambda lp: clipped_policy_loss(lp, jnp.zeros(2), jnp.ones(2), 0.2))(logp)
    np.testing.assert_allclose(np.asarray(g), [0.0, -1.05 / 2], rtol=1e-5)


@pytest.mark.parametrize("eps", [None, 0.2])
def test_value_loss(data, eps):
    d = data
    got = value_loss(d["values"], d["targets"], d["old_values"], eps, d["mask"])
    want = np_value(d["values"], d["targets"], d["old_values"], eps, d["mask"])
    np.testing.assert_allclose(float(got), want, rtol=1e-5)


def test_value_clipping_changes_the_loss(data):
    d = data
    a = value_loss(d["values"], d["targets"], d["old_values"], None, d["mask"])
    b = value_loss(d["values"], d["targets"], d["old_values"], 0.05, d["mask"])
    assert float(b) > float(a)  # max of the two errors, and the clip binds here


def test_entropy_bonus(data):
    d = data
    np.testing.assert_allclose(
        float(entropy_bonus(d["entropy"], d["mask"])), np_mean(d["entropy"], d["mask"]), rtol=1e-6
    )
    # No active sample: 0, not NaN.
    assert float(entropy_bonus(d["entropy"], np.zeros(M, bool))) == 0.0


def test_ppo_loss_total(data):
    d = data
    hp = {"clip_eps": 0.2, "clip_value": True, "value_clip_eps": 0.3, "vf_coef": 0.7}
    mb = {
        "old_logp": d["old_logp"],
        "old_value": d["old_values"],
        "advantage": d["adv"],
        "target": d["targets"],
        "mask": d["mask"],
    }
    total, aux = ppo_loss(d["logp"], d["entropy"], d["values"], mb, hp, 0.01)
    pg = np_clipped(d["logp"], d["old_logp"], d["adv"], 0.2, d["mask"])
    vl = np_value(d["values"], d["targets"], d["old_values"], 0.3, d["mask"])
    ent = np_mean(d["entropy"], d["mask"])
    np.testing.assert_allclose(float(total), pg + 0.7 * vl - 0.01 * ent, rtol=1e-5)
    np.testing.assert_allclose(float(aux["policy"]), pg, rtol=1e-5)
    np.testing.assert_allclose(float(aux["value"]), vl, rtol=1e-5)
    np.testing.assert_allclose(float(aux["entropy"]), ent, rtol=1e-5)


def test_a2c_loss(data):
    d = data
    mb = {"advantage": d["adv"], "target": d["targets"], "mask": d["mask"]}
    total, aux = a2c_loss(d["logp"], d["entropy"], d["values"], mb, {"vf_coef": 0.5}, 0.05)
    pg = -np_mean(d["logp"] * d["adv"], d["mask"])
    vl = np_value(d["values"], d["targets"], None, None, d["mask"])
    ent = np_mean(d["entropy"], d["mask"])
    np.testing.assert_allclose(float(aux["policy"]), pg, rtol=1e-5)
    np.testing.assert_allclose(float(total), pg + 0.5 * vl - 0.05 * ent, rtol=1e-5)


def test_a2c_gradient_equals_ppo_gradient_on_policy(data):
    # At the behaviour policy (ratio 1) PPO's clipped surrogate has A2C's gradient.
    d = data
    lp = jnp.asarray(d["old_logp"])
    g_ppo = jax.grad(lambda x: clipped_policy_loss(x, d["old_logp"], d["adv"], 0.2, d["mask"]))(lp)
    g_a2c = jax.grad(lambda x: policy_gradient_loss(x, d["adv"], d["mask"]))(lp)
    np.testing.assert_allclose(np.asarray(g_ppo), np.asarray(g_a2c), rtol=1e-5, atol=1e-7)
