"""Small envs for the recurrent-policy tests."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from jaxdrive import Box, Discrete, Env, EnvParams, TimeStep


@struct.dataclass
class RecallState:
    bit: jax.Array  # [A] int32, each agent's bit of this episode
    t: jax.Array  # [] int32, steps taken this episode


@dataclasses.dataclass(frozen=True)
class RepeatFirstBit(Env):
    """Each of `agents` agents sees its random bit ``b`` only in the first observation
    of an episode (``[2b − 1, 1]``; later ``[0, 0]``) and earns 1 at every step whose
    action is ``b``; episodes last `length` steps. A memoryless policy earns at most
    ``1 + (length − 1) / 2`` in expectation, a recurrent one ``length``. Action 2 pays
    `FORBIDDEN_REWARD` and the action mask always forbids it."""

    agents: int = 2
    length: int = 4

    FORBIDDEN_REWARD = 100.0

    @property
    def groups(self):
        return ("agent",)

    def num_agents(self, group):
        return self.agents

    def observation_space(self, group):
        return Box(-1.0, 1.0, (2,))

    def action_space(self, group):
        return Discrete(3)

    @property
    def default_params(self):
        return EnvParams()

    @property
    def episode_length(self):
        return self.length

    def _obs(self, state):
        first = (state.t == 0).astype(jnp.float32)
        sign = (2 * state.bit - 1).astype(jnp.float32) * first
        return {"agent": jnp.stack([sign, jnp.broadcast_to(first, sign.shape)], -1)}

    def _mask(self):
        return {"agent": jnp.broadcast_to(jnp.array([True, True, False]), (self.agents, 3))}

    def reset_env(self, key, params):
        bit = jax.random.bernoulli(key, 0.5, (self.agents,)).astype(jnp.int32)
        state = RecallState(bit=bit, t=jnp.zeros((), jnp.int32))
        return state, TimeStep.restart(self._obs(state), action_mask=self._mask())

    def step_env(self, key, state, actions, params):
        a = actions["agent"]
        reward = (a == state.bit).astype(jnp.float32)
        reward += jnp.where(a == 2, self.FORBIDDEN_REWARD, 0.0)
        state = state.replace(t=state.t + 1)
        end = state.t >= self.length
        none = jnp.zeros((self.agents,), bool)
        ts = TimeStep(
            obs=self._obs(state),
            reward={"agent": reward},
            terminated={"agent": none},
            truncated={"agent": jnp.full((self.agents,), end)},
            active={"agent": ~none},
            done=end,
            action_mask=self._mask(),
        )
        return state, ts
