"""Small envs written only for the core tests."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from jaxdrive import Box, Discrete, Env, EnvParams, MultiDiscrete, TimeStep


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


@struct.dataclass
class ChoiceState:
    phase: jax.Array  # [A] int32 in [0, K), each agent's phase (drawn anew every step)
    t: jax.Array  # [] int32, steps taken this episode


@dataclasses.dataclass(frozen=True)
class MaskedChoice(Env):
    """One group ``"agent"`` of `agents` agents, each seeing the one-hot of its phase
    ``p`` in ``[0, K)`` (redrawn every step); episodes last `length` steps (truncated).

    Actions: ``Discrete(K)``, or with ``multi`` ``MultiDiscrete([K, 3])``. Dimension 0
    pays 1 for ``(p + 1) % K``; dimension 1 pays 1 for ``(p + 1) % 3``. The action
    ``p`` (dimension 1: ``p % 3``) pays `FORBIDDEN_REWARD` (a temptation) and the
    action mask forbids it, so a return above ``length · D`` means a masked action was
    taken. ``mask_mode``: ``"forbid"`` (that mask), ``"all"`` (all True), ``"none"`` (no
    mask), and broken masks for `check_env`: ``"int"`` (int8), ``"shape"`` (one column
    too many), ``"empty"`` (agent 0 has no allowed action in the last dimension),
    ``"reset_only"`` (a mask after reset, none after step).
    """

    agents: int = 2
    num_choices: int = 4
    length: int = 4
    multi: bool = False
    mask_mode: str = "forbid"

    FORBIDDEN_REWARD = 1000.0

    @property
    def groups(self):
        return ("agent",)

    def num_agents(self, group):
        return self.agents

    def observation_space(self, group):
        return Box(0.0, 1.0, (self.num_choices,))

    def action_space(self, group):
        return MultiDiscrete([self.num_choices, 3]) if self.multi else Discrete(self.num_choices)

    @property
    def default_params(self):
        return EnvParams()

    @property
    def episode_length(self):
        return self.length

    def _obs(self, state):
        return {"agent": jax.nn.one_hot(state.phase, self.num_choices, dtype=jnp.float32)}

    def _mask(self, state, after_reset: bool):
        mode, p = self.mask_mode, state.phase[:, None]
        if mode == "none" or (mode == "reset_only" and not after_reset):
            return None
        m = jnp.arange(self.num_choices) != p  # [A, K]
        if self.multi:
            m = jnp.concatenate([m, jnp.arange(3) != p % 3], -1)
        if mode == "all":
            m = jnp.ones_like(m)
        elif mode == "int":
            m = m.astype(jnp.int8)
        elif mode == "shape":
            m = jnp.concatenate([m, m[:, :1]], -1)
        elif mode == "empty":
            m = m.at[0, -(3 if self.multi else self.num_choices) :].set(False)
        return {"agent": m}

    def _draw(self, key, t):
        phase = jax.random.randint(key, (self.agents,), 0, self.num_choices)
        return ChoiceState(phase=phase, t=t)

    def reset_env(self, key, params):
        state = self._draw(key, jnp.zeros((), jnp.int32))
        return state, TimeStep.restart(self._obs(state), action_mask=self._mask(state, True))

    def step_env(self, key, state, actions, params):
        a, p = actions["agent"], state.phase
        a = a if self.multi else a[:, None]
        dims = [(self.num_choices, p)] + ([(3, p % 3)] if self.multi else [])
        reward = jnp.zeros((self.agents,), jnp.float32)
        for d, (n, forbidden) in enumerate(dims):
            reward += jnp.where(a[:, d] == (forbidden + 1) % n, 1.0, 0.0)
            reward += jnp.where(a[:, d] == forbidden, self.FORBIDDEN_REWARD, 0.0)
        state = self._draw(key, state.t + 1)
        end = state.t >= self.length
        none = jnp.zeros((self.agents,), bool)
        ts = TimeStep(
            obs=self._obs(state),
            reward={"agent": reward},
            terminated={"agent": none},
            truncated={"agent": jnp.full((self.agents,), end)},
            active={"agent": ~none},
            done=end,
            action_mask=self._mask(state, False),
        )
        return state, ts


@dataclasses.dataclass(frozen=True)
class MaskedChoiceObs(MaskedChoice):
    """`MaskedChoice` with `Env.observations`: auto-reset selects states (no branch)."""

    def observations(self, state, params):
        return self._obs(state)
