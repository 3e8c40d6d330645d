"""``simple_speaker_listener``: a speaker tells a listener where to go (mpe2's
``simple_speaker_listener_v4``)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from environments.mpe.base import MPEEnv
from environments.mpe.world import MPEParams, MPEState, Role, relative

__all__ = ["LANDMARK_COLOURS", "SimpleSpeakerListener", "SimpleSpeakerListenerParams"]

#: The three landmarks' colours.
LANDMARK_COLOURS = np.array(
    [[0.65, 0.15, 0.15], [0.15, 0.65, 0.15], [0.15, 0.15, 0.65]], np.float32
)


@struct.dataclass
class SimpleSpeakerListenerParams(MPEParams):
    """`MPEParams` plus the listener's sensitivity and the agents' size (mpe2's)."""

    accel: float = 5.0
    agent_size: float = 0.075


@dataclasses.dataclass(frozen=True)
class SimpleSpeakerListener(MPEEnv):
    """A speaker (group ``"speaker"``, immovable, ``C = 3`` words) sees the goal
    landmark's colour (``state.goal[0]``); a listener (``"listener"``, silent) sees the
    landmarks and the word and must reach the goal; no collisions.

    Observations: speaker ``[3]``, the goal's colour; listener ``[11]``, velocity,
    landmarks relative, the speaker's utterance. Both get ``−|p_listener − goal|²``.
    Actions: speaker ``Discrete(3)`` / ``Box(0, 1, (3,))``; listener ``Discrete(5)`` /
    ``Box(0, 1, (5,))``.
    """

    dim_c = 3

    @property
    def roles(self) -> tuple[Role, ...]:
        return (Role("speaker", 1, movable=False, silent=False), Role("listener", 1))

    @property
    def num_landmarks(self) -> int:
        return 3

    @property
    def goal_ranges(self) -> tuple[int, ...]:
        return (3,)

    def obs_size(self, group: str) -> int:
        return 3 if self.role(group).name == "speaker" else 11

    @property
    def default_params(self) -> SimpleSpeakerListenerParams:
        return SimpleSpeakerListenerParams()

    def agent_physics(self, params: SimpleSpeakerListenerParams):
        return jnp.full((2,), params.agent_size), jnp.full((2,), params.accel), None

    def rewards(self, state: MPEState, params: SimpleSpeakerListenerParams) -> jax.Array:
        d = state.agent_pos[1] - state.landmark_pos[state.goal[0]]
        return jnp.full((2,), -(d[0] * d[0] + d[1] * d[1]))

    def observe(self, state: MPEState, params: SimpleSpeakerListenerParams) -> dict[str, jax.Array]:
        colour = jnp.asarray(LANDMARK_COLOURS)[state.goal[0]]
        lm = relative(state.landmark_pos, state.agent_pos[1:]).reshape(-1)
        listener = jnp.concatenate([state.agent_vel[1], lm, state.comm[0]])
        return {"speaker": colour[None], "listener": listener[None]}
