"""Tests of TagGridWorld: conformance, WarpDrive 2.7.1 reference comparison, invariants.

The reference is WarpDrive's NumPy class ``example_envs.tag_gridworld.tag_gridworld.
TagGridWorld`` (``env_backend="cpu"``), used as a black box: its state (``timestep`` and
``global_state["loc_x"/"loc_y"]``) is set, it is stepped with the same actions, and its
next positions, rewards, ``done`` and observations are compared with ours.

Differences from the spec found while comparing: none in the dynamics, rewards,
termination or observations. The reference computes in float64 (our arrays are
float32), so rewards and observations are compared to 1e-5 rather than bitwise
(e.g. ``10 − 0.1`` differs by ~4e-7). The reference CPU class has no random start (its
random starts exist only in the CUDA reset-pool class), so random starts are checked
by invariants here, not against it.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxdrive
from environments.tag_gridworld import TagGridWorld, TagGridWorldParams

# (num_taggers, grid_length, episode_length): small grids, so tags are common.
CONFIGS = [(1, 1, 5), (2, 2, 8), (3, 4, 30), (4, 6, 40)]
MOVES = np.array([[0, 0], [1, 0], [-1, 0], [0, 1], [0, -1]])
ATOL = 1e-5  # float32 (ours) vs float64 (reference)


@functools.cache
def _env(T: int, L: int, E: int, full: bool = True, random_start: bool = False) -> TagGridWorld:
    return TagGridWorld(
        num_taggers=T,
        grid_length=L,
        episode_length=E,
        use_full_observation=full,
        random_start=random_start,
    )


def _split(env: TagGridWorld, a) -> dict[str, jax.Array]:
    return {"tagger": a[..., : env.num_taggers], "runner": a[..., env.num_taggers :]}


def _cat(by_group: dict, axis: int) -> np.ndarray:
    """Per-group arrays back to agent-id order along ``axis``."""
    return np.concatenate([np.asarray(by_group["tagger"]), np.asarray(by_group["runner"])], axis)


@functools.cache
def _batched_step(env: TagGridWorld):
    """jit(vmap): ``[N, M, 2]`` positions, ``[N]`` times, ``[N, M]`` actions -> step."""

    def one(pos, t, a):
        state, _ = env.init_state(pos, t)
        return env.step(jax.random.key(0), state, _split(env, a))

    return jax.jit(jax.vmap(one))


@functools.cache
def _scan_steps(env: TagGridWorld):
    """jit: from ``positions [M, 2]`` at ``t``, applies ``[K, M]`` actions; all states, ts."""

    def run(pos, t, acts):
        state, _ = env.init_state(pos, t)

        def body(s, a):
            s, ts = env.step(jax.random.key(0), s, _split(env, a))
            return s, (s, ts)

        return jax.lax.scan(body, state, acts)[1]

    return jax.jit(run)


# ------------------------------------------------------------------------- reference
def _reference(env: TagGridWorld):
    mod = pytest.importorskip(
        "example_envs.tag_gridworld.tag_gridworld", reason="needs rl-warp-drive==2.7.1"
    )
    return mod.TagGridWorld(
        num_taggers=env.num_taggers,
        grid_length=env.grid_length,
        episode_length=env.episode_length,
        use_full_observation=env.use_full_observation,
        env_backend="cpu",
    )


def _ref_out(ref, obs, rew, done):
    M = ref.num_agents
    t = ref.timestep
    pos = np.stack([ref.global_state["loc_x"][t], ref.global_state["loc_y"][t]], -1)
    return (
        pos,
        np.array([rew[i] for i in range(M)]),
        bool(done["__all__"]),
        np.stack([obs[i] for i in range(M)]),
    )


def _ref_step_from(ref, pos: np.ndarray, t: int, a: np.ndarray):
    """Injects positions ``[M, 2]`` at time ``t`` into the reference and steps it."""
    ref.reset()
    ref.timestep = t
    ref.global_state["loc_x"][t] = pos[:, 0]
    ref.global_state["loc_y"][t] = pos[:, 1]
    obs, rew, done, _ = ref.step({i: int(a[i]) for i in range(ref.num_agents)})
    return _ref_out(ref, obs, rew, done)


@pytest.mark.parametrize("full", [True, False], ids=["full", "partial"])
@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_matches_reference_on_random_states(config, full):
    env = _env(*config, full)
    T, L, E = config
    M = T + 1
    ref = _reference(env)
    rng = np.random.default_rng(sum(config) + full)
    n = 120
    pos = rng.integers(0, L + 1, (n, M, 2)).astype(np.int32)
    # Half the samples put the runner next to (or on) a tagger, so tags are frequent.
    near = rng.random(n) < 0.5
    pos[near, T] = np.clip(pos[near, 0] + MOVES[rng.integers(0, 5, near.sum())], 0, L)
    t = rng.integers(0, E, n).astype(np.int32)
    a = rng.integers(0, 5, (n, M)).astype(np.int32)
    state, ts = _batched_step(env)(jnp.asarray(pos), jnp.asarray(t), jnp.asarray(a))
    got_pos = np.asarray(state.positions)
    got_rew = _cat(ts.reward, 1)
    got_obs = _cat(ts.obs, 1)
    tags = 0
    for i in range(n):
        want_pos, want_rew, want_done, want_obs = _ref_step_from(ref, pos[i], int(t[i]), a[i])
        np.testing.assert_array_equal(got_pos[i], want_pos, err_msg=f"positions, sample {i}")
        np.testing.assert_allclose(got_rew[i], want_rew, atol=ATOL, err_msg=f"reward {i}")
        assert bool(ts.done[i]) == want_done, f"done, sample {i}"
        np.testing.assert_allclose(got_obs[i], want_obs, atol=ATOL, err_msg=f"obs {i}")
        tagged = bool(np.any(np.all(want_pos[:T] == want_pos[T], -1)))
        assert bool(ts.extras["tagged"][i]) == tagged
        assert np.all(_cat(ts.terminated, 1)[i] == tagged)
        tags += tagged
    assert tags >= 5, f"only {tags} tags in {n} samples: the comparison is too weak"
    assert np.all(np.asarray(state.t) == t + 1)


@pytest.mark.parametrize("full", [True, False], ids=["full", "partial"])
def test_matches_reference_on_episodes(full):
    """Whole episodes from the default start, stepped in lockstep with the reference."""
    T, L, E = 3, 4, 25
    env = _env(T, L, E, full)
    ref = _reference(env)
    rng = np.random.default_rng(7 + full)
    run = _scan_steps(env)
    tags = truncations = 0
    for _ in range(6):
        ref_obs = ref.reset()
        state0, ts0 = env.reset(jax.random.key(0))
        np.testing.assert_allclose(
            _cat(ts0.obs, 0), np.stack([ref_obs[i] for i in range(T + 1)]), atol=ATOL
        )
        acts = rng.integers(0, 5, (E, T + 1)).astype(np.int32)
        states, ts = run(state0.positions, state0.t, jnp.asarray(acts))
        for k in range(E):
            obs, rew, done, _ = ref.step({i: int(acts[k, i]) for i in range(T + 1)})
            want_pos, want_rew, want_done, want_obs = _ref_out(ref, obs, rew, done)
            np.testing.assert_array_equal(np.asarray(states.positions[k]), want_pos)
            np.testing.assert_allclose(_cat(ts.reward, 1)[k], want_rew, atol=ATOL)
            np.testing.assert_allclose(_cat(ts.obs, 1)[k], want_obs, atol=ATOL)
            assert bool(ts.done[k]) == want_done
            if want_done:
                tags += bool(ts.extras["tagged"][k])
                truncations += not bool(ts.extras["tagged"][k])
                break
    assert tags >= 1, "no episode ended in a tag: the comparison is too weak"


# ----------------------------------------------------------------------- conformance
@pytest.mark.parametrize(
    ("full", "random_start"), [(True, False), (False, True)], ids=["full", "partial-random"]
)
def test_check_env(full, random_start):
    env = _env(3, 3, 10, full, random_start)
    report = jaxdrive.testing.check_env(env, num_steps=12)
    assert report["steps"] == 12


def test_make():
    env, params = jaxdrive.make(
        "tag_gridworld",
        num_taggers=2,
        grid_length=5,
        use_full_observation=False,
        tag_reward_for_tagger=5.0,
    )
    assert isinstance(env, TagGridWorld)
    assert (env.num_taggers, env.grid_length, env.episode_length) == (2, 5, 100)
    assert env.agent_counts == {"tagger": 2, "runner": 1}
    assert env.observation_space("runner").shape == (6,)
    assert params == TagGridWorldParams(tag_reward_for_tagger=5.0)
    default_env, default_params = jaxdrive.make("tag_gridworld")
    assert default_env.num_taggers == 10 and default_env.observation_space("tagger").shape == (45,)
    assert default_params.wall_hit_penalty == pytest.approx(0.1)
    assert default_params.tag_penalty_for_runner == pytest.approx(2.0)
    assert default_params.step_cost_for_tagger == pytest.approx(0.01)


def test_params_change_rewards():
    env = _env(2, 2, 8)
    params = TagGridWorldParams(
        wall_hit_penalty=1.0,
        tag_reward_for_tagger=3.0,
        tag_penalty_for_runner=4.0,
        step_cost_for_tagger=0.5,
    )
    # Tagger 0 moves onto the runner; tagger 1 hits the wall (x = 2, +x); runner stays.
    state, _ = env.init_state(np.array([[1, 0], [2, 2], [0, 0]]), 0)
    _, ts = jax.jit(env.step)(
        jax.random.key(0), state, {"tagger": jnp.array([2, 1]), "runner": jnp.array([0])}, params
    )
    np.testing.assert_allclose(_cat(ts.reward, 0), [3.0, 2.0, -4.0])
    assert bool(ts.done) and bool(ts.extras["tagged"])
    # No tag: taggers pay the step cost, the runner earns it; a wall hit costs 1.
    state, _ = env.init_state(np.array([[2, 2], [2, 2], [0, 0]]), 0)
    _, ts = jax.jit(env.step)(
        jax.random.key(0), state, {"tagger": jnp.array([0, 1]), "runner": jnp.array([4])}, params
    )
    np.testing.assert_allclose(_cat(ts.reward, 0), [-0.5, -1.5, -0.5])
    assert not bool(ts.done) and not bool(ts.extras["tagged"])


# ------------------------------------------------------------------------- starts
def test_default_start_and_global_state():
    env = _env(3, 5, 20)
    state, ts = env.reset(jax.random.key(3))
    np.testing.assert_array_equal(state.positions, [[2, 2], [2, 2], [2, 2], [0, 0]])
    assert int(state.t) == 0 and not bool(ts.done) and not bool(ts.extras["tagged"])
    g = np.asarray(env.global_state(state, env.default_params))
    assert g.shape == (2 * 4 + 1,) and g.dtype == np.float32
    np.testing.assert_allclose(g, [0.4, 0.4, 0.4, 0.0, 0.4, 0.4, 0.4, 0.0, 0.0])


@pytest.mark.parametrize("L", [1, 2, 7])
def test_random_start(L):
    env = _env(6, L, 10, True, True)
    keys = jax.random.split(jax.random.key(L), 64)
    pos = np.asarray(jax.jit(jax.vmap(env.start_positions))(keys))
    np.testing.assert_array_equal(pos[:, -1], 0)  # the runner starts at (0, 0)
    taggers = pos[:, :-1]
    assert not np.any(np.all(taggers == 0, -1)), "a tagger started on the runner"
    lo, hi = (1, L - 1) if L >= 2 else (0, L)
    assert taggers.min() >= lo and taggers.max() <= hi
    cells = len(np.unique(taggers.reshape(-1, 2), axis=0))
    assert cells == (3 if L == 1 else (L - 1) ** 2), "random starts miss some cells"


def test_reset_pool():
    env = _env(3, 6, 20, True, True)
    pool = jaxdrive.make_reset_pool(env, jax.random.key(0), 5)
    assert pool.state.positions.shape == (5, 4, 2)
    fixed = _env(3, 6, 20)  # a default-start env can reset from the random pool
    venv = jaxdrive.vectorize(fixed, 8, reset_pool=pool)
    state, ts = jax.jit(venv.reset)(jax.random.key(1))
    members = {tuple(p.ravel()) for p in np.asarray(pool.state.positions)}
    assert all(tuple(p.ravel()) in members for p in np.asarray(state.positions))
    assert ts.obs["tagger"].shape == (8, 3, 17)


# ------------------------------------------------------------------------ properties
@settings(max_examples=30, deadline=None)
@given(data=st.data(), config=st.sampled_from(CONFIGS), full=st.booleans())
def test_properties(data, config, full):
    T, L, E = config
    env = _env(T, L, E, full)
    M = T + 1
    cell = st.integers(0, L)
    pos = np.array(data.draw(st.lists(st.tuples(cell, cell), min_size=M, max_size=M)), np.int32)
    t0 = data.draw(st.integers(0, E - 1))
    K = 12
    acts = np.array(
        data.draw(
            st.lists(st.lists(st.integers(0, 4), min_size=M, max_size=M), min_size=K, max_size=K)
        ),
        np.int32,
    )
    states, ts = _scan_steps(env)(jnp.asarray(pos), jnp.asarray(t0), jnp.asarray(acts))
    P = np.asarray(states.positions)  # [K, M, 2]
    prev = np.concatenate([pos[None], P[:-1]])
    assert P.min() >= 0 and P.max() <= L, "a position left [0, L]^2"
    np.testing.assert_array_equal(P, np.clip(prev + MOVES[acts], 0, L))
    t = t0 + 1 + np.arange(K)
    np.testing.assert_array_equal(states.t, t)
    tagged = np.any(np.all(P[:, :T] == P[:, T:], -1), -1)  # [K]
    np.testing.assert_array_equal(ts.extras["tagged"], tagged)
    np.testing.assert_array_equal(ts.done, tagged | (t >= E))
    np.testing.assert_array_equal(_cat(ts.terminated, 1), np.repeat(tagged[:, None], M, 1))
    truncated = (t >= E) & ~tagged
    np.testing.assert_array_equal(_cat(ts.truncated, 1), np.repeat(truncated[:, None], M, 1))
    assert np.all(_cat(ts.active, 1))
    obs = _cat(ts.obs, 1)
    assert obs.dtype == np.float32 and obs.shape == (K, M, env.obs_size)
    np.testing.assert_allclose(obs[:, :, -1], np.repeat(t[:, None] / E, M, 1), rtol=1e-6)


# ------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_taggers": 0}, "num_taggers"),
        ({"num_taggers": -3}, "num_taggers"),
        ({"num_taggers": 2.5}, "num_taggers"),
        ({"grid_length": 0}, "grid_length"),
        ({"grid_length": True}, "grid_length"),
        ({"episode_length": 0}, "episode_length"),
        ({"use_full_observation": "yes"}, "use_full_observation"),
    ],
)
def test_bad_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TagGridWorld(**kwargs)


def test_bad_actions_and_positions():
    env = _env(2, 3, 10)
    state, _ = env.reset(jax.random.key(0))
    key = jax.random.key(1)
    good = {"tagger": jnp.zeros(2, jnp.int32), "runner": jnp.zeros(1, jnp.int32)}
    env.step(key, state, good)
    with pytest.raises(ValueError, match="shape"):
        env.step(key, state, {**good, "tagger": jnp.zeros(3, jnp.int32)})
    with pytest.raises(ValueError, match="shape"):
        env.step(key, state, {**good, "runner": jnp.zeros((1, 1), jnp.int32)})
    with pytest.raises(ValueError, match="integers"):
        env.step(key, state, {**good, "tagger": jnp.zeros(2, jnp.float32)})
    with pytest.raises(ValueError, match="outside"):
        env.step(key, state, {**good, "tagger": jnp.array([0, 5])})
    with pytest.raises(ValueError, match="groups"):
        env.step(key, state, {"tagger": good["tagger"]})
    with pytest.raises(ValueError, match="groups"):
        env.step(key, state, jnp.zeros(3, jnp.int32))
    with pytest.raises(ValueError, match="shape"):
        env.init_state(np.zeros((2, 2), np.int32))
    with pytest.raises(ValueError, match="lie in"):
        env.init_state(np.full((3, 2), 4, np.int32))
    with pytest.raises(ValueError, match="groups"):
        env.num_agents("chaser")
