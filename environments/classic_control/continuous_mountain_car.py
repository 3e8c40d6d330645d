"""MountainCarContinuous-v0 as in Gymnasium 1.x.

The mountain car with a continuous push ``a`` in ``[-1, 1]`` (clipped there for the
dynamics). Reaching ``position >= 0.45`` (with ``velocity >= goal_velocity``)
terminates the episode and pays +100; every step costs ``0.1 * a**2``, computed, as
in Gymnasium, from the action *before* clipping. Truncated after 999 steps.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from environments.classic_control import ClassicControlEnv, single_agent_timestep
from jaxdrive.spaces import Box
from jaxdrive.types import EnvParams, EnvState, TimeStep

__all__ = [
    "MountainCarContinuous",
    "MountainCarContinuousParams",
    "MountainCarContinuousState",
]


@struct.dataclass
class MountainCarContinuousParams(EnvParams):
    """Physics constants of MountainCarContinuous (Gymnasium's defaults)."""

    min_action: float = -1.0
    max_action: float = 1.0
    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float = 0.45
    goal_velocity: float = 0.0
    power: float = 0.0015
    gravity: float = 0.0025
    goal_reward: float = 100.0
    action_cost: float = 0.1  # reward -= action_cost * action**2 (unclipped action)
    init_low: float = -0.6  # reset: position ~ U[init_low, init_high), velocity 0
    init_high: float = -0.4


@struct.dataclass
class MountainCarContinuousState(EnvState):
    """Continuous mountain-car state; every field is a scalar."""

    position: jax.Array  # [] float32 in [min_position, max_position]
    velocity: jax.Array  # [] float32 in [-max_speed, max_speed]
    time: jax.Array  # [] int32 steps taken in this episode


def _obs(s: MountainCarContinuousState) -> jax.Array:
    """[2] float32 ``(position, velocity)``."""
    return jnp.stack([s.position, s.velocity]).astype(jnp.float32)


@dataclasses.dataclass(frozen=True, repr=False)
class MountainCarContinuous(
    ClassicControlEnv[MountainCarContinuousState, MountainCarContinuousParams]
):
    """MountainCarContinuous-v0: obs ``[1, 2]`` float32, action ``[1, 1]`` float32.

    Args:
      max_episode_steps: the built-in time limit (Gymnasium's registered 999).
    """

    max_episode_steps: int = 999

    @property
    def default_params(self) -> MountainCarContinuousParams:
        return MountainCarContinuousParams()

    def _observation_space(self) -> Box:
        p = self.default_params
        return Box([p.min_position, -p.max_speed], [p.max_position, p.max_speed], (2,))

    def _action_space(self) -> Box:
        p = self.default_params
        return Box(p.min_action, p.max_action, (1,))

    def reset_env(
        self, key: jax.Array, params: MountainCarContinuousParams
    ) -> tuple[MountainCarContinuousState, TimeStep]:
        """Position uniform in ``[init_low, init_high)``, velocity 0."""
        position = jax.random.uniform(key, (), jnp.float32, params.init_low, params.init_high)
        state = MountainCarContinuousState(
            position=position,
            velocity=jnp.zeros((), jnp.float32),
            time=jnp.zeros((), jnp.int32),
        )
        return state, TimeStep.restart({"agent": _obs(state)[None]})

    def step_env(
        self,
        key: jax.Array,
        state: MountainCarContinuousState,
        actions: dict[str, jax.Array],
        params: MountainCarContinuousParams,
    ) -> tuple[MountainCarContinuousState, TimeStep]:
        """One step; ``actions["agent"]``: [1, 1] float32 push."""
        del key
        p = params
        action = actions["agent"][0, 0].astype(jnp.float32)
        force = jnp.clip(action, p.min_action, p.max_action)
        velocity = state.velocity + force * p.power - p.gravity * jnp.cos(3 * state.position)
        velocity = jnp.clip(velocity, -p.max_speed, p.max_speed)
        position = jnp.clip(state.position + velocity, p.min_position, p.max_position)
        velocity = jnp.where((position == p.min_position) & (velocity < 0), 0.0, velocity)
        new_state = MountainCarContinuousState(
            position=position.astype(jnp.float32),
            velocity=velocity.astype(jnp.float32),
            time=state.time + 1,
        )
        terminated = (new_state.position >= p.goal_position) & (
            new_state.velocity >= p.goal_velocity
        )
        reward = jnp.where(terminated, p.goal_reward, 0.0) - p.action_cost * action**2
        ts = single_agent_timestep(
            _obs(new_state), reward, terminated, new_state.time, self.max_episode_steps
        )
        return new_state, ts

    def observations(
        self, state: MountainCarContinuousState, params: MountainCarContinuousParams
    ) -> dict[str, jax.Array]:
        """``{"agent": [1, O]}`` float32, the observation `reset`/`step` return for
        ``state`` (lets `jaxdrive.vectorize` auto-reset by a select, without a branch)."""
        return {"agent": _obs(state).astype(jnp.float32)[None]}

    def global_state(
        self, state: MountainCarContinuousState, params: MountainCarContinuousParams
    ) -> jax.Array:
        """[2] float32 ``(position, velocity)``."""
        return _obs(state)
