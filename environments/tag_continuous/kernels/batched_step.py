"""TagContinuous's batched step with auto-reset: one Pallas (Triton) kernel for ``N`` envs.

`tag_vector_step` computes what `jaxdrive.vectorize`'s ``step`` computes for a batch of
TagContinuous envs (shared params) before the observations are built. First, every
env's step (spec steps 1–9: turn, accelerate, cap, move and clip, edge and step
rewards, tagging, the taggers' race-free gains, runners leaving, end of game, done).
Then, with auto-reset, each finished env's start state (``x, y = u₀·L, u₁·L``,
direction ``min(⌊4u₂⌋, 3)·π/2``, speed and acceleration 0, all in the game, ``t = 0``),
selected in. The uniforms ``u`` are either passed in (``[N, 3, M]``) or drawn by the
kernel (`kernels.threefry`, bit-equal to `jax.random.uniform`) from each env's reset
key, or from the step key those are split from, only in programs where an env resets.
It also writes:

* the TimeStep's per-group arrays (reward, terminated, truncated, active);
* the per-env scalars (done, runners left, tags) and the observations' time ``t/E``;
* on request, the inputs of the observation path: the brute-force search's padded
  position rows, and the observation writer's agent-major feature table.

So the XLA program around it keeps no slices, selects, pads or reductions of its own,
where the vmapped plain-JAX step is about twenty small kernels per batch step. The
state's outputs reuse the state's input buffers (``input_output_aliases``), so a scan's
carry needs no copies.

Dimension letters: ``N`` envs, ``M = T + R`` agents (id order), ``T`` taggers, ``R``
runners, ``E`` envs per program, ``MP`` lanes per env (columns past ``M`` are masked).

Layout: a program holds ``E`` envs as the rows of ``[E, MP]`` tiles (``MP`` the next
power of two of ``M``, one agent per column). Every array is passed flat (``[N·M]``,
``[N·T·2]``, ``[N·3·M]``, ``[N]``) and read by pointer-style gathers at computed indices
(an env's row clamped to ``N − 1`` and its column to ``M − 1``, the tail masked at the
stores), so XLA pads nothing; the per-group outputs are scattered through a constant
table of each agent's position in its group. One env's agents lie along one program, so
the env uses this kernel only up to `TagKernelConfig.batched_step_up_to` agents.

Tagging: the taggers' lanes store their new positions in a small ``[N·2·T]`` scratch
output and, after a barrier, every lane loads them (broadcast loads). Each runner keeps a
running ``(d², j)`` minimum over the taggers with strict ``<`` (the lower index wins
ties, as ``jnp.argmin``). Up to `batched_step_kernel.UNROLL_TAGGERS` taggers the loop is
unrolled (its row reductions overlap) and the per-tagger tag counts and the runners left
are summed as bit fields of a few int32 row sums (``⌊31/b⌋`` fields of ``b =
bit_length(R)`` bits: none can overflow). A tagger's gain is ``c`` sequential additions
of the reward from ``+0``: what the reference's ``segment_sum`` (a scatter-add of equal
values) gives.

Bit-exactness: the operations are the plain-JAX step's (`TagContinuous.step_env`) in
the same order (``jnp.mod`` as ``lax.rem`` plus its sign fix-up, ``jnp.clip`` as
``minimum(hi, maximum(lo, x))``, the action tables as `params.action_values` computes
them, with `triton.div_rn` and `triton.fence`), and the reset's are ``reset_env``'s, so
in Pallas interpret mode on the CPU the outputs equal the vmapped plain-JAX step and
reset bit for bit (tests). On a GPU ``cos``, ``sin`` and ``sqrt`` are libdevice's and
Triton may contract ``a·b + c`` into an FMA where XLA does not; the values are equal as
numbers except the sign of zero accelerations (a negative acceleration times a 0 mask is
IEEE's −0 here, as in NumPy and XLA on the CPU; XLA on GPU gives +0).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

from environments.tag_continuous.kernels.batched_step_kernel import (
    RAW_PARAMS,
    UNROLL_TAGGERS,
    Layout,
    lanes,
    vector_kernel,
)
from environments.tag_continuous.kernels.obs_writer import TABLE_ROW
from environments.tag_continuous.kernels.triton import next_pow2, resolve_interpret

__all__ = ["RAW_PARAMS", "VectorStepOut", "lanes", "tag_vector_step"]

#: Elements (envs × lanes) per program: ``E = max(1, _ELEMENTS // MP)`` (fixed).
_ELEMENTS = 256
#: Triton warps: one per 128 elements, at most 8; `_LARGE_PROGRAM_WARPS` for programs
#: of ``E·MP >= 1024`` elements (fewer registers per thread, higher occupancy).
_LARGE_PROGRAM_WARPS = 16


class VectorStepOut(NamedTuple):
    """`tag_vector_step`'s outputs (see there); group pairs are ``(tagger, runner)``."""

    x: jax.Array
    y: jax.Array
    speed: jax.Array
    direction: jax.Array
    acceleration: jax.Array
    in_game: jax.Array
    t: jax.Array
    reward: tuple[jax.Array, jax.Array]
    terminated: tuple[jax.Array, jax.Array]
    truncated: tuple[jax.Array, jax.Array]
    active: tuple[jax.Array, jax.Array]
    done: jax.Array
    runners_left: jax.Array
    num_tags: jax.Array
    time: jax.Array
    search: tuple[jax.Array, jax.Array, jax.Array, jax.Array] | None
    table: jax.Array | None


def _out_shapes(lay: Layout, feature_table: bool) -> list[jax.ShapeDtypeStruct]:
    """The kernel's flat outputs: the state, the group arrays, the per-env scalars, the
    search's padded rows and the table (if asked for), the taggers' positions (scratch)."""
    n, m, nt, nr, mq, mc, f32 = lay.n, lay.m, lay.nt, lay.nr, lay.mq, lay.mc, jnp.float32

    def sds(shape, dtype):
        return jax.ShapeDtypeStruct(shape, dtype)

    out_shape = (
        [sds((n * m,), f32)] * 5
        + [sds((n * m,), jnp.bool_), sds((n,), jnp.int32)]
        + [sds((n * nt,), f32), sds((n * nr,), f32)]
        + [sds((n * nt,), jnp.bool_), sds((n * nr,), jnp.bool_)] * 3
        + [sds((n,), jnp.bool_), sds((n,), jnp.int32), sds((n,), jnp.int32), sds((n,), f32)]
    )
    if mq:
        out_shape += [sds((n * mq,), f32)] * 2 + [sds((n * mc,), f32)] * 2
    if feature_table:
        out_shape.append(sds((n * m * TABLE_ROW,), f32))
    out_shape.append(sds((n * 2 * nt,), f32))  # the taggers' new positions (scratch)
    return out_shape


def _outputs(outs, lay: Layout, feature_table: bool) -> VectorStepOut:
    """The kernel's flat outputs as `VectorStepOut` (``[N, M]``, ``[N, T]``, ...)."""
    n, m, nt, nr, mq, mc = lay.n, lay.m, lay.nt, lay.nr, lay.mq, lay.mc
    xo, yo, vo, tho, ao, go, to, rt, rr, mt, mr, ut, ur, vt, vr, done, left, tags, tm = outs[:19]
    rest = list(outs[19:])
    search = None
    if mq:
        xq, yq, xc, yc = rest[:4]
        del rest[:4]
        search = (xq.reshape(n, mq), yq.reshape(n, mq), xc.reshape(n, mc), yc.reshape(n, mc))
    table = rest.pop(0).reshape(n, m * TABLE_ROW) if feature_table else None

    def agents(a):
        return a.reshape(n, m)

    def pair(a_t, a_r):
        return a_t.reshape(n, nt), a_r.reshape(n, nr)

    return VectorStepOut(
        agents(xo), agents(yo), agents(vo), agents(tho), agents(ao), agents(go), to,
        pair(rt, rr), pair(mt, mr), pair(ut, ur), pair(vt, vr), done, left, tags, tm,
        search, table,
    )  # fmt: skip


def _reset_mode(reset_uniforms, reset_key_data, step_key_data, n: int, m: int) -> str | None:
    """Which reset input is given (``"uniforms"``, ``"keys"``, ``"step_key"`` or ``None``),
    checked."""
    given = [v is not None for v in (reset_uniforms, reset_key_data, step_key_data)]
    if sum(given) > 1:
        raise ValueError(
            "give one of reset_uniforms, reset_key_data and step_key_data, not several"
        )
    reset = None
    if reset_uniforms is not None:
        reset = "uniforms"
        if reset_uniforms.shape != (n, 3, m):
            raise ValueError(f"reset_uniforms must be [{n}, 3, {m}], got {reset_uniforms.shape}")
    elif reset_key_data is not None:
        reset = "keys"
        if reset_key_data.shape != (n, 2) or reset_key_data.dtype != jnp.uint32:
            raise ValueError(
                f"reset_key_data must be [{n}, 2] uint32, got {reset_key_data.shape} "
                f"{reset_key_data.dtype}"
            )
    elif step_key_data is not None:
        reset = "step_key"
        if step_key_data.shape != (2,) or step_key_data.dtype != jnp.uint32:
            raise ValueError(
                f"step_key_data must be [2] uint32, got {step_key_data.shape} {step_key_data.dtype}"
            )
    if reset in ("keys", "step_key") and (3 * m > 2**32 or 2 * n > 2**32):
        raise ValueError(f"in-kernel draws need 3·M and 2·N below 2**32, got M={m}, N={n}")
    return reset


def tag_vector_step(
    params: Sequence[jax.Array],
    x: jax.Array,
    y: jax.Array,
    speed: jax.Array,
    direction: jax.Array,
    acceleration: jax.Array,
    in_game: jax.Array,
    t: jax.Array,
    act_tagger: jax.Array,
    act_runner: jax.Array,
    reset_uniforms: jax.Array | None,
    *,
    reset_key_data: jax.Array | None = None,
    step_key_data: jax.Array | None = None,
    tagger_ids: Sequence[int],
    num_acceleration_levels: int,
    num_turn_levels: int,
    episode_length: int,
    runner_exits_game_after_tagged: bool,
    search_padding: tuple[int, int] | None = None,
    feature_table: bool = False,
    envs_per_program: int | None = None,
    interpret: bool | None = None,
) -> VectorStepOut:
    """The step of ``N`` envs, then their auto-reset (see the module docstring).

    Args:
      params: the ``RAW_PARAMS`` values (scalars, float32), shared by every env.
      x, y, speed, direction, acceleration: ``[N, M]`` float32, agents in id order.
      in_game: ``[N, M]`` bool.
      t: ``[N]`` int32, steps taken before this one.
      act_tagger, act_runner: ``[N, T, 2]`` and ``[N, R, 2]`` integer action indices.
      reset_uniforms: ``[N, 3, M]`` float32, the uniforms `TagContinuous.reset_env` draws
        from each env's reset key; ``None``: no auto-reset (or ``reset_key_data``).
      reset_key_data: instead of ``reset_uniforms``, ``[N, 2]`` uint32, the data of each
        env's threefry reset key (`threefry.key_data_for_uniforms`): the kernel draws the
        same uniforms itself, only in programs where an env resets.
      step_key_data: instead of either, ``[2]`` uint32, the data of the threefry key the
        reset keys are split from (`jaxdrive.vector.split_step_key`: env ``e``'s is
        element ``N + e`` of the split): the kernel derives each env's key, then draws.
      tagger_ids: static sorted tagger ids; the runners are the other ids.
      search_padding: ``(MQ, MC)``, each at most ``MP``: also write the brute-force
        search's padded inputs of the new state (`kernels.brute_padding`).
      feature_table: also write the observation writer's agent-major feature table of
        the new state (`obs_writer.agent_major`'s layout).
      envs_per_program: ``E`` (power of two; default ``max(1, 256 // MP)``). The layout
        changes, not the values.
      interpret: Pallas interpret mode; ``None``: when the default backend is the CPU.

    Returns:
      `VectorStepOut`: the new state ``x, y, speed, direction, acceleration [N, M]``
      float32, ``in_game [N, M]`` bool, ``t [N]`` int32 (after the reset: 0 where done);
      the TimeStep's ``reward``, ``terminated``, ``truncated`` (all False) and ``active``
      (the new state's in-game flags), each a pair ``([N, T], [N, R])``; ``done``
      ``[N]`` bool, ``runners_left`` and ``num_tags`` ``[N]`` int32 (of the step, before
      the reset); ``time [N]`` float32, the observations' ``t / E`` of the new state
      (XLA's form: ``t`` times the rounded reciprocal of ``E``); ``search``: ``(xq, yq
      [N, MQ], xc, yc [N, MC])`` or ``None``; ``table``: ``[N, 8M]`` float32 or ``None``.
    """
    n, m = x.shape
    ids = tuple(int(i) for i in tagger_ids)
    nt = len(ids)
    nr = m - nt
    if nt < 1 or nr < 1:
        raise ValueError(f"tag_vector_step needs taggers and runners, got T={nt}, R={nr}")
    if len(params) != len(RAW_PARAMS):
        raise ValueError(f"params must be the {len(RAW_PARAMS)} RAW_PARAMS, got {len(params)}")
    for name, arr in (
        ("y", y), ("speed", speed), ("direction", direction), ("acceleration", acceleration),
        ("in_game", in_game),
    ):  # fmt: skip
        if arr.shape != (n, m):
            raise ValueError(f"{name} must be [{n}, {m}] like x, got {arr.shape}")
    if t.shape != (n,):
        raise ValueError(f"t must be [{n}], got {t.shape}")
    if act_tagger.shape != (n, nt, 2) or act_runner.shape != (n, nr, 2):
        raise ValueError(
            f"actions must be [{n}, {nt}, 2] and [{n}, {nr}, 2], got "
            f"{act_tagger.shape}, {act_runner.shape}"
        )
    reset = _reset_mode(reset_uniforms, reset_key_data, step_key_data, n, m)
    la, lt = int(num_acceleration_levels), int(num_turn_levels)
    mp = lanes(m)
    mq, mc = (0, 0) if search_padding is None else (int(v) for v in search_padding)
    if search_padding is not None and not (m <= mq <= mp and m <= mc <= mp):
        raise ValueError(f"search_padding must be within [{m}, {mp}], got {search_padding}")
    be = max(1, _ELEMENTS // mp) if envs_per_program is None else int(envs_per_program)
    if be < 1 or be & (be - 1):
        raise ValueError(f"envs_per_program must be a power of two >= 1, got {be}")
    be = min(be, next_pow2(n))
    warps = _LARGE_PROGRAM_WARPS if be * mp >= 1024 else max(1, min(8, be * mp // 128))
    interpret = resolve_interpret(interpret)
    kind = np.zeros(m, np.int32)
    kind[list(ids)] = 1
    pos = np.zeros(m, np.int32)
    pos[list(ids)] = np.arange(nt)
    pos[kind == 0] = np.arange(nr)
    unrolled = nt <= UNROLL_TAGGERS
    f32 = jnp.float32
    # Behind a barrier: in interpret mode the kernel's arithmetic is XLA's, which would
    # fold constant params (the action tables) with other roundings (`action_values`).
    args = list(lax.optimization_barrier([jnp.reshape(jnp.asarray(v, f32), (1,)) for v in params]))
    args += [jnp.asarray(kind), jnp.asarray(pos)]
    if not unrolled:
        args.append(jnp.asarray(np.asarray(ids, np.int32)))
    first = len(args)  # the state's inputs, aliased to its outputs
    args += [
        *(a.astype(f32).reshape(-1) for a in (x, y, speed, direction, acceleration)),
        in_game.astype(jnp.bool_).reshape(-1),
        t.astype(jnp.int32),
        act_tagger.astype(jnp.int32).reshape(-1),
        act_runner.astype(jnp.int32).reshape(-1),
    ]
    if reset == "uniforms":
        args.append(reset_uniforms.astype(f32).reshape(-1))
    elif reset == "keys":
        args.append(reset_key_data.reshape(-1))
    elif reset == "step_key":
        args.append(step_key_data)
    lay = Layout(n, m, mp, be, nt, nr, la, lt, mq, mc)
    kernel = functools.partial(
        vector_kernel, lay=lay, ids=ids if unrolled else None,
        episode_length=int(episode_length), exits=bool(runner_exits_game_after_tagged),
        reset=reset, table_out=bool(feature_table), interpret=interpret,
    )  # fmt: skip

    out_shape = _out_shapes(lay, bool(feature_table))
    extra = 4 * (2 * mq + 2 * mc) + (4 * m * TABLE_ROW if feature_table else 0)
    outs = pl.pallas_call(
        kernel,
        out_shape=out_shape,
        grid=(pl.cdiv(n, be),),
        # the state's outputs reuse its inputs' buffers (no copies into a scan's carry)
        input_output_aliases={first + i: i for i in range(7)},
        compiler_params=pl_triton.CompilerParams(num_warps=warps, num_stages=1),
        cost_estimate=pl.CostEstimate(
            flops=int(n * m * (50 + 8 * nt)),
            transcendentals=int(3 * n * m),
            bytes_accessed=int(
                n * m * (4 * 5 + 1 + 8 + (12 if reset == "uniforms" else 0) + 4 * 6 + 4)
                + n * (extra + (8 if reset == "keys" else 0))
            ),
        ),
        interpret=interpret,
        name="tag_vector_step",
    )(*args)
    return _outputs(outs, lay, bool(feature_table))
