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

import jax
import jax.numpy as jnp
import numpy as np

from jaxdrive.env import Env
from jaxdrive.spaces import Discrete, MultiDiscrete
from jaxdrive.types import TimeStep

__all__ = ["EnvCheckError", "assert_trees_equal", "check_env", "check_timestep"]


class EnvCheckError(AssertionError):
    """A failed conformance check; the message names the check and the group or field."""


def _require(cond: Any, where: str, msg: str) -> None:
    if not bool(cond):
        raise EnvCheckError(f"{where}: {msg}")


def _host(x: Any) -> np.ndarray:
    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x)


def assert_trees_equal(a: Any, b: Any, what: str = "trees", atol: float = 0.0) -> None:
    """Raises `EnvCheckError` (an ``AssertionError``) unless two pytrees have the same
    structure and equal leaves (NaN equals NaN): bitwise, or for floating leaves within
    ``|x - y| <= atol`` where ``atol > 0``; the message names ``what`` and the first
    differing leaf's path."""
    sa, sb = jax.tree.structure(a), jax.tree.structure(b)
    _require(sa == sb, what, f"structures differ: {sa} vs {sb}")
    leaves_a = jax.tree_util.tree_flatten_with_path(a)[0]
    for (path, x), y in zip(leaves_a, jax.tree.leaves(b), strict=True):
        x, y = _host(x), _host(y)
        leaf = f"{what}: leaf {jax.tree_util.keystr(path) or '(root)'}"
        _require(
            x.shape == y.shape and x.dtype == y.dtype,
            leaf,
            f"{x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}",
        )
        nan_ok = x.dtype.kind in "fc"
        same = (np.abs(x - y) <= atol) if nan_ok and atol > 0 else (x == y)
        if nan_ok:
            same = same | (np.isnan(x) & np.isnan(y))
        if not np.all(same):
            differ = ~same
            first = tuple(int(i) for i in np.argwhere(differ)[0]) if x.ndim else ()
            raise EnvCheckError(
                f"{leaf}: {int(np.sum(differ))} of {x.size} values differ, first at index "
                f"{first}: {x[first].item()!r} vs {y[first].item()!r}"
            )


def check_timestep(
    env: Env, ts: TimeStep, batch: tuple[int, ...] = (), where: str = "check_timestep"
) -> None:
    """Checks that ``ts`` has the groups, shapes, dtypes and values the env's spaces say.

    ``batch``: leading axes before the agent axis. Raises `EnvCheckError` whose message
    starts with ``where`` and names the field and group, e.g.
    ``step: obs['runner'] has shape (5, 21), expected (5, 22) from observation_space('runner')``.
    """
    groups = env.groups
    for field in ("obs", "reward", "terminated", "truncated", "active"):
        got = getattr(ts, field)
        _require(
            set(got) == set(groups), where, f"ts.{field} has groups {list(got)}, expected "
            f"{list(groups)} (env.groups)",
        )  # fmt: skip
    for g in groups:
        a = env.num_agents(g)
        space = env.observation_space(g)
        obs = ts.obs[g]
        want = (*batch, a, *space.shape)
        from_space = f"from observation_space('{g}')"
        _require(
            obs.shape == want, where,
            f"obs['{g}'] has shape {obs.shape}, expected {want} {from_space}",
        )  # fmt: skip
        _require(
            obs.dtype == jnp.dtype(space.dtype), where,
            f"obs['{g}'] has dtype {obs.dtype}, expected {jnp.dtype(space.dtype)} {from_space}",
        )  # fmt: skip
        _require(space.contains(obs), where, f"obs['{g}'] has values outside {space}")
        if jnp.issubdtype(obs.dtype, jnp.floating):
            _require(jnp.all(jnp.isfinite(obs)), where, f"obs['{g}'] has non-finite values")
        r = ts.reward[g]
        _require(
            r.shape == (*batch, a) and r.dtype == jnp.float32, where,
            f"reward['{g}'] is {r.dtype}{list(r.shape)}, expected float32{list((*batch, a))}",
        )  # fmt: skip
        _require(jnp.all(jnp.isfinite(r)), where, f"reward['{g}'] has non-finite values")
        for field in ("terminated", "truncated", "active"):
            x = getattr(ts, field)[g]
            _require(
                x.shape == (*batch, a) and x.dtype == jnp.bool_, where,
                f"{field}['{g}'] is {x.dtype}{list(x.shape)}, expected bool{list((*batch, a))}",
            )  # fmt: skip
        both = ts.terminated[g] & ts.truncated[g]
        _require(
            not bool(jnp.any(both)), where, f"an agent of '{g}' is both terminated and truncated"
        )
    _require(
        ts.done.shape == batch and ts.done.dtype == jnp.bool_, where,
        f"done is {ts.done.dtype}{list(ts.done.shape)}, expected bool{list(batch)}",
    )  # fmt: skip
    if ts.action_mask is not None:
        _check_action_mask(env, ts.action_mask, batch, where)


def _check_action_mask(env: Env, masks: Any, batch: tuple[int, ...], where: str) -> None:
    """``masks`` is ``{g: [*batch, A_g, K_g]}`` bool (see `TimeStep.action_mask`) with an
    allowed action for every agent in every action dimension."""
    groups = env.groups
    _require(
        isinstance(masks, dict) and set(masks) == set(groups), where,
        f"ts.action_mask has groups {list(masks) if isinstance(masks, dict) else masks!r}, "
        f"expected {list(groups)} (env.groups) or None",
    )  # fmt: skip
    for g in groups:
        space = env.action_space(g)
        sizes = (
            (space.n,) if isinstance(space, Discrete)
            else space.nvec if isinstance(space, MultiDiscrete) else None
        )  # fmt: skip
        _require(
            sizes is not None, where,
            f"action_mask['{g}'] is given for {space}: masks are for Discrete and "
            "MultiDiscrete action spaces",
        )  # fmt: skip
        m = masks[g]
        want = (*batch, env.num_agents(g), sum(sizes))
        _require(
            m.shape == want and m.dtype == jnp.bool_, where,
            f"action_mask['{g}'] is {m.dtype}{list(m.shape)}, expected bool{list(want)} "
            f"(one column per action of action_space('{g}') = {space})",
        )  # fmt: skip
        m, start = np.asarray(m), 0
        for d, n in enumerate(sizes):
            none = ~m[..., start : start + n].any(-1)  # [*batch, A_g]
            start += n
            if none.any():
                dim = f" in dimension {d}" if len(sizes) > 1 else ""
                raise EnvCheckError(
                    f"{where}: action_mask['{g}'] allows no action{dim} for agent "
                    f"{tuple(int(i) for i in np.argwhere(none)[0])} (index [*batch, agent]); "
                    "every agent needs at least one allowed action"
                )


def check_env(
    env: Env,
    params: Any = None,
    *,
    num_envs: int = 3,
    num_steps: int | None = None,
    seed: int = 0,
    observations_atol: float = 0.0,
) -> dict[str, Any]:
    """Runs the jaxdrive conformance check on ``env``; raises `EnvCheckError` (an
    ``AssertionError``) on failure, its message naming the check and the offending
    group or field, e.g. ``check_env(TagContinuous): step: obs['runner'] has shape
    (5, 21), expected (5, 22) from observation_space('runner')``.

    Checks: reset/step jit, vmap and scan; timestep shapes/dtypes match the spaces and
    are the same after reset and after step (so auto-reset and scan work); action masks,
    where given, are bool ``[A_g, K_g]`` with an allowed action per agent and dimension
    and come after reset and after step (`TimeStep.action_mask`); the state
    keeps its structure; a jitted step traces once across many calls; same key gives
    the same result; ``done`` comes by ``episode_length`` steps, and an early ``done``
    has a terminated agent; `Env.observations` (when implemented) equals ``ts.obs``;
    wrong action shapes and dtypes raise ``ValueError``. ``observations_atol`` lets
    `Env.observations` differ from ``ts.obs`` by that much (physics envs: the two are
    separately compiled programs, which may round differently; 0 asks for bitwise).
    Returns a small report (steps run, episodes ended).
    """
    params = env.default_params if params is None else params
    E = env.episode_length
    if num_steps is None:
        num_steps = min(E + 2, 600) if E is not None else 100
    who = f"check_env({env.name})"
    key = jax.random.key(seed)
    k_reset, k_run, k_det = jax.random.split(key, 3)
    reset = jax.jit(env.reset)  # one program for every reset below
    state, state1, step = _check_jit(env, params, seed, k_reset, who, observations_atol, reset)
    _check_determinism(env, params, reset, step, k_det, who)
    episodes = _check_episode(env, params, num_steps, k_run, who)

    # -- vmap -------------------------------------------------------------------------
    keys = jax.random.split(k_run, num_envs)
    vs, vts = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params)
    check_timestep(env, vts, batch=(num_envs,), where=f"{who}: vmap reset")
    va = jax.vmap(env.sample_actions)(keys)
    vs, vts = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))(keys, vs, va, params)
    check_timestep(env, vts, batch=(num_envs,), where=f"{who}: vmap step")

    # -- bad actions ------------------------------------------------------------------
    actions = env.sample_actions(jax.random.key(seed + 1))
    g = env.groups[0]
    bad = dict(actions)
    bad[g] = jnp.zeros((env.num_agents(g) + 1, *env.action_space(g).shape), actions[g].dtype)
    _expect_value_error(
        lambda: env.step(k_run, state, bad, params), f"{who}: bad actions",
        f"actions['{g}'] of shape {bad[g].shape}",
    )  # fmt: skip
    wrong_dtype = jnp.float32 if jnp.issubdtype(actions[g].dtype, jnp.integer) else jnp.int32
    bad[g] = actions[g].astype(wrong_dtype)
    _expect_value_error(
        lambda: env.step(k_run, state, bad, params), f"{who}: bad actions",
        f"actions['{g}'] of dtype {jnp.dtype(wrong_dtype)}",
    )  # fmt: skip
    return {"steps": num_steps, "episodes": episodes}


def _check_jit(
    env: Env, params: Any, seed: int, k_reset: jax.Array, who: str, atol: float, reset: Any
) -> Any:
    """Reset (``reset``: the jitted ``env.reset``) and step under jit: timesteps match the
    spaces and each other, the state keeps its structure, the jitted step traces once
    over four calls, `Env.observations` equals ``ts.obs``. Returns ``(state, stepped
    state, step)``."""
    state, ts0 = reset(k_reset, params)
    check_timestep(env, ts0, where=f"{who}: reset")
    _require(not bool(ts0.done), f"{who}: reset", "returned done=True")
    traces = {"n": 0}

    def counted_step(k, s, a, p):
        traces["n"] += 1
        return env.step(k, s, a, p)

    step = jax.jit(counted_step)
    actions = env.sample_actions(jax.random.key(seed + 1))
    state1, ts1 = step(jax.random.key(seed + 2), state, actions, params)
    check_timestep(env, ts1, where=f"{who}: step")
    _require(
        (ts0.action_mask is None) == (ts1.action_mask is None), f"{who}: action_mask",
        f"present after {'reset' if ts1.action_mask is None else 'step'} but not after "
        f"{'step' if ts1.action_mask is None else 'reset'}: give masks in both or in neither",
    )  # fmt: skip
    _same_signature(ts0, ts1, f"{who}: step", "the timestep of step differs from reset's")
    _same_signature(state, state1, f"{who}: step", "step changed the state")
    for i in range(3):
        state1, ts1 = step(
            jax.random.key(seed + 3 + i), state1, env.sample_actions(jax.random.key(i)), params
        )
    _require(
        traces["n"] == 1, f"{who}: no retrace", f"jitted step traced {traces['n']} times "
        "over 4 calls with the same shapes",
    )  # fmt: skip
    if env.has_observations:
        observe = jax.jit(env.observations)
        assert_trees_equal(
            observe(state, params), ts0.obs, f"{who}: observations(state) after reset", atol
        )
        assert_trees_equal(
            observe(state1, params), ts1.obs, f"{who}: observations(state) after step", atol
        )
    return state, state1, step


def _check_determinism(
    env: Env, params: Any, reset: Any, step: Any, k_det: jax.Array, who: str
) -> None:
    sa, ta = reset(k_det, params)
    sb, tb = reset(k_det, params)
    assert_trees_equal((sa, ta), (sb, tb), f"{who}: determinism: reset with the same key")
    a = env.sample_actions(k_det)
    assert_trees_equal(
        step(k_det, sa, a, params),
        step(k_det, sb, a, params),
        f"{who}: determinism: step with the same key",
    )


def _check_episode(env: Env, params: Any, num_steps: int, k_run: jax.Array, who: str) -> int:
    """Scans ``num_steps`` steps without auto-reset: timesteps match the spaces, no agent
    is truncated before ``done``, ``done`` comes within ``episode_length`` steps and an
    early one has a terminated agent. Returns the number of episodes ended."""
    E = env.episode_length
    where = f"{who}: episode"

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
    check_timestep(env, traj, batch=(num_steps,), where=f"{where} (scan)")
    done = np.asarray(traj.done)
    live = ~np.asarray(finished_before)
    any_term = np.zeros(num_steps, bool)
    for g in env.groups:
        any_term |= np.asarray(traj.terminated[g]).any(-1)
        trunc = np.asarray(traj.truncated[g]).any(-1) & ~done & live
        _require(
            not np.any(trunc), where, f"truncated['{g}'] is set at step "
            f"{int(np.argmax(trunc)) + 1} before the episode is done",
        )  # fmt: skip
    if E is not None and num_steps >= E:
        _require(done[:E].any(), where, f"no done within episode_length={E} steps")
        first_done = int(np.argmax(done))
        _require(
            first_done == E - 1 or any_term[first_done], where,
            f"done at step {first_done + 1} < episode_length={E} with no terminated agent",
        )  # fmt: skip
    return int(np.sum(done & live))


def _same_signature(a: Any, b: Any, where: str, what: str) -> None:
    """Same tree structure, leaf shapes and dtypes; the message names the first leaf
    that differs."""
    sa, sb = jax.tree.structure(a), jax.tree.structure(b)
    _require(sa == sb, where, f"{what}: structure {sb}, expected {sa}")
    leaves_a = jax.tree_util.tree_flatten_with_path(a)[0]
    for (path, x), y in zip(leaves_a, jax.tree.leaves(b), strict=True):
        want, got = (jnp.shape(x), jnp.result_type(x)), (jnp.shape(y), jnp.result_type(y))
        _require(
            want == got, where,
            f"{what}: {jax.tree_util.keystr(path)} is {got[1]}{list(got[0])}, "
            f"expected {want[1]}{list(want[0])}",
        )  # fmt: skip


def _expect_value_error(fn: Any, where: str, what: str) -> None:
    try:
        fn()
    except ValueError:
        return
    raise EnvCheckError(f"{where}: step with {what} did not raise ValueError")
