"""TagContinuous's batched step kernel (`vector_step`, ``step_impl="vector"``) against the
vmapped XLA step: `jaxdrive.vectorize`'s whole ``(state, TimeStep)`` bit for bit, in Pallas
interpret mode on the CPU."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxdrive
from environments.tag_continuous import TagContinuous, vector_step
from environments.tag_continuous import env as env_module
from tests.environments.tag_helpers import assert_bitwise
from tests.environments.test_tag_step_kernel import _actions, _params, _random_state


def _pair(**kw) -> tuple[TagContinuous, TagContinuous]:
    return TagContinuous(**kw, step_impl="xla"), TagContinuous(**kw, step_impl="vector")


def _batch(rng, env, p, ts_) -> tuple:
    rows = [_random_state(rng, env, p, t) for t in ts_]
    s = jax.tree.map(lambda *v: jnp.stack(v), *rows)
    a = jax.tree.map(lambda *v: jnp.stack(v), *[_actions(rng, env) for _ in rows])
    return s, a


@pytest.mark.parametrize(
    ("exits", "ids", "full", "k"),
    [
        (True, None, False, 4),  # contiguous taggers: the kernel also feeds the search
        (False, (1, 4, 7), False, 4),  # scattered tagger ids
        (True, (0, 5, 9), True, 4),  # full observation: observations built as usual
        (True, None, False, 1),  # k = 1
    ],
)
def test_random_states(exits: bool, ids, full: bool, k: int) -> None:
    """Random states (agents out of the game, at the edge, episodes ending this step),
    with and without auto-reset, params traced and constant."""
    ref_env, env = _pair(
        use_full_observation=full,
        num_taggers=3,
        num_runners=10,
        num_other_agents_observed=k,
        episode_length=6,
        runner_exits_game_after_tagged=exits,
        tagger_ids=ids,
        num_acceleration_levels=4,
        num_turn_levels=5,
    )
    rng = np.random.default_rng(3 if exits else 4)
    p = _params(rng)
    s, a = _batch(rng, env, p, (0, 5, 2, 5, 3))  # t + 1 = E at t = 5: those envs reset
    key = jax.random.key(1)
    # XLA on the CPU contracts the move ``x + speed·cos θ`` into an FMA or not depending
    # on how it fuses the program around it: the vectorized XLA step with auto-reset and
    # scattered tagger ids does not, the vmapped step (and the kernel, interpret mode
    # being XLA too) does. There the positions (and what is built from them) may differ
    # by an ulp; everything else is compared bit for bit.
    same = _close_ulps if (ids is not None) else assert_bitwise
    for auto_reset in (True, False):
        check = same if auto_reset else assert_bitwise
        venv = jaxdrive.vectorize(env, 5, auto_reset=auto_reset)
        vref = jaxdrive.vectorize(ref_env, 5, auto_reset=auto_reset)
        got = jax.jit(venv.step)(key, s, a, p)
        ref = jax.jit(vref.step)(key, s, a, p)
        assert np.asarray(ref[1].done).any()
        check(got, ref, f"traced auto_reset={auto_reset}")
        got = jax.jit(lambda s, a, v=venv: v.step(key, s, a, p))(s, a)
        ref = jax.jit(lambda s, a, v=vref: v.step(key, s, a, p))(s, a)
        check(got, ref, f"constant auto_reset={auto_reset}")


def _close_ulps(a, b, what: str) -> None:
    """Float leaves within 1e-6 (an ulp of a position of a few units, or of what is built
    from it), every other leaf equal."""
    for i, (x, y) in enumerate(zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape, f"{what}[{i}]"
        if x.dtype == np.float32:
            np.testing.assert_allclose(x, y, rtol=0, atol=1e-6, err_msg=f"{what}[{i}]")
        else:
            np.testing.assert_array_equal(x, y, err_msg=f"{what}[{i}]")


def test_rollout_with_tags_and_resets() -> None:
    """A rollout where taggers tag several runners at once and episodes end by time and
    by tagging, on a non-power-of-two batch (a partial last program)."""
    ref_env, env = _pair(
        num_taggers=2, num_runners=6, num_other_agents_observed=3, episode_length=5
    )
    p = env.make_params(grid_length=1.5, tagging_distance=0.4, tag_reward_for_tagger=0.1)
    key = jax.random.key(5)
    kw = {"num_envs": 5, "num_steps": 12}
    ref = jaxdrive.rollout(ref_env, jaxdrive.random_policy(ref_env), key, p, **kw)
    got = jaxdrive.rollout(env, jaxdrive.random_policy(env), key, p, **kw)
    assert np.asarray(ref.timesteps.done).any()
    assert np.asarray(ref.timesteps.extras["num_tags"]).max() >= 2
    # some tagger collected more than one runner in a step (the gains' summation)
    assert np.any(np.asarray(ref.timesteps.reward["tagger"]) > 0.15)
    assert_bitwise(got, ref, "rollout")


@pytest.mark.parametrize(
    ("positions", "packed"),
    [("reduce", True), ("recompute", False), ("scratch", True)],
)
def test_tagging_forms(positions: str, packed: bool, monkeypatch) -> None:
    """`vector_step.TAGGER_POSITIONS` and `PACKED_COUNTS`: the same bits as the XLA step.
    12 taggers and 200 runners: 8-bit fields, 3 to a word, so the 12 counts and the
    runners left take 5 words; a tagging distance that gives taggers several tags."""
    monkeypatch.setattr(vector_step, "TAGGER_POSITIONS", positions)
    monkeypatch.setattr(vector_step, "PACKED_COUNTS", packed)
    ref_env, env = _pair(
        num_taggers=12, num_runners=200, num_other_agents_observed=3, episode_length=4
    )
    p = env.make_params(grid_length=2.0, tagging_distance=0.08, tag_reward_for_tagger=0.1)
    key = jax.random.key(7)
    kw = {"num_envs": 3, "num_steps": 5}
    ref = jaxdrive.rollout(ref_env, jaxdrive.random_policy(ref_env), key, p, **kw)
    got = jaxdrive.rollout(env, jaxdrive.random_policy(env), key, p, **kw)
    tags = np.asarray(ref.timesteps.extras["num_tags"])
    assert tags.max() >= 12, tags
    assert np.any(np.asarray(ref.timesteps.reward["tagger"]) > 0.15)  # a count >= 2
    assert_bitwise(got, ref, f"positions={positions} packed={packed}")


@pytest.mark.parametrize("positions", ["reduce", "scratch"])
def test_many_taggers_loop_form(positions: str, monkeypatch) -> None:
    """More taggers than `vector_step.UNROLL_TAGGERS`: the tagger loops run as
    `lax.fori_loop` over a table of ids (the taggers' positions by row reductions or
    from the scratch)."""
    monkeypatch.setattr(vector_step, "TAGGER_POSITIONS", positions)
    t = vector_step.UNROLL_TAGGERS + 2
    ref_env, env = _pair(num_taggers=t, num_runners=5, num_other_agents_observed=3)
    p = env.make_params(grid_length=2.0, tagging_distance=0.3)
    key = jax.random.key(2)
    kw = {"num_envs": 3, "num_steps": 6}
    ref = jaxdrive.rollout(ref_env, jaxdrive.random_policy(ref_env), key, p, **kw)
    got = jaxdrive.rollout(env, jaxdrive.random_policy(env), key, p, **kw)
    assert np.asarray(ref.timesteps.extras["num_tags"]).sum() > 0
    assert_bitwise(got, ref, "rollout with many taggers")


def test_program_layouts_agree() -> None:
    """Envs per program and warps change the layout, not the values."""
    _, env = _pair(num_taggers=2, num_runners=5, num_other_agents_observed=2)
    p = env.default_params
    rng = np.random.default_rng(0)
    s, a = _batch(rng, env, p, (0, 1, 2))
    u = jax.random.uniform(jax.random.key(0), (3, 3, env.num_agents_total))
    vals = [getattr(env._f32(p), name) for name in vector_step.RAW_PARAMS]

    def run(**kw):
        return vector_step.tag_vector_step(
            vals, s.x, s.y, s.speed, s.direction, s.acceleration, s.in_game, s.t,
            a["tagger"], a["runner"], u, tagger_ids=env.tagger_ids,
            num_acceleration_levels=env.num_acceleration_levels,
            num_turn_levels=env.num_turn_levels, episode_length=env.episode_length,
            runner_exits_game_after_tagged=True, **kw,
        )  # fmt: skip

    base = run()
    for e in (1, 2, 4):
        assert_bitwise(run(envs_per_program=e), base, f"envs_per_program={e}")


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), m=st.integers(1, 300), n=st.integers(1, 4))
def test_uniforms_from_key_data_equal_jax_random(seed: int, m: int, n: int) -> None:
    """`uniform_from_key_data` reproduces ``jax.random.uniform`` (and `threefry2x32` the
    key split) bit for bit."""
    keys = jax.random.split(jax.random.key(seed), n)
    data = vector_step.key_data_for_uniforms(keys)
    ref = jax.vmap(lambda k: jax.random.uniform(k, (3, m), jnp.float32))(keys)
    idx = jnp.arange(3 * m, dtype=jnp.uint32).reshape(3, m)
    got = jax.vmap(lambda d: vector_step.uniform_from_key_data(d[0], d[1], idx))(data)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))
    d = jax.random.key_data(jax.random.key(seed))
    idx = jnp.arange(2 * n, dtype=jnp.uint32)
    words = vector_step.threefry2x32(d[0], d[1], jnp.zeros_like(idx), idx)
    split = jax.random.key_data(jax.random.split(jax.random.key(seed), 2 * n))
    np.testing.assert_array_equal(np.stack([np.asarray(w) for w in words], -1), split)


def test_key_data_only_where_the_draws_can_be_reproduced() -> None:
    keys = jax.random.split(jax.random.key(0), 3)
    assert vector_step.key_data_for_uniforms(keys).shape == (3, 2)
    raw = jax.random.key_data(keys)
    assert vector_step.key_data_for_uniforms(raw) is raw
    rbg = jax.random.split(jax.random.key(0, impl="rbg"), 3)
    assert vector_step.key_data_for_uniforms(rbg) is None
    assert vector_step.key_data_for_uniforms(jnp.zeros((3, 4), jnp.uint32)) is None
    with jax.threefry_partitionable(False):
        assert vector_step.key_data_for_uniforms(keys) is None


def test_kernel_draws_equal_given_uniforms() -> None:
    """Episodes ending this step (``t = episode_length − 1``) in some envs: drawing the
    reset's uniforms in the kernel from the reset keys' data, or from the step key they
    are split from, equals passing `reset_env`'s."""
    _, env = _pair(num_taggers=2, num_runners=5, num_other_agents_observed=2, episode_length=4)
    p = env.default_params
    rng = np.random.default_rng(1)
    s, a = _batch(rng, env, p, (3, 0, 3, 1, 3))
    parent = jax.random.key(4)
    keys = jaxdrive.vector.split_step_key(parent, 5)[1]
    u = jax.vmap(env._reset_uniforms)(keys)
    vals = [getattr(env._f32(p), name) for name in vector_step.RAW_PARAMS]

    def run(u, data, parent=None, **kw):
        return vector_step.tag_vector_step(
            vals, s.x, s.y, s.speed, s.direction, s.acceleration, s.in_game, s.t,
            a["tagger"], a["runner"], u, reset_key_data=data, step_key_data=parent,
            tagger_ids=env.tagger_ids,
            num_acceleration_levels=env.num_acceleration_levels,
            num_turn_levels=env.num_turn_levels, episode_length=env.episode_length,
            runner_exits_game_after_tagged=True, **kw,
        )  # fmt: skip

    base = run(u, None)
    assert np.asarray(base.done).tolist() == [True, False, True, False, True]
    data = vector_step.key_data_for_uniforms(keys)
    parent = vector_step.key_data_for_uniforms(parent)
    for e in (1, 2, 8):
        assert_bitwise(run(None, data, envs_per_program=e), base, f"key data, E={e}")
        got = run(None, None, parent, envs_per_program=e)
        assert_bitwise(got, base, f"step key data, E={e}")
    with pytest.raises(ValueError, match="not several"):
        run(u, data)
    with pytest.raises(ValueError, match="reset_key_data must be"):
        run(None, data.astype(jnp.int32))
    with pytest.raises(ValueError, match="step_key_data must be"):
        run(None, None, data)


def test_direct_hook_call_without_step_key() -> None:
    """`TagContinuous.vector_step` called without ``step_key`` (the reset keys' data
    then) equals the XLA step's auto-reset."""
    ref_env, env = _pair(
        num_taggers=2, num_runners=4, num_other_agents_observed=2, episode_length=3
    )
    p = env.default_params
    rng = np.random.default_rng(2)
    s, a = _batch(rng, env, p, (2, 0, 2))
    key = jax.random.key(8)
    ref = jax.jit(jaxdrive.vectorize(ref_env, 3).step)(key, s, a, p)
    r_keys = jaxdrive.vector.split_step_key(key, 3)[1]
    got = jax.jit(env.vector_step)(r_keys, s, a, p)
    assert np.asarray(ref[1].done).tolist() == [True, False, True]
    assert_bitwise(got, ref, "hook without step_key")


@pytest.mark.parametrize("draws", [False, True])
def test_reset_draws_with_other_keys(draws: bool, monkeypatch) -> None:
    """With rbg keys (not reproducible in the kernel) or the in-kernel draws switched off,
    the env draws the uniforms itself: still the XLA step's rollout."""
    monkeypatch.setattr(env_module, "RESET_DRAWS_IN_KERNEL", draws)
    ref_env, env = _pair(
        num_taggers=2, num_runners=4, num_other_agents_observed=2, episode_length=3
    )
    p = env.default_params
    key = jax.random.key(5, impl="rbg") if draws else jax.random.key(5)
    kw = {"num_envs": 3, "num_steps": 7}
    ref = jaxdrive.rollout(ref_env, jaxdrive.random_policy(ref_env), key, p, **kw)
    got = jaxdrive.rollout(env, jaxdrive.random_policy(env), key, p, **kw)
    assert np.asarray(ref.timesteps.done).any()
    assert_bitwise(got, ref, f"rollout, draws in kernel {draws}")


def test_outer_vmap() -> None:
    """`jax.vmap` over a batch of batches (e.g. seeds) gives each inner batch's result."""
    ref_env, env = _pair(num_taggers=2, num_runners=4, num_other_agents_observed=2)
    p = env.default_params
    venv, vref = jaxdrive.vectorize(env, 3), jaxdrive.vectorize(ref_env, 3)
    keys = jax.random.split(jax.random.key(9), 2)
    s, ts = jax.vmap(venv.reset, in_axes=(0, None))(keys, p)
    acts = jax.vmap(jaxdrive.random_policy(env))(keys, ts.obs)
    got = jax.jit(jax.vmap(venv.step, in_axes=(0, 0, 0, None)))(keys, s, acts, p)
    ref = jax.jit(jax.vmap(vref.step, in_axes=(0, 0, 0, None)))(keys, s, acts, p)
    assert_bitwise(got, ref, "outer vmap")


def test_no_retrace_and_single_env_step() -> None:
    """Repeated steps trace once; a single env's `step` takes the XLA form."""
    ref_env, env = _pair(num_taggers=1, num_runners=3, num_other_agents_observed=2)
    p = env.default_params
    venv = jaxdrive.vectorize(env, 2)
    s, ts = venv.reset(jax.random.key(0), p)
    policy = jaxdrive.random_policy(env)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(k, s, a):
        return venv.step(k, s, a, p)

    for i in range(3):
        k = jax.random.key(i)
        s, ts = step(k, s, policy(k, ts.obs))
    one, _ = env.reset(jax.random.key(1), p)
    a = env.sample_actions(jax.random.key(2))
    k = jax.random.key(3)
    assert_bitwise(env.step(k, one, a, p), ref_env.step(k, one, a, p), "one env")


def test_bad_inputs_raise() -> None:
    _, env = _pair(num_taggers=2, num_runners=3, num_other_agents_observed=2)
    p = env._f32(env.default_params)
    vals = [getattr(p, name) for name in vector_step.RAW_PARAMS]
    z = jnp.zeros((2, 5), jnp.float32)
    g = jnp.ones((2, 5), bool)
    t = jnp.zeros((2,), jnp.int32)
    at, ar = jnp.zeros((2, 2, 2), jnp.int32), jnp.zeros((2, 3, 2), jnp.int32)
    kw = dict(
        tagger_ids=(0, 1), num_acceleration_levels=10, num_turn_levels=10,
        episode_length=5, runner_exits_game_after_tagged=True,
    )  # fmt: skip
    with pytest.raises(ValueError, match="actions must be"):
        vector_step.tag_vector_step(vals, z, z, z, z, z, g, t, ar, ar, None, **kw)
    with pytest.raises(ValueError, match="reset_uniforms"):
        vector_step.tag_vector_step(vals, z, z, z, z, z, g, t, at, ar, z, **kw)
    with pytest.raises(ValueError, match="envs_per_program"):
        vector_step.tag_vector_step(
            vals, z, z, z, z, z, g, t, at, ar, None, envs_per_program=3, **kw
        )
    with pytest.raises(ValueError, match="params"):
        vector_step.tag_vector_step(vals[:3], z, z, z, z, z, g, t, at, ar, None, **kw)
    with pytest.raises(ValueError, match="step_impl"):
        TagContinuous(step_impl="batched")
    venv = jaxdrive.vectorize(env, 2)
    s, _ = venv.reset(jax.random.key(0))
    with pytest.raises(ValueError, match="shape"):
        venv.step(jax.random.key(1), s, {"tagger": at, "runner": at})


def test_vector_step_probe_tiny() -> None:
    """The GPU probe's check and timing rows run at a tiny size (interpret mode)."""
    from experiments.benchmarks import vector_step_probe as probe

    assert probe.parse_variant("elements=64/warps=1") == {"elements": 64, "warps": 1}
    with pytest.raises(ValueError, match="unknown setting"):
        probe.parse_variant("bogus=1")
    rows = probe.check(2, 3, 2, 2, 2, only=("last_step",))  # every env resets there
    assert len(rows) == 2 * 2 and all(r["differing"] == 0 for r in rows), rows
    rec = probe.time_variant(2, 3, 2, 2, {"elements": 64}, 2, 1)
    assert rec["us_per_step"] > 0 and rec["bytes"] == probe.bytes_moved(2, 2, 3, (8, 5))


def test_auto_resolution(monkeypatch) -> None:
    """``step_impl="auto"``: the batched kernel on GPU with the Pallas searches up to
    `VECTOR_MAX_AGENTS` agents per env; XLA otherwise (and on the CPU)."""
    from environments.tag_continuous import env as tag_env

    small = TagContinuous(num_taggers=2, num_runners=5, impl="pallas")
    big = TagContinuous(num_taggers=2, num_runners=tag_env.VECTOR_MAX_AGENTS, impl="pallas")
    assert small._resolved_step_impl() == "xla"  # this machine has no GPU
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert small._resolved_step_impl() == "vector"
    assert big._resolved_step_impl() == "xla"
    assert TagContinuous(num_taggers=2, num_runners=5, impl="jax")._resolved_step_impl() == "xla"
    assert TagContinuous(step_impl="vector", num_runners=2000)._resolved_step_impl() == "vector"
