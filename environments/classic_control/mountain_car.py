"""MountainCar-v0 (Moore 1990) as in Gymnasium 1.x.

An under-powered car in a valley pushes left, not at all, or right (actions 0, 1,
2) to reach the flag at ``position >= 0.5`` (with ``velocity >= goal_velocity``),
which terminates the episode. Reward -1 every step. Velocity is clipped to
``±0.07`` and position to ``[-1.2, 0.6]``; hitting the left wall stops the car.
Truncated after 200 steps.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from environments.classic_control import ClassicControlEnv, single_agent_timestep
from jaxdrive.spaces import Box, Discrete
from jaxdrive.types import EnvParams, EnvState, TimeStep

__all__ = ["MountainCar", "MountainCarParams", "MountainCarState"]


@struct.dataclass
class MountainCarParams(EnvParams):
    """Physics constants of MountainCar (Gymnasium's defaults)."""

    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float = 0.5
    goal_velocity: float = 0.0
    force: float = 0.001
    gravity: float = 0.0025
    init_low: float = -0.6  # reset: position ~ U[init_low, init_high), velocity 0
    init_high: float = -0.4


@struct.dataclass
class MountainCarState(EnvState):
    """Mountain-car state; every field is a scalar."""

    position: jax.Array  # [] float32 in [min_position, max_position]
    velocity: jax.Array  # [] float32 in [-max_speed, max_speed]
    time: jax.Array  # [] int32 steps taken in this episode


def _obs(s: MountainCarState) -> jax.Array:
    """[2] float32 ``(position, velocity)``."""
    return jnp.stack([s.position, s.velocity]).astype(jnp.float32)


@dataclasses.dataclass(frozen=True, repr=False)
class MountainCar(ClassicControlEnv[MountainCarState, MountainCarParams]):
    """MountainCar-v0: obs ``[1, 2]`` float32, action ``[1]`` int32 in ``{0, 1, 2}``.

    Args:
      max_episode_steps: the built-in time limit (Gymnasium's registered 200).
    """

    max_episode_steps: int = 200

    @property
    def default_params(self) -> MountainCarParams:
        return MountainCarParams()

    def _observation_space(self) -> Box:
        p = self.default_params
        return Box([p.min_position, -p.max_speed], [p.max_position, p.max_speed], (2,))

    def _action_space(self) -> Discrete:
        return Discrete(3)

    def reset_env(
        self, key: jax.Array, params: MountainCarParams
    ) -> tuple[MountainCarState, TimeStep]:
        """Position uniform in ``[init_low, init_high)``, velocity 0."""
        position = jax.random.uniform(key, (), jnp.float32, params.init_low, params.init_high)
        state = MountainCarState(
            position=position,
            velocity=jnp.zeros((), jnp.float32),
            time=jnp.zeros((), jnp.int32),
        )
        return state, TimeStep.restart({"agent": _obs(state)[None]})

    def step_env(
        self,
        key: jax.Array,
        state: MountainCarState,
        actions: dict[str, jax.Array],
        params: MountainCarParams,
    ) -> tuple[MountainCarState, TimeStep]:
        """One step; ``actions["agent"]``: [1] int32 (push = action - 1)."""
        del key
        p = params
        push = actions["agent"][0].astype(jnp.float32) - 1.0
        velocity = state.velocity + push * p.force + jnp.cos(3 * state.position) * (-p.gravity)
        velocity = jnp.clip(velocity, -p.max_speed, p.max_speed)
        position = jnp.clip(state.position + velocity, p.min_position, p.max_position)
        velocity = jnp.where((position == p.min_position) & (velocity < 0), 0.0, velocity)
        new_state = MountainCarState(
            position=position.astype(jnp.float32),
            velocity=velocity.astype(jnp.float32),
            time=state.time + 1,
        )
        terminated = (new_state.position >= p.goal_position) & (
            new_state.velocity >= p.goal_velocity
        )
        reward = jnp.full((), -1.0, jnp.float32)
        ts = single_agent_timestep(
            _obs(new_state), reward, terminated, new_state.time, self.max_episode_steps
        )
        return new_state, ts

    def observations(
        self, state: MountainCarState, params: MountainCarParams
    ) -> dict[str, jax.Array]:
        """``{"agent": [1, O]}`` float32, the observation `reset`/`step` return for
        ``state`` (lets `jaxdrive.vectorize` auto-reset by a select, without a branch)."""
        return {"agent": _obs(state).astype(jnp.float32)[None]}

    def global_state(self, state: MountainCarState, params: MountainCarParams) -> jax.Array:
        """[2] float32 ``(position, velocity)``."""
        return _obs(state)
