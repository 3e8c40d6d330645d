"""CartPole-v1 (Barto, Sutton & Anderson 1983) as in Gymnasium 1.x.

A pole on a cart; the agent pushes the cart left (action 0) or right (action 1) with
a fixed force. Reward +1 every step, including the terminating one (or, with
``sutton_barto_reward``, 0 per step and -1 on termination). The episode terminates
when ``|x| > 2.4`` or ``|theta| > 12°`` and is truncated after 500 steps.

Gymnasium leaves stepping past termination undefined (it keeps integrating and pays
0). Here a step from a terminal state keeps the physical state unchanged, stays
terminated and pays Gymnasium's post-termination reward (0, or -1 with
``sutton_barto_reward``), so observations stay inside the observation space.
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

__all__ = ["CartPole", "CartPoleParams", "CartPoleState"]


@struct.dataclass
class CartPoleParams(EnvParams):
    """Physics constants of CartPole (Gymnasium's defaults)."""

    gravity: float = 9.8
    masscart: float = 1.0
    masspole: float = 0.1
    length: float = 0.5  # half the pole's length
    force_mag: float = 10.0
    tau: float = 0.02  # seconds per step (explicit Euler)
    theta_threshold_radians: float = 12 * 2 * math.pi / 360
    x_threshold: float = 2.4
    init_low: float = -0.05  # reset: every state variable ~ U[init_low, init_high)
    init_high: float = 0.05
    sutton_barto_reward: bool = False


@struct.dataclass
class CartPoleState(EnvState):
    """Cart-pole state; every field is a scalar."""

    x: jax.Array  # [] float32 cart position
    x_dot: jax.Array  # [] float32 cart velocity
    theta: jax.Array  # [] float32 pole angle (rad, 0 = upright)
    theta_dot: jax.Array  # [] float32 pole angular velocity
    time: jax.Array  # [] int32 steps taken in this episode


def _is_terminal(s: CartPoleState, p: CartPoleParams) -> jax.Array:
    """[] bool: the cart or the pole left its allowed range."""
    return (
        (s.x < -p.x_threshold)
        | (s.x > p.x_threshold)
        | (s.theta < -p.theta_threshold_radians)
        | (s.theta > p.theta_threshold_radians)
    )


def _obs(s: CartPoleState) -> jax.Array:
    """[4] float32 ``(x, x_dot, theta, theta_dot)``."""
    return jnp.stack([s.x, s.x_dot, s.theta, s.theta_dot]).astype(jnp.float32)


@dataclasses.dataclass(frozen=True, repr=False)
class CartPole(ClassicControlEnv[CartPoleState, CartPoleParams]):
    """CartPole-v1: obs ``[1, 4]`` float32, action ``[1]`` int32 in ``{0, 1}``.

    Args:
      max_episode_steps: the built-in time limit (Gymnasium's registered 500).
    """

    max_episode_steps: int = 500

    @property
    def default_params(self) -> CartPoleParams:
        return CartPoleParams()

    def _observation_space(self) -> Box:
        p = self.default_params
        high = [p.x_threshold * 2, math.inf, p.theta_threshold_radians * 2, math.inf]
        return Box([-h for h in high], high, (4,))

    def _action_space(self) -> Discrete:
        return Discrete(2)

    def reset_env(self, key: jax.Array, params: CartPoleParams) -> tuple[CartPoleState, TimeStep]:
        """Every state variable uniform in ``[init_low, init_high)``."""
        u = jax.random.uniform(key, (4,), jnp.float32, params.init_low, params.init_high)
        state = CartPoleState(
            x=u[0], x_dot=u[1], theta=u[2], theta_dot=u[3], time=jnp.zeros((), jnp.int32)
        )
        return state, TimeStep.restart({"agent": _obs(state)[None]})

    def step_env(
        self,
        key: jax.Array,
        state: CartPoleState,
        actions: dict[str, jax.Array],
        params: CartPoleParams,
    ) -> tuple[CartPoleState, TimeStep]:
        """One Euler step of the cart-pole dynamics; ``actions["agent"]``: [1] int32."""
        del key
        p = params
        action = actions["agent"][0]
        was_terminal = _is_terminal(state, p)
        force = jnp.where(action == 1, p.force_mag, -p.force_mag)
        total_mass = p.masspole + p.masscart
        polemass_length = p.masspole * p.length
        cos, sin = jnp.cos(state.theta), jnp.sin(state.theta)
        temp = (force + polemass_length * state.theta_dot**2 * sin) / total_mass
        thetaacc = (p.gravity * sin - cos * temp) / (
            p.length * (4.0 / 3.0 - p.masspole * cos**2 / total_mass)
        )
        xacc = temp - polemass_length * thetaacc * cos / total_mass
        moved = (
            state.x + p.tau * state.x_dot,
            state.x_dot + p.tau * xacc,
            state.theta + p.tau * state.theta_dot,
            state.theta_dot + p.tau * thetaacc,
        )
        old = (state.x, state.x_dot, state.theta, state.theta_dot)
        x, x_dot, theta, theta_dot = (
            jnp.where(was_terminal, a, b).astype(jnp.float32)
            for a, b in zip(old, moved, strict=True)
        )
        new_state = CartPoleState(
            x=x, x_dot=x_dot, theta=theta, theta_dot=theta_dot, time=state.time + 1
        )
        terminated = _is_terminal(new_state, p)
        sb = p.sutton_barto_reward
        reward = jnp.where(
            ~terminated,
            jnp.where(sb, 0.0, 1.0),
            jnp.where(was_terminal, jnp.where(sb, -1.0, 0.0), jnp.where(sb, -1.0, 1.0)),
        ).astype(jnp.float32)
        ts = single_agent_timestep(
            _obs(new_state), reward, terminated, new_state.time, self.max_episode_steps
        )
        return new_state, ts

    def observations(self, state: CartPoleState, params: CartPoleParams) -> dict[str, jax.Array]:
        """``{"agent": [1, O]}`` float32, the observation `reset`/`step` return for
        ``state`` (lets `jaxdrive.vectorize` auto-reset by a select, without a branch)."""
        return {"agent": _obs(state).astype(jnp.float32)[None]}

    def global_state(self, state: CartPoleState, params: CartPoleParams) -> jax.Array:
        """[4] float32 ``(x, x_dot, theta, theta_dot)``."""
        return _obs(state)
