"""Small envs written only for the core tests."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from jaxdrive import Box, Discrete, Env, EnvParams, TimeStep


@struct.dataclass
class CounterParams(EnvParams):
    step_reward: float = 1.0


@struct.dataclass
class CounterState:
    pos: jax.Array  # [A] int32, each walker's position
    t: jax.Array  # [] int32


@dataclasses.dataclass(frozen=True)
class Counter(Env):
    """Two groups of walkers on a line; an episode lasts `length` steps or until a
    "blue" walker reaches `goal` (terminated)."""

    num_red: int = 2
    num_blue: int = 3
    length: int = 7
    goal: int = 4

    @property
    def groups(self):
        return ("red", "blue")

    def num_agents(self, group):
        return {"red": self.num_red, "blue": self.num_blue}[group]

    def observation_space(self, group):
        return Box(-100.0, 100.0, (2,))

    def action_space(self, group):
        return Discrete(3)

    @property
    def default_params(self):
        return CounterParams()

    @property
    def episode_length(self):
        return self.length

    def _obs(self, state):
        o = jnp.stack(
            [state.pos.astype(jnp.float32), jnp.full(state.pos.shape, state.t, jnp.float32)], -1
        )
        return {"red": o[: self.num_red], "blue": o[self.num_red :]}

    def reset_env(self, key, params):
        m = self.num_red + self.num_blue
        pos = jax.random.randint(key, (m,), -1, 2)
        state = CounterState(pos=pos, t=jnp.zeros((), jnp.int32))
        return state, TimeStep.restart(self._obs(state), extras={"sum": jnp.zeros((), jnp.int32)})

    def step_env(self, key, state, actions, params):
        a = jnp.concatenate([actions["red"], actions["blue"]]) - 1
        pos = state.pos + a
        t = state.t + 1
        state = CounterState(pos=pos, t=t)
        reached = jnp.any(pos[self.num_red :] >= self.goal)
        trunc = (t >= self.length) & ~reached
        obs = self._obs(state)
        reward = {
            g: jnp.full((self.num_agents(g),), params.step_reward, jnp.float32) for g in self.groups
        }
        term = {g: jnp.full((self.num_agents(g),), reached) for g in self.groups}
        truncd = {g: jnp.full((self.num_agents(g),), trunc) for g in self.groups}
        active = {g: jnp.ones((self.num_agents(g),), bool) for g in self.groups}
        ts = TimeStep(obs, reward, term, truncd, active, reached | trunc, {"sum": jnp.sum(pos)})
        return state, ts

    def global_state(self, state, params):
        return jnp.concatenate([state.pos.astype(jnp.float32), state.t[None].astype(jnp.float32)])
