"""Shared by the Tag kernel tests: bit-for-bit comparison of pytrees, random states,
actions and params, and the envs of both backends."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from environments.tag_continuous import TagContinuous, TagContinuousParams, TagState

__all__ = [
    "assert_bitwise",
    "backend_pair",
    "random_actions",
    "random_obs_params",
    "random_step_params",
    "random_step_state",
    "random_tag_state",
]


def backend_pair(**kw) -> tuple[TagContinuous, TagContinuous]:
    """The same env with the plain-JAX backend (the reference) and with the kernels
    (interpret mode on the CPU)."""
    return TagContinuous(**kw, backend="xla"), TagContinuous(**kw, backend="pallas")


def _bits(x: Any) -> np.ndarray:
    """The array's bytes as unsigned integers of its item size (so −0.0 ≠ 0.0, NaN = NaN)."""
    a = np.asarray(x)
    if a.dtype == np.bool_:
        return a
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_bitwise(a: Any, b: Any, what: str) -> None:
    """Asserts ``a`` and ``b`` have the same tree structure, dtypes, shapes and bits;
    the message names ``what``, the leaf, the count of differing elements and the first."""
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb, f"{what}: tree structures differ: {ta} vs {tb}"
    for i, (x, y) in enumerate(zip(la, lb, strict=True)):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape, (
            f"{what}[{i}]: {x.dtype}{x.shape} vs {y.dtype}{y.shape}"
        )
        bad = _bits(x) != _bits(y)
        if np.any(bad):
            idx = tuple(np.argwhere(bad)[0])
            raise AssertionError(
                f"{what}[{i}]: {int(bad.sum())} elements differ, first at {idx}: "
                f"{x[idx]!r} vs {y[idx]!r}"
            )


def random_tag_state(
    rng: np.random.Generator, env: TagContinuous, L: float, frac: float, duplicate: str
) -> TagState:
    """Positions uniform in ``[0, L]²``, about ``frac`` of the agents in the game (the
    taggers always), random speeds, directions and accelerations (0 out of the game), a
    random ``t``, and an exact duplicate value (zero differences, ``-0.0``):
    ``duplicate="x"`` copies agent 0's x to a random agent, ``"xy"`` its position to a
    random other agent."""
    m = env.num_agents_total
    in_game = rng.uniform(size=m) < frac
    in_game[list(env.tagger_ids)] = True
    f = lambda lo, hi: rng.uniform(lo, hi, m).astype(np.float32)
    x, y = f(0, L), f(0, L)
    if duplicate == "x":
        x[rng.integers(0, m)] = x[0]
    elif duplicate == "xy":
        j = rng.integers(1, m)
        x[j], y[j] = x[0], y[0]
    else:
        raise ValueError(f"duplicate must be 'x' or 'xy', got {duplicate!r}")
    return TagState(
        x=jnp.asarray(x),
        y=jnp.asarray(y),
        speed=jnp.asarray(f(0, 1) * in_game),
        direction=jnp.asarray(f(0, 2 * np.pi) * in_game),
        acceleration=jnp.asarray(f(-1, 1) * in_game),
        in_game=jnp.asarray(in_game),
        t=jnp.int32(rng.integers(0, env.episode_length)),
    )


def random_obs_params(rng: np.random.Generator) -> TagContinuousParams:
    """Default params with a random grid length and maximum speed (the observation's scales)."""
    return TagContinuousParams(
        grid_length=float(rng.uniform(0.5, 20.0)), max_speed=float(rng.uniform(0.1, 3.0))
    )


def random_step_params(rng: np.random.Generator) -> TagContinuousParams:
    """Params with every reward and penalty non-zero, random speeds and grid length."""
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


def random_step_state(rng: np.random.Generator, env: TagContinuous, p, t: int) -> TagState:
    """A state for stepping: some agents at the edge, out of the game, at rest."""
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


def random_actions(rng: np.random.Generator, env: TagContinuous) -> dict[str, jax.Array]:
    """Uniform action indices of every agent, no-ops included."""
    hi = [env.num_acceleration_levels + 1, env.num_turn_levels + 1]
    return {
        g: jnp.asarray(rng.integers(0, hi, (env.num_agents(g), 2)), jnp.int32) for g in env.groups
    }


def original_obs_parts(env: TagContinuous, state: TagState, params, lo: int, hi: int):
    """The pieces both original observation formulas (k-nearest and full, as
    `TagContinuous.observe` computed them before the observation modules existed) start
    from, for observing rows ``lo:hi``: ``(feats [7, M], relative [1, 7, 1], scale
    [1, 7, 1], own [n, 7, 1], g_own [n, 1, 1], time)``."""
    p = jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), params)
    diag = p.grid_length * np.float32(np.sqrt(2.0))
    ms = p.max_speed + np.float32(1e-10)
    gf = state.in_game.astype(jnp.float32)
    feats = jnp.stack(
        [state.x, state.y, state.speed, state.acceleration, state.direction]
        + [jnp.asarray(env.is_tagger, jnp.float32), gf]
    )
    relative = np.array([1, 1, 1, 1, 1, 0, 0], np.float32)[None, :, None]
    one = jnp.float32(1.0)
    two_pi = jnp.float32(np.float32(2.0 * np.pi))
    scale = jnp.stack([diag, diag, ms, ms, two_pi, one, one])[None, :, None]
    own = feats[:, lo:hi].T[:, :, None]
    g_own = gf[lo:hi][:, None, None]
    time = state.t.astype(jnp.float32) / jnp.float32(env.episode_length)
    return feats, relative, scale, own, g_own, time
