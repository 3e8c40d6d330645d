"""Acrobot-v1 (Sutton & Barto's book dynamics) as in Gymnasium 1.x.

Two links hang from a fixed joint; the agent applies a torque of -1, 0 or +1
(actions 0, 1, 2) at the joint between them. One step integrates the dynamics over
``dt = 0.2`` s with one classical Runge-Kutta (RK4) step, wraps both angles into
``[-pi, pi]`` and clips the angular velocities to ``±4pi`` and ``±9pi``. The episode
terminates when the free end is more than one link length above the fixed joint,
``-cos(theta1) - cos(theta1 + theta2) > 1``; reward is -1 per step and 0 on the
terminating step. Truncated after 500 steps.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from flax import struct

from environments.classic_control import ClassicControlEnv, single_agent_timestep
from jaxdrive.spaces import Box, Discrete
from jaxdrive.types import EnvParams, EnvState, TimeStep

__all__ = ["Acrobot", "AcrobotParams", "AcrobotState"]


@struct.dataclass
class AcrobotParams(EnvParams):
    """Physics constants of Acrobot (Gymnasium's defaults)."""

    dt: float = 0.2  # integration step [s]
    link_length_1: float = 1.0  # [m]
    link_mass_1: float = 1.0  # [kg]
    link_mass_2: float = 1.0  # [kg]
    link_com_pos_1: float = 0.5  # [m] centre of mass of link 1
    link_com_pos_2: float = 0.5  # [m] centre of mass of link 2
    link_moi: float = 1.0  # moment of inertia of both links
    gravity: float = 9.8
    max_vel_1: float = 4 * math.pi
    max_vel_2: float = 9 * math.pi
    torque_noise_max: float = 0.0  # torque += U(-noise, noise), drawn with the step key
    init_low: float = -0.1  # reset: every state variable ~ U[init_low, init_high)
    init_high: float = 0.1


@struct.dataclass
class AcrobotState(EnvState):
    """Acrobot state; every field is a scalar."""

    theta1: jax.Array  # [] float32 angle of link 1 (0 = hanging down), in [-pi, pi]
    theta2: jax.Array  # [] float32 angle of link 2 relative to link 1, in [-pi, pi]
    dtheta1: jax.Array  # [] float32 angular velocity of link 1
    dtheta2: jax.Array  # [] float32 angular velocity of link 2
    time: jax.Array  # [] int32 steps taken in this episode


def _wrap(x: jax.Array, lo: float, hi: float) -> jax.Array:
    """Shifts ``x`` by whole periods ``hi - lo`` into ``[lo, hi]`` (Gymnasium's `wrap`)."""
    diff = hi - lo
    x = jnp.where(x > hi, x - diff * jnp.ceil((x - hi) / diff), x)
    return jnp.where(x < lo, x + diff * jnp.ceil((lo - x) / diff), x)


def _dsdt(s: jax.Array, torque: jax.Array, p: AcrobotParams) -> jax.Array:
    """Time derivative [4] of ``s = (theta1, theta2, dtheta1, dtheta2)`` (book dynamics)."""
    m1, m2 = p.link_mass_1, p.link_mass_2
    l1, lc1, lc2 = p.link_length_1, p.link_com_pos_1, p.link_com_pos_2
    i1 = i2 = p.link_moi
    g = p.gravity
    theta1, theta2, dtheta1, dtheta2 = s[0], s[1], s[2], s[3]
    d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * jnp.cos(theta2)) + i1 + i2
    d2 = m2 * (lc2**2 + l1 * lc2 * jnp.cos(theta2)) + i2
    phi2 = m2 * lc2 * g * jnp.cos(theta1 + theta2 - math.pi / 2.0)
    phi1 = (
        -m2 * l1 * lc2 * dtheta2**2 * jnp.sin(theta2)
        - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * jnp.sin(theta2)
        + (m1 * lc1 + m2 * l1) * g * jnp.cos(theta1 - math.pi / 2)
        + phi2
    )
    ddtheta2 = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * jnp.sin(theta2) - phi2) / (
        m2 * lc2**2 + i2 - d2**2 / d1
    )
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return jnp.stack([dtheta1, dtheta2, ddtheta1, ddtheta2])


def _rk4(s: jax.Array, torque: jax.Array, p: AcrobotParams) -> jax.Array:
    """One classical Runge-Kutta step of length ``p.dt`` from ``s`` [4]; returns [4]."""
    dt = p.dt
    k1 = _dsdt(s, torque, p)
    k2 = _dsdt(s + dt / 2.0 * k1, torque, p)
    k3 = _dsdt(s + dt / 2.0 * k2, torque, p)
    k4 = _dsdt(s + dt * k3, torque, p)
    return s + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)


def _is_terminal(s: AcrobotState) -> jax.Array:
    """[] bool: the free end is above height 1 (one link length over the pivot)."""
    return -jnp.cos(s.theta1) - jnp.cos(s.theta2 + s.theta1) > 1.0


def _obs(s: AcrobotState) -> jax.Array:
    """[6] float32 ``(cos t1, sin t1, cos t2, sin t2, dt1, dt2)``."""
    return jnp.stack(
        [
            jnp.cos(s.theta1),
            jnp.sin(s.theta1),
            jnp.cos(s.theta2),
            jnp.sin(s.theta2),
            s.dtheta1,
            s.dtheta2,
        ]
    ).astype(jnp.float32)


@dataclasses.dataclass(frozen=True, repr=False)
class Acrobot(ClassicControlEnv[AcrobotState, AcrobotParams]):
    """Acrobot-v1: obs ``[1, 6]`` float32, action ``[1]`` int32 in ``{0, 1, 2}``.

    Args:
      max_episode_steps: the built-in time limit (Gymnasium's registered 500).
    """

    max_episode_steps: int = 500

    @property
    def default_params(self) -> AcrobotParams:
        return AcrobotParams()

    def _observation_space(self) -> Box:
        p = self.default_params
        high = [1.0, 1.0, 1.0, 1.0, p.max_vel_1, p.max_vel_2]
        return Box([-h for h in high], high, (6,))

    def _action_space(self) -> Discrete:
        return Discrete(3)

    def reset_env(self, key: jax.Array, params: AcrobotParams) -> tuple[AcrobotState, TimeStep]:
        """Every state variable uniform in ``[init_low, init_high)``."""
        u = jax.random.uniform(key, (4,), jnp.float32, params.init_low, params.init_high)
        state = AcrobotState(
            theta1=u[0], theta2=u[1], dtheta1=u[2], dtheta2=u[3], time=jnp.zeros((), jnp.int32)
        )
        return state, TimeStep.restart({"agent": _obs(state)[None]})

    def step_env(
        self,
        key: jax.Array,
        state: AcrobotState,
        actions: dict[str, jax.Array],
        params: AcrobotParams,
    ) -> tuple[AcrobotState, TimeStep]:
        """One RK4 step of ``dt``; ``actions["agent"]``: [1] int32 (torque = action - 1)."""
        p = params
        torque = actions["agent"][0].astype(jnp.float32) - 1.0
        noise = jax.random.uniform(key, (), jnp.float32, -1.0, 1.0)
        torque = torque + p.torque_noise_max * noise
        s = jnp.stack([state.theta1, state.theta2, state.dtheta1, state.dtheta2])
        ns = _rk4(s.astype(jnp.float32), torque, p)
        new_state = AcrobotState(
            theta1=_wrap(ns[0], -math.pi, math.pi),
            theta2=_wrap(ns[1], -math.pi, math.pi),
            dtheta1=jnp.clip(ns[2], -p.max_vel_1, p.max_vel_1),
            dtheta2=jnp.clip(ns[3], -p.max_vel_2, p.max_vel_2),
            time=state.time + 1,
        )
        new_state = new_state.replace(
            theta1=new_state.theta1.astype(jnp.float32),
            theta2=new_state.theta2.astype(jnp.float32),
            dtheta1=new_state.dtheta1.astype(jnp.float32),
            dtheta2=new_state.dtheta2.astype(jnp.float32),
        )
        terminated = _is_terminal(new_state)
        reward = jnp.where(terminated, 0.0, -1.0).astype(jnp.float32)
        ts = single_agent_timestep(
            _obs(new_state), reward, terminated, new_state.time, self.max_episode_steps
        )
        return new_state, ts

    def observations(self, state: AcrobotState, params: AcrobotParams) -> dict[str, jax.Array]:
        """``{"agent": [1, O]}`` float32, the observation `reset`/`step` return for
        ``state`` (lets `jaxdrive.vectorize` auto-reset by a select, without a branch)."""
        return {"agent": _obs(state).astype(jnp.float32)[None]}

    def global_state(self, state: AcrobotState, params: AcrobotParams) -> jax.Array:
        """[4] float32 ``(theta1, theta2, dtheta1, dtheta2)``."""
        return jnp.stack([state.theta1, state.theta2, state.dtheta1, state.dtheta2]).astype(
            jnp.float32
        )
