"""Running trained policies outside training: evaluation episodes and animations.

`evaluate_policy` plays episodes of a trainer's policies in parallel on the device (one
jitted scan, compiled once per trainer and setting); `render_rollout` animates one
episode into a GIF with the env package's renderer (`find_renderer`). Both carry the
state of recurrent policies (``trainer.init_carry``). The run scripts use them through
`experiments.common`.
"""

from __future__ import annotations

import importlib
import inspect
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

__all__ = ["evaluate_policy", "find_renderer", "render_rollout"]


def _policy(trainer: Any, deterministic: bool):
    """``(params_by_policy, key, obs, action_mask=None) -> actions`` from ``trainer.act``,
    deterministic and masked (`jaxdrive.TimeStep.action_mask`) where it supports them."""
    if trainer.act is None:
        raise ValueError("this trainer has no `act`: it cannot be evaluated or animated")
    try:
        params = inspect.signature(trainer.act).parameters
    except (TypeError, ValueError):
        params = {}

    def policy(params_by_policy, key, obs, action_mask=None, carry=None):
        kw = {"deterministic": deterministic} if "deterministic" in params else {}
        if carry is not None:  # recurrent policies: returns (actions, carry)
            kw["carry"] = carry
        if action_mask is not None:
            if "action_mask" not in params:
                raise ValueError("this env gives action masks, which this trainer's act ignores")
            kw["action_mask"] = action_mask
        return trainer.act(params_by_policy, key, obs, **kw)

    return policy


#: The evaluation programs of the last few (trainer, env, episodes, deterministic,
#: max_steps): repeated evaluations reuse one compiled program (parameters are arguments).
_EVAL_PROGRAMS: dict[tuple, tuple[Any, Any, Any]] = {}
_EVAL_PROGRAMS_KEPT = 4


def _eval_program(
    env: Any, trainer: Any, episodes: int, deterministic: bool, max_steps: int
) -> Any:
    """The jitted ``run(params_by_policy, env_params, key) -> (returns {g: [E]},
    length [E], alive [E])`` of `evaluate_policy`, built once per setting."""
    import jaxdrive

    key = (id(trainer), id(env), episodes, bool(deterministic), max_steps)
    if key in _EVAL_PROGRAMS:  # the entry holds trainer and env: their ids stay theirs
        return _EVAL_PROGRAMS[key][2]
    policy = _policy(trainer, deterministic)
    # Ended envs reset and play on, their rewards masked: stepping a terminal state
    # instead (a fallen MJX humanoid sinking through a floor that only its feet touch)
    # can diverge, and a non-finite state is not guaranteed to stay in its own env.
    venv = jaxdrive.vectorize(env, episodes)
    groups = env.groups

    @jax.jit
    def run(params_by_policy, env_params, key):
        k_reset, k_loop = jax.random.split(key)
        state, ts = venv.reset(k_reset, env_params)
        ret0 = {g: jnp.zeros((episodes, env.num_agents(g)), jnp.float32) for g in groups}
        alive0 = jnp.ones((episodes,), bool)
        # recurrent policies' carries (no resets: only each env's first episode counts)
        init_carry = getattr(trainer, "init_carry", None)
        hc0 = None if init_carry is None else init_carry((episodes,))

        def body(carry, k):
            state, ts, ret, alive, length, hc = carry
            k_act, k_env = jax.random.split(k)
            if hc is None:
                actions = policy(params_by_policy, k_act, ts.obs, ts.action_mask)
            else:
                actions, hc = policy(params_by_policy, k_act, ts.obs, ts.action_mask, hc)
            state, ts = venv.step(k_env, state, actions, env_params)
            ret = {g: ret[g] + jnp.where(alive[:, None], ts.reward[g], 0.0) for g in groups}
            length = length + alive.astype(jnp.int32)
            alive = alive & ~ts.done
            return (state, ts, ret, alive, length, hc), None

        carry = (state, ts, ret0, alive0, jnp.zeros((episodes,), jnp.int32), hc0)
        (_, _, ret, alive, length, _), _ = jax.lax.scan(
            body, carry, jax.random.split(k_loop, max_steps)
        )
        return {g: ret[g].mean(axis=1) for g in groups}, length, alive

    while len(_EVAL_PROGRAMS) >= _EVAL_PROGRAMS_KEPT:
        _EVAL_PROGRAMS.pop(next(iter(_EVAL_PROGRAMS)))
    _EVAL_PROGRAMS[key] = (trainer, env, run)
    return run


def evaluate_policy(
    env: Any,
    env_params: Any,
    trainer: Any,
    params_by_policy: Any,
    key: jax.Array,
    *,
    episodes: int = 16,
    deterministic: bool = True,
    max_steps: int | None = None,
) -> dict[str, Any]:
    """Plays ``episodes`` episodes in parallel on the device (one jitted scan, compiled
    once per trainer, env and setting: the parameters are arguments).

    Each of the ``episodes`` envs runs from reset until its first ``done`` (or
    ``max_steps``, default the env's episode length or 1000); rewards after that are
    masked out. Returns ``{"episodes", "deterministic", "max_steps", "unfinished",
    "nonfinite", "episode_length": mean, "returns": {g: {"mean", "std", "min", "max"}}}``
    where an episode's return of group ``g`` is the mean over its agents of each agent's
    summed reward; ``unfinished`` counts episodes still running at ``max_steps`` and
    ``nonfinite`` the non-finite returns (over groups).
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be an integer >= 1, got {episodes!r}")
    if max_steps is None:
        max_steps = env.episode_length or 1000
    max_steps = int(max_steps)
    run = _eval_program(env, trainer, episodes, deterministic, max_steps)
    rets, length, alive = jax.device_get(run(params_by_policy, env_params, key))
    return {
        "episodes": episodes,
        "deterministic": bool(deterministic),
        "max_steps": max_steps,
        "unfinished": int(np.sum(alive)),
        "nonfinite": int(sum(np.sum(~np.isfinite(r)) for r in rets.values())),
        "episode_length": float(np.mean(length)),
        "returns": {
            g: {
                "mean": float(np.mean(r)),
                "std": float(np.std(r)),
                "min": float(np.min(r)),
                "max": float(np.max(r)),
            }
            for g, r in rets.items()
        },
    }


# ----- animation --------------------------------------------------------------------------
def find_renderer(env: Any, params: Any = None) -> Any | None:
    """``draw(state) -> uint8 [H, W, 3]`` for one env's states, from the ``render`` module
    of the env's package (``environments/<env>/render.py``): its ``make_renderer(env,
    params)`` (a figure built once for many frames) or else its ``render(env, state,
    params)``; ``None`` when the package has no renderer."""
    base = getattr(env, "unwrapped", env)
    package = type(base).__module__.rsplit(".", 1)[0]
    try:
        module = importlib.import_module(f"{package}.render")
    except ImportError:
        return None
    if hasattr(module, "make_renderer"):
        return module.make_renderer(env, params)
    render = getattr(module, "render", None)
    return None if render is None else (lambda state: render(env, state, params))


def render_rollout(
    env: Any,
    env_params: Any,
    trainer: Any,
    params_by_policy: Any,
    key: jax.Array,
    path: str | os.PathLike,
    *,
    num_steps: int = 200,
    deterministic: bool = True,
    fps: float = 10,
) -> str | None:
    """Animates one episode of the trained policies into ``path`` (GIF).

    Uses the env package's ``render`` and ``jaxdrive.render`` (`rollout_states`,
    `animate`); returns the written path, or ``None`` (with a log line) when the env
    has no renderer or the rendering helpers are missing.
    """
    draw = find_renderer(env, env_params)
    if draw is None:
        logging.info("no renderer for %s: skipping the animation", type(env).__name__)
        return None
    try:
        from jaxdrive.render import animate, rollout_states
    except ImportError as e:
        logging.info("jaxdrive.render is unavailable (%s): skipping the animation", e)
        return None
    batched = _policy(trainer, deterministic)
    if getattr(trainer, "init_carry", None) is not None:
        logging.info("animations of recurrent policies are not supported: skipping it")
        return None

    def one_env_policy(k, obs):  # obs {g: [A_g, ...]} -> add then drop an env axis
        actions = batched(params_by_policy, k, jax.tree.map(lambda o: o[None], obs))
        return jax.tree.map(lambda a: a[0], actions)

    states = rollout_states(env, one_env_policy, key, env_params, int(num_steps))
    out = animate(states, draw, path, fps=fps)
    return os.fspath(out)
