"""``simple``: one agent, one landmark, rewarded by closeness (mpe2's ``simple_v3``)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from environments.mpe.base import MPEEnv
from environments.mpe.world import MPEParams, MPEState, Role

__all__ = ["Simple", "SimpleParams"]


@struct.dataclass
class SimpleParams(MPEParams):
    """`MPEParams` plus the agent's sensitivity (mpe2's default 5 when ``accel`` is unset)."""

    accel: float = 5.0
    agent_size: float = 0.05


@dataclasses.dataclass(frozen=True)
class Simple(MPEEnv):
    """One agent (group ``"agent"``) and one landmark; no collisions, silent.

    Observation ``[4]``: own velocity, landmark position relative to the agent.
    Reward: ``−|p − p_landmark|²``. Actions: ``Discrete(5)`` / ``Box(0, 1, (5,))``.
    """

    @property
    def roles(self) -> tuple[Role, ...]:
        return (Role("agent", 1),)

    @property
    def num_landmarks(self) -> int:
        return 1

    def obs_size(self, group: str) -> int:
        self.role(group)
        return 4

    @property
    def default_params(self) -> SimpleParams:
        return SimpleParams()

    def agent_physics(self, params: SimpleParams):
        return (
            self.per_agent({"agent": params.agent_size}),
            self.per_agent({"agent": params.accel}),
            None,
        )

    def rewards(self, state: MPEState, params: SimpleParams) -> jax.Array:
        d = state.agent_pos - state.landmark_pos[0]
        return -(d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1])

    def observe(self, state: MPEState, params: SimpleParams) -> dict[str, jax.Array]:
        rel = state.landmark_pos[0][None, :] - state.agent_pos
        return {"agent": jnp.concatenate([state.agent_vel, rel], axis=-1)}
