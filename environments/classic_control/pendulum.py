"""Pendulum-v1 as in Gymnasium 1.x.

Swing a pendulum up and keep it upright with a torque ``u`` clipped to ``[-2, 2]``.
Reward ``-(normalize(theta)**2 + 0.1 * theta_dot**2 + 0.001 * u**2)`` with the angle
normalised into ``[-pi, pi)`` (the state's angle itself is never wrapped). Never
terminates; truncated after 200 steps.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from flax import struct

from environments.classic_control import ClassicControlEnv, single_agent_timestep
from jaxdrive.spaces import Box
from jaxdrive.types import EnvParams, EnvState, TimeStep

__all__ = ["Pendulum", "PendulumParams", "PendulumState", "angle_normalize"]


@struct.dataclass
class PendulumParams(EnvParams):
    """Physics constants of Pendulum (Gymnasium's defaults)."""

    max_speed: float = 8.0
    max_torque: float = 2.0
    dt: float = 0.05
    g: float = 10.0
    m: float = 1.0
    l: float = 1.0
    init_x: float = math.pi  # reset: theta ~ U[-init_x, init_x)
    init_y: float = 1.0  # reset: theta_dot ~ U[-init_y, init_y)


@struct.dataclass
class PendulumState(EnvState):
    """Pendulum state; every field is a scalar."""

    theta: jax.Array  # [] float32 angle (0 = upright), not wrapped
    theta_dot: jax.Array  # [] float32 angular velocity in [-max_speed, max_speed]
    time: jax.Array  # [] int32 steps taken in this episode


def angle_normalize(x: jax.Array) -> jax.Array:
    """Angle ``x`` (any shape) mapped into ``[-pi, pi)``."""
    return jnp.mod(x + math.pi, 2 * math.pi) - math.pi


def _obs(s: PendulumState) -> jax.Array:
    """[3] float32 ``(cos theta, sin theta, theta_dot)``."""
    return jnp.stack([jnp.cos(s.theta), jnp.sin(s.theta), s.theta_dot]).astype(jnp.float32)


@dataclasses.dataclass(frozen=True, repr=False)
class Pendulum(ClassicControlEnv[PendulumState, PendulumParams]):
    """Pendulum-v1: obs ``[1, 3]`` float32, action ``[1, 1]`` float32 torque.

    Args:
      max_episode_steps: the built-in time limit (Gymnasium's registered 200).
    """

    max_episode_steps: int = 200

    @property
    def default_params(self) -> PendulumParams:
        return PendulumParams()

    def _observation_space(self) -> Box:
        p = self.default_params
        high = [1.0, 1.0, p.max_speed]
        return Box([-h for h in high], high, (3,))

    def _action_space(self) -> Box:
        p = self.default_params
        return Box(-p.max_torque, p.max_torque, (1,))

    def reset_env(self, key: jax.Array, params: PendulumParams) -> tuple[PendulumState, TimeStep]:
        """``theta ~ U[-init_x, init_x)``, ``theta_dot ~ U[-init_y, init_y)``."""
        k1, k2 = jax.random.split(key)
        theta = jax.random.uniform(k1, (), jnp.float32, -params.init_x, params.init_x)
        theta_dot = jax.random.uniform(k2, (), jnp.float32, -params.init_y, params.init_y)
        state = PendulumState(theta=theta, theta_dot=theta_dot, time=jnp.zeros((), jnp.int32))
        return state, TimeStep.restart({"agent": _obs(state)[None]})

    def step_env(
        self,
        key: jax.Array,
        state: PendulumState,
        actions: dict[str, jax.Array],
        params: PendulumParams,
    ) -> tuple[PendulumState, TimeStep]:
        """One semi-implicit Euler step; ``actions["agent"]``: [1, 1] float32 torque."""
        del key
        p = params
        u = jnp.clip(actions["agent"][0, 0].astype(jnp.float32), -p.max_torque, p.max_torque)
        th, thdot = state.theta, state.theta_dot
        costs = angle_normalize(th) ** 2 + 0.1 * thdot**2 + 0.001 * u**2
        newthdot = thdot + (3 * p.g / (2 * p.l) * jnp.sin(th) + 3.0 / (p.m * p.l**2) * u) * p.dt
        newthdot = jnp.clip(newthdot, -p.max_speed, p.max_speed)
        newth = th + newthdot * p.dt
        new_state = PendulumState(
            theta=newth.astype(jnp.float32),
            theta_dot=newthdot.astype(jnp.float32),
            time=state.time + 1,
        )
        reward = (-costs).astype(jnp.float32)
        ts = single_agent_timestep(
            _obs(new_state), reward, jnp.asarray(False), new_state.time, self.max_episode_steps
        )
        return new_state, ts

    def observations(self, state: PendulumState, params: PendulumParams) -> dict[str, jax.Array]:
        """``{"agent": [1, O]}`` float32, the observation `reset`/`step` return for
        ``state`` (lets `jaxdrive.vectorize` auto-reset by a select, without a branch)."""
        return {"agent": _obs(state).astype(jnp.float32)[None]}

    def global_state(self, state: PendulumState, params: PendulumParams) -> jax.Array:
        """[2] float32 ``(theta, theta_dot)``."""
        return jnp.stack([state.theta, state.theta_dot]).astype(jnp.float32)
