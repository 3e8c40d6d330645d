"""Tests of the jaxdrive core: spaces, action checks, wrappers, vectorize, rollout, registry."""

from __future__ import annotations

import functools
import itertools

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
@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 50), batch=st.integers(1, 64), seed=st.integers(0, 2**31 - 1))
def test_discrete_sample_in_space(n, batch, seed):
    space = Discrete(n)
    x = space.sample(jax.random.key(seed), (batch,))
    assert x.shape == (batch,) and x.dtype == jnp.int32
    assert bool(space.contains(x))
    assert not bool(space.contains(jnp.asarray([n])))
    assert not bool(space.contains(jnp.asarray([-1])))


@settings(max_examples=25, deadline=None)
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


@pytest.mark.parametrize("draw", ["joint", "components", "hash", "philox"])
def test_multidiscrete_sample_is_uniform_over_the_product(monkeypatch, draw):
    """Every `spaces.MULTI_DISCRETE_DRAW` form: every (a, b) of 3 × 5 equally likely.
    ``"joint"``: one uniform per sample, decoded last component fastest (as
    ``np.unravel_index``); ``"components"``: one uniform per component,
    each ``floor(u · n)``; ``"hash"``: both components from one Threefry hash's words;
    ``"philox"`` (the default): two samples' components from one Philox hash's words."""
    from jaxdrive import spaces

    monkeypatch.setattr(spaces, "MULTI_DISCRETE_DRAW", draw)
    nvec, n = (3, 5), 150_000
    x = np.asarray(MultiDiscrete(nvec).sample(jax.random.key(7), (n,)))
    counts = np.zeros(nvec)
    np.add.at(counts, (x[:, 0], x[:, 1]), 1)
    expected = n / np.prod(nvec)
    chi2 = float(np.sum((counts - expected) ** 2 / expected))
    assert chi2 < 54.6  # 14 degrees of freedom: P(chi2 > 54.6) = 1e-6
    if draw == "joint":
        u = jax.random.uniform(jax.random.key(7), (n,))
        j = np.minimum(np.floor(np.asarray(u) * 15), 14).astype(np.int64)
        want = np.stack(np.unravel_index(j, nvec), -1)
    elif draw == "hash":  # one hash per sample: its two words, top 23 bits each
        b0, b1 = _threefry_numpy(jax.random.key_data(jax.random.key(7)), np.arange(n))
        want = np.stack(
            [
                np.floor((w >> 9) / 2.0**23 * k).astype(np.int64)
                for w, k in zip((b0, b1), nvec, strict=True)
            ],
            -1,
        )
    elif draw == "philox":  # hash q gives flat components 4q..4q+3: floor(w * n / 2^32)
        words = _philox_numpy(jax.random.key_data(jax.random.key(7)), np.arange(n // 2))
        flat = np.stack(words, -1).reshape(n, 2).astype(np.uint64)
        want = ((flat * np.asarray(nvec, np.uint64)) >> np.uint64(32)).astype(np.int64)
    else:
        u = np.asarray(jax.random.uniform(jax.random.key(7), (n, 2)))
        want = np.floor(u * np.asarray(nvec)).astype(np.int64)
    np.testing.assert_array_equal(x, want)


def _threefry_numpy(key_data, counters):
    """Threefry-2x32 (20 rounds) of the counters ``(0, s)``, in NumPy (an independent
    reference for `jaxdrive.hash_draws`; jax's own primitive on ``(0, s)`` agrees)."""
    m = np.uint64(0xFFFFFFFF)
    k0, k1 = (np.uint64(int(v)) for v in np.asarray(key_data))
    ks = (k0, k1, k0 ^ k1 ^ np.uint64(0x1BD11BDA))
    x0 = (np.zeros(len(counters), np.uint64) + ks[0]) & m
    x1 = (counters.astype(np.uint64) + ks[1]) & m
    rot = ((13, 15, 26, 6), (17, 29, 16, 24))
    for i in range(5):
        for r in rot[i % 2]:
            x0 = (x0 + x1) & m
            x1 = ((x1 << np.uint64(r)) | (x1 >> np.uint64(32 - r))) & m
            x1 = x0 ^ x1
        x0 = (x0 + ks[(i + 1) % 3]) & m
        x1 = (x1 + ks[(i + 2) % 3] + np.uint64(i + 1)) & m
    return x0, x1


def _philox_numpy(key_data, counters):
    """Philox-4x32-10 of the counters ``(q, 0, 0, 0)``, in NumPy (an independent
    reference for `jaxdrive.hash_draws.philox4x32`, itself checked against Random123's
    published known answers)."""
    m = np.uint64(0xFFFFFFFF)
    k0, k1 = (np.uint64(int(v)) for v in np.asarray(key_data))
    c = [counters.astype(np.uint64)] + [np.zeros(len(counters), np.uint64)] * 3
    for r in range(10):
        if r:
            k0, k1 = (k0 + np.uint64(0x9E3779B9)) & m, (k1 + np.uint64(0xBB67AE85)) & m
        p0 = c[0] * np.uint64(0xD2511F53)
        p1 = c[2] * np.uint64(0xCD9E8D57)
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & m, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & m]
    return c


def test_philox_known_answers():
    """`hash_draws.philox4x32` gives Random123's published Philox-4x32-10 known answers
    (its kat_vectors), and the NumPy reference agrees."""
    from jaxdrive import hash_draws

    kats = (
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    )
    for ctr, key, want in kats:
        u = [jnp.asarray([v], jnp.uint32) for v in (*key, *ctr)]
        got = hash_draws.philox4x32(*u)
        assert [int(w[0]) for w in got] == list(want)
    ref = _philox_numpy(np.asarray([0, 0]), np.asarray([0]))
    assert [int(w[0]) for w in ref] == list(kats[0][2])


def test_hash_draws_kernel_and_xla_agree_and_check_keys():
    """`jaxdrive.hash_draws.multi_discrete`, both methods: the Pallas kernel (interpret
    mode) and the XLA form give the same components (two Threefry hashes for three
    components, components that straddle Philox hashes, one component, a batch that is
    not a multiple of the block, a small dtype; also vmapped over keys); jax's threefry
    primitive gives the
    NumPy reference's words; keys that are not one threefry key raise."""
    from jax.extend.random import threefry_2x32

    from jaxdrive import hash_draws

    key = jax.random.key(11)
    cases = (((37, 3), (21, 21), jnp.int32), ((70,), (3, 5, 7), jnp.uint8), ((9,), (6,), jnp.int32))
    for (batch, nvec, dtype), method in itertools.product(cases, hash_draws.METHODS):
        draw = functools.partial(hash_draws.multi_discrete, key, batch, nvec, dtype, method=method)
        got, want = draw(use_pallas=True), draw(use_pallas=False)
        assert got.shape == (*batch, len(nvec)) and got.dtype == dtype
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert bool(MultiDiscrete(nvec).contains(got.astype(jnp.int32)))
        keys = jax.random.split(key, 3)  # vmapped: the kernel's grid gains the keys' axis
        vdraw = lambda k, p: hash_draws.multi_discrete(
            k, batch, nvec, dtype, method=method, use_pallas=p
        )
        vgot, vwant = (jax.vmap(functools.partial(vdraw, p=p))(keys) for p in (True, False))
        np.testing.assert_array_equal(np.asarray(vgot), np.asarray(vwant))
    kd = jax.random.key_data(key)
    s = np.arange(40, dtype=np.uint32)
    ref = _threefry_numpy(kd, s)
    ours = hash_draws.threefry2x32(kd[0], kd[1], jnp.zeros(40, jnp.uint32), jnp.asarray(s))
    jaxs = threefry_2x32(kd, jnp.concatenate([jnp.zeros(40, jnp.uint32), jnp.asarray(s)]))
    for w in range(2):
        np.testing.assert_array_equal(np.asarray(ours[w]), ref[w].astype(np.uint32))
        np.testing.assert_array_equal(np.asarray(jaxs[40 * w : 40 * (w + 1)]), ref[w])
    with pytest.raises(ValueError, match="one typed key"):
        hash_draws.multi_discrete(jax.random.split(key), (3,), (2, 2))
    with pytest.raises(ValueError, match="threefry2x32 key"):
        hash_draws.multi_discrete(jax.random.key(0, impl="rbg"), (3,), (2, 2))
    with pytest.raises(ValueError, match="method must be one of"):
        hash_draws.multi_discrete(key, (3,), (2, 2), method="xorwow")


@pytest.mark.parametrize("nvec", [(3, 7, 5), (1, 9), (21, 21), (4097, 4097)])
def test_multidiscrete_sample_odd_sizes_in_range(nvec):
    # (4097, 4097): P > 2^23, one uniform per component
    x = np.asarray(MultiDiscrete(nvec).sample(jax.random.key(1), (20_000,)))
    assert x.min() >= 0 and np.all(x.max(0) < np.asarray(nvec))
    if np.prod(nvec) <= 441:  # ≥ 45 expected per vector: every one is drawn
        assert len({tuple(r) for r in x}) == np.prod(nvec)


@pytest.mark.parametrize("batch", [(), (7,), (2, 3)])
@pytest.mark.parametrize("dtype", [jnp.int32, jnp.uint8])
def test_multidiscrete_sample_shapes_and_dtypes(batch, dtype):
    space = MultiDiscrete([21, 21], dtype)
    x = space.sample(jax.random.key(0), batch)
    assert x.shape == (*batch, 2) and x.dtype == dtype and bool(space.contains(x))
    big = MultiDiscrete([4097, 4097])
    y = big.sample(jax.random.key(0), batch)
    assert y.shape == (*batch, 2) and y.dtype == jnp.int32 and bool(big.contains(y))


@settings(max_examples=25, deadline=None)
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
    for g in env.groups:
        assert acts[g].dtype == jnp.int32 and bool(env.action_space(g).contains(acts[g]))


def test_random_policy_multidiscrete_groups_in_one_kernel(monkeypatch):
    """Groups of `MultiDiscrete` spaces (Philox, the default draw) draw in one Pallas
    kernel (`hash_draws.multi_discrete_groups`) with each space's own ``sample`` values;
    also with a group of no agents and with ``use_pallas`` off (XLA)."""
    from jaxdrive import hash_draws

    class Multi(Counter):
        def action_space(self, group):
            return MultiDiscrete([3, 5, 7]) if group == "red" else MultiDiscrete([21, 21])

    calls = []
    grouped = hash_draws.multi_discrete_groups
    monkeypatch.setattr(
        hash_draws, "multi_discrete_groups", lambda *a, **k: calls.append(1) or grouped(*a, **k)
    )
    key = jax.random.key(8)
    for num_red in (3, 0):
        env = Multi(num_red=num_red, num_blue=5)
        obs = {g: jnp.zeros((13, env.num_agents(g), 2)) for g in env.groups}
        acts = jax.jit(jaxdrive.random_policy(env))(key, obs)
        keys = jax.random.split(key)
        for g, k in zip(env.groups, keys, strict=True):
            want = env.action_space(g).sample(k, (13, env.num_agents(g)))
            np.testing.assert_array_equal(np.asarray(acts[g]), np.asarray(want))
    assert len(calls) == 2  # one grouped draw per policy trace (its kernel: test_triton_lowering)
    batches, nvecs, dtypes = [(4, 3), (0,), (9,)], [(3, 5, 7), (2,), (6, 6)], [jnp.int32] * 3
    keys = jax.random.split(key, 3)
    for use_pallas in (True, False):
        got = grouped(keys, batches, nvecs, dtypes, use_pallas=use_pallas)
        for i in range(3):
            want = hash_draws.multi_discrete(
                keys[i], batches[i], nvecs[i], method="philox", use_pallas=False
            )
            np.testing.assert_array_equal(np.asarray(got[i]), np.asarray(want))
    with pytest.raises(ValueError, match="one batch shape, nvec and dtype per key"):
        grouped(keys, batches[:2], nvecs, dtypes)
    with pytest.raises(ValueError, match=r"a \[P\] typed key array"):
        grouped(key, batches, nvecs, dtypes)


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
