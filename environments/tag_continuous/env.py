"""TagContinuous: taggers chase runners on a continuous square, in plain JAX.

Follows /work/shared/specs/tag.md (the semantics of WarpDrive 2.7.1's NumPy
``example_envs.tag_continuous.TagContinuous``), float32 throughout. See `TagContinuous`.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from environments.tag_continuous import full_obs, knn_obs, neighbors, step_kernel, vector_step
from jaxdrive.env import Env, check_actions
from jaxdrive.spaces import Box, MultiDiscrete
from jaxdrive.types import EnvParams, TimeStep

__all__ = [
    "RESET_DRAWS_IN_KERNEL",
    "VECTOR_MAX_AGENTS",
    "VECTOR_TABLE",
    "TagContinuous",
    "TagContinuousParams",
    "TagState",
    "action_values",
    "validate_params",
]

_TWO_PI = np.float32(2.0 * np.pi)
_EPS = np.float32(1e-10)
_SQRT2 = np.float32(np.sqrt(2.0))
_IMPLS = ("auto", "jax", "pallas")
_STEP_IMPLS = ("auto", "xla", "pallas", "vector")
_KERNELS = "environments.tag_continuous.kernels"
#: ``step_impl="auto"`` takes the batched kernel up to this many agents per env (it lays
#: one env's agents along a program's lanes: beyond, a few envs leave the GPU idle).
VECTOR_MAX_AGENTS = 1024
#: ``step_impl="vector"``: the batched kernel draws the reset's uniforms itself from the
#: reset keys' data (threefry keys; the same bits as `TagContinuous._reset_uniforms`),
#: only for programs where an env resets, instead of an XLA kernel drawing ``[N, 3, M]``
#: every step. ``False``: the XLA draw (the A/B probes' setting ``draws``).
RESET_DRAWS_IN_KERNEL = True
#: ``step_impl="vector"`` with partial observation by the Pallas writer: the batched
#: kernel also writes the writer's agent-major feature table for any search (with the
#: brute-force search it always does, beside the search's padded inputs), instead of an
#: XLA transpose building it from the new state (H200, 2000 × (5+995): a 29 µs fusion
#: per step reading 56 MB and writing 64 MB). ``False``: the XLA table (the A/B probes'
#: setting ``vtable``).
VECTOR_TABLE = True


@struct.dataclass
class TagContinuousParams(EnvParams):
    """Numeric parameters of TagContinuous (a pytree; vmappable). Defaults: WarpDrive's.

    WarpDrive's run config ``tag_continuous.yaml`` uses ``grid_length=20``,
    ``max/min_acceleration=±0.1``, ``max/min_turn=±2.356``, ``tag_reward_for_tagger=10``,
    ``tag_penalty_for_runner=-10``, ``tagging_distance=0.02``.
    """

    grid_length: float = 10.0  # L, side of the square [0, L]²
    max_speed: float = 1.0
    skill_level_tagger: float = 1.0  # speed cap of a tagger = max_speed · skill
    skill_level_runner: float = 1.0
    min_acceleration: float = -1.0
    max_acceleration: float = 1.0
    min_turn: float = -math.pi / 2
    max_turn: float = math.pi / 2
    edge_hit_penalty: float = 0.0  # <= 0, added when an agent is clipped at an edge
    tagging_distance: float = 0.01  # in [0, 1], a fraction of L
    tag_reward_for_tagger: float = 1.0
    tag_penalty_for_runner: float = -1.0
    step_penalty_for_tagger: float = 0.0
    step_reward_for_runner: float = 0.0
    end_of_game_reward_for_runner: float = 1.0


def _concrete(v: Any) -> bool:
    return not isinstance(v, jax.core.Tracer)


def validate_params(params: TagContinuousParams) -> TagContinuousParams:
    """Checks ``params`` when its values are concrete (eager); traced values pass as is.

    Raises ``ValueError`` naming the field: ``grid_length > 0``, ``max_speed > 0``,
    skill levels ``>= 0``, ``min_acceleration <= max_acceleration``,
    ``min_turn <= max_turn``, ``edge_hit_penalty <= 0``, ``0 <= tagging_distance <= 1``,
    and every value finite. Returns ``params`` unchanged.
    """
    if not isinstance(params, TagContinuousParams):
        raise ValueError(f"TagContinuous needs TagContinuousParams, got {type(params).__name__}")
    vals: dict[str, float] = {}
    for f in dataclasses.fields(params):
        v = getattr(params, f.name)
        if not _concrete(v):
            continue
        a = np.asarray(v)
        if a.size == 1:
            vals[f.name] = float(a)
        elif not np.all(np.isfinite(a)):  # batched params (vmapped): check elementwise
            raise ValueError(f"TagContinuousParams.{f.name} must be finite, got {a}")
    for name, v in vals.items():
        if not math.isfinite(v):
            raise ValueError(f"TagContinuousParams.{name} must be finite, got {v}")

    def need(cond: bool, msg: str) -> None:
        if not cond:
            raise ValueError(f"TagContinuousParams: {msg}")

    g = vals.get
    if g("grid_length") is not None:
        need(g("grid_length") > 0, f"grid_length must be > 0, got {g('grid_length')}")
    if g("max_speed") is not None:
        need(g("max_speed") > 0, f"max_speed must be > 0, got {g('max_speed')}")
    for name in ("skill_level_tagger", "skill_level_runner"):
        if g(name) is not None:
            need(g(name) >= 0, f"{name} must be >= 0, got {g(name)}")
    for lo, hi in (("min_acceleration", "max_acceleration"), ("min_turn", "max_turn")):
        if g(lo) is not None and g(hi) is not None:
            need(g(lo) <= g(hi), f"{lo} ({g(lo)}) must be <= {hi} ({g(hi)})")
    if g("edge_hit_penalty") is not None:
        need(
            g("edge_hit_penalty") <= 0,
            f"edge_hit_penalty must be <= 0, got {g('edge_hit_penalty')}",
        )
    if g("tagging_distance") is not None:
        td = g("tagging_distance")
        need(0.0 <= td <= 1.0, f"tagging_distance must be in [0, 1] (a fraction of L), got {td}")
    return params


@struct.dataclass
class TagState:
    """State of one TagContinuous env; ``M`` agents in id order (taggers and runners)."""

    x: jax.Array  # [M] float32, in [0, L]
    y: jax.Array  # [M] float32, in [0, L]
    speed: jax.Array  # [M] float32, in [0, max_speed · skill]
    direction: jax.Array  # [M] float32, θ in [0, 2π)
    acceleration: jax.Array  # [M] float32
    in_game: jax.Array  # [M] bool, False once a runner is tagged (with runner exits)
    t: jax.Array  # [] int32, steps taken this episode


def action_values(lo: jax.Array, hi: jax.Array, levels: int) -> jax.Array:
    """The action table ``[levels + 1]`` float32: ``0`` (no-op), then ``levels`` values
    evenly spaced from ``lo`` to ``hi`` (the float32 arithmetic of ``np.linspace``)."""
    lo = jnp.asarray(lo, jnp.float32)
    hi = jnp.asarray(hi, jnp.float32)
    # Constant bounds would otherwise be folded by XLA (on the CPU, inside a gather of
    # the table) with other roundings: 9 of 21 values off np.linspace's for ±0.1, 20
    # levels. The barrier makes the table the same whether the bounds are traced or not.
    lo, hi = jax.lax.optimization_barrier((lo, hi))
    if levels == 1:
        vals = lo[None]
    else:
        # Bit-exact with NumPy under jit: ``+ lo * 0`` keeps XLA from turning the division
        # by a constant into a multiplication by its rounded reciprocal, and the select
        # between the product and the sum keeps them from being contracted into an FMA.
        div = jnp.float32(levels - 1) + lo * 0
        step = (hi - lo) / div
        prod = jnp.arange(levels, dtype=jnp.float32) * step
        prod = jnp.where(prod == prod, prod, jnp.float32(0))
        vals = (prod + lo).at[-1].set(hi)
    return jnp.concatenate([jnp.zeros((1,), jnp.float32), vals])


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
      impl: ``"jax"`` (the plain-JAX neighbour searches of `neighbors`), ``"pallas"``
        (``environments.tag_continuous.kernels``; ``interpret=True`` off GPU) or
        ``"auto"`` (Pallas on GPU, JAX elsewhere).
      full_obs_impl: how the full observation is computed: ``"auto"`` (the default:
        ``"pallas"`` on GPU when ``impl`` resolves to Pallas, else ``"gather"``), or one of
        `full_obs.IMPLS`: ``"gather"`` (the original form, all agents then split into
        groups), ``"iota"``, ``"take"``, ``"select"``, ``"pallas"`` (built per group, see
        `environments.tag_continuous.full_obs`). On the CPU all give the same values, bit
        for bit; on an H200 the Pallas kernel differs from ``"gather"`` by at most one
        float32 ulp (6e-8; Triton contracts to FMA) and is the fastest (1000 × (10+100)
        envs: 0.164 vs 0.205 ms per step). Ignored for partial observation.
      knn_obs_impl: how the partial (k-nearest) observation is assembled from the
        neighbour lists: ``"auto"`` (the default: ``"pallas"`` on GPU when the searches
        are the Pallas kernels, else ``"xla"``), ``"xla"`` (the original
        gather/transpose/concatenate form) or ``"pallas"`` (a kernel writing each group's
        rows once in their final layout, `environments.tag_continuous.knn_obs`;
        interpret mode off GPU). Same values bit for bit on the CPU (tests); on an H200
        equal with constant params and within one float32 ulp with traced ones
        (`experiments.benchmarks.knn_obs_probe`); H200 steps 0.144 → 0.124 ms at
        1000 × (10+100) and 2.84 → 2.08 ms at 2000 × (5+995), k = 10. Ignored for full
        observation.
      step_impl: how the step's dynamics (spec steps 1–9, before the observation) are
        computed: ``"auto"`` (the default: ``"vector"`` on GPU when ``impl`` resolves to
        Pallas and ``M <= 1024``, else ``"xla"``), ``"xla"`` (plain JAX,
        ~20 small XLA kernels per batched step) or ``"pallas"`` (one kernel, one program
        per env,
        `environments.tag_continuous.step_kernel`; interpret mode off GPU;
        experimental). Same values bit for bit on the CPU (tests), except that with
        constant params XLA can fold the ``"xla"`` step's action tables into values
        other than `action_values`' (np.linspace's; the kernel's are those); on GPU
        ``cos``, ``sin``, ``sqrt`` and FMA contraction may move values by an ulp; the
        H200 check (`experiments.benchmarks.step_kernel_probe`) found 0.4–0.9% of the
        outputs bitwise different with a largest float difference of 0 (signed zeros or
        integer fields: the probe now names the leaves), not yet explained.
        ``"vector"``: `jaxdrive.vectorize`'s batched step and auto-reset (shared params,
        no reset pool) run as one kernel over the whole batch
        (`environments.tag_continuous.vector_step`; it also writes the TimeStep's group
        arrays, the per-env scalars and, for partial observation below 256 agents, the
        search's and the observation writer's inputs), then the observations; a single
        env's `step` uses the XLA form. Same values bit for bit on the CPU (tests); on
        an H200 equal as numbers, with the one-kernel step's signed zeros (above), and
        faster: env-only steps 0.0961 → 0.0856 ms at 1000 × (10+100), 1.484 → 1.449 ms
        at 2000 × (5+995) (`experiments.benchmarks.vector_step_probe` checks it).

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

    Cost per env step: ``O(M)`` dynamics, ``O(R·T)`` nearest-tagger search, and
    ``O(M²)`` observations: partial observation searches the ``k`` nearest over ``M²``
    distances in row blocks (a ``[~2**20 / M, M]`` tile, see `neighbors`); full
    observation writes ``M·(7(M−1)+1)`` floats.

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
    impl: str = "auto"
    full_obs_impl: str = "auto"
    knn_obs_impl: str = "auto"
    step_impl: str = "auto"

    def __post_init__(self) -> None:
        def count(name: str, lo: int) -> int:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | np.integer):
                raise ValueError(f"TagContinuous: {name} must be an integer, got {v!r}")
            if int(v) < lo:
                raise ValueError(f"TagContinuous: {name} must be >= {lo}, got {v}")
            object.__setattr__(self, name, int(v))
            return int(v)

        t = count("num_taggers", 1)
        r = count("num_runners", 1)
        count("episode_length", 1)
        count("num_acceleration_levels", 1)
        count("num_turn_levels", 1)
        m = t + r
        object.__setattr__(self, "use_full_observation", bool(self.use_full_observation))
        object.__setattr__(
            self, "runner_exits_game_after_tagged", bool(self.runner_exits_game_after_tagged)
        )
        k = self.num_other_agents_observed
        if isinstance(k, bool) or not isinstance(k, int | np.integer):
            raise ValueError(
                f"TagContinuous: num_other_agents_observed must be an integer, got {k!r}"
            )
        object.__setattr__(self, "num_other_agents_observed", int(k))
        if not self.use_full_observation and not 1 <= int(k) <= m - 1:
            raise ValueError(
                f"TagContinuous: num_other_agents_observed must be in [1, M-1] = [1, {m - 1}] "
                f"for partial observation (M = {t} taggers + {r} runners), got {k}"
            )
        if self.impl not in _IMPLS:
            raise ValueError(f"TagContinuous: impl must be one of {_IMPLS}, got {self.impl!r}")
        if self.full_obs_impl not in ("auto", *full_obs.IMPLS):
            raise ValueError(
                f"TagContinuous: full_obs_impl must be one of {('auto', *full_obs.IMPLS)}, "
                f"got {self.full_obs_impl!r}"
            )
        if self.knn_obs_impl not in ("auto", *knn_obs.IMPLS):
            raise ValueError(
                f"TagContinuous: knn_obs_impl must be one of {('auto', *knn_obs.IMPLS)}, "
                f"got {self.knn_obs_impl!r}"
            )
        if self.step_impl not in _STEP_IMPLS:
            raise ValueError(
                f"TagContinuous: step_impl must be one of {_STEP_IMPLS}, got {self.step_impl!r}"
            )
        ids = self.tagger_ids
        if ids is None:
            ids = tuple(range(t))
        else:
            try:
                ids = tuple(int(i) for i in ids)
            except TypeError as e:
                raise ValueError(f"TagContinuous: tagger_ids must be a tuple of ints: {e}") from e
            if len(ids) != t or len(set(ids)) != t or not all(0 <= i < m for i in ids):
                raise ValueError(
                    f"TagContinuous: tagger_ids must be {t} distinct ids in [0, {m - 1}], "
                    f"got {self.tagger_ids}"
                )
            ids = tuple(sorted(ids))
        object.__setattr__(self, "tagger_ids", ids)

    # ----- static description ----------------------------------------------------------
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

    def num_agents(self, group: str) -> int:
        return len(self.group_ids(group))

    @property
    def obs_size(self) -> int:
        """Values per observation: ``7(M−1)+1`` (full) or ``7k+1`` (partial)."""
        n = (
            self.num_agents_total - 1
            if self.use_full_observation
            else self.num_other_agents_observed
        )
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
        """Default params with ``overrides`` (field names of `TagContinuousParams`), checked
        by `validate_params`; unknown names raise ``ValueError``."""
        names = {f.name for f in dataclasses.fields(TagContinuousParams)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ValueError(
                f"unknown TagContinuousParams field(s) {unknown}; fields: {sorted(names)}"
            )
        return validate_params(TagContinuousParams(**overrides))

    # ----- helpers ------------------------------------------------------------------
    def _resolved_impl(self) -> str:
        if self.impl != "auto":
            return self.impl
        return "pallas" if jax.default_backend() == "gpu" else "jax"

    def _resolved_full_obs_impl(self) -> str:
        if self.full_obs_impl != "auto":
            return self.full_obs_impl
        gpu = jax.default_backend() == "gpu"
        return "pallas" if gpu and self._resolved_impl() == "pallas" else "gather"

    def _resolved_knn_obs_impl(self) -> str:
        # "auto": the Pallas writer on GPU when the search runs the Pallas kernels
        # (H200, 1000 x (10+100), k = 10: the step 0.144 -> 0.131 ms; 2000 x (5+995):
        # 2.84 -> 2.65 ms; <= 1 float32 ulp from the XLA form), else the XLA form.
        if self.knn_obs_impl != "auto":
            return self.knn_obs_impl
        gpu = jax.default_backend() == "gpu"
        return "pallas" if gpu and self._resolved_impl() == "pallas" else "xla"

    def _resolved_step_impl(self) -> str:
        # "auto": the batched kernel on GPU with the Pallas searches (H200, env-only
        # steps, 2026-11-24: 0.0961 -> 0.0856 ms at 1000 x (10+100), 1.484 -> 1.449 ms
        # at 2000 x (5+995)); XLA elsewhere (interpret mode is slow). The one-program-
        # per-env "pallas" kernel measured no faster (experiments/benchmarks/NOTES.md).
        # Not beyond VECTOR_MAX_AGENTS: one program per env then (10 x (100+10,000):
        # 0.26 -> 3.5 ms per step, most of the GPU idle).
        if self.step_impl != "auto":
            return self.step_impl
        gpu = jax.default_backend() == "gpu"
        small = self.num_agents_total <= VECTOR_MAX_AGENTS
        return "vector" if gpu and small and self._resolved_impl() == "pallas" else "xla"

    def _search_module(self):
        """The module providing ``nearest_k``/``nearest_tagger`` and the kwargs to pass."""
        if self._resolved_impl() == "pallas":
            try:
                kernels = importlib.import_module(_KERNELS)
            except ModuleNotFoundError as e:
                if self.impl == "auto" and e.name == _KERNELS:
                    return neighbors, {}
                raise
            return kernels, {"interpret": jax.default_backend() != "gpu"}
        return neighbors, {}

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

    @staticmethod
    def _f32(params: TagContinuousParams) -> TagContinuousParams:
        return jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), params)

    def _types(self) -> jax.Array:
        return jnp.asarray(self.is_tagger, jnp.float32)  # [M], tagger 1, runner 0

    # ----- observations ----------------------------------------------------------------
    def observe(
        self, state: TagState, params: TagContinuousParams, rows: tuple[int, int] | None = None
    ) -> jax.Array:
        """Observations of agents ``rows = (lo, hi)`` (default all), in id order:
        ``[hi − lo, obs_size]`` float32.

        ``rows`` lets observations be built per group (see `_timestep`).
        """
        m = self.num_agents_total
        lo, hi = (0, m) if rows is None else rows
        if self.use_full_observation:
            return self._observe_full(state, params, range(lo, hi))
        idx, valid = self._nearest_k(state)
        return self._observe_knn(
            state, params, range(lo, hi), idx, valid, lists_in_game=self._lists_in_game(valid)
        )

    def _nearest_k(self, state: TagState) -> tuple[jax.Array, jax.Array | None]:
        """The neighbour lists of all agents: ``idx, valid [M, k]`` (see `neighbors`), or,
        when the Pallas search feeds the Pallas observation writer, the kernels' own
        lists ``[M, k]`` with ``-1`` in empty slots and ``valid = None`` (one pass fewer:
        `kernels.nearest_k_lists`)."""
        search, kw = self._search_module()
        k = self.num_other_agents_observed
        if search is not neighbors and self._resolved_knn_obs_impl() == "pallas":
            lists = search.nearest_k_lists(
                state.x, state.y, state.in_game, k, queries=search.ENV_QUERIES, **kw
            )
            return lists, None
        return search.nearest_k(state.x, state.y, state.in_game, k, **kw)

    def _lists_in_game(self, valid: jax.Array | None) -> bool:
        """Whether `_nearest_k`'s lists (``valid=None``: the kernels' own) leave the rows of
        agents out of the game all ``-1`` (`kernels.lists_in_game_only`)."""
        search, _ = self._search_module()
        if valid is not None or search is neighbors or not knn_obs.USE_IN_GAME_LISTS:
            return False
        m, queries = self.num_agents_total, search.ENV_QUERIES
        return bool(search.lists_in_game_only(m, None, queries))

    def _observe_knn(
        self,
        state: TagState,
        params: TagContinuousParams,
        rows: Sequence[int],
        idx: jax.Array,
        valid: jax.Array | None,
        *,
        alone: bool = True,
        time: jax.Array | None = None,
        lists_in_game: bool = False,
        **options: Any,
    ) -> jax.Array:
        """Partial observations of the agent ids ``rows`` (static, any order) from the
        neighbour lists ``idx, valid [M, k]`` (``valid=None``: ``idx`` has ``-1`` in empty
        slots, see `_nearest_k`): ``[n, 7k+1]`` float32, by `knn_obs` with
        ``knn_obs_impl`` (``options``: `knn_obs.knn_obs_pallas`'s block options, for
        the benchmarks; ignored by the XLA form; ``time``: ``t / E`` if already computed,
        as the batched kernel does; ``lists_in_game``: the lists of agents out of the game
        are all ``-1``, see `_lists_in_game`).

        The Pallas form is told whether XLA compiles the original's division by the scale
        into a multiplication by its reciprocal (as in `_observe_full`), so they agree.
        One case takes the XLA form instead: a single row with ``k = 1`` that the XLA
        path would build ``alone`` (not as part of all ``M`` rows, as it does for groups
        of non-contiguous ids). There the original divides by an un-broadcast
        ``[1, 7, 1]`` scale, which XLA on the CPU divides or multiplies by the reciprocal
        depending on the context (`jax.vmap` with shared params adds a broadcast), so no
        fixed choice would match it bit for bit (and 8 values per env are not worth a
        kernel launch).
        """
        form = self._resolved_knn_obs_impl()
        if form == "pallas" and alone and len(rows) * self.num_other_agents_observed == 1:
            form = "xla"
        kw = {}
        if form == "pallas":
            constant = _concrete(params.grid_length) and _concrete(params.max_speed)
            kw["reciprocal"] = full_obs.reference_uses_reciprocal(constant)
            kw["interpret"] = jax.default_backend() != "gpu"
            kw["lists_in_game"] = bool(lists_in_game) and valid is None
            kw.update(options)
        p = self._f32(params)
        diag = p.grid_length * _SQRT2
        ms = p.max_speed + _EPS
        one = jnp.float32(1.0)
        scale = jnp.stack([diag, diag, ms, ms, jnp.float32(_TWO_PI), one, one])  # [7]
        if time is None:
            time = state.t.astype(jnp.float32) / jnp.float32(self.episode_length)
        feats = self._features(state)  # [7, M]
        return knn_obs.knn_obs(form, feats, idx, valid, rows, scale, state.in_game, time, **kw)

    def _observe_knn_groups(
        self,
        state: TagState,
        params: TagContinuousParams,
        idx: jax.Array,
        valid: jax.Array | None,
        *,
        row_order: jax.Array | None = None,
        **options: Any,
    ) -> dict[str, jax.Array]:
        """Every group's partial observation: `_observe_knn` of each group's rows
        (``options``: its keyword arguments; ``row_order``: the search's spatial order of
        the agents, passed on for the groups of at least half the agents, see
        `knn_obs.SORTED_ROWS`). (Tried: all groups by one launch of the writer, a grid
        over both groups' blocks: 22.1 → 23.0 µs per step at 1000 × (10+100), 309.8 →
        311.3 µs at 2000 × (5+995), H200 run 65; not kept.)"""
        ids, contiguous = self._group_rows()
        m = self.num_agents_total
        out = {}
        for g, i in ids.items():
            kw = dict(options)
            if row_order is not None and contiguous and 2 * len(i) >= m:
                kw["row_order"] = row_order
            out[g] = self._observe_knn(state, params, i, idx, valid, alone=contiguous, **kw)
        return out

    def _sorted_rows(self) -> bool:
        """Whether `_observe_nearest` hands the writer the grid search's spatial order
        (`knn_obs.SORTED_ROWS`: the Pallas grid search feeding the column-tile writer)."""
        if not knn_obs.SORTED_ROWS or knn_obs.LAYOUT != "cols":
            return False
        search, _ = self._search_module()
        return (
            search is not neighbors
            and self._resolved_knn_obs_impl() == "pallas"
            and search._resolve_method(None, self.num_agents_total) == "grid"
        )

    def _observe_nearest(
        self, state: TagState, params: TagContinuousParams, **options: Any
    ) -> dict[str, jax.Array]:
        """Every group's partial observation from one search of ``state`` (`_nearest_k`):
        `_observe_knn_groups` (``options``: `_observe_knn`'s ``time``, ``table``, ...)."""
        if self._sorted_rows():
            search, kw = self._search_module()
            lists, order = search.nearest_k_lists_ordered(
                state.x, state.y, state.in_game, self.num_other_agents_observed,
                queries=search.ENV_QUERIES, **kw,
            )  # fmt: skip
            in_game = self._lists_in_game(None)
            return self._observe_knn_groups(
                state, params, lists, None, lists_in_game=in_game, row_order=order, **options
            )
        idx, valid = self._nearest_k(state)
        in_game = self._lists_in_game(valid)
        return self._observe_knn_groups(state, params, idx, valid, lists_in_game=in_game, **options)

    def _features(self, state: TagState) -> jax.Array:
        """``[7, M]``: x, y, speed, acceleration, direction (the five relative features),
        then type and in-game (float32)."""
        return jnp.stack(
            [state.x, state.y, state.speed, state.acceleration, state.direction]
            + [self._types(), state.in_game.astype(jnp.float32)]
        )

    def _observe_full(
        self, state: TagState, params: TagContinuousParams, rows: Sequence[int]
    ) -> jax.Array:
        """Full observations of the agent ids ``rows`` (static, any order): ``[n, 7(M−1)+1]``
        float32, by `full_obs` with ``full_obs_impl``.

        The forms other than ``"gather"`` are told whether XLA compiles the original's
        division by the scale into a multiplication by its reciprocal (on the CPU, or when
        the scale is a compile-time constant: params not traced), so they agree bit for bit.
        """
        form = self._resolved_full_obs_impl()
        kw = {}
        if form != "gather":
            constant = _concrete(params.grid_length) and _concrete(params.max_speed)
            kw["reciprocal"] = full_obs.reference_uses_reciprocal(constant)
        p = self._f32(params)
        diag = p.grid_length * _SQRT2
        ms = p.max_speed + _EPS
        one = jnp.float32(1.0)
        scale = jnp.stack([diag, diag, ms, ms, jnp.float32(_TWO_PI), one, one])  # [7]
        gf = state.in_game.astype(jnp.float32)
        time = state.t.astype(jnp.float32) / jnp.float32(self.episode_length)
        feats = self._features(state)
        return full_obs.full_obs(form, feats, rows, scale, gf, time, **kw)

    def observations(self, state: TagState, params: TagContinuousParams) -> dict[str, jax.Array]:
        """``{"tagger": [T, D], "runner": [R, D]}``: every group's observation of
        ``state``, as `reset`/`step` return it (`jaxdrive.vectorize` uses it to build the
        observations once per step, after auto-reset)."""
        ids, contiguous = self._group_rows()
        if self.use_full_observation and self._resolved_full_obs_impl() != "gather":
            # one-pass forms (`full_obs`): each group's rows directly, any ids.
            return {g: self._observe_full(state, params, i) for g, i in ids.items()}
        elif not self.use_full_observation and (
            contiguous or self._resolved_knn_obs_impl() == "pallas"
        ):
            # k-nearest with contiguous groups (the default) or the Pallas form: one search,
            # then each group's rows directly (measured faster on an H200; for full
            # observation by "gather" one [M, D] pass then slicing measured faster: 0.56 vs
            # 0.78 ms per step of 1000 × (10+100) envs)
            return self._observe_nearest(state, params)
        else:
            return self.split_groups(self.observe(state, params))

    def global_state(self, state: TagState, params: TagContinuousParams) -> jax.Array:
        """A flat ``[7M+1]`` float32 view: ``x/L, y/L, speed/max_speed, θ/(2π),
        a/max_speed, type, in_game`` (each ``[M]``, id order), then ``t/E``."""
        p = self._f32(params)
        ms = p.max_speed + _EPS
        return jnp.concatenate(
            [
                state.x / p.grid_length,
                state.y / p.grid_length,
                state.speed / ms,
                state.direction / _TWO_PI,
                state.acceleration / ms,
                self._types(),
                state.in_game.astype(jnp.float32),
                (state.t.astype(jnp.float32) / jnp.float32(self.episode_length))[None],
            ]
        )

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
        p = self._f32(params)
        m = self.num_agents_total
        u = self._reset_uniforms(key)
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

    def _reset_uniforms(self, key: jax.Array) -> jax.Array:
        """``[3, M]`` float32: the uniforms a reset draws from ``key`` (x, y, direction)."""
        return jax.random.uniform(key, (3, self.num_agents_total), jnp.float32)  # one draw

    def step_env(
        self,
        key: jax.Array,
        state: TagState,
        actions: dict[str, jax.Array],
        params: TagContinuousParams,
    ) -> tuple[TagState, TimeStep]:
        """One step of every agent (spec steps 1–9); ``key`` is unused (deterministic)."""
        del key
        validate_params(params)
        if self._resolved_step_impl() == "pallas":
            return self._step_pallas(state, actions, params)
        p = self._f32(params)
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
        # 7: tagging: each in-game runner against its nearest tagger.
        xs, ys, gs = self.split_groups(x), self.split_groups(y), self.split_groups(g)
        # Plain JAX on every path: XLA fuses this O(R·T) search with the step, and the
        # Pallas version measured slower on an H100 (kernels.py docstring).
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

    def _step_pallas(
        self,
        state: TagState,
        actions: dict[str, jax.Array],
        params: TagContinuousParams,
        **options: Any,
    ) -> tuple[TagState, TimeStep]:
        """`step_env` with the dynamics in one kernel (`step_kernel.tag_step`; ``options``:
        its ``fence_products``/``num_warps``/``interpret``), then the same TimeStep."""
        pvec = self._kernel_params(params)
        options.setdefault("interpret", jax.default_backend() != "gpu")
        args, static = self._kernel_args(state, actions)
        x, y, speed, theta, acc, in_game, reward, terminated, done, num_tags = step_kernel.tag_step(
            pvec, *args, **static, **options
        )
        new = TagState(
            x=x, y=y, speed=speed, direction=theta, acceleration=acc, in_game=in_game,
            t=state.t + 1,
        )  # fmt: skip
        ts = self._timestep(new, params, reward, terminated, done, num_tags)
        return new, ts

    def _vector_search_padding(self) -> tuple[int, int] | None:
        """``(MQ, MC)`` when the batched kernel also writes the observations' inputs (the
        brute-force search's padded positions and the writer's feature table): partial
        observation by the Pallas search and writer, below `kernels.SORTED_MIN_AGENTS`
        agents, both lengths within one env's lanes. Otherwise ``None``."""
        search, kw = self._search_module()
        m = self.num_agents_total
        if (
            self.use_full_observation
            or search is neighbors
            or self._resolved_knn_obs_impl() != "pallas"
            or search._resolve_method(None, m) != "brute"
        ):
            return None
        mq, mc = search.brute_padding(m, kw.get("interpret"))
        return (mq, mc) if max(mq, mc) <= vector_step.lanes(m) else None

    def _vector_table(self) -> bool:
        """Whether the batched kernel writes the Pallas writer's feature table for a
        search without padded inputs (`VECTOR_TABLE`; partial observation by the Pallas
        writer)."""
        return (
            VECTOR_TABLE
            and not self.use_full_observation
            and self._resolved_knn_obs_impl() == "pallas"
        )

    def _group_rows(self) -> tuple[dict[str, tuple[int, ...]], bool]:
        """Each group's agent ids, and whether every group's ids are contiguous."""
        ids = {g: self.group_ids(g) for g in self.groups}
        contiguous = all(i == tuple(range(i[0], i[0] + len(i))) for i in ids.values())
        return ids, contiguous

    def _kernel_args(
        self, state: TagState, actions: dict[str, jax.Array]
    ) -> tuple[tuple[jax.Array, ...], dict[str, Any]]:
        """The step kernels' shared arguments: the state's arrays and both groups'
        actions (positional, as `step_kernel.tag_step` and `vector_step.tag_vector_step`
        take them after the params), and the static configuration (keywords)."""
        args = (
            state.x, state.y, state.speed, state.direction, state.acceleration,
            state.in_game, state.t, actions["tagger"], actions["runner"],
        )  # fmt: skip
        static = dict(
            tagger_ids=self.tagger_ids,
            num_acceleration_levels=self.num_acceleration_levels,
            num_turn_levels=self.num_turn_levels,
            episode_length=self.episode_length,
            runner_exits_game_after_tagged=self.runner_exits_game_after_tagged,
        )
        return args, static

    def _kernel_params(self, params: TagContinuousParams) -> jax.Array:
        """The step kernels' parameter vector ``[step_kernel.num_params(la, lt)]``."""
        p = self._f32(params)
        la, lt = self.num_acceleration_levels, self.num_turn_levels
        # The tables as `action_values` computes them eagerly (np.linspace's float32
        # values): the barrier keeps XLA from folding constant bounds into a context
        # where it rewrites the division (it does so in the XLA step's gather when the
        # params are constants; see the report of the step kernel).
        bounds = (p.min_acceleration, p.max_acceleration, p.min_turn, p.max_turn)
        a_lo, a_hi, t_lo, t_hi = jax.lax.optimization_barrier(bounds)
        scalars = {
            "grid_length": p.grid_length,
            "cap_tagger": p.max_speed * p.skill_level_tagger,
            "cap_runner": p.max_speed * p.skill_level_runner,
            "edge_hit_penalty": p.edge_hit_penalty,
            "tag_threshold": p.tagging_distance * p.grid_length,
            "tag_reward_for_tagger": p.tag_reward_for_tagger,
            "tag_penalty_for_runner": p.tag_penalty_for_runner,
            "step_penalty_for_tagger": p.step_penalty_for_tagger,
            "step_reward_for_runner": p.step_reward_for_runner,
            "end_of_game_reward_for_runner": p.end_of_game_reward_for_runner,
        }
        return jnp.concatenate(
            [
                jnp.stack([scalars[name] for name in step_kernel.PARAMS]),
                action_values(a_lo, a_hi, la),
                action_values(t_lo, t_hi, lt),
            ]
        )

    def vector_step(
        self,
        reset_keys: jax.Array | None,
        state: TagState,
        actions: dict[str, jax.Array],
        params: TagContinuousParams,
        *,
        step_key: jax.Array | None = None,
        **options: Any,
    ) -> tuple[TagState, TimeStep] | None:
        """With ``step_impl="vector"``: a batch's step and auto-reset by one kernel
        (`vector_step.tag_vector_step`; ``options``: its ``fence_products``,
        ``envs_per_program``, ``num_warps``, ``interpret``), then the observations of the
        new states; see `jaxdrive.Env.vector_step`. Otherwise ``None``. With
        `RESET_DRAWS_IN_KERNEL` and threefry keys the kernel derives the reset keys from
        ``step_key`` (else takes ``reset_keys``' data) and draws the reset's uniforms."""
        if self._resolved_step_impl() != "vector":
            return None
        validate_params(params)
        actions = jax.vmap(functools.partial(check_actions, self))(actions)
        # the reset's uniforms: drawn by the kernel from the keys' data where it can
        # reproduce `_reset_uniforms` (threefry keys), else drawn here
        u = data = parent = None
        if reset_keys is not None:
            if RESET_DRAWS_IN_KERNEL and step_key is not None:
                parent = vector_step.key_data_for_uniforms(step_key)
                if parent is not None and parent.shape != (2,):  # not one key
                    parent = None
            if RESET_DRAWS_IN_KERNEL and parent is None:
                data = vector_step.key_data_for_uniforms(reset_keys)
            if parent is None and data is None:
                u = jax.vmap(self._reset_uniforms)(reset_keys)
        options.setdefault("interpret", jax.default_backend() != "gpu")
        p = self._f32(params)
        search, kw = self._search_module()
        m = self.num_agents_total
        padding = self._vector_search_padding()
        with_table = padding is not None or self._vector_table()
        args, static = self._kernel_args(state, actions)
        out = vector_step.tag_vector_step(
            [getattr(p, name) for name in vector_step.RAW_PARAMS],
            *args,
            u,
            reset_key_data=data,
            step_key_data=parent,
            **static,
            search_padding=padding,
            feature_table=with_table,
            **options,
        )
        new = TagState(
            x=out.x, y=out.y, speed=out.speed, direction=out.direction,
            acceleration=out.acceleration, in_game=out.in_game, t=out.t,
        )  # fmt: skip
        if padding is None and out.table is None:
            obs = jax.vmap(self.observations, in_axes=(0, None))(new, params)
        elif padding is None:  # as `observations` builds them, with the kernel's table

            def observe_table(state, table, time):
                return self._observe_nearest(state, params, time=time, table=table)

            obs = jax.vmap(observe_table)(new, out.table, out.time)
        else:  # as `observations` builds them, from the kernel's search inputs and table
            k = self.num_other_agents_observed
            lists = search.brute_lists_padded(*out.search, m, k, interpret=kw.get("interpret"))

            def observe(state, lists, table, time):
                return self._observe_knn_groups(state, params, lists, None, table=table, time=time)

            obs = jax.vmap(observe)(new, lists, out.table, out.time)

        def groups(pair):
            return dict(zip(("tagger", "runner"), pair, strict=True))

        ts = TimeStep(
            obs=obs,
            reward=groups(out.reward),
            terminated=groups(out.terminated),
            truncated=groups(out.truncated),
            active=groups(out.active),
            done=out.done,
            extras={"num_runners_left": out.runners_left, "num_tags": out.num_tags},
        )
        return new, ts
