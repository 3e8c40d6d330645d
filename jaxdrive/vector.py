"""Batches of environments (`vectorize`) and jitted rollouts (`rollout`).

Example:
    >>> import jax, jaxdrive
    >>> env, params = jaxdrive.make("CartPole-v1")
    >>> venv = jaxdrive.vectorize(env, num_envs=8)
    >>> state, ts = venv.reset(jax.random.key(0), params)
    >>> ts.obs["agent"].shape
    (8, 1, 4)
    >>> out = jaxdrive.rollout(env, jaxdrive.random_policy(env), jax.random.key(1),
    ...                        params, num_envs=8, num_steps=16)
    >>> out.timesteps.reward["agent"].shape
    (16, 8, 1)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxdrive.env import Env
from jaxdrive.types import TimeStep
from jaxdrive.wrappers import ResetPool, merge_reset, reset_fields, select_tree

__all__ = [
    "RolloutResult",
    "VecEnv",
    "group_keys",
    "random_policy",
    "rollout",
    "split_step_key",
    "vectorize",
]

PolicyFn = Callable[[jax.Array, dict[str, jax.Array]], dict[str, jax.Array]]


def _check_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | jnp.integer):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if int(value) < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


class VecEnv:
    """``num_envs`` copies of ``env`` stepped together with `jax.vmap`.

    Every array gains a leading env axis ``N``: ``ts.obs[g]: [N, A_g, *O_g]``,
    ``actions[g]: [N, A_g, *act_shape_g]``. Params are shared (not batched) unless
    ``params_axis=0``. With ``auto_reset`` an env whose episode ended starts a new one
    inside `step` (from ``reset_pool`` if given). Two ways, same results:

    * envs with `Env.reset_by_select` (Tag), unless ``keep_final_obs``: a fresh start
      state is drawn for every env, selected where the episode ended, and the
      observations are built once from the selected states (the step's own and the
      reset's observations are never computed: XLA drops them as unused);
    * otherwise the reset is computed under a `lax.cond` on "any env done", so steps
      where no episode ends skip it (but pay a copy of the timestep out of the branch).

    ``reset_mode``: ``"auto"`` (the first way where `Env.reset_by_select`, or where the
    env has `Env.observations` and ``num_envs <= select_reset_max_envs``: at small
    batches resetting every env costs less than the branch's device-to-host read of its
    predicate; else the second), ``"select"`` (the first way; needs `Env.observations`)
    or ``"cond"``. ``select_reset_max_envs`` (default 2048) is part of the batch's
    static description, like ``num_envs``.
    """

    def __init__(
        self,
        env: Env,
        num_envs: int,
        *,
        auto_reset: bool = True,
        reset_pool: ResetPool | None = None,
        keep_final_obs: bool = False,
        params_axis: int | None = None,
        reset_mode: str = "auto",
        select_reset_max_envs: int = 2048,
    ):
        if reset_mode not in ("auto", "select", "cond"):
            raise ValueError(f"reset_mode must be 'auto', 'select' or 'cond', got {reset_mode!r}")
        if reset_mode == "select" and not env.has_observations:
            raise ValueError(
                f"reset_mode='select' needs an env with observations(state, params); "
                f"{env.name} has none"
            )
        if reset_mode == "select" and keep_final_obs:
            raise ValueError("reset_mode='select' cannot keep_final_obs; use 'cond' or 'auto'")
        self.reset_mode = reset_mode
        self.select_reset_max_envs = int(select_reset_max_envs)
        self.env = env
        self.num_envs = _check_count("num_envs", num_envs)
        self.auto_reset = bool(auto_reset)
        self.reset_pool = reset_pool
        self.keep_final_obs = bool(keep_final_obs)
        self.params_axis = params_axis

    # static description, forwarded
    @property
    def groups(self) -> tuple[str, ...]:
        return self.env.groups

    def num_agents(self, group: str) -> int:
        return self.env.num_agents(group)

    def observation_space(self, group: str):
        return self.env.observation_space(group)

    def action_space(self, group: str):
        return self.env.action_space(group)

    @property
    def default_params(self):
        return self.env.default_params

    def _single_reset(self, key, params):
        if self.reset_pool is not None:
            state, ts = self.reset_pool.sample(key)
        else:
            state, ts = self.env.reset(key, params)
        if self.keep_final_obs:
            ts = ts.replace(extras={**ts.extras, "final_obs": ts.obs})
        return state, ts

    def reset(self, key: jax.Array, params=None) -> tuple[Any, TimeStep]:
        """Resets all envs with independent keys; returns batched ``(state, ts)``."""
        params = self.env.default_params if params is None else params
        keys = jax.random.split(key, self.num_envs)
        return jax.vmap(self._single_reset, in_axes=(0, self.params_axis))(keys, params)

    def step(self, key: jax.Array, state: Any, actions: Any, params=None) -> tuple[Any, TimeStep]:
        """Steps all envs; ``actions[g]: [N, A_g, *act_shape_g]``."""
        params = self.env.default_params if params is None else params
        if not isinstance(actions, dict) and len(self.groups) == 1:
            actions = {self.groups[0]: actions}
        if isinstance(actions, dict):
            for g, a in actions.items():
                if getattr(a, "ndim", 0) < 1 or a.shape[0] != self.num_envs:
                    raise ValueError(
                        f"actions['{g}'] must have a leading env axis of size {self.num_envs}, "
                        f"got shape {getattr(a, 'shape', None)}"
                    )
        keys, r_keys = split_step_key(key, self.num_envs)
        keep = self.keep_final_obs
        select = self.reset_mode == "select" or (
            self.reset_mode == "auto"
            and not keep
            and (
                self.env.reset_by_select
                or (self.env.has_observations and self.num_envs <= self.select_reset_max_envs)
            )
        )
        if self.params_axis is None and (
            not self.auto_reset or (select and self.reset_pool is None)
        ):
            # the env's own batched step, where it has one (`Env.vector_step`)
            out = self.env.vector_step(
                r_keys if self.auto_reset else None, state, actions, params, step_key=key
            )
            if out is not None:
                return out
        state, ts = jax.vmap(self.env.step, in_axes=(0, 0, 0, self.params_axis))(
            keys, state, actions, params
        )
        if not self.auto_reset:
            return state, ts
        if select:
            r_state, r_ts = jax.vmap(self._single_reset, in_axes=(0, self.params_axis))(
                r_keys, params
            )
            state = jax.vmap(select_tree)(ts.done, r_state, state)
            fields = jax.vmap(reset_fields)(ts.done, r_ts, ts)  # active, action_mask
            obs = jax.vmap(self.env.observations, in_axes=(0, self.params_axis))(state, params)
            return state, ts.replace(obs=obs, **fields)

        def with_reset(operand):
            state, ts = operand
            r_state, r_ts = jax.vmap(self._single_reset, in_axes=(0, self.params_axis))(
                r_keys, params
            )
            return jax.vmap(lambda d, s, t, rs, rt: merge_reset(d, s, t, rs, rt, keep))(
                ts.done, state, ts, r_state, r_ts
            )

        def without_reset(operand):
            state, ts = operand
            if keep:
                ts = ts.replace(extras={**ts.extras, "final_obs": ts.obs})
            return state, ts

        return jax.lax.cond(jnp.any(ts.done), with_reset, without_reset, (state, ts))


def vectorize(env: Env, num_envs: int, **kwargs: Any) -> VecEnv:
    """``num_envs`` copies of ``env`` as a `VecEnv` (see its docstring for options)."""
    return VecEnv(env, num_envs, **kwargs)


def split_step_key(key: jax.Array, num_envs: int) -> tuple[jax.Array, jax.Array]:
    """``(step_keys [N], reset_keys [N])``: the per-env keys `VecEnv.step` gives each
    env's ``step`` and, with auto-reset, its reset; one split of ``key`` into ``[2, N]``
    (no scalar split first). Row ``r`` env ``e`` is element ``r·N + e`` of that split."""
    keys = jax.random.split(key, (2, num_envs))
    return keys[0], keys[1]


@functools.lru_cache(maxsize=64)
def random_policy(env: Env) -> PolicyFn:
    """A policy drawing uniform actions: ``(key, obs {g: [N, A_g, ...]}) -> actions``
    ``{g: [N, A_g, *act_shape_g]}``, each group's by its action space's ``sample``.
    One key per group: split from ``key`` (one key), or ``key`` itself when it is a typed
    key array of ``len(env.groups)`` keys, already split (in a scan, split them for
    every step beforehand: no split per step). Cached per env, so a jitted caller that
    takes it as a static argument compiles once.
    """

    def policy(key: jax.Array, obs: dict[str, jax.Array]) -> dict[str, jax.Array]:
        n = next(iter(obs.values())).shape[0]
        return {
            g: env.action_space(g).sample(k, (n, env.num_agents(g)))
            for g, k in zip(env.groups, group_keys(key, len(env.groups)), strict=True)
        }

    return policy


def group_keys(key: jax.Array, num_groups: int) -> list[jax.Array]:
    """``num_groups`` keys from ``key``: ``key`` itself for one group, a typed ``[G]``
    key array's rows as given, else a split of ``key`` (raises on other shapes)."""
    typed = jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
    if typed and key.ndim == 1 and key.shape[0] == num_groups:  # one key per group, given
        return [key[i] for i in range(num_groups)]
    if typed and key.ndim != 0:
        raise ValueError(
            f"random_policy needs one key or {num_groups} keys (one per group), got {key.shape}"
        )
    return [key] if num_groups == 1 else list(jax.random.split(key, num_groups))


@struct.dataclass
class RolloutResult:
    """A rollout of ``T`` steps of ``N`` envs.

    first: `TimeStep` after reset, leaves ``[N, ...]``.
    actions: ``{g: [T, N, A_g, *act_shape_g]}``; ``actions[t]`` was taken on the obs of
      step ``t − 1`` (``first`` for ``t = 0``).
    timesteps: `TimeStep` leaves ``[T, N, ...]``, the result of each step.
    state: the batched env state after the last step.
    """

    first: TimeStep
    actions: dict[str, jax.Array]
    timesteps: TimeStep
    state: Any


def rollout(
    env: Env,
    policy_fn: PolicyFn,
    key: jax.Array,
    params: Any = None,
    num_envs: int = 1,
    num_steps: int = 1,
    *,
    auto_reset: bool = True,
    reset_pool: ResetPool | None = None,
) -> RolloutResult:
    """Resets ``num_envs`` envs and steps them ``num_steps`` times under one jitted scan.

    ``policy_fn(key, obs)`` maps ``{g: [N, A_g, *O_g]}`` to ``{g: [N, A_g, *act]}``.
    """
    num_envs = _check_count("num_envs", num_envs)
    num_steps = _check_count("num_steps", num_steps)
    params = env.default_params if params is None else params
    return _rollout_jit(
        env, policy_fn, num_envs, num_steps, bool(auto_reset), key, params, reset_pool
    )


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3, 4))
def _rollout_jit(env, policy_fn, num_envs, num_steps, auto_reset, key, params, reset_pool):
    venv = VecEnv(env, num_envs, auto_reset=auto_reset, reset_pool=reset_pool)
    k_reset, k_run = jax.random.split(key)
    state, ts = venv.reset(k_reset, params)

    def body(carry, k):
        state, ts = carry
        k_act, k_env = jax.random.split(k)
        actions = policy_fn(k_act, ts.obs)
        state, ts_next = venv.step(k_env, state, actions, params)
        return (state, ts_next), (actions, ts_next)

    (state, _), (actions, timesteps) = jax.lax.scan(
        body, (state, ts), jax.random.split(k_run, num_steps)
    )
    return RolloutResult(first=ts, actions=actions, timesteps=timesteps, state=state)
