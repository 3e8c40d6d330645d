"""``simple_spread``: N agents cover N landmarks without colliding (mpe2's ``simple_spread_v3``)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from environments.mpe.base import MPEEnv, check_count, check_neighbors
from environments.mpe.world import (
    MPEParams,
    MPEState,
    Role,
    distances,
    fold,
    nearest,
    off_diagonal,
    relative,
)

__all__ = ["SimpleSpread", "SimpleSpreadParams"]


@struct.dataclass
class SimpleSpreadParams(MPEParams):
    """`MPEParams` plus spread's numbers (mpe2's defaults)."""

    local_ratio: float = 0.5  # reward = (1 − ratio)·global + ratio·local
    agent_size: float = 0.15
    accel: float = 5.0  # sensitivity of the movement action
    collision_penalty: float = 1.0  # local reward −penalty per other agent touched
    capture_radius: float = 0.1  # a landmark is covered by an agent this close


@dataclasses.dataclass(frozen=True)
class SimpleSpread(MPEEnv):
    """``N`` agents (group ``"agent"``) and ``N`` landmarks; agents collide, are silent.

    Observation ``[4 + 2N + 4(N − 1)]``: own velocity, own position, every landmark's
    position relative to the agent, every other agent's relative position (agent order),
    every other agent's utterance (``C = 2`` zeros: the agents are silent).
    mpe2's partial observability: ``num_landmark_neighbors = l`` keeps the ``l`` nearest
    landmarks, ``num_agent_neighbors = a`` the ``a`` nearest others (positions and
    utterances), nearest first, zero-padded: ``[4 + 2l + 4a]``, ``O(N)`` per agent.

    Reward: ``(1 − ρ)·G + ρ·l_i`` with ``G = −Σ_landmarks min_agents distance`` and
    ``l_i = −penalty · #{j ≠ i : |p_i − p_j| < 2·size}`` (``ρ`` = ``local_ratio``).
    Actions: ``Discrete(5)`` / ``Box(0, 1, (5,))``. ``terminate_on_success`` (mpe2's):
    the episode terminates once every landmark has an agent within ``capture_radius``.
    """

    N: int = 3
    num_agent_neighbors: int | None = None
    num_landmark_neighbors: int | None = None
    terminate_on_success: bool = False

    dim_c = 2
    agents_collide = True

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "N", check_count(self.name, "N", self.N, 1))
        check_neighbors(self)

    @property
    def roles(self) -> tuple[Role, ...]:
        return (Role("agent", self.N),)

    @property
    def num_landmarks(self) -> int:
        return self.N

    def obs_size(self, group: str) -> int:
        self.role(group)
        lms, others = self.num_landmark_neighbors, self.num_agent_neighbors
        lms = self.N if lms is None else lms
        others = self.N - 1 if others is None else others
        return 4 + 2 * lms + 4 * others

    @property
    def default_params(self) -> SimpleSpreadParams:
        return SimpleSpreadParams()

    def agent_physics(self, params: SimpleSpreadParams):
        n = self.N
        return jnp.full((n,), params.agent_size), jnp.full((n,), params.accel), None

    def success(self, state: MPEState, params: SimpleSpreadParams) -> jax.Array | None:
        if not self.terminate_on_success:
            return None
        nearest_agent = fold("min", distances(state.agent_pos, state.landmark_pos), 0)  # [L]
        return ~fold("any", nearest_agent >= params.capture_radius, 0)

    def rewards(self, state: MPEState, params: SimpleSpreadParams) -> jax.Array:
        cover = -fold("sum", fold("min", distances(state.agent_pos, state.landmark_pos), 0), 0)
        d = off_diagonal(distances(state.agent_pos, state.agent_pos))  # [N, N-1]
        hits = fold("sum", (d < 2.0 * params.agent_size).astype(jnp.float32), -1)
        ratio = params.local_ratio
        return cover * (1.0 - ratio) - params.collision_penalty * hits * ratio

    def observe(self, state: MPEState, params: SimpleSpreadParams) -> dict[str, jax.Array]:
        n, pos = self.N, state.agent_pos
        (lm,) = nearest(relative(state.landmark_pos, pos), self.num_landmark_neighbors)
        comm = off_diagonal(jnp.broadcast_to(state.comm[None], (n, n, self.dim_c)))
        others, said = nearest(off_diagonal(relative(pos, pos)), self.num_agent_neighbors, comm)
        parts = [state.agent_vel, pos, lm, others, said]
        return {"agent": jnp.concatenate(parts, axis=-1)}
