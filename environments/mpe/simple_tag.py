"""``simple_tag``: adversaries chase good agents among obstacles (mpe2's ``simple_tag_v3``)."""

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
    bound_penalty,
    distances,
    fold,
    nearest,
    off_diagonal,
    relative,
)

__all__ = ["ChaseParams", "SimpleTag", "SimpleTagParams", "chase_physics"]


@struct.dataclass
class ChaseParams(MPEParams):
    """`MPEParams` plus the physics of the chase scenarios (tag, world_comm): the
    adversaries' and good agents' sizes, sensitivities and speed caps, the obstacles'
    size, and the reward per (good agent, adversary) contact."""

    adversary_size: float = 0.075
    agent_size: float = 0.05
    adversary_accel: float = 3.0
    agent_accel: float = 4.0
    adversary_max_speed: float = 1.0
    agent_max_speed: float = 1.3
    obstacle_size: float = 0.2
    collision_reward: float = 10.0


def chase_physics(env: MPEEnv, params: ChaseParams) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(size, accel, max_speed)``, each ``[N]``: group ``"agent"`` the good agents'
    values, every other group the adversaries'."""

    def each(adv, good):
        return env.per_agent({r.name: good if r.name == "agent" else adv for r in env.roles})

    return (
        each(params.adversary_size, params.agent_size),
        each(params.adversary_accel, params.agent_accel),
        each(params.adversary_max_speed, params.agent_max_speed),
    )


@struct.dataclass
class SimpleTagParams(ChaseParams):
    """`ChaseParams` (mpe2's tag values) plus its reward shaping flag."""

    shaped_reward: bool = False  # mpe2's ``shape`` flag (off there): 0.1 × distances


@dataclasses.dataclass(frozen=True)
class SimpleTag(MPEEnv):
    """``A`` adversaries (group ``"adversary"``) chase ``G`` good agents (``"agent"``)
    among ``num_obstacles`` fixed obstacles; everything collides; silent.

    Observations (``N = A + G``, ``L`` obstacles): own velocity, own position, obstacles
    relative, all other agents relative (agent order), then the velocities of the good
    agents among the others: ``[4 + 2L + 2(N − 1) + 2G]`` for adversaries,
    ``[4 + 2L + 2(N − 1) + 2(G − 1)]`` for good agents.

    mpe2's partial observability: ``num_landmark_neighbors = l`` keeps the ``l`` nearest
    obstacles, ``num_agent_neighbors = a`` the ``a`` nearest others, each with its
    velocity if it is a good agent (else zeros), nearest first, zero-padded: both groups
    ``[4 + 2l + 4a]``, ``O(N)`` per agent.

    Rewards (contact: ``|p_a − p_g| < s_a + s_g``): a good agent gets
    ``−collision_reward`` per adversary touching it and ``−Σ_xy bound(|x|)``
    (`bound_penalty`); every adversary gets ``+collision_reward`` per contact of any
    (good agent, adversary) pair. With ``shaped_reward``, good agents add
    ``0.1 Σ_adv distance`` and adversaries subtract ``0.1 Σ_adv min_good distance``.
    Actions: ``Discrete(5)`` / ``Box(0, 1, (5,))``. Obstacles start in ``[−0.9, 0.9]²``.
    ``terminate_on_success`` (mpe2's): the episode terminates once every good agent
    touches an adversary.
    """

    num_good: int = 1
    num_adversaries: int = 3
    num_obstacles: int = 2  # type: ignore[assignment]
    num_agent_neighbors: int | None = None
    num_landmark_neighbors: int | None = None
    terminate_on_success: bool = False

    dim_c = 2
    agents_collide = True
    landmark_range = 0.9

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, lo in (("num_good", 1), ("num_adversaries", 1), ("num_obstacles", 0)):
            object.__setattr__(self, name, check_count(self.name, name, getattr(self, name), lo))
        check_neighbors(self)

    @property
    def roles(self) -> tuple[Role, ...]:
        return (Role("adversary", self.num_adversaries), Role("agent", self.num_good))

    @property
    def num_landmarks(self) -> int:
        return self.num_obstacles

    def obs_size(self, group: str) -> int:
        n, g = self.num_agents_total, self.num_good
        lms, others = self.num_landmark_neighbors, self.num_agent_neighbors
        lms = self.num_obstacles if lms is None else lms
        if others is not None:
            self.role(group)
            return 4 + 2 * lms + 4 * others
        base = 4 + 2 * lms + 2 * (n - 1)
        return base + 2 * (g if self.role(group).name == "adversary" else g - 1)

    @property
    def default_params(self) -> SimpleTagParams:
        return SimpleTagParams()

    def agent_physics(self, params: SimpleTagParams):
        return chase_physics(self, params)

    def obstacle_size(self, params: SimpleTagParams) -> jax.Array:
        return params.obstacle_size

    def success(self, state: MPEState, params: SimpleTagParams) -> jax.Array | None:
        if not self.terminate_on_success:
            return None
        a = self.num_adversaries
        d = distances(state.agent_pos[a:], state.agent_pos[:a])  # [G, A]
        caught = fold("any", d < params.agent_size + params.adversary_size, 1)
        return ~fold("any", ~caught, 0)

    def rewards(self, state: MPEState, params: SimpleTagParams) -> jax.Array:
        a = self.num_adversaries
        adv, good = state.agent_pos[:a], state.agent_pos[a:]
        d = distances(good, adv)  # [G, A]
        touch = (d < params.agent_size + params.adversary_size).astype(jnp.float32)
        w = params.collision_reward
        per_good = fold("sum", touch, 1)  # [G]
        good_r = -w * per_good - bound_penalty(good)
        adv_r = jnp.full((a,), w * fold("sum", per_good, 0))
        shaped = jnp.asarray(params.shaped_reward, jnp.float32)
        good_r = good_r + shaped * 0.1 * fold("sum", d, 1)
        adv_r = adv_r - shaped * 0.1 * fold("sum", fold("min", d, 0), 0)
        return jnp.concatenate([adv_r, good_r])

    def observe(self, state: MPEState, params: SimpleTagParams) -> dict[str, jax.Array]:
        a, g, n = self.num_adversaries, self.num_good, self.num_agents_total
        pos, vel = state.agent_pos, state.agent_vel
        (lm,) = nearest(relative(state.landmark_pos, pos), self.num_landmark_neighbors)
        rel = off_diagonal(relative(pos, pos))  # [N, N-1, 2]
        if self.num_agent_neighbors is not None:
            good = (jnp.arange(n) >= a).astype(jnp.float32)[None, :, None]
            vels = off_diagonal(jnp.broadcast_to(vel[None] * good, (n, n, 2)))
            others, seen_vel = nearest(rel, self.num_agent_neighbors, vels)
            obs = jnp.concatenate([vel, pos, lm, others, seen_vel], axis=-1)
            return {"adversary": obs[:a], "agent": obs[a:]}
        common = jnp.concatenate([vel, pos, lm, rel.reshape(n, -1)], axis=-1)
        good_vel = vel[a:]  # [G, 2]
        adv_obs = jnp.concatenate(
            [common[:a], jnp.broadcast_to(good_vel.reshape(1, -1), (a, 2 * g))], axis=-1
        )
        other_good = off_diagonal(jnp.broadcast_to(good_vel[None], (g, g, 2))).reshape(g, -1)
        good_obs = jnp.concatenate([common[a:], other_good], axis=-1)
        return {"adversary": adv_obs, "agent": good_obs}
