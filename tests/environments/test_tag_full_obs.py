"""TagContinuous's full-observation forms (`environments.tag_continuous.full_obs`).

Every form must give the original ``observe()`` output bit for bit (``-0.0`` included),
for all agents and per group (contiguous or not), with the params traced or compile-time
constants, alone, inside a whole env step and under `jax.vmap` with auto-reset. The
Pallas kernel runs in interpret mode on the CPU.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdrive
from environments.tag_continuous import TagContinuous, TagContinuousParams, TagState
from environments.tag_continuous import full_obs as fo
from tests.environments.tag_helpers import (
    assert_bitwise,
    original_obs_parts,
    random_obs_params,
    random_tag_state,
)

FORMS = [i for i in fo.IMPLS if i != "gather"]

ENVS = {
    "3+5": dict(num_taggers=3, num_runners=5, episode_length=9),
    "10+30": dict(num_taggers=10, num_runners=30, episode_length=50),
    "ids_2+6": dict(num_taggers=2, num_runners=6, episode_length=7, tagger_ids=(5, 1)),
    "stay_1+3": dict(
        num_taggers=1,
        num_runners=3,
        episode_length=6,
        tagger_ids=(2,),
        runner_exits_game_after_tagged=False,
    ),
}


def _env(name: str, impl: str = "gather") -> TagContinuous:
    return TagContinuous(**ENVS[name], use_full_observation=True, full_obs_impl=impl)


def _observe_original(env: TagContinuous, state: TagState, params, lo: int, hi: int):
    """The full observation exactly as `TagContinuous.observe` computed it before the
    `full_obs` module existed (a frozen copy: the reference of every form)."""
    m = env.num_agents_total
    feats, relative, scale, own, g_own, time = original_obs_parts(env, state, params, lo, hi)
    cols = jnp.arange(m - 1, dtype=jnp.int32)[None, :]
    rows_i = jnp.arange(lo, hi, dtype=jnp.int32)[:, None]
    others = cols + (cols >= rows_i)
    other = jnp.transpose(feats[:, others], (1, 0, 2))
    keep = jnp.where(relative > 0, g_own, 1.0)
    out = (other - own * relative) / scale * keep
    return jnp.concatenate([out.reshape(hi - lo, -1), (time * g_own[:, 0])], axis=1)


def _random_state(rng: np.random.Generator, env: TagContinuous, L: float) -> TagState:
    """`random_tag_state` with about 70% in the game and a duplicated x."""
    return random_tag_state(rng, env, L, 0.7, "x")


_params = random_obs_params


@functools.cache
def _original_jit(name: str):
    env = _env(name)
    m = env.num_agents_total
    return jax.jit(lambda s, p: _observe_original(env, s, p, 0, m))


@functools.cache
def _form_jit(name: str, impl: str, rows: tuple[int, ...]):
    env = _env(name, impl)
    return jax.jit(lambda s, p: env._observe_full(s, p, rows))


@pytest.mark.parametrize("impl", fo.IMPLS)
@pytest.mark.parametrize("name", sorted(ENVS))
def test_forms_equal_original(name: str, impl: str) -> None:
    """All rows and each group's rows, params traced, on random states."""
    env = _env(name, impl)
    m = env.num_agents_total
    rng = np.random.default_rng(abs(hash((name, impl))) % 2**32)
    for _ in range(3):
        p = _params(rng)
        s = _random_state(rng, env, p.grid_length)
        ref = np.asarray(_original_jit(name)(s, p))  # [M, D]
        got = _form_jit(name, impl, tuple(range(m)))(s, p)
        assert_bitwise(got, ref, f"{name} {impl} all rows")
        for g in env.groups:
            ids = env.group_ids(g)
            got = _form_jit(name, impl, ids)(s, p)
            assert_bitwise(got, ref[list(ids)], f"{name} {impl} group {g}")
        # The public observe() (all rows, and a row range).
        assert_bitwise(jax.jit(env.observe)(s, p), ref, f"{name} {impl} observe")
        lo, hi = 1, m - 1
        got = jax.jit(lambda s, p, env=env, lo=lo, hi=hi: env.observe(s, p, (lo, hi)))(s, p)
        assert_bitwise(got, ref[lo:hi], f"{name} {impl} observe rows")


@pytest.mark.parametrize("impl", fo.IMPLS)
def test_forms_with_constant_params(impl: str) -> None:
    """Params closed over (compile-time constants, as in the benchmarks)."""
    name = "10+30"
    env = _env(name, impl)
    m = env.num_agents_total
    rng = np.random.default_rng(7)
    p = _params(rng)
    s = _random_state(rng, env, p.grid_length)
    ref = jax.jit(lambda s: _observe_original(env, s, p, 0, m))(s)
    got = jax.jit(lambda s: env.observe(s, p))(s)
    assert_bitwise(got, ref, f"{impl} constant params")


@pytest.mark.parametrize("impl", FORMS)
def test_env_step_identical(impl: str) -> None:
    """reset and step TimeSteps of an env using ``impl`` equal those of the original."""
    for name in ("3+5", "ids_2+6"):
        base, env = _env(name), _env(name, impl)
        rng = np.random.default_rng(3)
        p = _params(rng)
        s = _random_state(rng, env, p.grid_length)
        a = env.sample_actions(jax.random.key(1))
        key = jax.random.key(2)
        assert_bitwise(
            jax.jit(env.step)(key, s, a, p), jax.jit(base.step)(key, s, a, p), f"{name} step"
        )
        assert_bitwise(jax.jit(env.reset)(key, p), jax.jit(base.reset)(key, p), f"{name} reset")


@pytest.mark.parametrize("impl", FORMS)
def test_vectorized_rollout_identical(impl: str) -> None:
    """Under `jax.vmap` (4 envs, auto-reset, episodes ending inside the rollout)."""
    name = "stay_1+3"
    base, env = _env(name), _env(name, impl)
    p = base.make_params(grid_length=2.0, tagging_distance=0.3)
    key = jax.random.key(5)
    ref = jaxdrive.rollout(base, jaxdrive.random_policy(base), key, p, num_envs=4, num_steps=8)
    got = jaxdrive.rollout(env, jaxdrive.random_policy(env), key, p, num_envs=4, num_steps=8)
    assert np.asarray(ref.timesteps.done).any()
    assert_bitwise(got, ref, f"{impl} rollout")


def _inputs(env: TagContinuous, s: TagState, p: TagContinuousParams):
    """``(feats, scale, g, time)`` of `full_obs` as the env builds them (call under jit)."""
    pf = jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), p)
    diag = pf.grid_length * np.float32(np.sqrt(2.0))
    ms = pf.max_speed + np.float32(1e-10)
    one = jnp.float32(1.0)
    scale = jnp.stack([diag, diag, ms, ms, jnp.float32(np.float32(2 * np.pi)), one, one])
    time = s.t.astype(jnp.float32) / jnp.float32(env.episode_length)
    return env._features(s), scale, s.in_game.astype(jnp.float32), time


def test_pallas_tiles_and_options() -> None:
    """Small tiles (many masked edge tiles), non-contiguous rows, and true division."""
    env = _env("10+30")
    m = env.num_agents_total
    rng = np.random.default_rng(11)
    p = _params(rng)
    s = _random_state(rng, env, p.grid_length)
    ref = np.asarray(_original_jit("10+30")(s, p))
    rows = (7, 3, 30, 31, 0)
    for kw in (dict(block_rows=2, block_cols=32), dict(block_rows=8, block_cols=512)):
        f = lambda s, p, kw=kw: fo.full_obs_pallas(*_insert(_inputs(env, s, p), rows), **kw)
        assert_bitwise(jax.jit(f)(s, p), ref[list(rows)], f"pallas {kw}")
    # reciprocal=False: a true division, within one ulp of the reference.
    f = lambda s, p: fo.full_obs_pallas(*_insert(_inputs(env, s, p), range(m)), reciprocal=False)
    np.testing.assert_allclose(np.asarray(jax.jit(f)(s, p)), ref, rtol=2.4e-7, atol=0)


def _insert(inputs: tuple, rows) -> tuple:
    feats, *rest = inputs
    return (feats, rows, *rest)


def test_reference_uses_reciprocal() -> None:
    assert fo.reference_uses_reciprocal(False, "cpu")
    assert fo.reference_uses_reciprocal(True, "gpu")
    assert not fo.reference_uses_reciprocal(False, "gpu")


def test_vmapped_forms_batched_params() -> None:
    """`jax.vmap` over envs with per-env params (the scale batched too)."""
    env = _env("3+5")
    m = env.num_agents_total
    rng = np.random.default_rng(13)
    states, params = [], []
    for _ in range(3):
        p = _params(rng)
        params.append(p)
        states.append(_random_state(rng, env, p.grid_length))
    s = jax.tree.map(lambda *x: jnp.stack(x), *states)
    p = jax.tree.map(lambda *x: jnp.asarray(x, jnp.float32), *params)
    ref = jax.jit(jax.vmap(lambda s, p: _observe_original(env, s, p, 0, m)))(s, p)
    for impl in FORMS:
        e = _env("3+5", impl)
        got = jax.jit(jax.vmap(lambda s, p, e=e: e._observe_full(s, p, e.runner_ids)))(s, p)
        assert_bitwise(got, np.asarray(ref)[:, list(e.runner_ids)], f"vmap {impl}")


def test_config_and_registry() -> None:
    with pytest.raises(ValueError, match="full_obs_impl"):
        TagContinuous(use_full_observation=True, full_obs_impl="cuda")
    assert TagContinuous().full_obs_impl == "auto"
    # "auto": the Pallas kernel only on GPU with the Pallas searches, else the original form.
    expected = "pallas" if jax.default_backend() == "gpu" else "gather"
    assert TagContinuous()._resolved_full_obs_impl() == expected
    assert TagContinuous(impl="jax")._resolved_full_obs_impl() == "gather"
    assert TagContinuous(full_obs_impl="iota")._resolved_full_obs_impl() == "iota"
    env, _ = jaxdrive.make("tag_continuous", use_full_observation=True, full_obs_impl="iota")
    assert env.full_obs_impl == "iota"
    # Partial observation ignores the option.
    a = TagContinuous(num_taggers=2, num_runners=3, full_obs_impl="select", impl="jax")
    b = TagContinuous(num_taggers=2, num_runners=3, impl="jax")
    key = jax.random.key(0)
    assert_bitwise(jax.jit(a.reset)(key), jax.jit(b.reset)(key), "partial")


def test_full_obs_argument_checks() -> None:
    feats, scale, g = jnp.zeros((7, 4)), jnp.ones(7), jnp.ones(4)
    t = jnp.float32(0)
    for impl in fo.IMPLS:
        with pytest.raises(ValueError, match="rows"):
            fo.full_obs(impl, feats, (0, 0), scale, g, t)
        with pytest.raises(ValueError, match="rows"):
            fo.full_obs(impl, feats, (4,), scale, g, t)
        with pytest.raises(ValueError, match="feats"):
            fo.full_obs(impl, jnp.zeros((6, 4)), (0,), scale, g, t)
    with pytest.raises(ValueError, match="impl"):
        fo.full_obs("nope", feats, (0,), scale, g, t)
    with pytest.raises(ValueError, match="power of two"):
        fo.full_obs_pallas(feats, (0,), scale, g, t, block_cols=24)
    assert fo.obs_size(110) == 764


@pytest.mark.slow
def test_probe_smoke() -> None:
    """The benchmark probe runs at a tiny size, finds the forms equal, and on the CPU
    XLA writes each group's observations in one pass with the iota and select forms."""
    from experiments.benchmarks import full_obs_probe

    records = full_obs_probe.probe([(4, 2, 3)], ["gather", "iota", "select"], steps=2, repeats=1)
    assert [r["form"] for r in records] == ["gather", "iota", "select"]
    for r in records:
        assert "error" not in r, r.get("error")
        assert r["check_const"]["differ"] == 0 and r["check_traced"]["differ"] == 0
        assert r["obs_ms"] > 0 and r["step_ms"] > 0 and r["env_steps_per_s"] > 0
        if r["form"] != "gather":
            assert r["obs_hlo"]["big_writes"] == 2, r["obs_hlo"]  # one per group
            assert r["step_hlo"]["big_writes"] == 2, r["step_hlo"]
