"""Wrappers around a pure `Env`: episode statistics, time limit, action repeat,
observation normalisation and auto-reset (optionally from a reset pool of start states).

Each wrapper is itself an `Env`; its state holds the wrapped env's state in
``inner``. Usual order, innermost first::

    env = AutoReset(EpisodeStats(TimeLimit(base, 200)))

For batches of environments prefer `jaxdrive.vectorize(..., auto_reset=True)`, which
resets at the batch level and computes a reset only on steps where an env ended.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxdrive.env import Env
from jaxdrive.types import TimeStep

__all__ = [
    "ActionRepeat",
    "AutoReset",
    "EpisodeStats",
    "NormalizeObservation",
    "ResetPool",
    "TimeLimit",
    "Wrapper",
    "make_reset_pool",
    "reset_fields",
    "select_tree",
]


def select_tree(pred: jax.Array, on_true: Any, on_false: Any) -> Any:
    """``jnp.where(pred, a, b)`` leaf by leaf; ``pred`` is a scalar bool."""
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)


class Wrapper(Env):
    """Delegates everything to the wrapped env; subclasses override what they change."""

    def __init__(self, env: Env):
        self._env = env

    @property
    def unwrapped(self) -> Env:
        env = self._env
        while isinstance(env, Wrapper):
            env = env._env
        return env

    @property
    def groups(self) -> tuple[str, ...]:
        return self._env.groups

    def num_agents(self, group: str) -> int:
        return self._env.num_agents(group)

    def observation_space(self, group: str):
        return self._env.observation_space(group)

    def action_space(self, group: str):
        return self._env.action_space(group)

    @property
    def default_params(self):
        return self._env.default_params

    @property
    def episode_length(self) -> int | None:
        return self._env.episode_length

    @property
    def name(self) -> str:
        return f"{type(self).__name__}<{self._env.name}>"

    #: True when this wrapper's state wraps the inner env's state in ``state.inner``.
    wraps_state = False

    def global_state(self, state, params) -> jax.Array:
        return self._env.global_state(state.inner if self.wraps_state else state, params)

    #: False for wrappers that change observations (their `observations` is not the
    #: inner env's).
    passes_observations = True

    @property
    def has_observations(self) -> bool:
        return self.passes_observations and self._env.has_observations

    @property
    def reset_by_select(self) -> bool:
        return self.has_observations and self._env.reset_by_select

    def observations(self, state, params) -> dict[str, jax.Array]:
        if not self.passes_observations:
            raise NotImplementedError(f"{self.name} does not implement observations()")
        return self._env.observations(state.inner if self.wraps_state else state, params)

    def reset_env(self, key, params):
        return self._env.reset(key, params)

    def step_env(self, key, state, actions, params):
        return self._env.step(key, state, actions, params)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") or attr == "_env":
            raise AttributeError(attr)
        return getattr(self._env, attr)


# ----------------------------------------------------------------------------------------
@struct.dataclass
class EpisodeStatsState:
    inner: Any
    episode_return: dict[str, jax.Array]  # {g: [A_g]} float32, running sum this episode
    episode_length: jax.Array  # [] int32, steps taken this episode


class EpisodeStats(Wrapper):
    """Adds running episode statistics to ``ts.extras``.

    ``extras["episode_return"]``: ``{g: [A_g]}`` the return so far, this step included;
    ``extras["episode_length"]``: ``[]`` steps so far. On a step with ``ts.done`` these
    are the finished episode's figures, so averaging them over ``done`` steps gives the
    episode statistics; auto-reset, applied outside this wrapper, zeroes them after.
    """

    wraps_state = True

    def reset_env(self, key, params):
        inner, ts = self._env.reset(key, params)
        ret = {g: jnp.zeros_like(r) for g, r in ts.reward.items()}
        length = jnp.zeros((), jnp.int32)
        ts = ts.replace(extras={**ts.extras, "episode_return": ret, "episode_length": length})
        return EpisodeStatsState(inner, ret, length), ts

    def step_env(self, key, state, actions, params):
        inner, ts = self._env.step(key, state.inner, actions, params)
        ret = {g: state.episode_return[g] + ts.reward[g] for g in ts.reward}
        length = state.episode_length + 1
        ts = ts.replace(extras={**ts.extras, "episode_return": ret, "episode_length": length})
        return EpisodeStatsState(inner, ret, length), ts


# ----------------------------------------------------------------------------------------
@struct.dataclass
class TimeLimitState:
    inner: Any
    t: jax.Array  # [] int32, steps taken this episode


class TimeLimit(Wrapper):
    """Truncates episodes after ``max_steps`` steps (active agents get ``truncated``)."""

    wraps_state = True

    def __init__(self, env: Env, max_steps: int):
        super().__init__(env)
        if int(max_steps) < 1:
            raise ValueError(f"TimeLimit needs max_steps >= 1, got {max_steps}")
        self.max_steps = int(max_steps)

    @property
    def episode_length(self) -> int:
        inner = self._env.episode_length
        return self.max_steps if inner is None else min(inner, self.max_steps)

    def reset_env(self, key, params):
        inner, ts = self._env.reset(key, params)
        return TimeLimitState(inner, jnp.zeros((), jnp.int32)), ts

    def step_env(self, key, state, actions, params):
        inner, ts = self._env.step(key, state.inner, actions, params)
        t = state.t + 1
        cut = (t >= self.max_steps) & ~ts.done
        truncated = {
            g: ts.truncated[g] | (cut & ts.active[g] & ~ts.terminated[g]) for g in ts.truncated
        }
        ts = ts.replace(truncated=truncated, done=ts.done | cut)
        return TimeLimitState(inner, t), ts


# ----------------------------------------------------------------------------------------
class ActionRepeat(Wrapper):
    """Applies each action ``repeat`` times: one step is up to ``repeat`` steps of the
    wrapped env with the same actions, stopping after the first that ends the episode.

    The timestep is that of the last inner step taken (observation, flags, extras,
    masks); its reward is the sum of the inner steps' rewards, ``Σ_{i ≤ j} r_i`` with
    ``j`` the last step taken. The state is the inner state after step ``j``. Episodes
    are ``ceil(L / repeat)`` steps long where the inner env's are ``L`` (Brax's
    ``action_repeat``; `jaxdrive.make` applies it with ``action_repeat=k``).
    """

    def __init__(self, env: Env, repeat: int):
        super().__init__(env)
        whole = (
            isinstance(repeat, numbers.Real)
            and not isinstance(repeat, bool)
            and math.isfinite(repeat)
            and repeat >= 1
            and int(repeat) == repeat
        )
        if not whole:
            raise ValueError(f"action_repeat must be an integer >= 1, got {repeat!r}")
        self.repeat = int(repeat)

    @property
    def episode_length(self) -> int | None:
        inner = self._env.episode_length
        return None if inner is None else -(-inner // self.repeat)

    @property
    def name(self) -> str:
        return f"ActionRepeat{self.repeat}<{self._env.name}>"

    def step_env(self, key, state, actions, params):
        # one inner step in the program (a scan), a zero timestep to start from
        shapes = jax.eval_shape(self._env.step, key, state, actions, params)[1]
        ts = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)

        def again(carry, k):
            state, ts, total, ended = carry
            nxt_state, nxt = self._env.step(k, state, actions, params)
            total = {g: total[g] + jnp.where(ended, 0.0, nxt.reward[g]) for g in total}
            state = select_tree(ended, state, nxt_state)
            return (state, select_tree(ended, ts, nxt), total, ended | nxt.done), None

        carry = (state, ts, ts.reward, jnp.asarray(False))
        keys = jax.random.split(key, self.repeat)
        (state, ts, total, _), _ = jax.lax.scan(again, carry, keys)
        return state, ts.replace(reward=total)


# ----------------------------------------------------------------------------------------
@struct.dataclass
class NormState:
    inner: Any
    mean: dict[str, jax.Array]  # {g: [*O_g]} running mean over agents and steps
    var: dict[str, jax.Array]  # {g: [*O_g]} running variance
    count: jax.Array  # [] float32, observations seen


class NormalizeObservation(Wrapper):
    """Normalises observations per group by running mean and variance (Welford/Chan).

    Statistics are pooled over the agents of a group and over steps, and live in the
    state, so they vmap with the env (use the batch mean across envs for a shared one).
    """

    wraps_state = True
    passes_observations = False  # normalised with statistics updated in `step`

    def __init__(self, env: Env, epsilon: float = 1e-8, clip: float = 10.0):
        super().__init__(env)
        self.epsilon = float(epsilon)
        self.clip = float(clip)

    def _update(self, state: NormState, obs: dict[str, jax.Array]) -> NormState:
        mean, var = {}, {}
        count = state.count
        for g, o in obs.items():
            o = o.reshape(-1, *o.shape[1:]).astype(jnp.float32)
            n = o.shape[0]
            bm, bv = o.mean(0), o.var(0)
            tot = count + n
            delta = bm - state.mean[g]
            mean[g] = state.mean[g] + delta * n / tot
            m2 = state.var[g] * count + bv * n + delta**2 * count * n / tot
            var[g] = m2 / tot
        n0 = next(iter(obs.values())).shape[0]
        return state.replace(mean=mean, var=var, count=count + n0)

    def _norm(self, state: NormState, obs):
        return {
            g: jnp.clip(
                (o - state.mean[g]) / jnp.sqrt(state.var[g] + self.epsilon), -self.clip, self.clip
            )
            for g, o in obs.items()
        }

    def reset_env(self, key, params):
        inner, ts = self._env.reset(key, params)
        mean = {g: jnp.zeros(o.shape[1:], jnp.float32) for g, o in ts.obs.items()}
        var = {g: jnp.ones(o.shape[1:], jnp.float32) for g, o in ts.obs.items()}
        st = self._update(NormState(inner, mean, var, jnp.zeros((), jnp.float32)), ts.obs)
        return st, ts.replace(obs=self._norm(st, ts.obs))

    def step_env(self, key, state, actions, params):
        inner, ts = self._env.step(key, state.inner, actions, params)
        st = self._update(state.replace(inner=inner), ts.obs)
        return st, ts.replace(obs=self._norm(st, ts.obs))


# ----------------------------------------------------------------------------------------
@struct.dataclass
class ResetPool:
    """``P`` start states and their first timesteps, stacked on a leading axis."""

    state: Any  # env state, every leaf [P, ...]
    timestep: TimeStep  # every leaf [P, ...]

    @property
    def size(self) -> int:
        return jax.tree.leaves(self.timestep.done)[0].shape[0]

    def sample(self, key: jax.Array) -> tuple[Any, TimeStep]:
        """One uniformly drawn ``(state, timestep)`` of the pool."""
        i = jax.random.randint(key, (), 0, self.size)
        return jax.tree.map(lambda x: x[i], (self.state, self.timestep))


def make_reset_pool(env: Env, key: jax.Array, size: int, params=None) -> ResetPool:
    """Draws ``size`` start states with ``env.reset`` (vmapped) into a `ResetPool`.

    A pool of size 1 is a fixed start, as WarpDrive uses for every replica.
    """
    if int(size) < 1:
        raise ValueError(f"a reset pool needs size >= 1, got {size}")
    params = env.default_params if params is None else params
    keys = jax.random.split(key, int(size))
    state, ts = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    return ResetPool(state=state, timestep=ts)


class AutoReset(Wrapper):
    """Starts a new episode when one ends, inside `step`, for a single env.

    On a step with ``ts.done``, the returned state and ``ts.obs``/``ts.active`` (and
    ``ts.action_mask``, where the env gives masks) are the new episode's; reward,
    terminated, truncated, done and extras stay those of the finished step. With
    ``keep_final_obs`` the finished episode's last observation is kept in
    ``extras["final_obs"]`` (for bootstrapping truncated episodes).
    Resets draw from ``reset_pool`` when one is given, else call ``env.reset``.
    Under `jax.vmap` both branches run every step; `jaxdrive.vectorize` avoids that.
    """

    def __init__(self, env: Env, reset_pool: ResetPool | None = None, keep_final_obs=False):
        super().__init__(env)
        self.reset_pool = reset_pool
        self.keep_final_obs = bool(keep_final_obs)

    def _fresh(self, key, params):
        if self.reset_pool is not None:
            return self.reset_pool.sample(key)
        return self._env.reset(key, params)

    def reset_env(self, key, params):
        state, ts = self._fresh(key, params)
        if self.keep_final_obs:
            ts = ts.replace(extras={**ts.extras, "final_obs": ts.obs})
        return state, ts

    def step_env(self, key, state, actions, params):
        k_step, k_reset = jax.random.split(key)
        state, ts = self._env.step(k_step, state, actions, params)
        r_state, r_ts = self._fresh(k_reset, params)
        return merge_reset(ts.done, state, ts, r_state, r_ts, self.keep_final_obs)


def reset_fields(done: jax.Array, r_ts: TimeStep, ts: TimeStep) -> dict[str, Any]:
    """The per-agent fields an auto-reset takes from the reset's timestep ``r_ts`` where
    ``done`` (scalar), besides the observations: ``{"active": ...}``, plus
    ``"action_mask"`` where the env gives masks (for ``ts.replace(**...)``)."""
    out = {"active": select_tree(done, r_ts.active, ts.active)}
    if ts.action_mask is not None:
        out["action_mask"] = select_tree(done, r_ts.action_mask, ts.action_mask)
    return out


def merge_reset(done, state, ts: TimeStep, r_state, r_ts: TimeStep, keep_final_obs: bool):
    """Where ``done`` (scalar), takes the reset state, obs, active flags and action
    masks."""
    extras = dict(ts.extras)
    if keep_final_obs:
        extras["final_obs"] = ts.obs
    new_state = select_tree(done, r_state, state)
    ts = ts.replace(
        obs=select_tree(done, r_ts.obs, ts.obs), extras=extras, **reset_fields(done, r_ts, ts)
    )
    return new_state, ts
