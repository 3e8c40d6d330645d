"""`MPEEnv`: what every MPE scenario shares (groups, spaces, reset, step, global state).

A scenario subclasses `MPEEnv` (a frozen dataclass) and states its agents (`roles`),
landmarks, physics per group (`agent_physics`) and its two scenario functions,
`rewards` and `observations`; the step itself (actions -> forces -> integration ->
utterances -> rewards -> observations) is written once here, after mpe2 1.1.1's
``SimpleEnv`` and ``World``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from environments.mpe.world import (
    MPEParams,
    MPEState,
    Role,
    contact_forces,
    decode_actions,
    integrate,
    move_size,
)
from jaxdrive.env import Env
from jaxdrive.spaces import Box, Discrete, Space
from jaxdrive.types import TimeStep

__all__ = ["MPEEnv", "check_count", "check_neighbors"]


def check_count(owner: str, name: str, value: Any, lo: int) -> int:
    """``value`` as an int ``>= lo``; else ``ValueError`` naming ``owner.name``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < lo:
        raise ValueError(f"{owner}: {name} must be an integer >= {lo}, got {value!r}")
    return int(value)


def check_neighbors(env: Any) -> None:
    """Checks (and normalises to int) ``env.num_agent_neighbors`` and
    ``env.num_landmark_neighbors``: ``None`` (full observation) or an integer ``>= 1``."""
    for name in ("num_agent_neighbors", "num_landmark_neighbors"):
        value = getattr(env, name)
        if value is not None:
            object.__setattr__(env, name, check_count(env.name, name, value, 1))


@dataclasses.dataclass(frozen=True)
class MPEEnv(Env[MPEState, MPEParams]):
    """Base of the MPE scenarios (see the module docstring).

    Static configuration shared by all scenarios: ``continuous_actions`` (mpe2's
    ``continuous_actions``: ``Box(0, 1, (n,))`` actions instead of ``Discrete(n)``) and
    ``max_cycles`` (the episode length; every agent is truncated after it).

    Subclasses set the class attributes ``dim_c`` (``C``), ``landmark_range`` (landmarks
    start uniform in ``[−r, r]²``) and ``agents_collide``, and implement `roles`,
    `num_landmarks`, `obs_size`, `agent_physics`, `rewards`, `observe`, and where they
    have them `goal_ranges` and `num_obstacles`.
    """

    continuous_actions: bool = False
    max_cycles: int = 25

    dim_c = 0
    landmark_range = 1.0
    agents_collide = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "continuous_actions", bool(self.continuous_actions))
        object.__setattr__(
            self, "max_cycles", check_count(self.name, "max_cycles", self.max_cycles, 1)
        )

    # ----- scenario hooks ------------------------------------------------------------
    @property
    def roles(self) -> tuple[Role, ...]:
        """The groups in agent order (mpe2's agent order; groups are contiguous)."""
        raise NotImplementedError

    @property
    def num_landmarks(self) -> int:
        """``L``."""
        raise NotImplementedError

    @property
    def num_obstacles(self) -> int:
        """How many of the first landmarks collide with agents (``Lc``)."""
        return 0

    @property
    def goal_ranges(self) -> tuple[int, ...]:
        """``K`` entries: ``state.goal[k]`` is drawn uniform in ``[0, goal_ranges[k])``
        (none: ``state.goal`` is one unused zero)."""
        return ()

    def obs_size(self, group: str) -> int:
        """Values in one observation of ``group``."""
        raise NotImplementedError

    def agent_physics(self, params: Any) -> tuple[jax.Array, jax.Array, jax.Array | None]:
        """``(size [N], accel [N], max_speed [N] or None)`` from ``params``."""
        raise NotImplementedError

    def obstacle_size(self, params: Any) -> jax.Array | float:
        """Size of the colliding landmarks."""
        return 0.0

    def landmark_sizes(self, params: Any) -> np.ndarray:
        """``[L]`` the landmarks' sizes (for drawing): the obstacles' size, else mpe2's
        default entity size 0.05."""
        lc = self.num_obstacles
        sizes = np.full(self.num_landmarks, 0.05, np.float32)
        sizes[:lc] = float(np.asarray(self.obstacle_size(params))) if lc else 0.05
        return sizes

    def success(self, state: MPEState, params: Any) -> jax.Array | None:
        """``[]`` bool: the episode ends early in ``state`` (mpe2's ``is_terminal``, with
        ``terminate_on_success``); ``None`` where it never does."""
        return None

    def rewards(self, state: MPEState, params: Any) -> jax.Array:
        """``[N]`` float32: each agent's reward for arriving in ``state``."""
        raise NotImplementedError

    def observe(self, state: MPEState, params: Any) -> dict[str, jax.Array]:
        """``{g: [A_g, obs_size(g)]}`` float32."""
        raise NotImplementedError

    def check_params(self, params: Any) -> Any:
        """`Env.check_params` (real, finite), then, for concrete values: ``dt``, ``mass``,
        ``contact_margin`` and every ``*_size`` positive; ``damping`` and
        ``local_ratio`` in ``[0, 1]``; ``*_accel`` and ``*_max_speed`` non-negative.
        Raises ``ValueError`` naming the field."""
        params = super().check_params(params)
        for f in dataclasses.fields(params):
            value = getattr(params, f.name)
            if isinstance(value, jax.core.Tracer):
                continue
            v = np.asarray(value, np.float64)
            name = f.name
            if name in ("dt", "mass", "contact_margin") or name.endswith("_size"):
                ok, rule = bool(np.all(v > 0)), "> 0"
            elif name in ("damping", "local_ratio"):
                ok, rule = bool(np.all((v >= 0) & (v <= 1))), "in [0, 1]"
            elif name.endswith(("accel", "max_speed")):
                ok, rule = bool(np.all(v >= 0)), ">= 0"
            else:
                continue
            if not ok:
                raise ValueError(
                    f"{self.name}: {type(params).__name__}.{name} must be {rule}, got {value!r}"
                )
        return params

    # ----- static description --------------------------------------------------------
    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.roles)

    def role(self, group: str) -> Role:
        """The `Role` of ``group``."""
        for r in self.roles:
            if r.name == group:
                return r
        raise ValueError(f"{self.name} has groups {list(self.groups)}, got {group!r}")

    def num_agents(self, group: str) -> int:
        return self.role(group).count

    @property
    def num_agents_total(self) -> int:
        """``N``."""
        return sum(r.count for r in self.roles)

    def group_slices(self) -> dict[str, slice]:
        """Each group's rows in agent order."""
        out, lo = {}, 0
        for r in self.roles:
            out[r.name] = slice(lo, lo + r.count)
            lo += r.count
        return out

    def split(self, x: jax.Array) -> dict[str, jax.Array]:
        """``[N, ...]`` in agent order -> ``{g: [A_g, ...]}`` (static slices)."""
        return {g: x[s] for g, s in self.group_slices().items()}

    def per_agent(self, values: dict[str, Any]) -> jax.Array:
        """``{g: scalar}`` -> ``[N]`` float32, each agent its group's value."""
        return jnp.concatenate(
            [jnp.full((r.count,), values[r.name], jnp.float32) for r in self.roles]
        )

    @property
    def episode_length(self) -> int:  # type: ignore[override]
        return self.max_cycles

    def observation_space(self, group: str) -> Box:
        return Box(-np.inf, np.inf, (self.obs_size(group),), jnp.float32)

    def action_space(self, group: str) -> Space:
        n = move_size(self.role(group), self.dim_c, self.continuous_actions)
        return Box(0.0, 1.0, (n,), jnp.float32) if self.continuous_actions else Discrete(n)

    @property
    def comm_width(self) -> int:
        """Columns of ``state.comm``: ``C``, or one zero column where ``C = 0`` (no state
        array is empty, so checkpoints can store every field)."""
        return max(self.dim_c, 1)

    @property
    def movable(self) -> np.ndarray:
        """``[N]`` bool (static): which agents move."""
        return np.concatenate([np.full(r.count, r.movable) for r in self.roles])

    # ----- state functions -----------------------------------------------------------
    def observations(self, state: MPEState, params: Any) -> dict[str, jax.Array]:
        """``{g: [A_g, obs_size(g)]}``: the observations of ``state`` (as ``ts.obs``)."""
        return self.observe(state, params)

    def global_state(self, state: MPEState, params: Any) -> jax.Array:
        """``[D]`` float32, ``D = Σ_g A_g · obs_size(g)``: every agent's observation in
        agent order, concatenated (mpe2's ``state()``)."""
        obs = self.observe(state, params)
        return jnp.concatenate([obs[g].reshape(-1) for g in self.groups])

    def _timestep(
        self, state: MPEState, params: Any, reward: jax.Array, success: jax.Array | None = None
    ) -> TimeStep:
        """Every agent truncated at ``t = max_cycles``, else terminated on ``success``
        (mpe2 checks the cap first)."""
        n = self.num_agents_total
        cap = state.t >= self.max_cycles
        end = cap if success is None else cap | success
        return TimeStep(
            obs=self.observe(state, params),
            reward=self.split(reward.astype(jnp.float32)),
            terminated=self.split(jnp.broadcast_to(end & ~cap, (n,))),
            truncated=self.split(jnp.broadcast_to(cap, (n,))),
            active=self.split(jnp.ones((n,), bool)),
            done=end,
        )

    # ----- dynamics ------------------------------------------------------------------
    def reset_env(self, key: jax.Array, params: Any) -> tuple[MPEState, TimeStep]:
        """Agents uniform in ``[−1, 1]²`` at rest and silent, landmarks uniform in
        ``[−r, r]²`` (``r = landmark_range``), goals uniform in their ranges."""
        n, lm = self.num_agents_total, self.num_landmarks
        ranges = self.goal_ranges
        # one draw for everything (no key split): agents, landmarks, goals
        u = jax.random.uniform(key, (2 * n + 2 * lm + len(ranges),), jnp.float32)
        r = self.landmark_range
        if ranges:
            hi = jnp.asarray(ranges, jnp.int32)
            goal = jnp.floor(u[2 * (n + lm) :] * hi.astype(jnp.float32)).astype(jnp.int32)
            goal = jnp.minimum(goal, hi - 1)
        else:
            goal = jnp.zeros((1,), jnp.int32)
        state = MPEState(
            agent_pos=u[: 2 * n].reshape(n, 2) * 2.0 - 1.0,
            agent_vel=jnp.zeros((n, 2), jnp.float32),
            comm=jnp.zeros((n, self.comm_width), jnp.float32),
            # one multiply-add (``u·2r − r``): the stored value and the observations'
            # recomputation of it in a fused kernel round alike
            landmark_pos=u[2 * n : 2 * (n + lm)].reshape(lm, 2) * (2.0 * r) - r,
            goal=goal,
            t=jnp.zeros((), jnp.int32),
        )
        return state, self._timestep(state, params, jnp.zeros((n,), jnp.float32))

    def step_env(
        self, key: jax.Array, state: MPEState, actions: dict[str, jax.Array], params: Any
    ) -> tuple[MPEState, TimeStep]:
        """One world step (module docstring); ``key`` is unused (no noise in MPE)."""
        del key
        us, cs = [], []
        for r in self.roles:
            u, c = decode_actions(actions[r.name], r, self.dim_c, self.continuous_actions)
            us.append(u)
            cs.append(c)
        u, comm = jnp.concatenate(us), jnp.concatenate(cs)
        if self.dim_c == 0:
            comm = jnp.zeros((self.num_agents_total, 1), jnp.float32)
        size, accel, max_speed = self.agent_physics(params)
        lc = self.num_obstacles
        force = u * accel[:, None] + contact_forces(
            state.agent_pos,
            size,
            params,
            agents_collide=self.agents_collide,
            obstacle_pos=state.landmark_pos[:lc] if lc else None,
            obstacle_size=self.obstacle_size(params),
        )
        pos, vel = integrate(
            state.agent_pos,
            state.agent_vel,
            force,
            params,
            max_speed=max_speed,
            movable=self.movable,
        )
        new = state.replace(agent_pos=pos, agent_vel=vel, comm=comm, t=state.t + 1)
        return new, self._timestep(
            new, params, self.rewards(new, params), self.success(new, params)
        )
