"""TagContinuous: conformance, hand-built scenarios, spec-derived NumPy checks of the
observations and neighbour searches, hypothesis invariants, bad input, large M.

The WarpDrive comparison lives in test_tag_continuous_reference.py.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaxdrive
from environments.tag_continuous import TagContinuous, TagContinuousParams, TagState, neighbors
from jaxdrive.wrappers import make_reset_pool

ATOL = 1e-6


@functools.cache
def _jit(env: TagContinuous):
    """Jitted ``(reset, step, observe)`` of ``env``, compiled once per config."""
    return jax.jit(env.reset), jax.jit(env.step), jax.jit(env.observe)


def _state(**kw) -> TagState:
    m = len(kw["x"])
    z = np.zeros(m, np.float32)
    return TagState(
        x=np.asarray(kw["x"], np.float32),
        y=np.asarray(kw["y"], np.float32),
        speed=np.asarray(kw.get("speed", z), np.float32),
        direction=np.asarray(kw.get("direction", z), np.float32),
        acceleration=np.asarray(kw.get("acceleration", z), np.float32),
        in_game=np.asarray(kw.get("in_game", np.ones(m, bool)), bool),
        t=np.int32(kw.get("t", 0)),
    )


def _noop(env: TagContinuous) -> dict[str, np.ndarray]:
    return {g: np.zeros((env.num_agents(g), 2), np.int32) for g in env.groups}


def _merge(env: TagContinuous, tree: dict) -> np.ndarray:
    return np.asarray(env.merge_groups({g: jnp.asarray(v) for g, v in tree.items()}))


# ------------------------------------------------------------------------------------
# Spec-derived NumPy references (written from tag.md, independent of the env code).
def _nearest_k_np(x, y, in_game, k):
    m = len(x)
    idx = np.tile(np.arange(m, dtype=np.int32)[:, None], (1, k))
    valid = np.zeros((m, k), bool)
    for i in range(m):
        dx = (x[i] - x).astype(np.float32)
        dy = (y[i] - y).astype(np.float32)
        d2 = dx * dx + dy * dy
        cand = sorted((j for j in range(m) if j != i and in_game[j]), key=lambda j: (d2[j], j))
        for s, j in enumerate(cand[:k]):
            idx[i, s], valid[i, s] = j, True
    return idx, valid


def _obs_np(env: TagContinuous, s: TagState, p: TagContinuousParams) -> np.ndarray:
    m = env.num_agents_total
    L, ms = np.float64(p.grid_length), np.float64(p.max_speed) + 1e-10
    x, y = np.asarray(s.x, np.float64), np.asarray(s.y, np.float64)
    g = np.asarray(s.in_game, bool)
    val = np.stack([x, y, s.speed, s.acceleration, s.direction]).astype(np.float64)
    scale = np.array([np.sqrt(2) * L, np.sqrt(2) * L, ms, ms, 2 * np.pi])
    types = env.is_tagger.astype(np.float64)
    time_ = float(s.t) / env.episode_length
    out = []
    for i in range(m):
        if env.use_full_observation:
            js = [j for j in range(m) if j != i]
            rel = (val[:, js] - val[:, [i]]) / scale[:, None] * g[i]
            feats = np.concatenate([rel.ravel(), types[js], g[js].astype(float)])
            out.append(np.concatenate([feats, [time_ * g[i]]]))
        else:
            k = env.num_other_agents_observed
            idx, valid = _nearest_k_np(np.asarray(s.x), np.asarray(s.y), g, k)
            js = idx[i][valid[i]]
            block = np.zeros((7, k))
            if g[i]:
                block[:5, : len(js)] = (val[:, js] - val[:, [i]]) / scale[:, None]
                block[5, : len(js)] = types[js]
                block[6, : len(js)] = 1.0
            out.append(np.concatenate([block.ravel(), [time_ * g[i]]]))
    return np.stack(out)


def _random_state(rng, env: TagContinuous, L: float, cap: np.ndarray, lattice: bool = False):
    m = env.num_agents_total
    in_game = np.ones(m, bool)
    if env.runner_exits_game_after_tagged:
        runners = np.asarray(env.runner_ids)
        in_game[runners] = rng.uniform(size=runners.size) < 0.6
    if lattice:  # coarse lattice positions: many exactly tied distances
        x = rng.integers(0, 4, m) * (L / 3)
        y = rng.integers(0, 4, m) * (L / 3)
    else:
        x, y = rng.uniform(0, L, m), rng.uniform(0, L, m)
    kw = dict(
        x=x,
        y=y,
        speed=rng.uniform(0, 1, m) * cap,
        direction=rng.uniform(0, 2 * np.pi, m),
        acceleration=rng.uniform(-1, 1, m),
    )
    kw = {k: v * in_game for k, v in kw.items()}
    return _state(**kw, in_game=in_game, t=rng.integers(0, env.episode_length))


# ------------------------------------------------------------------------------------
SMALL_PARTIAL = TagContinuous(num_taggers=2, num_runners=4, episode_length=20)
SMALL_FULL = TagContinuous(
    num_taggers=2,
    num_runners=3,
    episode_length=12,
    use_full_observation=True,
    tagger_ids=(4, 1),
    runner_exits_game_after_tagged=False,
)


@pytest.mark.parametrize("env", [SMALL_PARTIAL, SMALL_FULL], ids=["partial", "full"])
def test_check_env(env: TagContinuous) -> None:
    params = env.make_params(grid_length=2.0, tagging_distance=0.3)
    report = jaxdrive.testing.check_env(env, params, num_envs=2)
    assert report["episodes"] >= 1


def test_make_and_defaults() -> None:
    env, params = jaxdrive.make("tag_continuous", num_taggers=2, num_runners=5, grid_length=3.0)
    assert isinstance(env, TagContinuous) and params.grid_length == 3.0
    assert env.agent_counts == {"tagger": 2, "runner": 5}
    assert env.tagger_ids == (0, 1) and env.runner_ids == (2, 3, 4, 5, 6)
    assert env.observation_space("runner").shape == (7 * 2 + 1,)
    assert env.action_space("tagger") == jaxdrive.MultiDiscrete([11, 11])
    d = TagContinuous()
    assert (d.num_taggers, d.num_runners, d.episode_length) == (1, 10, 100)
    assert d.default_params == TagContinuousParams()
    assert float(d.default_params.tagging_distance) == 0.01
    full = TagContinuous(num_taggers=2, num_runners=5, use_full_observation=True)
    assert full.observation_space("tagger").shape == (7 * 6 + 1,)
    assert hash(env) == hash(TagContinuous(num_taggers=2, num_runners=5))  # static, hashable
    # Extras have the same structure from reset and step.
    reset, step, _ = _jit(SMALL_PARTIAL)
    p = SMALL_PARTIAL.default_params
    s, ts0 = reset(jax.random.key(0), p)
    _, ts1 = step(jax.random.key(1), s, SMALL_PARTIAL.sample_actions(jax.random.key(2)), p)
    assert set(ts0.extras) == set(ts1.extras) == {"num_runners_left", "num_tags"}
    assert int(ts0.extras["num_runners_left"]) == 4 and int(ts0.extras["num_tags"]) == 0
    # Reset: everyone in the game, at rest, on the square, facing a multiple of pi/2.
    assert np.all(np.asarray(s.in_game)) and not np.any(np.asarray(s.speed))
    q = np.asarray(s.direction) / (np.pi / 2)
    np.testing.assert_allclose(q, np.round(q), atol=1e-6)
    assert np.all((np.asarray(s.x) >= 0) & (np.asarray(s.x) <= p.grid_length))
    # The real observation at t = 0 (WarpDrive's partial one is zeros at reset).
    assert np.abs(np.asarray(ts0.obs["runner"])).sum() > 0


# ------------------------------------------------------------------------------------
# Hand-built scenarios.
def _scenario_env(tagger_ids, exits=True, episode_length=5):
    return TagContinuous(
        num_taggers=2,
        num_runners=3,
        episode_length=episode_length,
        num_other_agents_observed=2,
        tagger_ids=tagger_ids,
        runner_exits_game_after_tagged=exits,
    )


def _scenario_state(env: TagContinuous, t: int = 0, runner_in=(True, True, True)):
    """Taggers at (1,1), (3,3); runners at (1.2,1), (3,2.5) and (2,2): the last is at
    distance √2 of both taggers (a tie)."""
    ta, tb = env.tagger_ids
    r0, r1, r2 = env.runner_ids
    x, y, g = np.zeros(5), np.zeros(5), np.ones(5, bool)
    for i, (px, py) in zip(
        (ta, tb, r0, r1, r2), [(1, 1), (3, 3), (1.2, 1), (3, 2.5), (2, 2)], strict=True
    ):
        x[i], y[i] = px, py
    g[[r0, r1, r2]] = runner_in
    return _state(x=x, y=y, in_game=g, t=t)


@pytest.mark.parametrize("tagger_ids", [None, (1, 3)])
def test_double_tag_and_tie(tagger_ids) -> None:
    env = _scenario_env(tagger_ids)
    p = env.make_params(
        grid_length=4.0,
        tagging_distance=0.5,
        tag_reward_for_tagger=1.5,
        tag_penalty_for_runner=-2.0,
    )
    _, step, _ = _jit(env)
    s, ts = step(jax.random.key(0), _scenario_state(env), _noop(env), p)
    # Tagger 0 tags runner 0 and the tied runner 2 (lowest tagger index): both rewards.
    np.testing.assert_allclose(np.asarray(ts.reward["tagger"]), [3.0, 1.5])
    np.testing.assert_allclose(np.asarray(ts.reward["runner"]), [-2.0, -2.0, -2.0])
    assert int(ts.extras["num_tags"]) == 3 and int(ts.extras["num_runners_left"]) == 0
    assert bool(ts.done)  # no runner left
    assert np.all(np.asarray(ts.terminated["runner"])) and np.all(ts.terminated["tagger"])
    assert not np.any(np.asarray(ts.active["runner"])) and np.all(ts.active["tagger"])
    assert not np.any(np.asarray(ts.truncated["runner"]))
    runners = np.asarray(env.runner_ids)
    assert not np.any(np.asarray(s.in_game)[runners])


def test_runners_stay_without_exit() -> None:
    env = _scenario_env(None, exits=False)
    p = env.make_params(grid_length=4.0, tagging_distance=0.5)
    _, step, _ = _jit(env)
    s, ts = step(jax.random.key(0), _scenario_state(env), _noop(env), p)
    s, ts = step(jax.random.key(1), s, _noop(env), p)  # tagged again
    np.testing.assert_allclose(np.asarray(ts.reward["tagger"]), [2.0, 1.0])
    np.testing.assert_allclose(np.asarray(ts.reward["runner"]), [-1.0, -1.0, -1.0])
    assert np.all(np.asarray(s.in_game)) and not bool(ts.done)
    assert not np.any(np.asarray(ts.terminated["runner"]))


def test_end_of_game_and_frozen_runner() -> None:
    env = _scenario_env(None, exits=True, episode_length=5)
    p = env.make_params(
        grid_length=4.0,
        tagging_distance=0.06,
        end_of_game_reward_for_runner=0.7,
        step_reward_for_runner=0.1,
        step_penalty_for_tagger=-0.05,
    )
    _, step, _ = _jit(env)
    # Runner 1 already out (tagged earlier): frozen, no reward. Runner 0 is tagged now.
    s0 = _scenario_state(env, t=4, runner_in=(True, False, True))
    runner_act = np.array([[0, 0], [10, 0], [10, 0]], np.int32)  # runner 0 stays put
    act = {"tagger": np.zeros((2, 2), np.int32), "runner": runner_act}
    s, ts = step(jax.random.key(0), s0, act, p)
    r = np.asarray(ts.reward["runner"])
    np.testing.assert_allclose(r, [0.1 - 1.0, 0.0, 0.1 + 0.7], atol=ATOL)
    np.testing.assert_allclose(np.asarray(ts.reward["tagger"]), [-0.05 + 1.0, -0.05], atol=ATOL)
    assert bool(ts.done) and int(s.t) == 5
    np.testing.assert_array_equal(np.asarray(ts.terminated["runner"]), [True, False, True])
    r1 = env.runner_ids[1]
    assert float(s.x[r1]) == 3.0 and float(s.y[r1]) == 2.5 and float(s.speed[r1]) == 0.0
    # The in-game runner accelerated at full (index 10 = +1) and moved.
    r2 = env.runner_ids[2]
    assert float(s.speed[r2]) == 1.0 and float(s.acceleration[r2]) == 0.0  # at the cap


def test_edge_penalty_and_clipping() -> None:
    env = _scenario_env(None)
    p = env.make_params(grid_length=4.0, tagging_distance=0.0, edge_hit_penalty=-0.25)
    _, step, _ = _jit(env)
    s0 = _scenario_state(env, runner_in=(True, False, True))
    s0 = s0.replace(x=s0.x.copy(), speed=np.full(5, 0.5, np.float32) * s0.in_game)
    s0.x[env.runner_ids[0]] = 3.9  # heading 0 at speed 0.5 +1: crosses x = 4
    act = {"tagger": np.zeros((2, 2), np.int32), "runner": np.full((3, 2), [10, 0], np.int32)}
    s, ts = step(jax.random.key(0), s0, act, p)
    assert float(s.x[env.runner_ids[0]]) == 4.0
    np.testing.assert_allclose(np.asarray(ts.reward["runner"]), [-0.25, 0.0, 0.0])
    assert int(ts.extras["num_tags"]) == 0  # tagging_distance 0: nobody is ever tagged


# ------------------------------------------------------------------------------------
# Observations and neighbour searches against the spec-derived NumPy references.
OBS_ENVS = [
    TagContinuous(num_taggers=2, num_runners=5, episode_length=7, num_other_agents_observed=3),
    TagContinuous(
        num_taggers=1, num_runners=4, episode_length=7, num_other_agents_observed=4, tagger_ids=(3,)
    ),
    TagContinuous(
        num_taggers=2, num_runners=4, episode_length=7, use_full_observation=True, tagger_ids=(0, 5)
    ),
]


@pytest.mark.parametrize("env", OBS_ENVS, ids=["partial", "partial_k=M-1", "full"])
def test_observation_layout(env: TagContinuous) -> None:
    rng = np.random.default_rng(1)
    _, _, observe = _jit(env)
    p = env.make_params(grid_length=3.0, max_speed=1.5)
    cap = np.full(env.num_agents_total, 1.5)
    for trial in range(6):
        s = _random_state(rng, env, 3.0, cap, lattice=trial % 2 == 0)
        got = np.asarray(observe(s, p))
        np.testing.assert_allclose(got, _obs_np(env, s, p), atol=ATOL, err_msg=f"trial {trial}")
        out = ~np.asarray(s.in_game)
        if env.use_full_observation:
            n = env.num_agents_total - 1
            assert not got[out][:, : 5 * n].any() and not got[out][:, -1].any()
        else:
            assert not got[out].any()
    # Group views are the id-order rows.
    st, ts = _jit(env)[0](jax.random.key(3), p)
    full = np.asarray(observe(st, p))
    for g in env.groups:
        np.testing.assert_array_equal(np.asarray(ts.obs[g]), full[list(env.group_ids(g))])


@pytest.mark.parametrize("block_rows", [None, 3])
def test_nearest_k_matches_bruteforce(block_rows) -> None:
    rng = np.random.default_rng(0)
    m = 13
    fn = jax.jit(functools.partial(neighbors.nearest_k, block_rows=block_rows), static_argnums=3)
    for trial in range(8):
        lattice = trial % 2 == 0  # ties
        x = (rng.integers(0, 3, m) if lattice else rng.uniform(0, 5, m)).astype(np.float32)
        y = (rng.integers(0, 3, m) if lattice else rng.uniform(0, 5, m)).astype(np.float32)
        g = rng.uniform(size=m) < (0.3 if trial >= 6 else 0.8)
        for k in (1, m - 1, m + 2) if block_rows is None else (4, m + 2):
            idx, valid = fn(x, y, g, k)
            ridx, rvalid = _nearest_k_np(x, y, g, k)
            np.testing.assert_array_equal(np.asarray(valid), rvalid, f"trial {trial} k {k}")
            np.testing.assert_array_equal(np.asarray(idx), ridx, f"trial {trial} k {k}")
            assert idx.dtype == jnp.int32 and idx.shape == (m, k)


@pytest.mark.parametrize("block_rows", [None, 4])
def test_nearest_tagger_matches_bruteforce(block_rows) -> None:
    rng = np.random.default_rng(2)
    fn = jax.jit(functools.partial(neighbors.nearest_tagger, block_rows=block_rows))
    for trial in range(6):
        r, t = 11, 3
        pts = rng.integers(0, 3, (4, max(r, t))).astype(np.float32)  # ties
        if trial % 2:
            pts = rng.uniform(0, 5, pts.shape).astype(np.float32)
        xr, yr, xt, yt = pts[0, :r], pts[1, :r], pts[2, :t], pts[3, :t]
        idx, d2 = fn(xr, yr, xt, yt)
        dx = xr[:, None] - xt[None, :]
        dy = yr[:, None] - yt[None, :]
        rd2 = dx * dx + dy * dy
        np.testing.assert_array_equal(np.asarray(idx), np.argmin(rd2, axis=1))  # first min
        np.testing.assert_allclose(np.asarray(d2), rd2.min(1), rtol=1e-6)
        assert idx.dtype == jnp.int32 and d2.dtype == jnp.float32


def test_global_state() -> None:
    env = OBS_ENVS[2]
    p = env.make_params(grid_length=3.0)
    s = _random_state(np.random.default_rng(5), env, 3.0, np.ones(6))
    gs = np.asarray(jax.jit(env.global_state)(s, p))
    m = env.num_agents_total
    assert gs.shape == (7 * m + 1,) and gs.dtype == np.float32
    np.testing.assert_allclose(gs[:m], np.asarray(s.x) / 3.0, atol=ATOL)
    np.testing.assert_array_equal(gs[5 * m : 6 * m], env.is_tagger.astype(np.float32))
    np.testing.assert_array_equal(gs[6 * m : 7 * m], np.asarray(s.in_game, np.float32))
    np.testing.assert_allclose(gs[-1], int(s.t) / env.episode_length, atol=ATOL)


# ------------------------------------------------------------------------------------
# Reset options.
def test_reset_pool_of_one_is_a_fixed_start() -> None:
    env = SMALL_PARTIAL
    p = env.default_params
    pool = jax.jit(make_reset_pool, static_argnums=(0, 2))(env, jax.random.key(7), 1, p)
    venv = jaxdrive.VecEnv(env, 3, reset_pool=pool)
    s, _ = jax.jit(venv.reset)(jax.random.key(0), p)
    for f in ("x", "y", "direction"):
        a = np.asarray(getattr(s, f))
        assert np.all(a == a[:1]), f
        np.testing.assert_array_equal(a[0], np.asarray(getattr(pool.state, f))[0])
    # Without a pool every reset draws a fresh start.
    s3, _ = _jit(env)[0](jax.random.key(1), p)
    s4, _ = _jit(env)[0](jax.random.key(2), p)
    assert not np.array_equal(np.asarray(s3.x), np.asarray(s4.x))


# ------------------------------------------------------------------------------------
# Hypothesis invariants (plain JAX; one compiled step per config).
PROP_ENVS = {
    "partial_exit": TagContinuous(
        num_taggers=2, num_runners=5, episode_length=6, num_other_agents_observed=3, backend="xla"
    ),
    "full_stay": TagContinuous(
        num_taggers=1,
        num_runners=3,
        episode_length=6,
        use_full_observation=True,
        runner_exits_game_after_tagged=False,
        tagger_ids=(2,),
        backend="xla",
    ),
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(PROP_ENVS)),
    seed=st.integers(0, 2**31 - 1),
    grid_length=st.floats(0.5, 20.0),
    max_speed=st.floats(0.05, 3.0),
    skill_t=st.floats(0.0, 2.0),
    skill_r=st.floats(0.0, 2.0),
    tagging_distance=st.floats(0.0, 1.0),
    acc=st.floats(0.0, 2.0),
    edge=st.floats(-1.0, 0.0),
)
def test_step_invariants(
    name, seed, grid_length, max_speed, skill_t, skill_r, tagging_distance, acc, edge
) -> None:
    env = PROP_ENVS[name]
    p = env.make_params(
        grid_length=grid_length,
        max_speed=max_speed,
        skill_level_tagger=skill_t,
        skill_level_runner=skill_r,
        tagging_distance=tagging_distance,
        min_acceleration=-acc,
        max_acceleration=acc,
        edge_hit_penalty=edge,
        step_reward_for_runner=0.1,
        step_penalty_for_tagger=-0.1,
    )
    rng = np.random.default_rng(seed)
    cap = np.where(env.is_tagger, skill_t, skill_r) * max_speed
    cap32 = (
        np.float32(max_speed) * np.where(env.is_tagger, np.float32(skill_t), np.float32(skill_r))
    ).astype(np.float32)
    s = _random_state(rng, env, grid_length, cap)
    act = {
        g: np.stack(
            [
                rng.integers(0, env.num_acceleration_levels + 1, env.num_agents(g)),
                rng.integers(0, env.num_turn_levels + 1, env.num_agents(g)),
            ],
            axis=1,
        ).astype(np.int32)
        for g in env.groups
    }
    _, step, _ = _jit(env)
    new, ts = step(jax.random.key(0), s, act, p)
    L = np.float32(grid_length)
    x, y, sp = np.asarray(new.x), np.asarray(new.y), np.asarray(new.speed)
    assert np.all((x >= 0) & (x <= L) & (y >= 0) & (y <= L))
    assert np.all((sp >= 0) & (sp <= cap32))
    th = np.asarray(new.direction)
    assert np.all((th >= 0) & (th <= np.float32(2 * np.pi)))
    was_out = ~np.asarray(s.in_game)
    rew = _merge(env, ts.reward)
    assert np.all(np.isfinite(rew)) and not np.any(rew[was_out])
    np.testing.assert_array_equal(x[was_out], np.asarray(s.x)[was_out])
    np.testing.assert_array_equal(y[was_out], np.asarray(s.y)[was_out])
    assert not np.any(sp[was_out]) and not np.any(np.asarray(new.in_game)[was_out])
    runners = np.asarray(env.runner_ids)
    before = int(np.asarray(s.in_game)[runners].sum())
    after = int(np.asarray(new.in_game)[runners].sum())
    assert after <= before and after == int(ts.extras["num_runners_left"])
    if not env.runner_exits_game_after_tagged:
        assert after == before
    assert np.all(np.asarray(new.in_game)[list(env.tagger_ids)])
    assert int(new.t) == int(s.t) + 1
    for g in env.groups:
        assert np.all(np.isfinite(np.asarray(ts.obs[g])))


# ------------------------------------------------------------------------------------
# Bad input.
@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(num_taggers=0), "num_taggers"),
        (dict(num_runners=0), "num_runners"),
        (dict(num_taggers=2, num_runners=3, num_other_agents_observed=5), "num_other_agents"),
        (dict(num_other_agents_observed=0), "num_other_agents"),
        (dict(episode_length=0), "episode_length"),
        (dict(num_acceleration_levels=0), "num_acceleration_levels"),
        (dict(num_turn_levels=0), "num_turn_levels"),
        (dict(num_taggers=1.5), "num_taggers"),
        (dict(backend="cuda"), "backend"),
        (dict(backend="jax"), "backend"),
        (dict(kernel_config={"brute_below": 4}), "kernel_config"),
        (dict(num_taggers=2, tagger_ids=(0,)), "tagger_ids"),
        (dict(num_taggers=2, tagger_ids=(3, 3)), "tagger_ids"),
        (dict(num_taggers=2, num_runners=2, tagger_ids=(0, 4)), "tagger_ids"),
    ],
)
def test_bad_config(kw, match) -> None:
    with pytest.raises(ValueError, match=match):
        TagContinuous(**kw)


def test_full_observation_ignores_k() -> None:
    env = TagContinuous(
        num_taggers=1, num_runners=1, use_full_observation=True, num_other_agents_observed=5
    )
    assert env.obs_size == 8


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(tagging_distance=1.5), "tagging_distance"),
        (dict(tagging_distance=-0.1), "tagging_distance"),
        (dict(edge_hit_penalty=0.5), "edge_hit_penalty"),
        (dict(grid_length=0.0), "grid_length"),
        (dict(max_speed=-1.0), "max_speed"),
        (dict(skill_level_runner=-1.0), "skill_level_runner"),
        (dict(min_turn=1.0, max_turn=0.0), "min_turn"),
        (dict(min_acceleration=2.0), "min_acceleration"),
        (dict(grid_length=float("nan")), "grid_length"),
        (dict(not_a_field=1.0), "not_a_field"),
    ],
)
def test_bad_params(kw, match) -> None:
    env = SMALL_PARTIAL
    with pytest.raises(ValueError, match=match):
        env.make_params(**kw)
    if "not_a_field" not in kw:  # eager reset/step check concrete params too
        bad = env.default_params.replace(**kw)
        with pytest.raises(ValueError, match=match):
            env.reset(jax.random.key(0), bad)


def test_bad_actions() -> None:
    env = SMALL_PARTIAL
    p = env.default_params
    s, _ = _jit(env)[0](jax.random.key(0), p)
    good = _noop(env)
    for bad, match in [
        ({**good, "tagger": np.zeros((3, 2), np.int32)}, "shape"),
        ({**good, "runner": np.zeros((4,), np.int32)}, "shape"),
        ({**good, "runner": np.zeros((4, 2), np.float32)}, "integers"),
        ({**good, "runner": np.full((4, 2), 11, np.int32)}, "outside"),
        ({"tagger": good["tagger"]}, "missing"),
    ]:
        with pytest.raises(ValueError, match=match):
            env.step(jax.random.key(1), s, bad, p)


# ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_large_env_one_step() -> None:
    """WarpDrive's largest config: T=100, R=10,000 (M=10,010) in one env, on CPU."""
    env = TagContinuous(
        num_taggers=100,
        num_runners=10_000,
        episode_length=500,
        num_other_agents_observed=10,
        backend="xla",
    )
    p = env.make_params(grid_length=20.0, tagging_distance=0.02)
    m = env.num_agents_total
    rng = np.random.default_rng(0)
    s = _state(x=rng.uniform(0, 20, m), y=rng.uniform(0, 20, m))  # no threefry compile
    t0 = time.perf_counter()
    new, ts = jax.jit(env.step)(jax.random.key(0), s, _noop(env), p)
    jax.block_until_ready(ts)
    assert time.perf_counter() - t0 < 60
    assert ts.obs["runner"].shape == (10_000, 71)
    # Spot-check a few rows of the neighbour search against brute force.
    obs = np.asarray(ts.obs["runner"])
    x, y = np.asarray(new.x), np.asarray(new.y)
    g = np.asarray(new.in_game)  # the observation uses the flags after tagging
    for r in (0, 4567, 9999):
        i = env.runner_ids[r]
        dx, dy = x[i] - x, y[i] - y
        d2 = dx * dx + dy * dy  # float32, as the env
        d2[i] = np.inf
        d2[~g] = np.inf
        near = np.argsort(d2, kind="stable")[:10]
        if g[i]:
            np.testing.assert_allclose(obs[r, :10], (x[near] - x[i]) / (20 * np.sqrt(2)), atol=1e-5)
        else:
            assert not obs[r].any()
    tags = int(ts.extras["num_tags"])
    assert int(ts.extras["num_runners_left"]) == 10_000 - tags


def test_action_table_same_with_constant_bounds_under_jit() -> None:
    """The action table equals np.linspace's float32 values whether its bounds are traced,
    eager or compile-time constants gathered inside jit (XLA used to fold the constant
    case with other roundings: 9 of 21 values off for ±0.1 and 20 levels)."""
    from environments.tag_continuous import action_values

    for lo, hi, levels in [(-0.1, 0.1, 20), (-2.356, 2.356, 20), (-1.0, 0.5, 7)]:
        ref = np.concatenate(
            [[0.0], np.linspace(np.float32(lo), np.float32(hi), levels, dtype=np.float32)]
        ).astype(np.float32)
        idx = jnp.arange(levels + 1)
        const = jax.jit(lambda i, lo=lo, hi=hi, n=levels: action_values(lo, hi, n)[i])(idx)
        traced = jax.jit(lambda a, b, i, n=levels: action_values(a, b, n)[i])(lo, hi, idx)
        np.testing.assert_array_equal(np.asarray(const), ref)
        np.testing.assert_array_equal(np.asarray(traced), ref)
