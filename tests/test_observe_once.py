"""Auto-reset through `Env.observations` (observations built once per step) equals the
branching auto-reset, for `jaxdrive.vectorize` and inside the on-policy trainers."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import algorithms
import jaxdrive
from experiments.configs import tag_continuous
from jaxdrive.wrappers import EpisodeStats, Wrapper


class HideObservations(Wrapper):
    """The same env without `observations`: forces the `lax.cond` auto-reset."""

    passes_observations = False


def _tag(**kw):
    kw = {
        "num_taggers": 2, "num_runners": 5, "episode_length": 4,
        "num_other_agents_observed": 3, "tagging_distance": 0.2, "grid_length": 3.0, **kw,
    }  # fmt: skip
    return jaxdrive.make("tag_continuous", **kw)


def _assert_trees_equal(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_has_observations_flags():
    env, _ = _tag()
    assert env.has_observations
    assert EpisodeStats(env).has_observations
    assert not HideObservations(env).has_observations
    assert not jaxdrive.wrappers.NormalizeObservation(env).has_observations
    cart, _ = jaxdrive.make("CartPole-v1")  # classic control: the obs is a state function
    assert cart.has_observations
    assert not cart.reset_by_select  # ... but auto-resets by the branch (measured faster)
    assert env.reset_by_select and not HideObservations(env).reset_by_select


@pytest.mark.xla_optimized  # two programs bit for bit, as XLA compiles them by default
def test_vectorize_observe_once_equals_branching_reset():
    """Tag (k nearest) and CartPole; Tag's full observation as `Env.observations` builds
    it: `check_env` in tests/environments/test_tag_continuous.py."""
    cases = [_tag(use_full_observation=False)]
    cases.append(jaxdrive.make("CartPole-v1", max_episode_steps=5))
    for env, params in cases:
        fast = jaxdrive.vectorize(EpisodeStats(env), 6)
        slow = jaxdrive.vectorize(HideObservations(EpisodeStats(env)), 6)
        policy = jaxdrive.random_policy(env)

        def run(venv):
            def body(carry, k):
                state, ts = carry
                ka, ks = jax.random.split(k)
                state, ts = venv.step(ks, state, policy(ka, ts.obs), params)
                return (state, ts), ts

            init = venv.reset(jax.random.key(0), params)
            return jax.lax.scan(body, init, jax.random.split(jax.random.key(1), 8))

        (s_fast, _), tr_fast = jax.jit(lambda: run(fast))()
        (s_slow, _), tr_slow = jax.jit(lambda: run(slow))()
        assert int(np.sum(tr_fast.done)) > 0  # resets happened
        _assert_trees_equal(tr_fast, tr_slow)
        _assert_trees_equal(s_fast, s_slow)


def test_on_policy_trainer_same_with_observe_once():
    """PPO on tiny Tag: the observe-once path and the branching path train alike."""
    c = tag_continuous.get_config("tiny")
    env, params = jaxdrive.make(c.env_name, **dict(c.env_kwargs))
    out = {}
    for name, e in (("fast", env), ("slow", HideObservations(env))):
        tr = algorithms.make_train(c, e, params)
        rs = jax.jit(tr.init)(jax.random.PRNGKey(0))
        rs, m = jax.jit(lambda r, tr=tr: tr.chunk(r, 3))(rs)
        out[name] = (tr.get_params(rs), m)
    assert float(np.sum(out["fast"][1]["episodes_done"])) > 0
    fa, sl = jax.tree.leaves(out["fast"]), jax.tree.leaves(out["slow"])
    for x, y in zip(fa, sl, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)


def test_reset_mode_option():
    """`reset_mode` forces either auto-reset; both give the same steps; bad values fail."""
    env, params = jaxdrive.make("CartPole-v1", max_episode_steps=3)
    policy = jaxdrive.random_policy(env)
    out = {}
    for mode in ("select", "cond"):
        venv = jaxdrive.vectorize(env, 5, reset_mode=mode)
        state, ts = venv.reset(jax.random.key(0), params)
        trace = []
        for i in range(7):
            k = jax.random.key(10 + i)
            state, ts = venv.step(k, state, policy(k, ts.obs), params)
            trace.append(ts)
        out[mode] = trace
    assert int(np.sum([np.asarray(t.done) for t in out["cond"]])) > 0
    _assert_trees_equal(out["select"], out["cond"])
    with pytest.raises(ValueError, match="reset_mode"):
        jaxdrive.vectorize(env, 5, reset_mode="never")
    with pytest.raises(ValueError, match="observations"):
        jaxdrive.vectorize(HideObservations(env), 5, reset_mode="select")
    with pytest.raises(ValueError, match="keep_final_obs"):
        jaxdrive.vectorize(env, 5, reset_mode="select", keep_final_obs=True)
