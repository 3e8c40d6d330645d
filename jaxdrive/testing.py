"""Testing kit shipped with jaxdrive: the conformance check every env must pass.

Example:
    >>> import jaxdrive
    >>> env, params = jaxdrive.make("CartPole-v1")
    >>> report = jaxdrive.testing.check_env(env, params, num_steps=20)
    >>> report["steps"]
    20
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np

from jaxdrive.env import Env
from jaxdrive.types import TimeStep

__all__ = ["assert_trees_equal", "check_env", "check_timestep"]


def assert_trees_equal(a: Any, b: Any, what: str = "trees") -> None:
    """Asserts two pytrees have the same structure and bitwise-equal leaves."""
    sa, sb = jax.tree.structure(a), jax.tree.structure(b)
    assert sa == sb, f"{what}: structures differ: {sa} vs {sb}"
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=what)


def _signature(tree: Any) -> Any:
    return jax.tree.map(lambda x: (tuple(jnp.shape(x)), jnp.result_type(x)), tree)


def check_timestep(env: Env, ts: TimeStep, batch: tuple[int, ...] = ()) -> None:
    """Asserts ``ts`` has the groups, shapes, dtypes and values the env's spaces say."""
    groups = env.groups
    for field in ("obs", "reward", "terminated", "truncated", "active"):
        got = getattr(ts, field)
        assert set(got) == set(groups), f"ts.{field} groups {list(got)} != {list(groups)}"
    for g in groups:
        a = env.num_agents(g)
        space = env.observation_space(g)
        obs = ts.obs[g]
        assert obs.shape == (*batch, a, *space.shape), (
            f"obs[{g}] shape {obs.shape} != {(*batch, a, *space.shape)}"
        )
        assert obs.dtype == jnp.dtype(space.dtype), f"obs[{g}] dtype {obs.dtype} != {space.dtype}"
        assert bool(space.contains(obs)), f"obs[{g}] outside {space}"
        assert bool(jnp.all(jnp.isfinite(obs))) or not jnp.issubdtype(obs.dtype, jnp.floating), (
            f"obs[{g}] has non-finite values"
        )
        r = ts.reward[g]
        assert r.shape == (*batch, a) and r.dtype == jnp.float32, (
            f"reward[{g}] must be float32 {(*batch, a)}, got {r.dtype} {r.shape}"
        )
        assert bool(jnp.all(jnp.isfinite(r))), f"reward[{g}] has non-finite values"
        for field in ("terminated", "truncated", "active"):
            x = getattr(ts, field)[g]
            assert x.shape == (*batch, a) and x.dtype == jnp.bool_, (
                f"{field}[{g}] must be bool {(*batch, a)}, got {x.dtype} {x.shape}"
            )
        both = ts.terminated[g] & ts.truncated[g]
        assert not bool(jnp.any(both)), f"{g}: an agent is both terminated and truncated"
    assert ts.done.shape == batch and ts.done.dtype == jnp.bool_, (
        f"done must be bool {batch}, got {ts.done.dtype} {ts.done.shape}"
    )


def check_env(
    env: Env,
    params: Any = None,
    *,
    num_envs: int = 3,
    num_steps: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Runs the jaxdrive conformance check on ``env``; raises ``AssertionError`` on failure.

    Checks: reset/step jit, vmap and scan; timestep shapes/dtypes match the spaces and
    are the same after reset and after step (so auto-reset and scan work); the state
    keeps its structure; a jitted step traces once across many calls; same key gives
    the same result; ``done`` comes by ``episode_length`` steps, and an early ``done``
    has a terminated agent; `Env.observations` (when implemented) equals ``ts.obs``;
    wrong action shapes and dtypes raise ``ValueError``.
    Returns a small report (steps run, episodes ended).
    """
    params = env.default_params if params is None else params
    E = env.episode_length
    if num_steps is None:
        num_steps = min(E + 2, 600) if E is not None else 100
    key = jax.random.key(seed)
    k_reset, k_run, k_det = jax.random.split(key, 3)

    # -- reset and step under jit -----------------------------------------------------
    state, ts0 = jax.jit(env.reset)(k_reset, params)
    check_timestep(env, ts0)
    assert not bool(ts0.done), "reset returned done=True"
    traces = {"n": 0}

    def counted_step(k, s, a, p):
        traces["n"] += 1
        return env.step(k, s, a, p)

    step = jax.jit(counted_step)
    actions = env.sample_actions(jax.random.key(seed + 1))
    state1, ts1 = step(jax.random.key(seed + 2), state, actions, params)
    check_timestep(env, ts1)
    assert _signature(ts0) == _signature(ts1), (
        "reset and step return timesteps of different structure/shape/dtype:\n"
        f"{_signature(ts0)}\nvs\n{_signature(ts1)}"
    )
    assert _signature(state) == _signature(state1), "step changed the state's structure"
    for i in range(3):
        state1, ts1 = step(
            jax.random.key(seed + 3 + i), state1, env.sample_actions(jax.random.key(i)), params
        )
    assert traces["n"] == 1, f"jitted step traced {traces['n']} times over 4 calls (retrace)"

    # -- observations(state) equals the obs of reset and step -------------------------
    if env.has_observations:
        observe = jax.jit(env.observations)
        assert_trees_equal(observe(state, params), ts0.obs, "observations(state) after reset")
        assert_trees_equal(observe(state1, params), ts1.obs, "observations(state) after step")

    # -- determinism ------------------------------------------------------------------
    sa, ta = jax.jit(env.reset)(k_det, params)
    sb, tb = jax.jit(env.reset)(k_det, params)
    assert_trees_equal((sa, ta), (sb, tb), "reset with the same key")
    a = env.sample_actions(k_det)
    assert_trees_equal(step(k_det, sa, a, params), step(k_det, sb, a, params), "same-key step")

    # -- scan over one episode, without auto-reset ----------------------------------
    def body(carry, k):
        s, finished = carry
        k1, k2 = jax.random.split(k)
        s, t = env.step(k2, s, env.sample_actions(k1), params)
        return (s, finished | t.done), (t, finished)

    @jax.jit
    def run(k):
        s, t = env.reset(k, params)
        _, (traj, finished_before) = jax.lax.scan(
            body, (s, jnp.asarray(False)), jax.random.split(k, num_steps)
        )
        return traj, finished_before

    traj, finished_before = run(k_run)
    check_timestep(env, traj, batch=(num_steps,))
    done = np.asarray(traj.done)
    live = ~np.asarray(finished_before)
    episodes = int(np.sum(done & live))
    any_term = np.zeros(num_steps, bool)
    for g in env.groups:
        any_term |= np.asarray(traj.terminated[g]).any(-1)
        trunc = np.asarray(traj.truncated[g]).any(-1)
        assert not np.any(trunc & ~done & live), f"{g}: truncated before the episode is done"
    if E is not None and num_steps >= E:
        first_done = int(np.argmax(done)) if done.any() else None
        assert first_done is not None and first_done <= E - 1, (
            f"no done within episode_length={E} steps"
        )
        if first_done < E - 1:
            assert any_term[first_done], (
                f"done at step {first_done + 1} < E={E} with no terminated agent"
            )

    # -- vmap -------------------------------------------------------------------------
    keys = jax.random.split(k_run, num_envs)
    vs, vts = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params)
    check_timestep(env, vts, batch=(num_envs,))
    va = jax.vmap(env.sample_actions)(keys)
    vs, vts = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))(keys, vs, va, params)
    check_timestep(env, vts, batch=(num_envs,))

    # -- bad actions ------------------------------------------------------------------
    g = env.groups[0]
    bad = dict(actions)
    bad[g] = jnp.zeros((env.num_agents(g) + 1, *env.action_space(g).shape), actions[g].dtype)
    _expect_value_error(lambda: env.step(k_run, state, bad, params), "wrong action shape")
    wrong_dtype = jnp.float32 if jnp.issubdtype(actions[g].dtype, jnp.integer) else jnp.int32
    bad[g] = actions[g].astype(wrong_dtype)
    _expect_value_error(lambda: env.step(k_run, state, bad, params), "wrong action dtype")

    chex.assert_tree_all_finite(jax.tree.leaves(traj.reward))
    return {"steps": num_steps, "episodes": episodes}


def _expect_value_error(fn, what: str) -> None:
    try:
        fn()
    except ValueError:
        return
    raise AssertionError(f"{what} did not raise ValueError")
