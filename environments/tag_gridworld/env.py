"""TagGridWorld: ``T`` taggers chase one runner on the integer grid ``{0..L}²``.

Written from the jaxdrive spec (``specs/tag.md``), following the semantics of WarpDrive
2.7.1's NumPy ``TagGridWorld``. Dimension letters: ``T`` taggers (ids ``0..T−1``,
type 0), one runner (id ``T``, type 1), ``M = T + 1`` agents, ``L`` the grid length,
``E`` the episode length.

Groups: ``"tagger"`` (``T`` agents) and ``"runner"`` (1 agent); both act with
``Discrete(5)``: 0 stay, 1 ``+x``, 2 ``−x``, 3 ``+y``, 4 ``−y``.

Example:
    >>> import jax
    >>> from environments.tag_gridworld import TagGridWorld
    >>> env = TagGridWorld(num_taggers=3, grid_length=5, episode_length=20)
    >>> state, ts = env.reset(jax.random.key(0))
    >>> ts.obs["tagger"].shape, ts.obs["runner"].shape
    ((3, 17), (1, 17))
    >>> state, ts = env.step(jax.random.key(1), state, env.sample_actions(jax.random.key(2)))
    >>> ts.reward["tagger"].shape
    (3,)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxdrive.env import Env
from jaxdrive.spaces import Box, Discrete
from jaxdrive.types import EnvParams, TimeStep

__all__ = ["MOVES", "TagGridWorld", "TagGridWorldParams", "TagGridWorldState"]

#: ``[5, 2]`` the (dx, dy) of each action: stay, +x, −x, +y, −y.
MOVES = ((0, 0), (1, 0), (-1, 0), (0, 1), (0, -1))


@struct.dataclass
class TagGridWorldParams(EnvParams):
    """Reward numbers (vmappable). Signs are applied by the env: penalties are subtracted."""

    wall_hit_penalty: float = 0.1  # subtracted from an agent whose move was clipped
    tag_reward_for_tagger: float = 10.0  # every tagger, on the step the runner is tagged
    tag_penalty_for_runner: float = 2.0  # subtracted from the runner when tagged
    step_cost_for_tagger: float = 0.01  # each untagged step: taggers −c, runner +c


@struct.dataclass
class TagGridWorldState:
    """State of one TagGridWorld (letters as in the module docstring)."""

    positions: jax.Array  # [M, 2] int32, (x, y) per agent; rows 0..T-1 taggers, row T runner
    t: jax.Array  # [] int32, steps taken this episode


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"TagGridWorld: {name} must be an integer, got {value!r}")
    if int(value) < minimum:
        raise ValueError(f"TagGridWorld: {name} must be >= {minimum}, got {value}")
    return int(value)


@dataclasses.dataclass(frozen=True)
class TagGridWorld(Env[TagGridWorldState, TagGridWorldParams]):
    """The game of tag on a square grid (see the module docstring).

    Static options:
      num_taggers: ``T >= 1``.
      grid_length: ``L >= 1``; positions lie in ``{0..L}²``.
      episode_length: ``E >= 1``; the episode is truncated when ``t >= E``.
      use_full_observation: full observations of size ``4M+1``
        (``[x_all/L, y_all/L, type_all, one_hot(i), t/E]``) or partial ones of size 6
        (``[x/L, y/L, x_o/L, y_o/L, type, t/E]``, where ``o`` is the runner for a tagger
        and the nearest tagger — squared Euclidean distance, ties to the lowest id — for
        the runner).
      random_start: when False every reset starts the taggers at ``(⌊L/2⌋, ⌊L/2⌋)`` and
        the runner at ``(0, 0)`` (WarpDrive's start). When True the taggers start
        uniformly on the interior ``{1..L−1}²`` and the runner at ``(0, 0)``, as
        WarpDrive's reset-pool generator draws them (for ``L = 1``, whose interior is
        empty, on every cell but ``(0, 0)``), so no tagger starts on the runner. Build
        a reset pool of such starts with ``jaxdrive.make_reset_pool(env, key, size)``.

    A tag (a tagger on the runner's cell after the move) ends the episode with every
    agent ``terminated``; reaching ``t >= E`` untagged ends it ``truncated``. Stepping
    past the end keeps counting ``t`` (observations' last feature exceeds 1 then), so
    use auto-reset. ``ts.extras == {"tagged": bool []}``.
    """

    num_taggers: int = 10
    grid_length: int = 10
    episode_length: int = 100
    use_full_observation: bool = True
    random_start: bool = False

    def __post_init__(self) -> None:
        _check_int("num_taggers", self.num_taggers, 1)
        _check_int("grid_length", self.grid_length, 1)
        _check_int("episode_length", self.episode_length, 1)
        for name in ("use_full_observation", "random_start"):
            if not isinstance(getattr(self, name), bool | np.bool_):
                raise ValueError(
                    f"TagGridWorld: {name} must be a bool, got {getattr(self, name)!r}"
                )

    # ----- static description -----------------------------------------------------------
    @property
    def groups(self) -> tuple[str, ...]:
        return ("tagger", "runner")

    def num_agents(self, group: str) -> int:
        if group == "tagger":
            return self.num_taggers
        if group == "runner":
            return 1
        raise ValueError(f"TagGridWorld has groups ('tagger', 'runner'), got {group!r}")

    @property
    def num_agents_total(self) -> int:
        """``M = T + 1``."""
        return self.num_taggers + 1

    @property
    def obs_size(self) -> int:
        """``4M + 1`` (full observation) or 6 (partial)."""
        return 4 * self.num_agents_total + 1 if self.use_full_observation else 6

    def observation_space(self, group: str) -> Box:
        self.num_agents(group)
        # Every feature lies in [0, 1] during an episode; the last one, t/E, is left
        # unbounded above because stepping past the end keeps counting.
        high = np.ones(self.obs_size, np.float32)
        high[-1] = np.inf
        return Box(0.0, high, (self.obs_size,))

    def action_space(self, group: str) -> Discrete:
        self.num_agents(group)
        return Discrete(len(MOVES))

    @property
    def default_params(self) -> TagGridWorldParams:
        return TagGridWorldParams()

    # ----- helpers ----------------------------------------------------------------------
    def start_positions(self, key: jax.Array) -> jax.Array:
        """The start of an episode: ``[M, 2]`` int32 (random only with ``random_start``)."""
        T, L = self.num_taggers, self.grid_length
        runner = jnp.zeros((1, 2), jnp.int32)
        if not self.random_start:
            taggers = jnp.full((T, 2), L // 2, jnp.int32)
        elif L >= 2:
            taggers = jax.random.randint(key, (T, 2), 1, L, dtype=jnp.int32)
        else:  # L == 1: the cells (0, 1), (1, 0), (1, 1)
            cell = jax.random.randint(key, (T,), 1, 4, dtype=jnp.int32)
            taggers = jnp.stack([cell // 2, cell % 2], axis=-1)
        return jnp.concatenate([taggers, runner], axis=0)

    def _split(self, per_agent: jax.Array) -> dict[str, jax.Array]:
        T = self.num_taggers
        return {"tagger": per_agent[:T], "runner": per_agent[T:]}

    def observations(self, state: TagGridWorldState, params: Any = None) -> dict[str, jax.Array]:
        """Every agent's observation: ``{"tagger": [T, D], "runner": [1, D]}`` float32."""
        T, M = self.num_taggers, self.num_agents_total
        L = jnp.float32(self.grid_length)
        pos = state.positions
        xy = pos.astype(jnp.float32) / L  # [M, 2]
        time = state.t.astype(jnp.float32) / jnp.float32(self.episode_length)
        agent_type = (jnp.arange(M) >= T).astype(jnp.float32)  # [M]
        if self.use_full_observation:
            common = jnp.concatenate([xy[:, 0], xy[:, 1], agent_type])  # [3M]
            obs = jnp.concatenate(
                [
                    jnp.broadcast_to(common, (M, 3 * M)),
                    jnp.eye(M, dtype=jnp.float32),
                    jnp.full((M, 1), time),
                ],
                axis=1,
            )  # [M, 4M+1]
        else:
            d2 = jnp.sum((pos[:T] - pos[T]) ** 2, axis=-1)  # [T] int32, exact
            nearest = jnp.argmin(d2)  # first minimum: ties go to the lowest id
            other = jnp.concatenate(
                [jnp.broadcast_to(xy[T], (T, 2)), xy[nearest][None]], axis=0
            )  # [M, 2]
            obs = jnp.concatenate(
                [xy, other, agent_type[:, None], jnp.full((M, 1), time)], axis=1
            )  # [M, 6]
        return self._split(obs)

    def init_state(
        self, positions: Any, t: Any = 0, params: TagGridWorldParams | None = None
    ) -> tuple[TagGridWorldState, TimeStep]:
        """A state at given ``positions`` (``[M, 2]`` ints in ``[0, L]``) and time ``t``.

        Returns ``(state, TimeStep.restart(...))``; useful for fixed starts and tests.
        """
        del params  # observations do not depend on the params
        M = self.num_agents_total
        positions = jnp.asarray(positions)
        if positions.shape != (M, 2) or not jnp.issubdtype(positions.dtype, jnp.integer):
            raise ValueError(
                f"TagGridWorld: positions must be integers of shape {(M, 2)}, got "
                f"{positions.dtype} {positions.shape}"
            )
        if not isinstance(positions, jax.core.Tracer):
            p = np.asarray(positions)
            if p.min() < 0 or p.max() > self.grid_length:
                raise ValueError(
                    f"TagGridWorld: positions must lie in [0, {self.grid_length}], "
                    f"got min {p.min()}, max {p.max()}"
                )
        state = TagGridWorldState(
            positions=positions.astype(jnp.int32), t=jnp.asarray(t, jnp.int32)
        )
        ts = TimeStep.restart(self.observations(state), extras={"tagged": jnp.asarray(False)})
        return state, ts

    # ----- dynamics ---------------------------------------------------------------------
    def reset_env(
        self, key: jax.Array, params: TagGridWorldParams
    ) -> tuple[TagGridWorldState, TimeStep]:
        return self.init_state(self.start_positions(key), 0)

    def step_env(
        self,
        key: jax.Array,
        state: TagGridWorldState,
        actions: dict[str, jax.Array],
        params: TagGridWorldParams,
    ) -> tuple[TagGridWorldState, TimeStep]:
        del key  # the dynamics are deterministic
        T, M, L = self.num_taggers, self.num_agents_total, self.grid_length
        a = jnp.concatenate([actions["tagger"], actions["runner"]])  # [M]
        moved = state.positions + jnp.asarray(MOVES, jnp.int32)[a]  # [M, 2]
        pos = jnp.clip(moved, 0, L)
        hit_wall = jnp.any(moved != pos, axis=-1)  # [M]
        tagged = jnp.any(jnp.all(pos[:T] == pos[T], axis=-1))  # []

        f32 = jnp.float32
        is_tagger = jnp.arange(M) < T
        tag_reward = jnp.where(
            is_tagger, f32(params.tag_reward_for_tagger), -f32(params.tag_penalty_for_runner)
        )
        cost = f32(params.step_cost_for_tagger)
        step_reward = jnp.where(is_tagger, -cost, cost)
        reward = jnp.where(tagged, tag_reward, step_reward)
        reward = reward - f32(params.wall_hit_penalty) * hit_wall.astype(f32)  # [M]

        t = state.t + 1
        out_of_time = t >= self.episode_length
        new_state = TagGridWorldState(positions=pos, t=t)
        ones = jnp.ones((M,), bool)
        ts = TimeStep(
            obs=self.observations(new_state, params),
            reward=self._split(reward.astype(f32)),
            terminated=self._split(ones & tagged),
            truncated=self._split(ones & out_of_time & ~tagged),
            active=self._split(ones),
            done=tagged | out_of_time,
            extras={"tagged": tagged},
        )
        return new_state, ts

    def global_state(self, state: TagGridWorldState, params: TagGridWorldParams) -> jax.Array:
        """``[2M + 1]`` float32: ``x_all/L``, ``y_all/L``, ``t/E``."""
        xy = state.positions.astype(jnp.float32) / jnp.float32(self.grid_length)
        time = state.t.astype(jnp.float32) / jnp.float32(self.episode_length)
        return jnp.concatenate([xy[:, 0], xy[:, 1], time[None]])
