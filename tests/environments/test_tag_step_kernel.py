"""TagContinuous's one-kernel step (`step_kernel`, ``step_impl="pallas"``) against the XLA
step: every output bit for bit, in Pallas interpret mode on the CPU."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdrive
from environments.tag_continuous import TagContinuous, TagContinuousParams, TagState
from tests.environments.tag_helpers import assert_bitwise


def _pair(**kw) -> tuple[TagContinuous, TagContinuous]:
    return TagContinuous(**kw, step_impl="xla"), TagContinuous(**kw, step_impl="pallas")


def _params(rng: np.random.Generator) -> TagContinuousParams:
    return TagContinuousParams(
        grid_length=float(rng.uniform(2, 5)),
        max_speed=float(rng.uniform(0.5, 1.5)),
        skill_level_tagger=float(rng.uniform(0.5, 1.2)),
        skill_level_runner=float(rng.uniform(0.5, 1.2)),
        min_acceleration=-0.7,
        max_acceleration=0.9,
        min_turn=-2.356,
        max_turn=2.356,
        edge_hit_penalty=-0.3,
        tagging_distance=0.25,
        tag_reward_for_tagger=0.1,  # not exact in float32: the gains' summation order shows
        tag_penalty_for_runner=-0.7,
        step_penalty_for_tagger=-0.01,
        step_reward_for_runner=0.03,
        end_of_game_reward_for_runner=1.3,
    )


def _random_state(rng: np.random.Generator, env: TagContinuous, p, t: int) -> TagState:
    m = env.num_agents_total
    L = p.grid_length
    x = rng.uniform(0, L, m)
    x[rng.uniform(size=m) < 0.15] = L  # at the edge
    in_game = rng.uniform(size=m) < 0.75
    in_game[list(env.tagger_ids)] = True
    return TagState(
        x=jnp.asarray(x, jnp.float32),
        y=jnp.asarray(rng.uniform(0, L, m), jnp.float32),
        speed=jnp.asarray(rng.uniform(0, 1.2, m) * (rng.uniform(size=m) < 0.8), jnp.float32),
        direction=jnp.asarray(rng.uniform(0, 2 * np.pi, m), jnp.float32),
        acceleration=jnp.asarray(rng.uniform(-0.5, 0.5, m), jnp.float32),
        in_game=jnp.asarray(in_game),
        t=jnp.asarray(t, jnp.int32),
    )


def _actions(rng: np.random.Generator, env: TagContinuous) -> dict[str, jax.Array]:
    hi = [env.num_acceleration_levels + 1, env.num_turn_levels + 1]
    return {
        g: jnp.asarray(rng.integers(0, hi, (env.num_agents(g), 2)), jnp.int32) for g in env.groups
    }


def test_bad_step_impl_raises() -> None:
    with pytest.raises(ValueError, match="step_impl"):
        TagContinuous(step_impl="cuda")


@pytest.mark.parametrize(("exits", "ids", "full"), [(True, None, False), (False, (1, 4, 7), True)])
def test_random_states(exits: bool, ids, full: bool) -> None:
    """Random states (agents out of the game, at the edge, the episode's last step),
    params traced and constant, one env and vmapped (shared and batched params);
    runners leaving the game or not, contiguous or scattered tagger ids, partial or full
    observation (the TimeStep is compared whole)."""
    ref_env, env = _pair(
        use_full_observation=full,
        num_taggers=3,
        num_runners=10,
        num_other_agents_observed=4,
        episode_length=6,
        runner_exits_game_after_tagged=exits,
        tagger_ids=ids,
        num_acceleration_levels=4,
        num_turn_levels=5,
    )
    rng = np.random.default_rng(0 if exits else 1)
    key = jax.random.key(0)
    p = _params(rng)
    for t in (0, 3, 5):  # t + 1 = E at t = 5
        s = _random_state(rng, env, p, t)
        a = _actions(rng, env)
        ref = jax.jit(ref_env.step_env)(key, s, a, p)
        assert_bitwise(jax.jit(env.step_env)(key, s, a, p), ref, f"traced t={t}")
        got = jax.jit(lambda s, a: env.step_env(key, s, a, p))(s, a)
        ref = jax.jit(lambda s, a: ref_env.step_env(key, s, a, p))(s, a)
        assert_bitwise(got, ref, f"constant t={t}")
    # a batch of 3 envs, shared then batched params
    rows = [_random_state(rng, env, p, t) for t in (1, 5, 2)]
    s = jax.tree.map(lambda *v: jnp.stack(v), *rows)
    a = jax.tree.map(lambda *v: jnp.stack(v), *[_actions(rng, env) for _ in rows])
    keys = jax.random.split(key, 3)
    vm = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))
    vr = jax.vmap(ref_env.step_env, in_axes=(0, 0, 0, None))
    assert_bitwise(jax.jit(vm)(keys, s, a, p), jax.jit(vr)(keys, s, a, p), "vmap shared")
    pb = jax.tree.map(lambda *v: jnp.asarray(v, jnp.float32), *[_params(rng) for _ in rows])
    vm = jax.vmap(env.step_env)
    vr = jax.vmap(ref_env.step_env)
    assert_bitwise(jax.jit(vm)(keys, s, a, pb), jax.jit(vr)(keys, s, a, pb), "vmap batched")


def test_ties_and_tagging_distance() -> None:
    """A runner exactly at the tagging distance (not tagged), runners equidistant from
    several taggers (the lowest tagger index tags), several runners per tagger."""
    ref_env, env = _pair(num_taggers=3, num_runners=5, num_other_agents_observed=2)
    p = env.make_params(grid_length=10.0, tagging_distance=0.25, tag_reward_for_tagger=0.1)
    # taggers 0..2, runners 3..7; thresh = 2.5; no motion (speed 0, no-op actions)
    x = [4.0, 6.0, 5.0, 5.0, 5.0, 1.0, 9.0, 4.0]
    y = [5.0, 5.0, 4.0, 5.0, 5.0, 9.0, 0.5, 7.5]
    # runner 3, 4 at (5,5): taggers 0, 1, 2 all at distance 1 -> tagger 0 (twice);
    # runner 5 far; runner 6: nearest tagger 1 at distance sqrt(9+20.25) > 2.5;
    # runner 7 at (4, 7.5): tagger 0 at exactly 2.5 -> not tagged.
    m = env.num_agents_total
    z = jnp.zeros((m,), jnp.float32)
    s = TagState(
        x=jnp.asarray(x, jnp.float32),
        y=jnp.asarray(y, jnp.float32),
        speed=z,
        direction=z,
        acceleration=z,
        in_game=jnp.ones((m,), bool),
        t=jnp.asarray(0, jnp.int32),
    )
    a = {g: jnp.zeros((env.num_agents(g), 2), jnp.int32) for g in env.groups}
    key = jax.random.key(0)
    got = jax.jit(env.step_env)(key, s, a, p)
    ref = jax.jit(ref_env.step_env)(key, s, a, p)
    assert_bitwise(got, ref, "ties")
    ts = got[1]
    np.testing.assert_array_equal(ts.reward["tagger"], np.float32([0.1 + 0.1, 0, 0]))
    np.testing.assert_array_equal(ts.active["runner"], [False, False, True, True, True])
    assert int(ts.extras["num_tags"]) == 2


def test_rollout_auto_reset() -> None:
    """A vectorized rollout with auto-reset (episodes ending by time and by tagging)."""
    ref_env, env = _pair(
        num_taggers=2, num_runners=4, num_other_agents_observed=3, episode_length=5
    )
    p = env.make_params(grid_length=2.0, tagging_distance=0.3, tag_reward_for_tagger=0.1)
    key = jax.random.key(5)
    kw = {"num_envs": 3, "num_steps": 12}
    ref = jaxdrive.rollout(ref_env, jaxdrive.random_policy(ref_env), key, p, **kw)
    got = jaxdrive.rollout(env, jaxdrive.random_policy(env), key, p, **kw)
    assert np.asarray(ref.timesteps.done).any()
    assert np.asarray(ref.timesteps.extras["num_tags"]).sum() > 0
    assert_bitwise(got, ref, "rollout")
    venv = jaxdrive.vectorize(env, 3)
    venv_ref = jaxdrive.vectorize(ref_env, 3)
    s, ts = jax.jit(venv.reset)(key, p)
    sr, tsr = jax.jit(venv_ref.reset)(key, p)
    step, step_ref = jax.jit(venv.step), jax.jit(venv_ref.step)
    pol = jaxdrive.random_policy(env)
    for i in range(7):
        k = jax.random.fold_in(key, i)
        act = pol(k, ts.obs)
        s, ts = step(k, s, act, p)
        sr, tsr = step_ref(k, sr, act, p)
        assert_bitwise((s, ts), (sr, tsr), f"vectorize step {i}")


@pytest.mark.slow
def test_step_kernel_probe_check_tiny() -> None:
    """The GPU probe's check rows at a tiny size (interpret mode): every form, state set
    and params mode agrees bit for bit with the XLA step."""
    from experiments.benchmarks import step_kernel_probe

    rows = step_kernel_probe.check(2, 5, 3, 3, 3)
    assert len(rows) == 3 * 2 * 2  # state sets x params modes x forms
    assert {r["form"] for r in rows} == {"pallas", "pallas_fence"}
    assert all(r["elements"] > 0 and r["differing"] == 0 for r in rows), rows
    assert all(r["leaves"] == {} for r in rows)


def test_step_kernel_probe_compare_names_leaves() -> None:
    """The probe's comparison names each differing leaf, counting signed zeros apart."""
    from experiments.benchmarks.step_kernel_probe import compare

    got = {"x": np.array([0.0, -0.0, 1.0], np.float32), "n": np.array([1, 2], np.int32)}
    ref = {"x": np.array([0.0, 0.0, 1.5], np.float32), "n": np.array([1, 3], np.int32)}
    out = compare(got, ref)
    assert out["elements"] == 5 and out["differing"] == 3 and out["max_abs_diff"] == 0.5
    assert out["leaves"] == {
        "['n']": {"dtype": "int32", "differing": 1, "signed_zeros": 0},
        "['x']": {"dtype": "float32", "differing": 2, "signed_zeros": 1},
    }
