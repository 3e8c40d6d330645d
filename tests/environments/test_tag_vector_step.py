"""TagContinuous's batched step kernel (`kernels.batched_step`, used by `vectorize` with
``backend="pallas"``) against the plain-JAX step (``backend="xla"``): `jaxdrive.vectorize`'s
whole ``(state, TimeStep)`` bit for bit, in Pallas interpret mode on the CPU, with each
observation path the kernel feeds (brute-force search inputs, the writer's table with the
grid and sorted searches, full observation)."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdrive
from environments.tag_continuous import TagContinuous, TagKernelConfig
from environments.tag_continuous.kernels import batched_step, batched_step_kernel, threefry
from tests.environments.tag_helpers import (
    assert_bitwise,
    backend_pair,
    random_actions,
    random_step_params,
    random_step_state,
)

# The kernel's program and the plain-JAX one compared bit for bit where XLA compiles
# with its optimisations (without them, their float rounding can part).
OPTIMIZED = pytest.mark.xla_optimized
GRID = TagKernelConfig(brute_below=0)  # the grid search at any size


def _batch(rng, env, p, ts_) -> tuple:
    rows = [random_step_state(rng, env, p, t) for t in ts_]
    s = jax.tree.map(lambda *v: jnp.stack(v), *rows)
    a = jax.tree.map(lambda *v: jnp.stack(v), *[random_actions(rng, env) for _ in rows])
    return s, a


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


@pytest.mark.parametrize(
    ("ids", "full", "k", "config"),
    [
        # contiguous: the kernel writes the brute search's inputs
        pytest.param(None, False, 1, None, marks=OPTIMIZED),
        ((1, 4, 7), False, 3, GRID),  # scattered ids; the kernel's table, the grid search
        ((0, 5, 9), True, 3, None),  # full observation: observations built as usual
    ],
    ids=["brute_k1", "grid_ids", "full"],
)
def test_random_states(ids, full: bool, k: int, config) -> None:
    """Random states (agents out of the game, at the edge, episodes ending this step):
    with auto-reset and traced params, and without it and constant params."""
    kw = dict(
        use_full_observation=full, num_taggers=3, num_runners=7, num_other_agents_observed=k,
        episode_length=6, tagger_ids=ids, num_acceleration_levels=4, num_turn_levels=5,
        kernel_config=config, runner_exits_game_after_tagged=ids is None,
    )  # fmt: skip
    ref_env, env = backend_pair(**kw)
    rng = np.random.default_rng(3)
    p = random_step_params(rng)
    s, a = _batch(rng, env, p, (0, 5, 2, 5, 3))  # t + 1 = E at t = 5: those envs reset
    key = jax.random.key(1)
    got = jax.jit(jaxdrive.vectorize(env, 5).step)(key, s, a, p)
    ref = jax.jit(jaxdrive.vectorize(ref_env, 5).step)(key, s, a, p)
    assert np.asarray(ref[1].done).any()
    # XLA on the CPU contracts the move ``x + speed·cos θ`` into an FMA or not depending
    # on how it fuses the program around it: the vectorized XLA step with auto-reset and
    # scattered tagger ids does not, the kernel (interpret mode being XLA too) does. The
    # grid search leaves the lists of agents out of the game empty: their rows are +0.0
    # where the reference's listed neighbours can give -0.0 (equal as numbers).
    same = _close_ulps if ids is not None else assert_bitwise
    same(got, ref, "auto-reset, traced")
    if full:  # (the full observation's kernel with constant params: test_tag_full_obs)
        return
    venv = jaxdrive.vectorize(env, 5, auto_reset=False)
    vref = jaxdrive.vectorize(ref_env, 5, auto_reset=False)
    got = jax.jit(lambda s, a: venv.step(key, s, a, p))(s, a)
    ref = jax.jit(lambda s, a: vref.step(key, s, a, p))(s, a)
    (_close_ulps if config is GRID else assert_bitwise)(got, ref, "no reset, constant params")


@OPTIMIZED
@pytest.mark.parametrize("num_taggers", [12, batched_step_kernel.UNROLL_TAGGERS + 1])
def test_rollout_with_tags_and_resets(num_taggers: int) -> None:
    """Rollouts where taggers tag several runners at once and episodes end by time and by
    tagging, on a batch that leaves a partial last program. 12 taggers and 5 runners:
    3-bit fields, 10 to a word, so the 12 counts and the runners left take 2 words; 17
    taggers: the tagger loops run as `lax.fori_loop`."""
    ref_env, env = backend_pair(
        num_taggers=num_taggers, num_runners=5, num_other_agents_observed=3, episode_length=4
    )
    p = env.make_params(grid_length=1.0, tagging_distance=0.3, tag_reward_for_tagger=0.1)
    key = jax.random.key(7)
    kw = {"num_envs": 3, "num_steps": 5}
    ref = jaxdrive.rollout(ref_env, jaxdrive.random_policy(ref_env), key, p, **kw)
    got = jaxdrive.rollout(env, jaxdrive.random_policy(env), key, p, **kw)
    assert np.asarray(ref.timesteps.done).any()
    assert np.asarray(ref.timesteps.extras["num_tags"]).max() >= 2
    assert np.any(np.asarray(ref.timesteps.reward["tagger"]) > 0.15)  # a count >= 2
    assert_bitwise(got, ref, f"rollout, {num_taggers} taggers")


def _kernel_call(env: TagContinuous, s, a, p, u, **kw):
    vals = [jnp.float32(getattr(p, name)) for name in batched_step.RAW_PARAMS]
    return batched_step.tag_vector_step(
        vals, s.x, s.y, s.speed, s.direction, s.acceleration, s.in_game, s.t,
        a["tagger"], a["runner"], u, tagger_ids=env.tagger_ids,
        num_acceleration_levels=env.num_acceleration_levels,
        num_turn_levels=env.num_turn_levels, episode_length=env.episode_length,
        runner_exits_game_after_tagged=True, interpret=True, **kw,
    )  # fmt: skip


def test_layouts_and_in_kernel_draws_keep_the_values() -> None:
    """Envs per program change the layout, not the values; drawing the reset's uniforms
    in the kernel from the reset keys' data, or from the step key they are split from,
    equals passing `reset_uniforms`' (episodes end in some envs). The kernel against
    itself: bit for bit under the tests' unoptimised compiles too."""
    env = TagContinuous(num_taggers=2, num_runners=5, num_other_agents_observed=2, episode_length=4)
    p = env.default_params
    s, a = _batch(np.random.default_rng(1), env, p, (3, 0, 3, 1, 3))
    parent = jax.random.key(4)
    keys = jaxdrive.vector.split_step_key(parent, 5)[1]
    u = jax.vmap(env.reset_uniforms)(keys)
    base = _kernel_call(env, s, a, p, u)
    assert np.asarray(base.done).tolist() == [True, False, True, False, True]
    assert_bitwise(_kernel_call(env, s, a, p, u, envs_per_program=4), base, "E=4")
    data = threefry.key_data_for_uniforms(keys)
    parent = threefry.key_data_for_uniforms(parent)
    got = _kernel_call(env, s, a, p, None, reset_key_data=data, envs_per_program=1)
    assert_bitwise(got, base, "reset keys' data, E=1")
    got = _kernel_call(env, s, a, p, None, step_key_data=parent, envs_per_program=2)
    assert_bitwise(got, base, "step key's data, E=2")
    with pytest.raises(ValueError, match="not several"):
        _kernel_call(env, s, a, p, u, reset_key_data=data)
    with pytest.raises(ValueError, match="reset_key_data must be"):
        _kernel_call(env, s, a, p, None, reset_key_data=data.astype(jnp.int32))
    with pytest.raises(ValueError, match="step_key_data must be"):
        _kernel_call(env, s, a, p, None, step_key_data=data)
    with pytest.raises(ValueError, match="envs_per_program"):
        _kernel_call(env, s, a, p, u, envs_per_program=3)
    with pytest.raises(ValueError, match="reset_uniforms"):
        _kernel_call(env, s, a, p, s.x)
    with pytest.raises(ValueError, match="actions must be"):
        _kernel_call(env, s, {"tagger": a["runner"], "runner": a["runner"]}, p, u)


@pytest.mark.parametrize(("m", "n"), [(1, 1), (37, 3)])
def test_uniforms_from_key_data_equal_jax_random(m: int, n: int) -> None:
    """`threefry.uniform_from_key_data` reproduces ``jax.random.uniform`` (and
    `threefry.threefry2x32` the key split) bit for bit, for a few seeds."""

    @jax.jit
    def both(seed):
        keys = jax.random.split(jax.random.key(seed), n)
        data = threefry.key_data_for_uniforms(keys)
        ref = jax.vmap(lambda k: jax.random.uniform(k, (3, m), jnp.float32))(keys)
        idx = jnp.arange(3 * m, dtype=jnp.uint32).reshape(3, m)
        got = jax.vmap(lambda d: threefry.uniform_from_key_data(d[0], d[1], idx))(data)
        d = jax.random.key_data(jax.random.key(seed))
        idx = jnp.arange(2 * n, dtype=jnp.uint32)
        words = jnp.stack(threefry.threefry2x32(d[0], d[1], jnp.zeros_like(idx), idx), -1)
        split = jax.random.key_data(jax.random.split(jax.random.key(seed), 2 * n))
        return got, ref, words, split

    for seed in (0, 1, 2**31 + 5, 2**32 - 1):
        got, ref, words, split = both(jnp.uint32(seed))
        np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))
        np.testing.assert_array_equal(np.asarray(words), np.asarray(split))


def test_key_data_only_where_the_draws_can_be_reproduced() -> None:
    keys = jax.random.split(jax.random.key(0), 3)
    assert threefry.key_data_for_uniforms(keys).shape == (3, 2)
    raw = jax.random.key_data(keys)
    assert threefry.key_data_for_uniforms(raw) is raw
    rbg = jax.random.split(jax.random.key(0, impl="rbg"), 3)
    assert threefry.key_data_for_uniforms(rbg) is None
    assert threefry.key_data_for_uniforms(jnp.zeros((3, 4), jnp.uint32)) is None
    with jax.threefry_partitionable(False):
        assert threefry.key_data_for_uniforms(keys) is None


@pytest.mark.parametrize("keys", ["threefry_no_step_key", "rbg"])
def test_reset_draws_from_other_keys(keys: str) -> None:
    """`TagContinuous.vector_step` called without ``step_key`` (the kernel draws from the
    reset keys' data), and with rbg keys (the env draws the uniforms itself, as the
    kernel cannot reproduce them): both equal the plain-JAX step's auto-reset."""
    ref_env, env = backend_pair(
        num_taggers=2, num_runners=4, num_other_agents_observed=2, episode_length=3
    )
    p = env.default_params
    rng = np.random.default_rng(2)
    s, a = _batch(rng, env, p, (2, 0, 2))
    key = jax.random.key(8, impl="rbg" if keys == "rbg" else None)
    ref = jax.jit(jaxdrive.vectorize(ref_env, 3).step)(key, s, a, p)
    r_keys = jaxdrive.vector.split_step_key(key, 3)[1]
    assert np.asarray(ref[1].done).tolist() == [True, False, True]
    if keys == "rbg":
        got = jax.jit(jaxdrive.vectorize(env, 3).step)(key, s, a, p)
    else:
        got = jax.jit(env.vector_step)(r_keys, s, a, p)
    assert_bitwise(got, ref, keys)


def test_outer_vmap_and_no_retrace() -> None:
    """`jax.vmap` over a batch of batches (e.g. seeds) gives each inner batch's result;
    repeated steps trace once."""
    ref_env, env = backend_pair(num_taggers=2, num_runners=4, num_other_agents_observed=2)
    p = env.default_params
    venv, vref = jaxdrive.vectorize(env, 3), jaxdrive.vectorize(ref_env, 3)
    keys = jax.random.split(jax.random.key(9), 2)
    s, ts = jax.vmap(venv.reset, in_axes=(0, None))(keys, p)
    acts = jax.vmap(jaxdrive.random_policy(env))(keys, ts.obs)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(k, s, a):
        return jax.vmap(venv.step, in_axes=(0, 0, 0, None))(k, s, a, p)

    ref = jax.jit(jax.vmap(vref.step, in_axes=(0, 0, 0, None)))(keys, s, acts, p)
    for _ in range(2):
        got = step(keys, s, acts)
    assert_bitwise(got, ref, "outer vmap")


def test_kernel_used_only_where_it_applies(monkeypatch) -> None:
    """`vector_step` runs the kernel with the kernels' backend up to
    `TagKernelConfig.batched_step_up_to` agents; otherwise ``None`` (vmapped
    `step_env`). ``backend="auto"`` takes the kernels only on a GPU."""
    kw = dict(num_taggers=2, num_runners=3, num_other_agents_observed=2)
    xla, pallas = backend_pair(**kw)
    small = TagContinuous(
        **kw, backend="pallas", kernel_config=TagKernelConfig(batched_step_up_to=4)
    )
    p = xla.default_params
    s, a = _batch(np.random.default_rng(0), xla, p, (0, 1))
    assert xla.vector_step(None, s, a, p) is None
    assert small.vector_step(None, s, a, p) is None
    shapes = jax.eval_shape(lambda s, a: pallas.vector_step(None, s, a, p), s, a)
    assert shapes[1].obs["runner"].shape == (2, 3, 15)
    auto = TagContinuous(**kw)
    assert not auto.uses_kernels  # this machine has no GPU
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert auto.uses_kernels and not auto.interpret
    assert not xla.uses_kernels
    venv = jaxdrive.vectorize(xla, 2)
    with pytest.raises(ValueError, match="shape"):
        venv.step(jax.random.key(1), s, {"tagger": a["tagger"], "runner": a["tagger"]}, p)
