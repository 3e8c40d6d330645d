"""Gymnasium's classic-control tasks as single-agent jaxdrive environments.

Each env has one group, ``"agent"``, with one agent, so per-group arrays carry a
leading agent axis of size 1: ``ts.obs["agent"]: [1, O]``. The time limit of
Gymnasium's registered version is built in (``env.episode_length``); at that step
the agent is truncated (unless it terminated) and ``done`` is True.

- ``CartPole-v1`` (`CartPole`): obs ``Box[4]``, action ``Discrete(2)``, limit 500.
- ``Acrobot-v1`` (`Acrobot`): obs ``Box[6]``, action ``Discrete(3)``, limit 500.
- ``MountainCar-v0`` (`MountainCar`): obs ``Box[2]``, action ``Discrete(3)``, limit 200.
- ``MountainCarContinuous-v0`` (`MountainCarContinuous`): obs ``Box[2]``,
  action ``Box(-1, 1, (1,))``, limit 999.
- ``Pendulum-v1`` (`Pendulum`): obs ``Box[3]``, action ``Box(-2, 2, (1,))``, limit 200.

Example:
    >>> import jax, jaxdrive
    >>> env, params = jaxdrive.make("Pendulum-v1")
    >>> state, ts = env.reset(jax.random.key(0), params)
    >>> ts.obs["agent"].shape, env.episode_length
    ((1, 3), 200)

The classes are imported lazily (on first attribute access), so importing this
package builds nothing.
"""

from __future__ import annotations

import importlib
from typing import Any, Generic, TypeVar

import jax
import jax.numpy as jnp

from jaxdrive.env import Env
from jaxdrive.spaces import Space
from jaxdrive.types import EnvParams, TimeStep

__all__ = [
    "Acrobot",
    "CartPole",
    "ClassicControlEnv",
    "MountainCar",
    "MountainCarContinuous",
    "Pendulum",
    "single_agent_timestep",
]

GROUP = "agent"

_LAZY = {
    "CartPole": "environments.classic_control.cartpole",
    "Acrobot": "environments.classic_control.acrobot",
    "MountainCar": "environments.classic_control.mountain_car",
    "MountainCarContinuous": "environments.classic_control.continuous_mountain_car",
    "Pendulum": "environments.classic_control.pendulum",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


StateT = TypeVar("StateT")
ParamsT = TypeVar("ParamsT", bound=EnvParams)


def single_agent_timestep(
    obs: jax.Array,
    reward: jax.Array,
    terminated: jax.Array,
    time: jax.Array,
    limit: int,
) -> TimeStep:
    """Builds the `TimeStep` of a one-agent group ``"agent"``.

    ``obs``: [O] float32; ``reward``: [] float32; ``terminated``: [] bool; ``time``: []
    int32 steps taken so far (after this step). Truncated is ``time >= limit`` and not
    terminated; ``done`` is either. Returns obs ``[1, O]`` and ``[1]`` per-agent arrays.
    """
    terminated = jnp.asarray(terminated, bool)
    out_of_time = time >= limit
    truncated = out_of_time & ~terminated
    return TimeStep(
        obs={GROUP: obs.astype(jnp.float32)[None]},
        reward={GROUP: jnp.reshape(reward, (1,)).astype(jnp.float32)},
        terminated={GROUP: jnp.reshape(terminated, (1,))},
        truncated={GROUP: jnp.reshape(truncated, (1,))},
        active={GROUP: jnp.ones((1,), bool)},
        done=terminated | out_of_time,
    )


class ClassicControlEnv(Env[StateT, ParamsT], Generic[StateT, ParamsT]):
    """Shared plumbing of the single-agent classic-control envs.

    Subclasses are frozen dataclasses with a ``max_episode_steps: int`` field (the
    built-in time limit) and define ``_observation_space`` / ``_action_space``.
    Spaces are built from the *default* params: changing bounds such as
    ``max_speed`` in the params does not change the spaces.
    """

    max_episode_steps: int

    def __post_init__(self) -> None:
        steps = self.max_episode_steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(
                f"{type(self).__name__}: max_episode_steps must be an int >= 1, got {steps!r}"
            )

    def _observation_space(self) -> Space:
        raise NotImplementedError

    def _action_space(self) -> Space:
        raise NotImplementedError

    @property
    def reset_by_select(self) -> bool:
        # Auto-reset by branch: a classic-control reset is a few scalar draws, cheaper to
        # branch on than to compute for every env each step; `reset_mode="select"` in
        # `jaxdrive.vectorize` still forces the other way (docs/performance.md).
        return False

    def _check_group(self, group: str) -> None:
        if group != GROUP:
            raise ValueError(f"{self.name} has only the group {GROUP!r}, got {group!r}")

    @property
    def groups(self) -> tuple[str, ...]:
        return (GROUP,)

    def num_agents(self, group: str) -> int:
        self._check_group(group)
        return 1

    def observation_space(self, group: str) -> Space:
        self._check_group(group)
        return self._observation_space()

    def action_space(self, group: str) -> Space:
        self._check_group(group)
        return self._action_space()

    @property
    def episode_length(self) -> int:
        return self.max_episode_steps
