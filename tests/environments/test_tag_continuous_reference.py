"""TagContinuous against WarpDrive 2.7.1's NumPy TagContinuous (env_backend="cpu").

Both envs get the same state (WarpDrive's attributes are overwritten) and the same
actions; next state, rewards, done and observations must agree to float32 tolerance
(``ATOL = 1e-5``; cos/sin and the observation's normalise-then-subtract order differ
in the last bits). Our state is re-synchronised from WarpDrive's before every step, so
rounding never accumulates.

Real differences from WarpDrive, handled below (each is documented in the env):
* WarpDrive builds a step's observation *before* tagging, so a runner tagged in that
  step still shows as in the game; ours is the observation of the state returned. We
  compare WarpDrive's to ``env.observe`` of our next state with the pre-step in-game
  flags, and to ``ts.obs`` itself on steps without a tag.
* The spec says WarpDrive's partial observation at reset is all zeros: its NumPy class
  in fact returns the real observation at ``t = 0``, as ours does, and we compare them.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

from environments.tag_continuous import TagContinuous, TagState, action_values

wd_module = pytest.importorskip("example_envs.tag_continuous.tag_continuous")

ATOL = 1e-5
FEATURES = ("loc_x", "loc_y", "speed", "direction", "acceleration")
FIELDS = ("x", "y", "speed", "direction", "acceleration")

# (static config, params). Small grids and large tagging distances so tags happen.
CONFIGS = [
    (
        dict(num_taggers=2, num_runners=6, episode_length=12, use_full_observation=True),
        dict(
            grid_length=2.0,
            tagging_distance=0.2,
            skill_level_tagger=1.2,
            skill_level_runner=0.8,
            edge_hit_penalty=-0.3,
            step_penalty_for_tagger=-0.01,
            step_reward_for_runner=0.02,
            end_of_game_reward_for_runner=2.0,
        ),
    ),
    (
        dict(num_taggers=1, num_runners=7, episode_length=15, num_other_agents_observed=3),
        dict(grid_length=1.5, tagging_distance=0.3, edge_hit_penalty=-0.1),
    ),
    (
        # k = M - 1: rows get padded once runners leave.
        dict(num_taggers=1, num_runners=4, episode_length=10, num_other_agents_observed=4),
        dict(grid_length=2.0, tagging_distance=0.25, tag_reward_for_tagger=3.0),
    ),
    (
        dict(
            num_taggers=3,
            num_runners=5,
            episode_length=9,
            num_other_agents_observed=2,
            runner_exits_game_after_tagged=False,
            num_acceleration_levels=3,
            num_turn_levels=5,
        ),
        dict(grid_length=3.0, tagging_distance=0.15, tag_penalty_for_runner=-2.5),
    ),
    (
        # WarpDrive's run config numbers (tag_continuous.yaml), fewer agents.
        dict(
            num_taggers=2,
            num_runners=5,
            episode_length=20,
            use_full_observation=True,
            runner_exits_game_after_tagged=False,
            num_acceleration_levels=20,
            num_turn_levels=20,
        ),
        dict(
            grid_length=4.0,
            max_acceleration=0.1,
            min_acceleration=-0.1,
            max_turn=2.356,
            min_turn=-2.356,
            tag_reward_for_tagger=10.0,
            tag_penalty_for_runner=-10.0,
            tagging_distance=0.1,
        ),
    ),
]


def _make_wd(static: dict, params: dict, seed: int):
    kw = {k: v for k, v in static.items() if k not in ("tagger_ids", "backend")}
    # Our default is partial observation, WarpDrive's class default is full.
    kw.setdefault("use_full_observation", False)
    return wd_module.TagContinuous(**kw, **params, seed=seed, env_backend="cpu")


@functools.cache
def _jitted(env: TagContinuous):
    return jax.jit(env.step), jax.jit(env.observe)


def _wd_state(wd) -> dict[str, np.ndarray]:
    t = wd.timestep
    out = {
        f: np.asarray(wd.global_state[k][t], np.float32)
        for f, k in zip(FIELDS, FEATURES, strict=True)
    }
    out["in_game"] = np.asarray(wd.still_in_the_game).astype(bool)
    out["t"] = np.int32(t)
    return out


def _inject(wd, s: dict[str, np.ndarray], runner_ids: tuple[int, ...]) -> None:
    """Overwrites WarpDrive's state (after a reset) with ``s``."""
    t = int(s["t"])
    wd.timestep = t
    for f, k in zip(FIELDS, FEATURES, strict=True):
        wd.global_state[k][t] = s[f]
    wd.still_in_the_game = s["in_game"].astype(np.int32)
    wd.runners = {r: True for r in runner_ids if s["in_game"][r]}
    wd.num_runners = len(wd.runners)


def _random_state(rng, env: TagContinuous, p: dict, exits: bool) -> dict[str, np.ndarray]:
    m = env.num_agents_total
    L = p.get("grid_length", 10.0)
    cap = np.where(
        env.is_tagger, p.get("skill_level_tagger", 1.0), p.get("skill_level_runner", 1.0)
    ) * p.get("max_speed", 1.0)
    in_game = np.ones(m, bool)
    if exits:
        runners = np.asarray(env.runner_ids)
        in_game[runners] = rng.uniform(size=runners.size) < 0.7
        in_game[rng.choice(runners)] = True
    s = {
        "x": rng.uniform(0, L, m),
        "y": rng.uniform(0, L, m),
        "speed": rng.uniform(0, 1, m) * cap,
        "direction": rng.uniform(0, 2 * np.pi, m),
        "acceleration": rng.uniform(-0.5, 0.5, m),
    }
    s = {k: (v * in_game).astype(np.float32) for k, v in s.items()}
    s["in_game"] = in_game
    s["t"] = np.int32(rng.integers(0, env.episode_length))
    return s


def _to_tag_state(s: dict[str, np.ndarray]) -> TagState:
    return TagState(**{f: np.asarray(s[f]) for f in (*FIELDS, "in_game", "t")})


def _merge_np(env: TagContinuous, per_group: dict) -> np.ndarray:
    """``{g: [A_g, ...]}`` -> ``[M, ...]`` in agent-id order (NumPy)."""
    first = np.asarray(per_group["tagger"])
    out = np.zeros((env.num_agents_total, *first.shape[1:]), first.dtype)
    for g in env.groups:
        out[np.asarray(env.group_ids(g))] = np.asarray(per_group[g])
    return out


def _wd_obs(obs: dict, m: int) -> np.ndarray:
    return np.stack([np.asarray(obs[i], np.float64) for i in range(m)])


def _angle_close(a: np.ndarray, b: np.ndarray) -> bool:
    d = np.abs(a.astype(np.float64) - b.astype(np.float64)) % (2 * np.pi)
    return bool(np.all(np.minimum(d, 2 * np.pi - d) <= ATOL))


def _run_config(static: dict, params: dict, seed: int, num_steps: int) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    wd = _make_wd(static, params, seed)
    tagger_ids = tuple(sorted(int(i) for i in wd.taggers))  # WarpDrive's random choice
    env = TagContinuous(**static, tagger_ids=tagger_ids, backend="xla")
    p = env.make_params(**params)
    step, observe = _jitted(env)
    m = env.num_agents_total
    exits = env.runner_exits_game_after_tagged
    stats = {"tags": 0, "double_tags": 0, "ends": 0, "edge_hits": 0, "padded": 0}

    # Reset: WarpDrive's own start, observed by both.
    wd_obs0 = _wd_obs(wd.reset(), m)
    s = _wd_state(wd)
    ours0 = np.asarray(observe(_to_tag_state(s), p))
    # Contrary to the spec's note, WarpDrive's NumPy class returns the real partial
    # observation at reset too (its zeros are only the initial buffer): same as ours.
    np.testing.assert_allclose(ours0, wd_obs0, atol=ATOL, err_msg="reset obs")
    assert np.abs(ours0).sum() > 0

    for i in range(num_steps):
        if i % 4 == 3:  # now and then, an arbitrary state (random flags, speeds, time)
            s = _random_state(rng, env, params, exits)
            wd.reset()
            _inject(wd, s, env.runner_ids)
        act = np.stack(
            [
                rng.integers(0, env.num_acceleration_levels + 1, m),
                rng.integers(0, env.num_turn_levels + 1, m),
            ],
            axis=1,
        ).astype(np.int32)
        state = _to_tag_state(s)
        actions = {g: act[np.asarray(env.group_ids(g))] for g in env.groups}
        new, ts = step(jax.random.key(i), state, actions, p)
        wd_obs, wd_rew, wd_done, _ = wd.step({a: act[a] for a in range(m)})
        s_next = _wd_state(wd)
        where = f"config {static}, step {i}"

        for f in ("x", "y", "speed", "acceleration"):
            np.testing.assert_allclose(
                np.asarray(getattr(new, f)), s_next[f], atol=ATOL, err_msg=f"{f}, {where}"
            )
        assert _angle_close(np.asarray(new.direction), s_next["direction"]), where
        np.testing.assert_array_equal(np.asarray(new.in_game), s_next["in_game"], where)
        assert int(new.t) == int(s_next["t"]), where
        rew = np.asarray(_merge_np(env, ts.reward))
        wd_r = np.array([wd_rew[a] for a in range(m)], np.float64)
        np.testing.assert_allclose(rew, wd_r, atol=ATOL, err_msg=f"reward, {where}")
        assert bool(ts.done) == bool(wd_done["__all__"]), where

        # Observations: WarpDrive's carry the pre-tag in-game flags (see module doc).
        wd_o = _wd_obs(wd_obs, m)
        lagged = np.asarray(observe(new.replace(in_game=state.in_game), p))
        np.testing.assert_allclose(lagged, wd_o, atol=ATOL, err_msg=f"obs, {where}")
        num_tags = int(ts.extras["num_tags"])
        if num_tags == 0 or not exits:
            ours = np.asarray(_merge_np(env, ts.obs))
            np.testing.assert_allclose(ours, wd_o, atol=ATOL, err_msg=f"ts.obs, {where}")

        # Bookkeeping to prove the interesting cases happened.
        L = float(p.grid_length)
        on_edge = np.isin(np.asarray(new.x), [0.0, L]) | np.isin(np.asarray(new.y), [0.0, L])
        stats["tags"] += num_tags
        tr = float(p.tag_reward_for_tagger)
        stats["double_tags"] += int(np.any(np.asarray(ts.reward["tagger"]) >= 2 * tr - 0.5))
        stats["ends"] += int(int(new.t) == env.episode_length)
        stats["edge_hits"] += int(np.any(on_edge & np.asarray(state.in_game)))
        if not env.use_full_observation:
            k = env.num_other_agents_observed
            others_in = s_next["in_game"].sum() - 1
            stats["padded"] += int(others_in < k)
        s = s_next
        if bool(ts.done):
            # WarpDrive's arrays end at t = E: start over from a fresh injected state.
            s = _random_state(rng, env, params, exits)
            wd.reset()
            _inject(wd, s, env.runner_ids)
    return stats


@pytest.mark.parametrize("case", range(len(CONFIGS)))
def test_matches_warpdrive(case: int) -> None:
    static, params = CONFIGS[case]
    stats = _run_config(static, params, seed=100 + case, num_steps=80)
    assert stats["tags"] > 0, stats
    assert stats["ends"] > 0, stats
    assert stats["edge_hits"] > 0, stats
    if case == 2:
        assert stats["padded"] > 0, stats
    if case == 1:  # one tagger, many runners: one tagger tags several runners at once
        assert stats["double_tags"] > 0, stats


@pytest.mark.parametrize("case", [0, 4])
def test_action_tables_match_warpdrive(case: int) -> None:
    """The no-op plus ``linspace`` levels agree bit for bit with WarpDrive's tables."""
    static, params = CONFIGS[case]
    wd = _make_wd(static, params, seed=0)
    env = TagContinuous(**static)
    p = env.make_params(**params)

    @jax.jit
    def tables(p):
        return (
            action_values(p.min_acceleration, p.max_acceleration, env.num_acceleration_levels),
            action_values(p.min_turn, p.max_turn, env.num_turn_levels),
        )

    acc, turn = tables(p)
    np.testing.assert_array_equal(np.asarray(acc), np.asarray(wd.acceleration_actions))
    np.testing.assert_array_equal(np.asarray(turn), np.asarray(wd.turn_actions))


def test_tagger_ids_follow_warpdrive_choice() -> None:
    """WarpDrive's random taggers (not the first ids) map onto our ``tagger_ids``."""
    wd = _make_wd(dict(num_taggers=3, num_runners=6, episode_length=5), {}, seed=7)
    tagger_ids = tuple(sorted(int(i) for i in wd.taggers))
    env = TagContinuous(num_taggers=3, num_runners=6, episode_length=5, tagger_ids=tagger_ids)
    assert tagger_ids != (0, 1, 2)  # seed 7 picks other ids: the mapping is exercised
    types = np.array([wd.agent_type[i] for i in range(9)], bool)
    np.testing.assert_array_equal(env.is_tagger, types)
