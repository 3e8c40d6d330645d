"""Tests of the jaxdrive core: spaces, action checks, wrappers, vectorize, rollout, registry."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxdrive
from jaxdrive import Box, Discrete, MultiDiscrete
from tests.toy_envs import Counter, CounterParams


# ----------------------------------------------------------------------------- spaces
@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 50), batch=st.integers(1, 64), seed=st.integers(0, 2**31 - 1))
def test_discrete_sample_in_space(n, batch, seed):
    space = Discrete(n)
    x = space.sample(jax.random.key(seed), (batch,))
    assert x.shape == (batch,) and x.dtype == jnp.int32
    assert bool(space.contains(x))
    assert not bool(space.contains(jnp.asarray([n])))
    assert not bool(space.contains(jnp.asarray([-1])))


@settings(max_examples=10, deadline=None)
@given(
    nvec=st.lists(st.integers(1, 30), min_size=1, max_size=4),
    seed=st.integers(0, 2**31 - 1),
)
def test_multidiscrete_sample_in_space(nvec, seed):
    space = MultiDiscrete(nvec)
    x = space.sample(jax.random.key(seed), (100,))
    assert x.shape == (100, len(nvec))
    assert bool(space.contains(x))
    assert np.all(np.asarray(x).max(0) < np.asarray(nvec))
    assert not bool(space.contains(jnp.asarray(nvec)[None]))
    assert not bool(space.contains(x.astype(jnp.float32)))


def test_multidiscrete_sample_is_uniform_over_the_product():
    """Every (a, b) of 3 × 5 equally likely (chi-square), the draw is one
    `jax.random.randint` with the sizes as bounds, and a compiled draw equals the eager
    one (no state outside the space)."""
    nvec, n = (3, 5), 150_000
    space = MultiDiscrete(nvec)
    x = np.asarray(space.sample(jax.random.key(7), (n,)))
    counts = np.zeros(nvec)
    np.add.at(counts, (x[:, 0], x[:, 1]), 1)
    expected = n / np.prod(nvec)
    chi2 = float(np.sum((counts - expected) ** 2 / expected))
    assert chi2 < 54.6  # 14 degrees of freedom: P(chi2 > 54.6) = 1e-6
    want = jax.random.randint(jax.random.key(7), (n, 2), 0, jnp.asarray(nvec))
    np.testing.assert_array_equal(x, np.asarray(want))
    jitted = jax.jit(space.sample, static_argnums=1)(jax.random.key(7), (n,))
    np.testing.assert_array_equal(x, np.asarray(jitted))


@pytest.mark.parametrize("nvec", [(3, 7, 5), (1, 9), (21, 21), (4097, 4097), (2**30, 3)])
def test_multidiscrete_sample_odd_sizes_in_range(nvec):
    x = np.asarray(MultiDiscrete(nvec).sample(jax.random.key(1), (20_000,)))
    assert x.min() >= 0 and np.all(x.max(0) < np.asarray(nvec))
    if np.prod(nvec) <= 441:  # ≥ 45 expected per vector: every one is drawn
        assert len({tuple(r) for r in x}) == np.prod(nvec)
    if nvec[0] > 2**23:  # beyond a float32 uniform's 2^23 steps: odd values drawn too
        assert np.mean(x[:, 0] % 2) > 0.4 and x[:, 0].max() > 2**29


def test_discrete_sample_large_n_reaches_every_value():
    """``n > 2^23``: not ``floor(u · n)`` of a 23-bit uniform (which gives multiples of
    ``n / 2^23`` only); `Discrete` then draws by `jax.random.randint`."""
    x = np.asarray(Discrete(2**30).sample(jax.random.key(2), (20_000,)))
    assert x.min() >= 0 and x.max() < 2**30 and np.mean(x % 2) > 0.4


@pytest.mark.parametrize("batch", [(), (7,), (2, 3)])
@pytest.mark.parametrize("dtype", [jnp.int32, jnp.uint8])
def test_multidiscrete_sample_shapes_and_dtypes(batch, dtype):
    space = MultiDiscrete([21, 21], dtype)
    x = space.sample(jax.random.key(0), batch)
    assert x.shape == (*batch, 2) and x.dtype == dtype and bool(space.contains(x))
    full = MultiDiscrete([256, 255], dtype)  # 256: uint8's whole range
    y = full.sample(jax.random.key(0), batch)
    assert y.shape == (*batch, 2) and y.dtype == dtype and bool(full.contains(y))


@settings(max_examples=10, deadline=None)
@given(
    low=st.floats(-10, 0),
    width=st.floats(0.01, 10),
    seed=st.integers(0, 2**31 - 1),
)
def test_box_sample_in_space(low, width, seed):
    space = Box(low, low + width, (3,))
    x = space.sample(jax.random.key(seed), (50,))
    assert x.shape == (50, 3) and x.dtype == jnp.float32
    assert bool(space.contains(x))
    assert not bool(space.contains(x + 2 * width + 1))
    assert not bool(space.contains(x.astype(jnp.int32)))


def test_box_unbounded_sample_is_finite():
    space = Box(-jnp.inf, jnp.inf, (4,))
    x = space.sample(jax.random.key(0), (10,))
    assert bool(jnp.all(jnp.isfinite(x))) and bool(space.contains(x))


def test_bad_spaces():
    with pytest.raises(ValueError, match="n >= 1"):
        Discrete(0)
    with pytest.raises(ValueError, match="every n >= 1"):
        MultiDiscrete([3, 0])
    with pytest.raises(ValueError, match="low <= high"):
        Box(1.0, 0.0, (2,))


# ----------------------------------------------------------------------- env contract
@pytest.fixture(scope="module")
def env():
    return Counter()


def test_conformance_toy(env):
    report = jaxdrive.testing.check_env(env)
    assert report["episodes"] >= 1


def test_assert_trees_equal_bitwise_or_within_atol():
    """Bitwise by default (NaN equals NaN); ``atol`` admits float differences up to it."""
    a = {"x": np.array([1.0, np.nan], np.float32), "n": np.array([3], np.int32)}
    b = {"x": np.array([1.0 + 1e-6, np.nan], np.float32), "n": np.array([3], np.int32)}
    jaxdrive.testing.assert_trees_equal(a, a, "same")
    with pytest.raises(AssertionError, match=r"ulp: leaf \['x'\]: 1 of 2 values differ"):
        jaxdrive.testing.assert_trees_equal(a, b, "ulp")
    jaxdrive.testing.assert_trees_equal(a, b, "ulp", atol=1e-5)
    with pytest.raises(AssertionError, match="leaf \\['n'\\]"):
        jaxdrive.testing.assert_trees_equal(a, {**b, "n": np.array([4], np.int32)}, "n", 1.0)


def test_action_errors(env):
    state, _ = env.reset(jax.random.key(0))
    good = env.sample_actions(jax.random.key(1))
    env.step(jax.random.key(2), state, good)  # no error
    with pytest.raises(ValueError, match=r"actions\['red'\] must have shape \(2,\)"):
        env.step(jax.random.key(2), state, {**good, "red": jnp.zeros((3,), jnp.int32)})
    with pytest.raises(ValueError, match="must be integers"):
        env.step(jax.random.key(2), state, {**good, "red": jnp.zeros((2,), jnp.float32)})
    with pytest.raises(ValueError, match="outside Discrete"):
        env.step(jax.random.key(2), state, {**good, "blue": jnp.asarray([0, 3, 1])})
    with pytest.raises(ValueError, match="missing"):
        env.step(jax.random.key(2), state, {"red": good["red"]})
    with pytest.raises(ValueError, match="pass actions as a dict"):
        env.step(jax.random.key(2), state, good["red"])
    # Shape errors are raised at trace time under jit too.
    with pytest.raises(ValueError, match="must have shape"):
        jax.jit(env.step)(jax.random.key(2), state, {**good, "red": jnp.zeros((5,), jnp.int32)})


# ---------------------------------------------------------------------------- wrappers
def test_episode_stats_match_numpy(env):
    wenv = jaxdrive.EpisodeStats(env)
    params = CounterParams(step_reward=0.5)
    state, ts = wenv.reset(jax.random.key(0), params)
    step = jax.jit(wenv.step)
    total = 0.0
    for i in range(env.length):
        state, ts = step(
            jax.random.key(i), state, env.sample_actions(jax.random.key(100 + i)), params
        )
        total += 0.5
        np.testing.assert_allclose(ts.extras["episode_return"]["red"], total)
        assert int(ts.extras["episode_length"]) == i + 1
        if bool(ts.done):
            break


def test_time_limit_truncates(env):
    wenv = jaxdrive.TimeLimit(Counter(length=100, goal=1000), max_steps=3)
    assert wenv.episode_length == 3
    state, ts = wenv.reset(jax.random.key(0))
    for i in range(3):
        state, ts = wenv.step(jax.random.key(i), state, env.sample_actions(jax.random.key(i)))
        assert bool(ts.done) == (i == 2)
    assert bool(jnp.all(ts.truncated["red"])) and not bool(jnp.any(ts.terminated["red"]))
    with pytest.raises(ValueError, match="max_steps >= 1"):
        jaxdrive.TimeLimit(env, 0)


def test_normalize_observation_running_stats():
    env = Counter(num_red=3, num_blue=3, length=50, goal=1000)
    wenv = jaxdrive.NormalizeObservation(env)
    state, ts = wenv.reset(jax.random.key(0))
    raw = [np.asarray(env._obs(state.inner)["red"])]
    step = jax.jit(wenv.step)
    for i in range(10):
        state, ts = step(jax.random.key(i), state, env.sample_actions(jax.random.key(50 + i)))
        raw.append(np.asarray(env._obs(state.inner)["red"]))
    raw = np.concatenate(raw)
    np.testing.assert_allclose(state.mean["red"], raw.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(state.var["red"], raw.var(0), rtol=1e-4, atol=1e-5)
    expect = np.clip((raw[-3:] - raw.mean(0)) / np.sqrt(raw.var(0) + 1e-8), -10, 10)
    np.testing.assert_allclose(ts.obs["red"], expect, rtol=1e-4, atol=1e-4)


def test_auto_reset_single_env(env):
    wenv = jaxdrive.AutoReset(jaxdrive.EpisodeStats(env), keep_final_obs=True)
    state, ts = wenv.reset(jax.random.key(0))
    step = jax.jit(wenv.step)
    dones = 0
    for i in range(30):
        prev_t = int(state.inner.t)
        state, ts = step(jax.random.key(i), state, env.sample_actions(jax.random.key(7 * i)))
        if bool(ts.done):
            dones += 1
            # new episode: time back to zero in state and obs; final obs keeps the old time
            assert int(state.inner.t) == 0 and float(ts.obs["red"][0, 1]) == 0.0
            assert float(ts.extras["final_obs"]["red"][0, 1]) == prev_t + 1
            assert int(ts.extras["episode_length"]) == prev_t + 1
            assert int(state.episode_length) == 0
        else:
            assert int(state.inner.t) == prev_t + 1
    assert dones >= 3


def test_reset_pool_fixed_start(env):
    pool = jaxdrive.make_reset_pool(env, jax.random.key(3), size=1)
    assert pool.size == 1
    venv = jaxdrive.vectorize(env, 6, reset_pool=pool)
    state, ts = venv.reset(jax.random.key(0))
    np.testing.assert_array_equal(state.pos, np.broadcast_to(pool.state.pos, state.pos.shape))
    pool4 = jaxdrive.make_reset_pool(env, jax.random.key(3), size=4)
    state, _ = jaxdrive.vectorize(env, 64, reset_pool=pool4).reset(jax.random.key(1))
    rows = {tuple(r) for r in np.asarray(state.pos)}
    assert rows <= {tuple(r) for r in np.asarray(pool4.state.pos)} and len(rows) > 1
    with pytest.raises(ValueError, match="size >= 1"):
        jaxdrive.make_reset_pool(env, jax.random.key(0), size=0)


# ---------------------------------------------------------------- vectorize / rollout
def test_vectorize_auto_reset_matches_per_env_semantics(env):
    venv = jaxdrive.vectorize(jaxdrive.EpisodeStats(env), 16)
    state, ts = venv.reset(jax.random.key(0))
    step = jax.jit(venv.step)
    pol = jaxdrive.random_policy(env)
    lengths = []
    for i in range(25):
        prev_t = np.asarray(state.inner.t)
        state, ts = step(jax.random.key(i), state, pol(jax.random.key(99 + i), ts.obs))
        done = np.asarray(ts.done)
        t = np.asarray(state.inner.t)
        np.testing.assert_array_equal(t[done], 0)
        np.testing.assert_array_equal(t[~done], prev_t[~done] + 1)
        lengths += list(np.asarray(ts.extras["episode_length"])[done])
    assert lengths and all(1 <= n <= env.length for n in lengths)


def test_vectorize_errors(env):
    with pytest.raises(ValueError, match="num_envs must be >= 1"):
        jaxdrive.vectorize(env, 0)
    with pytest.raises(ValueError, match="num_envs must be >= 1"):
        jaxdrive.vectorize(env, -5)
    with pytest.raises(TypeError, match="num_envs must be an integer"):
        jaxdrive.vectorize(env, 2.5)
    venv = jaxdrive.vectorize(env, 4)
    state, _ = venv.reset(jax.random.key(0))
    with pytest.raises(ValueError, match="leading env axis of size 4"):
        venv.step(jax.random.key(0), state, env.sample_actions(jax.random.key(0)))


class _Observed(Counter):
    """`Counter` with `Env.observations` but the branching auto-reset preferred (as
    classic control): `VecEnv`'s ``"auto"`` mode picks by ``select_reset_max_envs``."""

    def observations(self, state, params):
        return self._obs(state)

    @property
    def reset_by_select(self):
        return False


def test_select_reset_max_envs_is_a_constructor_choice():
    """Two batches that differ only in ``select_reset_max_envs`` compile their own
    auto-reset (select: no `lax.cond`; above the limit: the branch) within one process,
    and both give the same steps."""
    env = _Observed(length=3)
    pol = jaxdrive.random_policy(env)
    out, conds = {}, {}
    for limit in (2048, 4):  # 6 envs: select below 2048, the branch above 4
        venv = jaxdrive.vectorize(env, 6, select_reset_max_envs=limit)
        assert venv.select_reset_max_envs == limit

        def run(key, venv=venv):
            def body(carry, k):
                ka, ks = jax.random.split(k)
                state, ts = venv.step(ks, carry[0], pol(ka, carry[1].obs))
                return (state, ts), ts

            init = venv.reset(jax.random.key(0))
            return jax.lax.scan(body, init, jax.random.split(key, 8))[1]

        conds[limit] = "cond" in str(jax.make_jaxpr(run)(jax.random.key(1)))
        out[limit] = jax.jit(run)(jax.random.key(1))
    assert conds == {2048: False, 4: True}
    assert int(np.sum(out[4].done)) > 0  # episodes ended: both resets ran
    jaxdrive.testing.assert_trees_equal(out[2048], out[4], "select vs branch auto-reset")


def test_rollout_shapes_no_retrace_and_determinism(env):
    traces = {"n": 0}

    def policy(key, obs):
        traces["n"] += 1
        return jaxdrive.random_policy(env)(key, obs)

    out1 = jaxdrive.rollout(env, policy, jax.random.key(0), num_envs=8, num_steps=12)
    out2 = jaxdrive.rollout(env, policy, jax.random.key(0), num_envs=8, num_steps=12)
    assert traces["n"] == 1
    jaxdrive.testing.assert_trees_equal(out1, out2, "rollout with the same key")
    assert out1.timesteps.obs["blue"].shape == (12, 8, 3, 2)
    assert out1.actions["red"].shape == (12, 8, 2)
    with pytest.raises(ValueError, match="num_steps must be >= 1"):
        jaxdrive.rollout(env, policy, jax.random.key(0), num_envs=2, num_steps=0)


def test_random_policy_groups_draw_independently():
    env = Counter(num_red=4, num_blue=6)  # both groups Discrete(3)
    obs = {g: jnp.zeros((64, env.num_agents(g), 2)) for g in env.groups}
    key = jax.random.key(5)
    acts = jax.jit(jaxdrive.random_policy(env))(key, obs)
    assert set(acts) == {"red", "blue"}
    for g in env.groups:
        assert acts[g].shape == (64, env.num_agents(g)) and acts[g].dtype == jnp.int32
        assert bool(env.action_space(g).contains(acts[g]))
    red, blue = np.asarray(acts["red"]), np.asarray(acts["blue"])
    assert np.mean(red != blue[:, :4]) > 0.5  # independent draws, not one copied
    # a key per group, split from the policy's key
    k_red, _ = jax.random.split(key)
    np.testing.assert_array_equal(red, np.asarray(Discrete(3).sample(k_red, (64, 4))))
    # or the groups' keys given, already split: the same draws
    given = jaxdrive.random_policy(env)(jax.random.split(key), obs)
    for g in env.groups:
        np.testing.assert_array_equal(np.asarray(given[g]), np.asarray(acts[g]))
    with pytest.raises(ValueError, match="one key or 2 keys"):
        jaxdrive.random_policy(env)(jax.random.split(key, 3), obs)


def test_random_policy_distinct_spaces_per_group():
    class Mixed(Counter):
        def action_space(self, group):
            return Discrete(3) if group == "red" else MultiDiscrete([3, 5])

    env = Mixed(num_red=2, num_blue=3)
    obs = {g: jnp.zeros((16, env.num_agents(g), 2)) for g in env.groups}
    acts = jaxdrive.random_policy(env)(jax.random.key(0), obs)
    assert acts["red"].shape == (16, 2) and acts["blue"].shape == (16, 3, 2)
    for g, k in zip(env.groups, jax.random.split(jax.random.key(0)), strict=True):
        assert acts[g].dtype == jnp.int32 and bool(env.action_space(g).contains(acts[g]))
        want = env.action_space(g).sample(k, (16, env.num_agents(g)))  # the space's own draw
        np.testing.assert_array_equal(np.asarray(acts[g]), np.asarray(want))


# ---------------------------------------------------------------------------- registry
def test_registry_errors_and_register():
    with pytest.raises(ValueError, match="registered envs: .*CartPole-v1"):
        jaxdrive.make("NoSuchEnv-v0")
    jaxdrive.register("toy-counter", Counter, overwrite=True)
    env, params = jaxdrive.make("toy-counter", num_red=4, step_reward=2.0)
    assert env.num_agents("red") == 4 and params.step_reward == 2.0
    with pytest.raises(ValueError, match=r"unknown override\(s\) \['nonsense'\]"):
        jaxdrive.make("toy-counter", nonsense=3)
    with pytest.raises(ValueError, match="registered already"):
        jaxdrive.register("toy-counter", Counter)
    assert "toy-counter" in jaxdrive.registered_envs()
