"""A2C: a tiny Tag with two policies (one frozen), one gradient step per iteration, and
its config errors."""

import jax
import numpy as np
import pytest

import algorithms
import jaxdrive
from algorithms.a2c import make_train
from experiments.configs import tag_continuous

FAST = {"xla_backend_optimization_level": 0}


def leaves_equal(a, b) -> bool:
    return all(
        np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def test_a2c_tiny_tag_frozen_tagger():
    c = tag_continuous.get_config("tiny,a2c")
    c.policies.tagger.frozen = True
    env, params = jaxdrive.make(c.env_name, **c.env_kwargs)
    trainer = algorithms.make_train(c, env, params)
    assert trainer.num_iterations == 4
    init = jax.jit(trainer.init, compiler_options=FAST)
    train = jax.jit(trainer, compiler_options=FAST)
    rs0 = init(jax.random.PRNGKey(0))
    rs, m = train(jax.random.PRNGKey(0))
    m = jax.device_get(m)
    assert leaves_equal(rs0.policies["tagger"].params, rs.policies["tagger"].params)
    assert not leaves_equal(rs0.policies["runner"].params, rs.policies["runner"].params)
    # One gradient step per iteration.
    assert int(rs.policies["runner"].opt_state[1][0].count) == 4
    assert "loss/tagger/policy" not in m
    for k in ("policy", "value", "entropy", "approx_kl", "grad_norm"):
        v = m[f"loss/runner/{k}"]
        assert v.shape == (4,) and np.all(np.isfinite(v)), k
    # One step at the behaviour policy: the ratio is 1, so the KL estimate is 0.
    np.testing.assert_allclose(m["loss/runner/approx_kl"], 0.0, atol=1e-6)
    for g in env.groups:
        assert np.all(np.isfinite(m[f"episode_return/{g}"]))
    # Same seed, same numbers.
    _, m2 = train(jax.random.PRNGKey(0))
    jaxdrive.testing.assert_trees_equal(jax.device_get(m2), m, "A2C metrics, same seed")


def test_a2c_rejects_ppo_keys():
    c = tag_continuous.get_config("tiny")
    c.algorithm = "a2c"
    with pytest.raises(ValueError, match=r"\['clip_eps'.*PPO-only"):
        make_train(c)
    c = tag_continuous.get_config("tiny,a2c")
    c.policies.runner.num_epochs = 3
    with pytest.raises(ValueError, match=r"num_epochs.*config.policies.runner.*PPO-only"):
        make_train(c)
    c = tag_continuous.get_config("tiny,a2c")
    c.algo.gae_lambda = 1.5
    with pytest.raises(ValueError, match=r"gae_lambda must lie in \[0, 1\]"):
        make_train(c)


def test_a2c_input_padding_does_not_change_results():
    """``input_pad_multiple`` 8 (tiny Tag obs 15 -> 16, normalised obs) trains the same
    parameters, statistics and metrics as 1, up to float rounding."""
    out = []
    for m in (1, 8):
        c = tag_continuous.get_config("tiny,a2c")
        c.algo.normalize_obs = True
        c.total_env_steps = 2 * c.num_envs * c.num_steps
        for p in c.policies.keys():
            c.policies[p].input_pad_multiple = m
        trainer = make_train(c)
        rs, met = jax.jit(trainer, compiler_options=FAST)(jax.random.PRNGKey(0))
        out.append(jax.device_get((rs.policies, met)))
    assert out[0][0]["runner"].obs_norm.mean.shape == (15,)
    for a, b in zip(jax.tree.leaves(out[0]), jax.tree.leaves(out[1]), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    c = tag_continuous.get_config("tiny,a2c")
    c.policies.runner.input_pad_multiple = 0
    with pytest.raises(ValueError, match="input_pad_multiple must be a positive integer"):
        make_train(c)


def test_a2c_bfloat16_trains_close_to_float32():
    """``compute_dtype="bfloat16"`` keeps float32 parameters and metrics and, over two
    iterations, stays close to the float32 run; unknown dtypes are refused."""
    out = []
    for dt in ("float32", "bfloat16"):
        c = tag_continuous.get_config("tiny,a2c")
        c.total_env_steps = 2 * c.num_envs * c.num_steps
        for p in c.policies.keys():
            c.policies[p].compute_dtype = dt
        rs, met = jax.jit(make_train(c), compiler_options=FAST)(jax.random.PRNGKey(0))
        out.append(jax.device_get((rs.policies["runner"].params, met)))
    assert all(x.dtype == np.float32 for x in jax.tree.leaves(out[1]))
    for a, b in zip(jax.tree.leaves(out[0]), jax.tree.leaves(out[1]), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=5e-2, atol=5e-3)
    c = tag_continuous.get_config("tiny,a2c")
    c.policies.runner.compute_dtype = "float16"
    with pytest.raises(ValueError, match="compute_dtype must be one of"):
        make_train(c)
