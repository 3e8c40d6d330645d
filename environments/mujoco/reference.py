"""Gymnasium's v5 envs as the reference for the MJX envs (tests and the
``mujoco_parity`` benchmark suite).

`gymnasium_env` builds Gymnasium's env on exactly the model the MJX env steps (the
edited model written to a temporary XML for ``xml_file``) with the same options and
params. `compare` steps both from the same ``(qpos, qvel)`` (zero warm start, as after
``mj_resetData``) with the same actions and reports the largest differences of the
observation, of each reward term and the termination flags.

Why the two differ at all: MJX computes in float32 where MuJoCo uses float64, and
its Newton/CG solver (the same algorithm, run for the model's ``iterations``) stops at
float32 precision; contact onsets (a penetration crossing zero) can amplify that.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import tempfile
import warnings
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from environments.mujoco.base import GROUP, MujocoEnv

__all__ = [
    "compare",
    "gymnasium_env",
    "health_margin",
    "one_step",
    "quiet_mujoco_warnings",
    "random_states",
    "summarize",
]

_NOT_GYM_OPTIONS = ("xml_file", "model", "max_episode_steps", "include_contact_cost")


@contextlib.contextmanager
def quiet_mujoco_warnings() -> Iterator[None]:
    """MuJoCo's C warnings become Python warnings (not lines of a ``MUJOCO_LOG.TXT`` in
    the working folder) while inside; half_cheetah.xml's deprecated ``settotalmass``,
    which still works, is ignored."""
    import mujoco

    previous = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(lambda msg: warnings.warn(f"MuJoCo: {msg}", stacklevel=1))
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*settotalmass.*")
            yield
    finally:
        mujoco.set_mju_user_warning(previous)


def gymnasium_env(env: MujocoEnv, params: Any = None) -> Any:
    """Gymnasium's ``<Name>-v5`` (unwrapped) on ``env.model_xml()`` with ``env``'s
    constructor options and ``params`` (default: ``env.default_params``); an env without
    the contact cost (``include_contact_cost=False``) gets ``contact_cost_weight=0``."""
    import gymnasium

    params = env.default_params if params is None else params
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(env):
        if f.name not in _NOT_GYM_OPTIONS:
            kwargs[f.name] = getattr(env, f.name)
    for f in dataclasses.fields(params):
        v = getattr(params, f.name)
        kwargs[f.name] = tuple(float(x) for x in v) if isinstance(v, tuple) else v
        if isinstance(v, bool | np.bool_):
            kwargs[f.name] = bool(v)
    if not getattr(env, "include_contact_cost", True):  # v5's way: a zero weight
        kwargs["contact_cost_weight"] = 0.0
    with tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False) as f:
        f.write(env.model_xml())
    try:
        with quiet_mujoco_warnings():
            ref = gymnasium.make(f"{env.name}-v5", xml_file=f.name, **kwargs).unwrapped
    finally:
        os.unlink(f.name)
    ref.reset(seed=0)
    return ref


def random_states(ref: Any, num_states: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(qpos [num_states, Q], qvel [num_states, V])`` float64: the states a random-action
    walk of Gymnasium's env ``ref`` visits (reset where an episode ends or after 1000
    steps), for `compare` to start from."""
    rng = np.random.default_rng(seed)
    low, high = ref.action_space.low, ref.action_space.high
    ref.reset(seed=seed)
    qpos, qvel, t = [], [], 0
    while len(qpos) < num_states:
        _, _, term, _, _ = ref.step(rng.uniform(low, high))
        qpos.append(ref.data.qpos.copy())
        qvel.append(ref.data.qvel.copy())
        t += 1
        if term or t >= 1000:
            ref.reset(seed=int(rng.integers(2**31)))
            t = 0
    return np.asarray(qpos), np.asarray(qvel)


def health_margin(env: MujocoEnv, params: Any, qpos: np.ndarray, qvel: np.ndarray) -> float:
    """How far the values the health test compares (height, angle, state) lie from the
    nearest finite bound of their ranges (``inf`` for an env without a health test)."""
    ranges = {
        "Humanoid": [("healthy_z_range", qpos[2:3])],
        "Ant": [("healthy_z_range", qpos[2:3])],
        "Hopper": [
            ("healthy_z_range", qpos[1:2]),
            ("healthy_angle_range", qpos[2:3]),
            ("healthy_state_range", np.concatenate([qpos, qvel])[2:]),
        ],
        "Walker2d": [("healthy_z_range", qpos[1:2]), ("healthy_angle_range", qpos[2:3])],
    }.get(env.name, [])
    margin = np.inf
    for field, values in ranges:
        for bound in getattr(params, field):
            if np.isfinite(bound):
                margin = min(margin, float(np.min(np.abs(np.asarray(values) - bound))))
    return margin


@functools.lru_cache(maxsize=8)
def one_step(env: MujocoEnv) -> Any:
    """``jit`` of ``f`` mapped over a leading state axis, with ``f(qpos [Q], qvel [V],
    action [U], params) -> (obs [O], extras, terminated [])``: ``env``'s step from
    `MujocoEnv.state_from` (one compiled program per env, shared by every caller).

    The states are stepped one after another (`lax.map`), not vmapped: batched, the
    solver's Cholesky factorisations become jaxlib's batched CPU kernel, and two of them
    side by side can deadlock XLA's CPU thread pool on a machine with few cores."""

    def one(qpos, qvel, action, params):
        state = env.state_from(qpos, qvel)
        _, ts = env.step(jax.random.key(0), state, action[None], params)
        return ts.obs[GROUP][0], ts.extras, ts.terminated[GROUP][0]

    def mapped(qpos, qvel, action, params):
        return jax.lax.map(lambda x: one(*x, params), (qpos, qvel, action))

    return jax.jit(mapped)


def compare(
    env: MujocoEnv,
    qpos: np.ndarray,
    qvel: np.ndarray,
    actions: np.ndarray,
    params: Any = None,
    ref: Any = None,
) -> dict[str, Any]:
    """Steps ``env`` and Gymnasium's reference once from each ``(qpos [N, Q], qvel [N, V])``
    with ``actions [N, U]``.

    Returns ``[N]`` arrays of differences: ``obs/<part>`` for each part of the
    observation (`MujocoEnv.obs_parts`), the largest ``|ours - ref| / (1 + |ref|)`` of its
    entries; ``reward`` and each ``reward_*`` term, ``|ours - ref|``. Also
    ``terminated_mismatch``, the indices where the flags differ, and
    ``terminated_mismatch_margin``, the largest `health_margin` of the reference's
    state among them (a flag may differ only where a value sits at a threshold)."""
    import mujoco

    params = env.default_params if params is None else params
    ref = gymnasium_env(env, params) if ref is None else ref
    obs, extras, term = jax.device_get(
        one_step(env)(
            jnp.asarray(qpos, jnp.float32),
            jnp.asarray(qvel, jnp.float32),
            jnp.asarray(actions, jnp.float32),
            params,
        )
    )
    keys = [k for k in extras if k.startswith("reward_")]
    n = len(qpos)
    ref_obs, ref_rew = np.zeros(obs.shape), np.zeros(n)
    ref_terms = {k: np.zeros(n) for k in keys}
    mismatch, margins = [], []
    for i in range(n):
        mujoco.mj_resetData(ref.model, ref.data)
        ref.set_state(qpos[i], qvel[i])
        ref_obs[i], ref_rew[i], t, _, info = ref.step(np.asarray(actions[i], np.float64))
        for k in keys:
            ref_terms[k][i] = info[k]
        if bool(t) != bool(term[i]):
            mismatch.append(i)
            margins.append(health_margin(env, params, ref.data.qpos, ref.data.qvel))
    out: dict[str, Any] = {}
    rel = np.abs(ref_obs - obs) / (1 + np.abs(ref_obs))
    at = 0
    for name, size in env.obs_parts:
        if size:
            out[f"obs/{name}"] = rel[:, at : at + size].max(axis=1)
        at += size
    out["reward"] = np.abs(ref_rew - sum(extras[k] for k in keys))
    for k in keys:
        out[k] = np.abs(ref_terms[k] - extras[k])
    out["terminated_mismatch"] = mismatch
    out["terminated_mismatch_margin"] = max(margins, default=0.0)
    return out


def summarize(out: dict[str, Any], quantiles: tuple[float, ...] = (0.5, 0.99, 1.0)) -> dict:
    """``{name: {q: quantile}}`` of `compare`'s difference arrays (``1.0``: the largest)."""
    return {
        k: {q: float(np.quantile(v, q)) for q in quantiles}
        for k, v in out.items()
        if isinstance(v, np.ndarray)
    }
