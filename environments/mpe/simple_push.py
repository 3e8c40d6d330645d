"""``simple_push``: an agent reaches its goal while an adversary pushes it away (mpe2's
``simple_push_v3``)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from environments.mpe.base import MPEEnv
from environments.mpe.world import MPEParams, MPEState, Role, distances, relative

__all__ = ["SimplePush", "SimplePushParams"]

# Landmark i's colour: 0.1 everywhere and 0.9 in channel i + 1 (mpe2's reset_world).
_LANDMARK_COLOURS = np.array([[0.1, 0.9, 0.1], [0.1, 0.1, 0.9]], np.float32)


@struct.dataclass
class SimplePushParams(MPEParams):
    """`MPEParams` plus the agents' size and sensitivity (mpe2's defaults)."""

    agent_size: float = 0.05
    accel: float = 5.0


@dataclasses.dataclass(frozen=True)
class SimplePush(MPEEnv):
    """One adversary (group ``"adversary"``), one good agent (``"agent"``), two landmarks,
    one the goal (``state.goal[0]``); the agents collide; silent.

    Observations: the good agent ``[19]``: velocity, goal relative, its colour (``0.25``
    and ``0.75`` in channel ``goal + 1``), landmarks relative, landmark colours, the
    adversary relative; the adversary ``[8]``: velocity, landmarks relative, the good
    agent relative.

    Rewards: good agent ``−d_good`` (its distance to the goal); adversary
    ``d_good − d_adv``. Actions: ``Discrete(5)`` / ``Box(0, 1, (5,))``.
    """

    agents_collide = True
    dim_c = 2

    @property
    def roles(self) -> tuple[Role, ...]:
        return (Role("adversary", 1), Role("agent", 1))

    @property
    def num_landmarks(self) -> int:
        return 2

    @property
    def goal_ranges(self) -> tuple[int, ...]:
        return (2,)

    def obs_size(self, group: str) -> int:
        return 19 if self.role(group).name == "agent" else 8

    @property
    def default_params(self) -> SimplePushParams:
        return SimplePushParams()

    def agent_physics(self, params: SimplePushParams):
        return jnp.full((2,), params.agent_size), jnp.full((2,), params.accel), None

    def rewards(self, state: MPEState, params: SimplePushParams) -> jax.Array:
        goal = state.landmark_pos[state.goal[0]]
        d = distances(state.agent_pos, goal[None])[:, 0]  # [2]
        return jnp.stack([d[1] - d[0], -d[1]])

    def observe(self, state: MPEState, params: SimplePushParams) -> dict[str, jax.Array]:
        pos, vel = state.agent_pos, state.agent_vel
        lm = relative(state.landmark_pos, pos).reshape(2, -1)
        goal = state.goal[0]
        colour = 0.25 + 0.5 * (jnp.arange(3) == goal + 1).astype(jnp.float32)
        good = jnp.concatenate(
            [
                vel[1],
                state.landmark_pos[goal] - pos[1],
                colour,
                lm[1],
                jnp.asarray(_LANDMARK_COLOURS.reshape(-1)),
                pos[0] - pos[1],
            ]
        )
        adv = jnp.concatenate([vel[0], lm[0], pos[1] - pos[0]])
        return {"adversary": adv[None], "agent": good[None]}
