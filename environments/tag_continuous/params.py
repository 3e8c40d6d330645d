"""TagContinuous's numeric parameters, state, kernel configuration and their checks.

`TagContinuousParams` holds what a user may vary or vmap over (a pytree passed to every
call); `TagState` one env's state; `TagKernelConfig` the size thresholds of the kernel
path (static, hashable: part of the env and so of the jit cache key); `action_values` the
action tables, bit-exact with NumPy's ``linspace``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxdrive.types import EnvParams

__all__ = [
    "BACKENDS",
    "TagContinuousParams",
    "TagKernelConfig",
    "TagState",
    "action_values",
    "check_count",
    "check_tagger_ids",
    "is_concrete_scale",
    "make_params",
    "validate_params",
]

#: The env's ``backend`` values: ``"auto"`` (Pallas kernels on a GPU, plain JAX
#: elsewhere), ``"xla"`` (plain JAX), ``"pallas"`` (the kernels; interpret mode off GPU).
BACKENDS = ("auto", "xla", "pallas")


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


@dataclasses.dataclass(frozen=True)
class TagKernelConfig:
    """Size thresholds of TagContinuous's kernel path (``backend="pallas"``, or ``"auto"``
    on a GPU). Frozen and hashable: two envs with different configs compile two programs.

    All searches give the same neighbour lists and the batched step the same values as
    the plain-JAX step; the thresholds only pick the fastest form for the agent count
    ``M`` of one env:

    * ``brute_below``, ``grid_up_to``: the neighbour search of the partial observation
      (`environments.tag_continuous.kernels.select_method`): every pair (``"brute"``)
      below ``brute_below`` agents, the uniform-grid search up to ``grid_up_to`` agents
      (at most 1024, the grid kernel's limit), the sorted (space-filling-curve) search
      above.
    * ``batched_step_up_to``: `TagContinuous.vector_step` (the batch's step and
      auto-reset as one kernel) up to this many agents per env. It lays one env's agents
      along one program's lanes, so beyond that a batch of a few large envs would leave
      most of the GPU idle; the vmapped plain-JAX step is used there.
    """

    brute_below: int = 256
    grid_up_to: int = 1024
    batched_step_up_to: int = 1024

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 0:
                raise ValueError(f"TagKernelConfig.{f.name} must be an integer >= 0, got {v!r}")
            object.__setattr__(self, f.name, int(v))


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


def make_params(**overrides: Any) -> TagContinuousParams:
    """Default params with ``overrides`` (field names of `TagContinuousParams`), checked
    by `validate_params`; unknown names raise ``ValueError``."""
    names = {f.name for f in dataclasses.fields(TagContinuousParams)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise ValueError(f"unknown TagContinuousParams field(s) {unknown}; fields: {sorted(names)}")
    return validate_params(TagContinuousParams(**overrides))


def is_concrete_scale(params: TagContinuousParams) -> bool:
    """Whether the observation's scale (``grid_length``, ``max_speed``) is a compile-time
    constant (params closed over rather than traced)."""
    return _concrete(params.grid_length) and _concrete(params.max_speed)


def check_count(name: str, value: Any, lo: int) -> int:
    """``value`` as an int ``>= lo`` (not a bool), else ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"TagContinuous: {name} must be an integer, got {value!r}")
    if int(value) < lo:
        raise ValueError(f"TagContinuous: {name} must be >= {lo}, got {value}")
    return int(value)


def check_tagger_ids(ids: Any, num_taggers: int, num_agents: int) -> tuple[int, ...]:
    """The tagger ids, sorted: ``(0, …, T−1)`` for ``None``, else ``T`` distinct ids in
    ``[0, M−1]`` (``ValueError`` otherwise)."""
    if ids is None:
        return tuple(range(num_taggers))
    try:
        out = tuple(int(i) for i in ids)
    except TypeError as e:
        raise ValueError(f"TagContinuous: tagger_ids must be a tuple of ints: {e}") from e
    if len(out) != num_taggers or len(set(out)) != num_taggers:
        bad = True
    else:
        bad = not all(0 <= i < num_agents for i in out)
    if bad:
        raise ValueError(
            f"TagContinuous: tagger_ids must be {num_taggers} distinct ids in "
            f"[0, {num_agents - 1}], got {ids}"
        )
    return tuple(sorted(out))


def action_values(lo: jax.Array, hi: jax.Array, levels: int) -> jax.Array:
    """The action table ``[levels + 1]`` float32: ``0`` (no-op), then ``levels`` values
    evenly spaced from ``lo`` to ``hi`` (the float32 arithmetic of ``np.linspace``)."""
    lo = jnp.asarray(lo, jnp.float32)
    hi = jnp.asarray(hi, jnp.float32)
    # Constant bounds would otherwise be folded by XLA (on the CPU, inside a gather of
    # the table) with other roundings. The barrier makes the table the same whether the
    # bounds are traced or not.
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
