"""``simple_adversary``: good agents hide the goal landmark from an adversary (mpe2's
``simple_adversary_v3``)."""

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

__all__ = ["SimpleAdversary", "SimpleAdversaryParams"]


@struct.dataclass
class SimpleAdversaryParams(MPEParams):
    """`MPEParams` plus the scenario's numbers (mpe2's defaults)."""

    agent_size: float = 0.15
    landmark_size: float = 0.08  # "near the goal" is within 2 × this (unshaped rewards)
    accel: float = 5.0
    shaped_reward: bool = True  # good agents' term: −min distance (else +5 when near, too)
    shaped_adv_reward: bool = True  # the adversary's distance terms (else ∓5 when near)


@dataclasses.dataclass(frozen=True)
class SimpleAdversary(MPEEnv):
    """One adversary (group ``"adversary"``) and ``N`` good agents (``"agent"``), ``N``
    landmarks, one of them the goal (``state.goal[0]``); no collisions; silent.

    Observations (relative to the agent): the good agents see the goal, then every
    landmark, then every other agent (agent order): ``[2 + 2N + 2N]``; the adversary does
    not see the goal: ``[2N + 2N]``. mpe2's partial observability:
    ``num_landmark_neighbors = l`` and ``num_agent_neighbors = a`` keep the nearest
    landmarks and others, nearest first, zero-padded (``[2 + 2l + 2a]``, ``[2l + 2a]``);
    the goal stays observed.

    Rewards (``d_x`` = distance of agent ``x`` to the goal): adversary ``−d_adv``; good
    agents ``Σ_adv d_adv − min_good d_good``. Unshaped variants: without
    ``shaped_adv_reward`` the adversary gets ``+5`` when ``d_adv < 2·landmark_size`` and
    good agents ``−5`` per such adversary (instead of the distances); without
    ``shaped_reward`` good agents also get ``+5`` when
    ``min_good d_good < 2·landmark_size`` (keeping ``−min_good d_good``).
    Actions: ``Discrete(5)`` / ``Box(0, 1, (5,))``.
    """

    N: int = 2
    num_agent_neighbors: int | None = None
    num_landmark_neighbors: int | None = None

    dim_c = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "N", check_count(self.name, "N", self.N, 1))
        check_neighbors(self)

    @property
    def roles(self) -> tuple[Role, ...]:
        return (Role("adversary", 1), Role("agent", self.N))

    @property
    def num_landmarks(self) -> int:
        return self.N

    @property
    def goal_ranges(self) -> tuple[int, ...]:
        return (self.N,)

    def obs_size(self, group: str) -> int:
        lms, others = self.num_landmark_neighbors, self.num_agent_neighbors
        lms = self.N if lms is None else lms
        others = self.N if others is None else others
        return 2 * lms + 2 * others + (2 if self.role(group).name == "agent" else 0)

    @property
    def default_params(self) -> SimpleAdversaryParams:
        return SimpleAdversaryParams()

    def agent_physics(self, params: SimpleAdversaryParams):
        n = self.num_agents_total
        return jnp.full((n,), params.agent_size), jnp.full((n,), params.accel), None

    def rewards(self, state: MPEState, params: SimpleAdversaryParams) -> jax.Array:
        goal = state.landmark_pos[state.goal[0]]
        d = distances(state.agent_pos, goal[None])[:, 0]  # [N + 1]
        near = d < 2.0 * params.landmark_size
        adv_d, best = d[0], fold("min", d[1:], 0)
        adv_term = jnp.where(params.shaped_adv_reward, adv_d, jnp.where(near[0], -5.0, 0.0))
        pos_term = jnp.where(
            params.shaped_reward,
            -best,
            jnp.where(best < 2.0 * params.landmark_size, 5.0, 0.0) - best,
        )
        adv_r = jnp.where(params.shaped_adv_reward, -adv_d, jnp.where(near[0], 5.0, 0.0))
        return jnp.concatenate([adv_r[None], jnp.full((self.N,), pos_term + adv_term)])

    def observe(self, state: MPEState, params: SimpleAdversaryParams) -> dict[str, jax.Array]:
        pos = state.agent_pos
        (lm,) = nearest(relative(state.landmark_pos, pos), self.num_landmark_neighbors)
        (others,) = nearest(off_diagonal(relative(pos, pos)), self.num_agent_neighbors)
        common = jnp.concatenate([lm, others], axis=-1)
        goal = state.landmark_pos[state.goal[0]][None, :] - pos[1:]
        return {"adversary": common[:1], "agent": jnp.concatenate([goal, common[1:]], axis=-1)}
