"""A2C's ``reuse_rollout_forward``: the gradient step pulls the loss back through the
rollout's kept VJP residuals instead of running the network again. It must train the
same parameters as the plain path (same loss, same gradient, different summation
order) for every head and network layout it can meet."""

import re

import jax
import numpy as np
import pytest

import algorithms
from algorithms.common.config import make_env
from experiments.configs import cartpole, tag_continuous

FAST = {"xla_backend_optimization_level": 0}


def _tag(dtype: str = "float32", preset: str = "tiny,a2c"):
    c = tag_continuous.get_config(preset)
    c.total_env_steps = 2 * c.num_envs * c.num_steps
    for p in c.policies.keys():
        c.policies[p].compute_dtype = dtype
    return c


def _normalised_tag():
    c = _tag()
    c.algo.normalize_obs = True
    c.algo.normalize_rewards = True
    c.algo.normalize_advantages = True
    return c


def _frozen_tagger_tag():
    c = _tag()
    c.policies.tagger.frozen = True
    return c


def _pendulum_gaussian():
    c = cartpole.get_config("tiny,a2c")
    c.env_name = "Pendulum-v1"
    c.policies.agent.action_head = "gaussian"
    c.total_env_steps = 2 * c.num_envs * c.num_steps
    return c


def _cartpole():
    c = cartpole.get_config("tiny,a2c")
    c.total_env_steps = 2 * c.num_envs * c.num_steps
    return c


CASES = {
    "tag_f32_shared_torso": (_tag, 1e-5),
    "tag_bf16": (lambda: _tag("bfloat16"), 2e-3),
    "tag_mappo_critic": (lambda: _tag(preset="tiny,a2c,mappo"), 1e-5),
    "tag_normalised": (_normalised_tag, 1e-5),
    "tag_frozen_tagger": (_frozen_tagger_tag, 1e-5),
    "cartpole_discrete": (_cartpole, 1e-5),
    "pendulum_gaussian": (_pendulum_gaussian, 1e-5),
}


def _train(config, reuse: bool):
    config.algo.reuse_rollout_forward = reuse
    trainer = algorithms.make_train(config, *make_env(config))
    rs, met = jax.jit(trainer, compiler_options=FAST)(jax.random.PRNGKey(3))
    return jax.device_get((rs.policies, met))


@pytest.mark.parametrize("case", sorted(CASES))
def test_reuse_rollout_forward_trains_the_same(case):
    make, tol = CASES[case]
    (pol_a, met_a), (pol_b, met_b) = _train(make(), True), _train(make(), False)
    flat_a, tree_a = jax.tree.flatten(pol_a)
    flat_b, tree_b = jax.tree.flatten(pol_b)
    assert tree_a == tree_b
    moved = False
    for a, b in zip(flat_a, flat_b, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)
    for name in pol_a:
        trainer = algorithms.make_train(make(), *make_env(make()))
        before = trainer.init(jax.random.PRNGKey(3)).policies[name].params
        after = jax.tree.leaves(pol_a[name].params)
        moved |= any(
            not np.array_equal(np.asarray(x), np.asarray(y))
            for x, y in zip(jax.tree.leaves(before), after, strict=True)
        )
    assert moved, "no parameter changed: the test would pass for an update that does nothing"
    assert set(met_a) == set(met_b)
    for k in met_a:
        np.testing.assert_allclose(met_a[k], met_b[k], rtol=10 * tol, atol=10 * tol, err_msg=k)


def test_reuse_rollout_forward_is_an_a2c_key():
    c = tag_continuous.get_config("tiny")  # PPO: several steps per batch, no such key
    c.algo.reuse_rollout_forward = True
    with pytest.raises(ValueError, match="reuse_rollout_forward"):
        algorithms.make_train(c, *make_env(c))


def test_reuse_rollout_forward_drops_the_learning_forward():
    """The compiled replayed program has fewer GEMMs: the learning step's forward pass is
    gone (the whole-batch VJP it traces is dead code), so the equality test above
    compares two different programs."""
    counts = {}
    for reuse in (True, False):
        c = _tag()
        c.algo.reuse_rollout_forward = reuse
        trainer = algorithms.make_train(c, *make_env(c))
        hlo = jax.jit(trainer).lower(jax.random.PRNGKey(0)).compile(FAST).as_text()
        counts[reuse] = len(re.findall(r"\bdot\(", hlo))
    assert 0 < counts[True] < counts[False], counts
