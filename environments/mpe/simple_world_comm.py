"""``simple_world_comm``: tag with food, forests that hide agents and a leader who talks
(mpe2's ``simple_world_comm_v3``)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from environments.mpe.base import MPEEnv, check_count
from environments.mpe.simple_tag import ChaseParams, chase_physics
from environments.mpe.world import (
    MPEState,
    Role,
    bound_penalty,
    distances,
    fold,
    off_diagonal,
    relative,
)

__all__ = ["SimpleWorldComm", "SimpleWorldCommParams"]


@struct.dataclass
class SimpleWorldCommParams(ChaseParams):
    """`ChaseParams` plus food and forests (mpe2's defaults)."""

    agent_size: float = 0.045
    collision_reward: float = 5.0  # per (good agent, adversary) contact
    food_size: float = 0.03
    forest_size: float = 0.3
    food_reward: float = 2.0  # per food a good agent touches
    food_distance_weight: float = 0.05  # good agents: −w · distance to the nearest food
    boundary_weight: float = 2.0  # good agents: −w · bound penalty
    chase_distance_weight: float = 0.1  # adversaries: −w · distance to the nearest prey


@dataclasses.dataclass(frozen=True)
class SimpleWorldComm(MPEEnv):
    """A leader (group ``"leadadversary"``, speaks ``C = 4`` words), ``num_adversaries − 1``
    adversaries (``"adversary"``) and ``num_good`` good agents (``"agent"``); landmarks in
    this order: ``num_obstacles`` obstacles (they collide), ``num_food`` food,
    ``num_forests`` forests; agents collide with each other and the obstacles.

    Forests hide: agent ``i`` sees agent ``j`` when both are in a common forest, or neither
    is in any forest, or ``i`` is the leader (in a forest: ``|p − p_forest| <
    size + forest_size``); a hidden agent's relative position and velocity read zeros.

    Observations (``N`` agents, ``L`` landmarks, ``F`` forests, ``G`` good): adversaries
    and leader ``[4 + 2L + 2(N − 1) + 2G + F + 4]``: velocity, position, landmarks
    relative, others relative (agent order), the good others' velocities, ``±1`` per
    forest (inside or not), the leader's utterance; good agents
    ``[4 + 2L + 2(N − 1) + F + 2(G − 1)]``: the same without the utterance, the forest
    flags before the velocities.

    Rewards: a good agent ``−collision_reward`` per adversary touching it,
    ``−boundary_weight · bound``, ``+food_reward`` per food touched,
    ``−food_distance_weight · nearest food distance``; every adversary
    ``+collision_reward`` per (good, adversary) contact and ``−chase_distance_weight ·
    its distance to the nearest good agent``. Actions: leader ``Discrete(20)``
    (``move + 5·word``) / ``Box(0, 1, (9,))``; others ``Discrete(5)`` / ``Box(0, 1, (5,))``.
    """

    num_good: int = 2
    num_adversaries: int = 4
    num_obstacles: int = 1  # type: ignore[assignment]
    num_food: int = 2
    num_forests: int = 2

    dim_c = 4
    agents_collide = True
    landmark_range = 0.9

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, lo in (
            ("num_good", 1),
            ("num_adversaries", 1),
            ("num_obstacles", 0),
            ("num_food", 1),
            ("num_forests", 0),
        ):
            object.__setattr__(self, name, check_count(self.name, name, getattr(self, name), lo))

    @property
    def roles(self) -> tuple[Role, ...]:
        return (
            Role("leadadversary", 1, movable=True, silent=False),
            Role("adversary", self.num_adversaries - 1),
            Role("agent", self.num_good),
        )

    @property
    def num_landmarks(self) -> int:
        return self.num_obstacles + self.num_food + self.num_forests

    def obs_size(self, group: str) -> int:
        n, g, f = self.num_agents_total, self.num_good, self.num_forests
        base = 4 + 2 * self.num_landmarks + 2 * (n - 1) + f
        if self.role(group).name == "agent":
            return base + 2 * (g - 1)
        return base + 2 * g + self.dim_c

    @property
    def default_params(self) -> SimpleWorldCommParams:
        return SimpleWorldCommParams()

    def agent_physics(self, params: SimpleWorldCommParams):
        return chase_physics(self, params)

    def obstacle_size(self, params: SimpleWorldCommParams) -> jax.Array:
        return params.obstacle_size

    def landmark_sizes(self, params: SimpleWorldCommParams) -> np.ndarray:
        """``[L]``: obstacles, food, forests."""
        counts = (self.num_obstacles, self.num_food, self.num_forests)
        sizes = (params.obstacle_size, params.food_size, params.forest_size)
        return np.repeat(np.asarray(sizes, np.float32), counts)

    def _food(self, state: MPEState) -> jax.Array:
        lo = self.num_obstacles
        return state.landmark_pos[lo : lo + self.num_food]

    def rewards(self, state: MPEState, params: SimpleWorldCommParams) -> jax.Array:
        a = self.num_adversaries
        adv, good = state.agent_pos[:a], state.agent_pos[a:]
        d = distances(good, adv)  # [G, A]
        touch = (d < params.agent_size + params.adversary_size).astype(jnp.float32)
        per_good = fold("sum", touch, 1)  # [G]
        w = params.collision_reward
        food_d = distances(good, self._food(state))  # [G, food]
        eats = fold("sum", (food_d < params.agent_size + params.food_size).astype(jnp.float32), 1)
        good_r = (
            -w * per_good
            - params.boundary_weight * bound_penalty(good)
            + params.food_reward * eats
            - params.food_distance_weight * fold("min", food_d, 1)
        )
        adv_r = w * fold("sum", per_good, 0) - params.chase_distance_weight * fold("min", d, 0)
        return jnp.concatenate([adv_r, good_r])

    def observe(self, state: MPEState, params: SimpleWorldCommParams) -> dict[str, jax.Array]:
        a, g, n = self.num_adversaries, self.num_good, self.num_agents_total
        pos, vel = state.agent_pos, state.agent_vel
        size = self.agent_physics(params)[0]
        lo = self.num_obstacles + self.num_food
        forests = state.landmark_pos[lo:]
        inside = distances(pos, forests) < size[:, None] + params.forest_size  # [N, F]
        inf = inside.astype(jnp.float32)
        share = fold("any", inside[:, None, :] & inside[None, :, :], -1)  # [N, N] same forest
        free = ~fold("any", inside, 1)
        leader = jnp.arange(n) == 0
        seen = share | (free[:, None] & free[None, :]) | leader[:, None]
        seen = off_diagonal(seen.astype(jnp.float32))  # [N, N-1]
        lm = relative(state.landmark_pos, pos).reshape(n, -1)
        rel = off_diagonal(relative(pos, pos)) * seen[..., None]  # [N, N-1, 2]
        flags = 2.0 * inf - 1.0
        # Velocities of the good agents among the others, hidden ones zeroed.
        good_cols = seen[:, a - 1 :]  # [N, G] for adversaries (others' good are the last G)
        adv_vel = vel[None, a:, :] * good_cols[:a, :, None]  # [A, G, 2]
        other_good = off_diagonal(jnp.broadcast_to(vel[None, a:], (g, g, 2)))  # [G, G-1, 2]
        good_vel = other_good * seen[a:, a:, None]  # [G, G-1, 2]
        common = jnp.concatenate([vel, pos, lm, rel.reshape(n, -1)], axis=-1)
        said = jnp.broadcast_to(state.comm[0], (a, self.dim_c))
        adv_obs = jnp.concatenate([common[:a], adv_vel.reshape(a, -1), flags[:a], said], axis=-1)
        good_obs = jnp.concatenate([common[a:], flags[a:], good_vel.reshape(g, -1)], axis=-1)
        return {"leadadversary": adv_obs[:1], "adversary": adv_obs[1:], "agent": good_obs}
