"""TagContinuous: taggers chase runners on a continuous square (WarpDrive's game, in JAX).

The semantics of WarpDrive 2.7.1's NumPy ``example_envs.tag_continuous.TagContinuous``,
float32 throughout. See `TagContinuous`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from environments.tag_continuous import batched, neighbors, observations
from environments.tag_continuous.params import (
    BACKENDS,
    TagContinuousParams,
    TagKernelConfig,
    TagState,
    action_values,
    check_count,
    check_tagger_ids,
    make_params,
    validate_params,
)
from jaxdrive.env import Env
from jaxdrive.spaces import Box, MultiDiscrete
from jaxdrive.types import TimeStep

__all__ = ["TagContinuous"]

_TWO_PI = np.float32(2.0 * np.pi)


@dataclasses.dataclass(frozen=True)
class TagContinuous(Env[TagState, TagContinuousParams]):
    """Taggers chase runners on the continuous square ``[0, L]²`` (WarpDrive's TagContinuous).

    Dimension letters: ``T`` taggers, ``R`` runners, ``M = T + R`` agents, ``k``
    neighbours observed (partial observation), ``E`` episode length.

    Static configuration (the constructor; what fixes shapes and code paths):
      num_taggers, num_runners: ``T >= 1``, ``R >= 1``.
      episode_length: ``E >= 1``.
      use_full_observation: observe every other agent (``7(M−1)+1`` values) instead of
        the ``k`` nearest (``7k+1``). WarpDrive's class defaults to full, its run config
        to partial; here the default is partial, which scales to many agents.
      num_other_agents_observed: ``k`` in ``[1, M−1]`` (partial observation only).
      num_acceleration_levels, num_turn_levels: action levels (>= 1).
      runner_exits_game_after_tagged: a tagged runner leaves the game (frozen, zero reward).
      tagger_ids: which agent ids ``0..M−1`` are taggers (stored sorted). WarpDrive draws
        them at random once per env; here the default is the first ``T`` ids
        ``(0, …, T−1)``, and any fixed choice may be given.
      backend: ``"xla"`` (plain JAX: `step_env`, the `neighbors` search and
        `obs_xla`'s observations; the reference), ``"pallas"`` (the Pallas kernels of
        `environments.tag_continuous.kernels`: the neighbour search, the observation
        writers and, for `jaxdrive.vectorize`'s batched step, the one-kernel step with
        auto-reset, `batched`; Pallas interpret mode off GPU) or ``"auto"`` (the
        default: ``"pallas"`` when `jax.default_backend` is ``"gpu"``, else ``"xla"``).
        Both give the same values: bit for bit on the CPU (tests, interpret mode); on a
        GPU within an ulp where Triton contracts a product into an FMA or calls
        libdevice's ``cos``/``sin``/``sqrt``.
      kernel_config: the size thresholds of the kernel path (`TagKernelConfig`; ``None``:
        the defaults): which neighbour search by agent count, and up to which agent count
        the batched one-kernel step is used.

    Groups: ``"tagger"`` (``T`` agents, the tagger ids in increasing order) and
    ``"runner"`` (the other ids, increasing). Agent type: tagger 1, runner 0.

    Actions: per agent ``MultiDiscrete([num_acceleration_levels + 1, num_turn_levels + 1])``
    with index 0 the no-op and ``i >= 1`` the ``(i−1)``-th value of
    ``linspace(min, max, levels)`` (see `action_values`).

    Observation of agent ``i``, feature-major, float32: for each neighbour ``j`` the
    relative ``Δx/(√2 L)``, ``Δy/(√2 L)``, ``Δspeed/(max_speed+1e-10)``,
    ``Δa/(max_speed+1e-10)``, ``Δθ/(2π)`` (``Δ = value_j − value_i``), then ``type_j``
    and ``in_game_j``: first all neighbours' Δx, then all Δy, …, then all in-game flags,
    and last ``t/E``.
      * full: neighbours are all ``j != i`` in id order; an agent out of the game sees
        zeros in the five relative features and the time, but the types and flags.
      * partial: the ``k`` nearest ``j != i`` still in the game, nearest first (ties by
        lower id), zero padded; an agent out of the game sees all zeros.
    The observation is that of the state returned: after tagging (WarpDrive builds the
    step's observation before tagging, so its flags lag one step), and `reset` returns
    the real observation at ``t = 0`` (WarpDrive's partial observation at reset is zeros).

    Step (spec steps 1–9): turn, accelerate, cap the speed at ``max_speed · skill``,
    move and clip into the square (edge penalty), step rewards, tagging (each in-game
    runner's nearest tagger, lowest index on ties; within ``tagging_distance · L`` the
    runner gets ``tag_penalty_for_runner`` and that tagger ``tag_reward_for_tagger``,
    once per runner, so a tagger may collect several), end-of-game reward at ``t+1 = E``.

    TimeStep: ``active`` = in the game after the step. ``terminated`` marks a runner on
    the step it is tagged out, and every agent that was in the game when the episode
    ends (``t+1 >= E`` or no runner left): ``E`` is part of the game (the observation
    holds ``t/E`` and runners get an end-of-game reward), so it is a termination, not a
    truncation; ``truncated`` is always False (wrap in `jaxdrive.TimeLimit` to cut
    earlier). ``extras``: ``num_runners_left`` (int32 []) and ``num_tags`` (int32 [],
    runners tagged this step; 0 at reset).

    Start: ``x, y`` uniform in ``[0, L]``, ``θ`` uniform in ``{0, π/2, π, 3π/2}``, speed and
    acceleration 0, all in the game. Each reset draws a fresh start from its key; a fixed
    start (as WarpDrive) is a reset pool of size 1: ``jaxdrive.make_reset_pool(env, key,
    1)`` passed to ``AutoReset``/``VecEnv(reset_pool=...)``.

    Deviations from WarpDrive: the observation is that of the state returned (above);
    neighbours and the tagging tagger are ordered by the float32 squared distance, ties
    by lower index, where WarpDrive orders by the rounded square root, so squared
    distances that its square root merges may order differently; a runner is tagged when
    the float32 ``sqrt(d²) < tagging_distance · L`` (the threshold rounded once, in
    float32).

    Cost per env step: ``O(M)`` dynamics, ``O(R·T)`` nearest-tagger search, and
    ``O(M²)`` observations: partial observation searches the ``k`` nearest (plain JAX:
    ``M²`` distances in row blocks, see `neighbors`; kernels: the search of
    `TagKernelConfig`); full observation writes ``M·(7(M−1)+1)`` floats.

    Example:
        >>> import jax
        >>> from environments.tag_continuous import TagContinuous
        >>> env = TagContinuous(num_taggers=2, num_runners=5, num_other_agents_observed=3)
        >>> params = env.make_params(tagging_distance=0.05)
        >>> state, ts = env.reset(jax.random.key(0), params)
        >>> ts.obs["tagger"].shape, ts.obs["runner"].shape
        ((2, 22), (5, 22))
        >>> state, ts = env.step(jax.random.key(1), state, env.sample_actions(jax.random.key(2)),
        ...                      params)
        >>> ts.reward["runner"].shape
        (5,)
    """

    num_taggers: int = 1
    num_runners: int = 10
    episode_length: int = 100
    use_full_observation: bool = False
    num_other_agents_observed: int = 2
    num_acceleration_levels: int = 10
    num_turn_levels: int = 10
    runner_exits_game_after_tagged: bool = True
    tagger_ids: tuple[int, ...] | None = None
    backend: str = "auto"
    kernel_config: TagKernelConfig | None = None

    def __post_init__(self) -> None:
        def count(name: str, lo: int) -> int:
            object.__setattr__(self, name, check_count(name, getattr(self, name), lo))
            return getattr(self, name)

        t, r = count("num_taggers", 1), count("num_runners", 1)
        for name in ("episode_length", "num_acceleration_levels", "num_turn_levels"):
            count(name, 1)
        k = count("num_other_agents_observed", 0 if self.use_full_observation else 1)
        m = t + r
        object.__setattr__(self, "use_full_observation", bool(self.use_full_observation))
        exits = bool(self.runner_exits_game_after_tagged)
        object.__setattr__(self, "runner_exits_game_after_tagged", exits)
        if not self.use_full_observation and not 1 <= k <= m - 1:
            raise ValueError(
                f"TagContinuous: num_other_agents_observed must be in [1, M-1] = [1, {m - 1}] "
                f"for partial observation (M = {t} taggers + {r} runners), got {k}"
            )
        if self.backend not in BACKENDS:
            raise ValueError(
                f"TagContinuous: backend must be one of {BACKENDS}, got {self.backend!r}"
            )
        config = TagKernelConfig() if self.kernel_config is None else self.kernel_config
        if not isinstance(config, TagKernelConfig):
            raise ValueError(
                f"TagContinuous: kernel_config must be a TagKernelConfig, got {config!r}"
            )
        object.__setattr__(self, "kernel_config", config)
        object.__setattr__(self, "tagger_ids", check_tagger_ids(self.tagger_ids, t, m))

    # ----- static description ----------------------------------------------------------
    @property
    def uses_kernels(self) -> bool:
        """Whether the Pallas kernels run (``backend`` resolved: ``"auto"`` on a GPU)."""
        if self.backend == "auto":
            return jax.default_backend() == "gpu"
        return self.backend == "pallas"

    @property
    def interpret(self) -> bool:
        """Whether the kernels run in Pallas interpret mode (off GPU)."""
        return jax.default_backend() != "gpu"

    @property
    def search_method(self) -> str:
        """The kernels' neighbour search for ``M`` agents (`TagKernelConfig`)."""
        from environments.tag_continuous.kernels import search

        c = self.kernel_config
        return search.select_method(
            self.num_agents_total, brute_below=c.brute_below, grid_up_to=c.grid_up_to
        )

    @property
    def num_agents_total(self) -> int:
        """``M = T + R``."""
        return self.num_taggers + self.num_runners

    @property
    def runner_ids(self) -> tuple[int, ...]:
        """The runner agent ids, increasing."""
        taggers = set(self.tagger_ids)
        return tuple(i for i in range(self.num_agents_total) if i not in taggers)

    @property
    def is_tagger(self) -> np.ndarray:
        """``[M]`` bool, True for the tagger ids."""
        a = np.zeros(self.num_agents_total, bool)
        a[list(self.tagger_ids)] = True
        return a

    @property
    def groups(self) -> tuple[str, ...]:
        return ("tagger", "runner")

    def group_ids(self, group: str) -> tuple[int, ...]:
        """The agent ids of ``group``, in the group's order."""
        if group == "tagger":
            return self.tagger_ids
        if group == "runner":
            return self.runner_ids
        raise ValueError(f"TagContinuous has groups ('tagger', 'runner'), got {group!r}")

    def group_rows(self) -> tuple[dict[str, tuple[int, ...]], bool]:
        """Each group's agent ids, and whether every group's ids are contiguous."""
        ids = {g: self.group_ids(g) for g in self.groups}
        contiguous = all(i == tuple(range(i[0], i[0] + len(i))) for i in ids.values())
        return ids, contiguous

    def num_agents(self, group: str) -> int:
        return len(self.group_ids(group))

    @property
    def obs_size(self) -> int:
        """Values per observation: ``7(M−1)+1`` (full) or ``7k+1`` (partial)."""
        full = self.use_full_observation
        n = self.num_agents_total - 1 if full else self.num_other_agents_observed
        return 7 * n + 1

    def observation_space(self, group: str) -> Box:
        self.group_ids(group)
        return Box(-np.inf, np.inf, (self.obs_size,), jnp.float32)

    def action_space(self, group: str) -> MultiDiscrete:
        self.group_ids(group)
        return MultiDiscrete([self.num_acceleration_levels + 1, self.num_turn_levels + 1])

    @property
    def default_params(self) -> TagContinuousParams:
        return TagContinuousParams()

    def make_params(self, **overrides: Any) -> TagContinuousParams:
        """Default params with ``overrides`` (`params.make_params`)."""
        return make_params(**overrides)

    def split_groups(self, arr: jax.Array) -> dict[str, jax.Array]:
        """``[M, ...]`` in id order -> ``{g: [A_g, ...]}`` (static gathers or slices)."""
        out = {}
        for g in self.groups:
            ids = self.group_ids(g)
            if ids == tuple(range(ids[0], ids[0] + len(ids))):
                out[g] = arr[ids[0] : ids[0] + len(ids)]
            else:
                out[g] = arr[np.asarray(ids, np.int32)]
        return out

    def merge_groups(self, per_group: dict[str, jax.Array]) -> jax.Array:
        """``{g: [A_g, ...]}`` -> ``[M, ...]`` in id order."""
        cat = jnp.concatenate([per_group["tagger"], per_group["runner"]], axis=0)
        perm = np.asarray(self.tagger_ids + self.runner_ids)
        if np.array_equal(perm, np.arange(perm.size)):
            return cat
        return cat[np.argsort(perm)]

    # ----- observations ----------------------------------------------------------------
    def observe(
        self, state: TagState, params: TagContinuousParams, rows: tuple[int, int] | None = None
    ) -> jax.Array:
        """Observations of agents ``rows = (lo, hi)`` (default all), in id order:
        ``[hi − lo, obs_size]`` float32."""
        return observations.observe(self, state, params, rows)

    def observations(self, state: TagState, params: TagContinuousParams) -> dict[str, jax.Array]:
        """``{"tagger": [T, D], "runner": [R, D]}``: every group's observation of
        ``state``, as `reset`/`step` return it (`jaxdrive.vectorize` uses it to build the
        observations once per step, after auto-reset)."""
        return observations.group_observations(self, state, params)

    def global_state(self, state: TagState, params: TagContinuousParams) -> jax.Array:
        """A flat ``[7M+1]`` float32 view of ``state`` (`observations.global_state`)."""
        return observations.global_state(self, state, params)

    def _timestep(
        self,
        state: TagState,
        params: TagContinuousParams,
        reward: jax.Array,
        terminated: jax.Array,
        done: jax.Array,
        num_tags: jax.Array,
    ) -> TimeStep:
        obs = self.observations(state, params)
        runners_left = jnp.sum(self.split_groups(state.in_game)["runner"]).astype(jnp.int32)
        return TimeStep(
            obs=obs,
            reward=self.split_groups(reward),
            terminated=self.split_groups(terminated),
            truncated=self.split_groups(jnp.zeros_like(terminated)),
            active=self.split_groups(state.in_game),
            done=done,
            extras={"num_runners_left": runners_left, "num_tags": num_tags.astype(jnp.int32)},
        )

    # ----- dynamics --------------------------------------------------------------------
    def reset_env(self, key: jax.Array, params: TagContinuousParams) -> tuple[TagState, TimeStep]:
        """A fresh random start drawn from ``key``; the real observation at ``t = 0``."""
        validate_params(params)
        p = _f32(params)
        m = self.num_agents_total
        u = self.reset_uniforms(key)
        zeros = jnp.zeros((m,), jnp.float32)
        quarter = jnp.minimum(jnp.floor(u[2] * 4.0), 3.0)  # uniform in {0, 1, 2, 3}
        state = TagState(
            x=u[0] * p.grid_length,
            y=u[1] * p.grid_length,
            speed=zeros,
            direction=quarter * jnp.float32(np.pi / 2),
            acceleration=zeros,
            in_game=jnp.ones((m,), bool),
            t=jnp.zeros((), jnp.int32),
        )
        false = jnp.zeros((m,), bool)
        ts = self._timestep(state, params, zeros, false, jnp.asarray(False), jnp.int32(0))
        return state, ts

    def reset_uniforms(self, key: jax.Array) -> jax.Array:
        """``[3, M]`` float32: the uniforms a reset draws from ``key`` (x, y, direction)."""
        return jax.random.uniform(key, (3, self.num_agents_total), jnp.float32)  # one draw

    def step_env(
        self,
        key: jax.Array,
        state: TagState,
        actions: dict[str, jax.Array],
        params: TagContinuousParams,
    ) -> tuple[TagState, TimeStep]:
        """One step of every agent (spec steps 1–9) in plain JAX, the reference of the
        batched kernel (`vector_step`); ``key`` is unused (deterministic)."""
        del key
        validate_params(params)
        p = _f32(params)
        is_tagger = jnp.asarray(self.is_tagger)
        act = self.merge_groups(actions)  # [M, 2] int32
        d_acc = action_values(p.min_acceleration, p.max_acceleration, self.num_acceleration_levels)
        d_turn = action_values(p.min_turn, p.max_turn, self.num_turn_levels)
        d_acc, d_turn = d_acc[act[:, 0]], d_turn[act[:, 1]]

        g = state.in_game  # [M] in the game at the start of the step
        gf = g.astype(jnp.float32)
        L = p.grid_length
        # 1-4: turn, accelerate, cap the speed, drop the acceleration at a bound.
        theta = jnp.mod(state.direction + d_turn, jnp.float32(_TWO_PI)) * gf
        acc = state.acceleration + d_acc
        cap = p.max_speed * jnp.where(is_tagger, p.skill_level_tagger, p.skill_level_runner)
        speed = jnp.clip(state.speed + acc, 0.0, cap) * gf
        acc = acc * ((speed > 0) & (speed < cap)).astype(jnp.float32)
        # 5: move, clip into the square.
        x = state.x + speed * jnp.cos(theta)
        y = state.y + speed * jnp.sin(theta)
        crossed = ~((x >= 0) & (x <= L) & (y >= 0) & (y <= L))
        x = jnp.clip(x, 0.0, L)
        y = jnp.clip(y, 0.0, L)
        # 6: edge penalty and step rewards for agents in the game.
        step_reward = jnp.where(is_tagger, p.step_penalty_for_tagger, p.step_reward_for_runner)
        reward = jnp.where(g, p.edge_hit_penalty * crossed.astype(jnp.float32) + step_reward, 0.0)
        # 7: tagging: each in-game runner against its nearest tagger (an O(R·T) search
        # that XLA fuses with the step).
        xs, ys, gs = self.split_groups(x), self.split_groups(y), self.split_groups(g)
        nearest, dist2 = neighbors.nearest_tagger(
            xs["runner"], ys["runner"], xs["tagger"], ys["tagger"]
        )
        tagged = gs["runner"] & (jnp.sqrt(dist2) < p.tagging_distance * L)  # [R]
        tag_f = tagged.astype(jnp.float32)
        tagger_gain = jax.ops.segment_sum(
            tag_f * p.tag_reward_for_tagger, nearest, num_segments=self.num_taggers
        )  # [T], race-free: a tagger collects once per runner it tags
        reward = reward + self.merge_groups(
            {"tagger": tagger_gain, "runner": tag_f * p.tag_penalty_for_runner}
        )
        in_game = g
        if self.runner_exits_game_after_tagged:
            in_game = g & ~self.merge_groups(
                {"tagger": jnp.zeros_like(gs["tagger"]), "runner": tagged}
            )
        # 8: end-of-game reward; 9: done.
        t = state.t + 1
        end = t == self.episode_length
        reward = reward + jnp.where(
            end & in_game & ~is_tagger, p.end_of_game_reward_for_runner, 0.0
        )
        runners_left = jnp.sum(self.split_groups(in_game)["runner"])
        done = (t >= self.episode_length) | (runners_left == 0)
        terminated = (g & ~in_game) | (done & g)
        new = TagState(
            x=x, y=y, speed=speed, direction=theta, acceleration=acc, in_game=in_game, t=t
        )
        ts = self._timestep(new, params, reward, terminated, done, jnp.sum(tagged))
        return new, ts

    def vector_step(
        self,
        reset_keys: jax.Array | None,
        state: TagState,
        actions: dict[str, jax.Array],
        params: TagContinuousParams,
        *,
        step_key: jax.Array | None = None,
    ) -> tuple[TagState, TimeStep] | None:
        """With the kernels and at most `TagKernelConfig.batched_step_up_to` agents: a
        batch's step and auto-reset by one kernel, then the observations of the new
        states (`batched.vector_step`; see `jaxdrive.Env.vector_step`). Otherwise
        ``None`` (`jaxdrive.vectorize` then vmaps `step_env`)."""
        return batched.vector_step(self, reset_keys, state, actions, params, step_key)


def _f32(params: TagContinuousParams) -> TagContinuousParams:
    return jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), params)
