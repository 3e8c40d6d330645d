"""``simple_reference``: two agents guide each other to their goals by talking (mpe2's
``simple_reference_v3``)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from environments.mpe.base import MPEEnv
from environments.mpe.world import MPEParams, MPEState, Role, relative

__all__ = ["LANDMARK_COLOURS", "SimpleReference", "SimpleReferenceParams"]

#: The three landmarks' colours (red, green, blue).
LANDMARK_COLOURS = np.array(
    [[0.75, 0.25, 0.25], [0.25, 0.75, 0.25], [0.25, 0.25, 0.75]], np.float32
)


@struct.dataclass
class SimpleReferenceParams(MPEParams):
    """`MPEParams` plus the reward mix and sensitivity (mpe2's defaults)."""

    local_ratio: float = 0.5  # reward = (1 − ratio)·mean + ratio·own
    accel: float = 5.0
    agent_size: float = 0.05


@dataclasses.dataclass(frozen=True)
class SimpleReference(MPEEnv):
    """Two agents (group ``"agent"``), three landmarks; each agent ``i`` knows the goal
    landmark ``state.goal[i]`` of the *other* agent and must tell it (``C = 10``); no
    collisions.

    Observation ``[21]``: velocity, landmarks relative, the colour of ``goal[i]``, the
    other agent's utterance. Own reward ``r_i = −|p_{1−i} − landmark[goal[i]]|``; reward
    ``(1 − ρ)·(r_0 + r_1)/2 + ρ·r_i``. Actions: ``Discrete(50)`` (``move + 5·word``) /
    ``Box(0, 1, (15,))`` (5 movement entries, then 10 utterance values).
    """

    dim_c = 10

    @property
    def roles(self) -> tuple[Role, ...]:
        return (Role("agent", 2, movable=True, silent=False),)

    @property
    def num_landmarks(self) -> int:
        return 3

    @property
    def goal_ranges(self) -> tuple[int, ...]:
        return (3, 3)

    def obs_size(self, group: str) -> int:
        self.role(group)
        return 21

    @property
    def default_params(self) -> SimpleReferenceParams:
        return SimpleReferenceParams()

    def agent_physics(self, params: SimpleReferenceParams):
        return jnp.full((2,), params.agent_size), jnp.full((2,), params.accel), None

    def rewards(self, state: MPEState, params: SimpleReferenceParams) -> jax.Array:
        target = state.landmark_pos[state.goal]  # [2, 2]: agent i's goal for the other
        d = state.agent_pos[::-1] - target
        own = -jnp.sqrt(d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1])
        ratio = params.local_ratio
        return (own[0] + own[1]) * 0.5 * (1.0 - ratio) + own * ratio

    def observe(self, state: MPEState, params: SimpleReferenceParams) -> dict[str, jax.Array]:
        lm = relative(state.landmark_pos, state.agent_pos).reshape(2, -1)
        colour = jnp.asarray(LANDMARK_COLOURS)[state.goal]  # [2, 3]
        obs = jnp.concatenate([state.agent_vel, lm, colour, state.comm[::-1]], axis=-1)
        return {"agent": obs}
