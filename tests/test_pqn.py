"""PQN: learns CartPole in a small CPU budget, deterministic, compiles once, refuses
minibatch counts that do not divide the rollout."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import algorithms
from algorithms.pqn import default_config, make_train
from algorithms.pqn.train import ALGO_DEFAULTS

# the seeded run learns under XLA's default compile (and runs 60k steps: optimised code
# pays for its compile)
pytestmark = pytest.mark.xla_optimized


def _config():
    c = default_config()
    c.num_envs, c.num_steps, c.total_env_steps = 16, 32, 60_000
    c.algo.update(num_minibatches=4, num_epochs=2, td_lambda=0.65, reward_scale=0.1)
    c.policies.agent.update(lr=1e-3, hidden_sizes=(64, 64))
    return c


@pytest.fixture(scope="module")
def pqn_cartpole():
    trainer = make_train(_config())
    train = jax.jit(trainer)
    rs, metrics = train(jax.random.key(0))
    return trainer, train, jax.device_get(metrics), rs


def test_pqn_learns_cartpole(pqn_cartpole):
    trainer, _, m, _ = pqn_cartpole
    ret = m["episode_return/agent"]
    assert np.nanmean(ret[-len(ret) // 4 :]) > 200.0, ret[::10]  # random play: ~22
    assert np.all(np.isfinite(m["loss/agent"]))
    assert m["env_steps"][-1] == trainer.num_iterations * 16 * 32


def test_pqn_is_deterministic_and_compiles_once(pqn_cartpole):
    _, train, m, _ = pqn_cartpole
    _, again = train(jax.random.key(0))
    for k in m:
        np.testing.assert_array_equal(m[k], np.asarray(again[k]), err_msg=k)
    assert train._cache_size() == 1


def test_pqn_epsilon_past_two_to_the_31_env_steps(pqn_cartpole):
    """ε stays at its end value past 2^31 env steps (an int32 count would wrap)."""
    trainer, _, _, rs = pqn_cartpole
    far = rs.replace(iteration=jnp.asarray(2**31 // (16 * 32) + 10, jnp.int32))
    _, m = jax.jit(trainer.update)(far)
    assert float(m["epsilon"]) == pytest.approx(ALGO_DEFAULTS["eps_finish"])


def test_pqn_greedy_act_and_bad_minibatches(pqn_cartpole):
    trainer, _, _, rs = pqn_cartpole
    obs = {"agent": np.zeros((3, 1, 4), np.float32)}
    act = jax.jit(trainer.act, static_argnames="deterministic")
    a = act(trainer.get_params(rs), jax.random.key(1), obs)["agent"]
    assert a.shape == (3, 1) and a.dtype == np.int32
    # tilted right, the learnt greedy policy pushes right (action 1)
    tilted = {"agent": np.array([[[0.0, 0.0, 0.15, 0.5]]], np.float32)}
    assert int(act(trainer.get_params(rs), jax.random.key(1), tilted)["agent"][0, 0]) == 1
    c = _config()
    c.algo.num_minibatches = 7
    with pytest.raises(ValueError, match="num_minibatches=7 must divide"):
        algorithms.make_train(c, None)
