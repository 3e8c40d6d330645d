"""TagContinuous's full observation: the plain-JAX form (`obs_xla.full_obs_xla`) and the
Pallas kernel (`kernels.full_obs`, interpret mode on the CPU).

Both must give the original ``observe()`` output bit for bit (``-0.0`` included), for
all agents and per group (contiguous or not), with the params traced or compile-time
constants, inside a whole env step and under `jax.vmap` with per-env params.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from environments.tag_continuous import TagContinuous, TagState, obs_xla
from environments.tag_continuous.kernels import full_obs
from environments.tag_continuous.observations import features
from tests.environments.tag_helpers import (
    assert_bitwise,
    original_obs_parts,
    random_obs_params,
    random_tag_state,
)

ENVS = {
    "3+5": dict(num_taggers=3, num_runners=5, episode_length=9),
    "10+30": dict(num_taggers=10, num_runners=30, episode_length=50),  # masked edge tiles
    "ids_2+6": dict(num_taggers=2, num_runners=6, episode_length=7, tagger_ids=(5, 1)),
    "stay_1+3": dict(
        num_taggers=1,
        num_runners=3,
        episode_length=6,
        tagger_ids=(2,),
        runner_exits_game_after_tagged=False,
    ),
}
BACKENDS = ("xla", "pallas")


@functools.cache
def _env(name: str, backend: str = "xla") -> TagContinuous:
    return TagContinuous(**ENVS[name], use_full_observation=True, backend=backend)


def _observe_original(env: TagContinuous, state: TagState, params, lo: int, hi: int):
    """The full observation exactly as `TagContinuous.observe` computed it before the
    observation modules existed (a frozen copy: the reference of both forms)."""
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


@pytest.mark.parametrize("name", sorted(ENVS))
def test_forms_equal_original(name: str) -> None:
    """Each group's rows (`observations`, as reset and step build them) and `observe`'s
    row range, params traced, on random states."""
    base = _env(name)
    m = base.num_agents_total
    original = jax.jit(lambda s, p: _observe_original(base, s, p, 0, m))
    groups = {b: jax.jit(_env(name, b).observations) for b in BACKENDS}
    rng = np.random.default_rng(sum(map(ord, name)))
    for _ in range(2):
        p = random_obs_params(rng)
        s = _random_state(rng, base, p.grid_length)
        ref = np.asarray(original(s, p))  # [M, D]
        for backend, fn in groups.items():
            got = fn(s, p)
            for g in base.groups:
                assert_bitwise(got[g], ref[list(base.group_ids(g))], f"{name} {backend} {g}")
    for backend in BACKENDS:
        env = _env(name, backend)
        got = jax.jit(lambda s, p, e=env: e.observe(s, p, (1, m - 1)))(s, p)
        assert_bitwise(got, ref[1 : m - 1], f"{name} {backend} observe rows")


def test_kernel_with_constant_params_and_in_a_step() -> None:
    """Params closed over (compile-time constants); reset and step TimeSteps of the
    kernels' env equal the plain-JAX env's."""
    name = "ids_2+6"
    base, env = _env(name), _env(name, "pallas")
    m = env.num_agents_total
    rng = np.random.default_rng(7)
    p = random_obs_params(rng)
    s = _random_state(rng, env, p.grid_length)
    ref = jax.jit(lambda s: _observe_original(env, s, p, 0, m))(s)
    assert_bitwise(jax.jit(lambda s: env.observe(s, p))(s), ref, "constant params")
    a = env.sample_actions(jax.random.key(1))
    key = jax.random.key(2)
    assert_bitwise(jax.jit(env.step)(key, s, a, p), jax.jit(base.step)(key, s, a, p), "step")
    assert_bitwise(jax.jit(env.reset)(key, p), jax.jit(base.reset)(key, p), "reset")


def _inputs(env: TagContinuous, s: TagState, p):
    """``(feats, scale, g, time)`` as the env builds them (call under jit)."""
    pf = jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), p)
    diag = pf.grid_length * np.float32(np.sqrt(2.0))
    ms = pf.max_speed + np.float32(1e-10)
    one = jnp.float32(1.0)
    scale = jnp.stack([diag, diag, ms, ms, jnp.float32(np.float32(2 * np.pi)), one, one])
    time = s.t.astype(jnp.float32) / jnp.float32(env.episode_length)
    return features(env, s), scale, s.in_game.astype(jnp.float32), time


def test_kernel_rows_true_division_and_batched_params() -> None:
    """Non-contiguous rows; true division (``reciprocal=False``: within one ulp of the
    reference); `jax.vmap` over envs with per-env params (the scale batched too)."""
    env = _env("3+5")
    m = env.num_agents_total
    rng = np.random.default_rng(11)

    def kernel(s, p, rows, **kw):
        feats, *rest = _inputs(env, s, p)
        return full_obs.full_obs_pallas(feats, rows, *rest, interpret=True, **kw)

    params = [random_obs_params(rng) for _ in range(3)]
    states = [_random_state(rng, env, q.grid_length) for q in params]
    s = jax.tree.map(lambda *x: jnp.stack(x), *states)
    p = jax.tree.map(lambda *x: jnp.asarray(x, jnp.float32), *params)
    ref = np.asarray(jax.jit(jax.vmap(lambda s, p: _observe_original(env, s, p, 0, m)))(s, p))
    rows = (7, 3, 0)
    got = jax.jit(jax.vmap(lambda s, p: kernel(s, p, rows)))(s, p)
    assert_bitwise(got, ref[:, list(rows)], "vmap, rows")
    got = jax.jit(jax.vmap(lambda s, p: kernel(s, p, range(m), reciprocal=False)))(s, p)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=2.4e-7, atol=0)


def test_reference_uses_reciprocal_and_argument_checks() -> None:
    assert obs_xla.reference_uses_reciprocal(False, "cpu")
    assert obs_xla.reference_uses_reciprocal(True, "gpu")
    assert not obs_xla.reference_uses_reciprocal(False, "gpu")
    feats, scale, g = jnp.zeros((7, 4)), jnp.ones(7), jnp.ones(4)
    t = jnp.float32(0)
    for fn in (obs_xla.full_obs_xla, full_obs.full_obs_pallas):
        with pytest.raises(ValueError, match="rows"):
            fn(feats, (0, 0), scale, g, t)
        with pytest.raises(ValueError, match="rows"):
            fn(feats, (4,), scale, g, t)
        with pytest.raises(ValueError, match="feats"):
            fn(jnp.zeros((6, 4)), (0,), scale, g, t)
    assert obs_xla.full_obs_size(110) == 764
