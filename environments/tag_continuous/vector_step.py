"""TagContinuous's batched step with auto-reset: one Pallas (Triton) kernel for ``N`` envs.

`tag_vector_step` computes what `jaxdrive.vectorize`'s ``step`` computes for a batch of
TagContinuous envs (shared params) before the observations are built. First, every
env's step (spec steps 1–9: turn, accelerate, cap, move and clip, edge and step
rewards, tagging, the taggers' race-free gains, runners leaving, end of game, done).
Then, with ``auto_reset``, each finished env's start state (``x, y = u₀·L, u₁·L``,
direction ``min(⌊4u₂⌋, 3)·π/2``, speed and acceleration 0, all in the game, ``t = 0``),
selected in. The uniforms ``u`` are either passed in (``[N, 3, M]``) or drawn by the
kernel (threefry-2x32, bit-equal to `jax.random.uniform`) from each env's reset key, or
from the step key those are split from, only in programs where an env resets. It also
writes:

* the TimeStep's per-group arrays (reward, terminated, truncated, active);
* the per-env scalars (done, runners left, tags);
* on request, the inputs of the observation path: the brute-force search's padded
  position rows, and the observation writer's agent-major feature table.

So the XLA program around it keeps no slices, selects, pads or reductions of its own.
The state's outputs reuse the state's input buffers (``input_output_aliases``), so a
scan's carry needs no copies.

Why: the vmapped XLA step is ≈ 20 small kernels per batch step (dynamics, clamps, the
nearest-tagger search, the tag scatter-add, reductions for done, the reset's select,
group slices, pads). At 1000 × (10+100) on an H200 each is a launch of 1–4 µs, ≈ 40 µs in
all. The one-program-per-env kernel of `environments.tag_continuous.step_kernel` did not
gain: 1000 programs of one env each, whose loops over taggers reduce across warps. Here a
program holds ``E`` envs as the rows of ``[E, MP]`` tiles (``MP`` the next power of two
of ``M``, one agent per column), and the tagger loop is unrolled, so its row reductions
overlap. Measured (H200, `experiments/benchmarks/NOTES.md`): the env step 0.0969 →
0.0801 ms at 1000 × (10+100), with the kernel 10 µs of it. It lays one env's agents
along one program, so a few envs of many agents leave the GPU idle: 10 × (100+10,000)
measured 14× slower than XLA. `TagContinuous`'s ``step_impl="auto"`` uses the kernel only
up to 1024 agents per env.

Dimension letters: ``N`` envs, ``M = T + R`` agents (id order), ``T`` taggers, ``R``
runners, ``E`` envs per program, ``MP`` lanes per env (columns past ``M`` are masked).

Layout: every array is passed flat (``[N·M]``, ``[N·T·2]``, ``[N·3·M]``, ``[N]``) and read
by pointer-style gathers at computed indices (an env's row clamped to ``N − 1`` and its
column to ``M − 1``, the tail masked at the stores), so XLA pads nothing; the per-group
outputs are scattered through a constant table of each agent's position in its group.

Bit-exactness: the step's operations are those of `step_kernel` (the XLA step's, in the
same order; see its docstring for ``cos``/``sin``/``sqrt`` and FMA contraction on GPU,
and ``fence_products``), and the reset's are ``reset_env``'s, so in Pallas interpret
mode on the CPU the outputs equal the vmapped XLA step and reset bit for bit (tests).
On an H200 (`experiments.benchmarks.vector_step_probe`) they are equal as numbers. The
one difference is the sign of zero accelerations: for a negative acceleration times a
0 mask, the kernel gives IEEE's −0, as NumPy and XLA on the CPU do; XLA on GPU gives +0.
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

from environments.tag_continuous.full_obs import _div_rn
from environments.tag_continuous.step_kernel import _fence
from jaxdrive.hash_draws import threefry2x32

__all__ = [
    "DEFAULT_ELEMENTS",
    "DEFAULT_WARPS",
    "LARGE_PROGRAM_WARPS",
    "PACKED_COUNTS",
    "RAW_PARAMS",
    "TABLE_ROW",
    "TABLE_STORE",
    "TABLE_STORE_FORMS",
    "TAGGER_POSITIONS",
    "TAGGER_POSITION_FORMS",
    "UNROLL_TAGGERS",
    "VectorStepOut",
    "key_data_for_uniforms",
    "lanes",
    "tag_vector_step",
    "threefry2x32",
    "uniform_from_key_data",
]

#: The env params the kernel reads, in `TagContinuousParams` field order: each passed as
#: its own ``[1]`` float32 array (no concatenation kernel per step).
RAW_PARAMS = (
    "grid_length",
    "max_speed",
    "skill_level_tagger",
    "skill_level_runner",
    "min_acceleration",
    "max_acceleration",
    "min_turn",
    "max_turn",
    "edge_hit_penalty",
    "tagging_distance",
    "tag_reward_for_tagger",
    "tag_penalty_for_runner",
    "step_penalty_for_tagger",
    "step_reward_for_runner",
    "end_of_game_reward_for_runner",
)
_TWO_PI = np.float32(2.0 * np.pi)
_HALF_PI = np.float32(np.pi / 2)
#: Features per agent in the observation writer's agent-major table
#: (`knn_obs._agent_major`): x, y, speed, acceleration, direction, type, in-game, in-game.
TABLE_ROW = 8

#: Default elements (envs × lanes) per program: ``E = max(1, DEFAULT_ELEMENTS // MP)``
#: (H200, 1000 × (10+100), the kernel alone in a scan: 256 elements with two warps
#: 18.3 µs per step, 128 with one 20.9 µs; `experiments/benchmarks/NOTES.md`).
DEFAULT_ELEMENTS = 256
#: Default Triton warps per program (``None``: one per 128 elements, at most 8, and
#: `LARGE_PROGRAM_WARPS` from 1024 elements). H200,
#: 2000 × (5+995), one env of 1024 lanes per program: 4 warps 160 registers per thread
#: and 80 µs per step, 8 warps 110 and 73.5 µs (2026-11-24 run 40).
DEFAULT_WARPS: int | None = None
#: Warps of a program of ``E·MP >= 1024`` elements when `DEFAULT_WARPS` is ``None``:
#: H200, 2000 × (5+995) in the env: 16 warps 64 registers, 50% occupancy, 86.7 µs per
#: step; 8 warps 126 registers, 25%, 90.3 µs (2026-11-25 run 78).
LARGE_PROGRAM_WARPS = 16
#: Taggers up to this many are looped over statically (unrolled: the per-tagger row
#: reductions overlap); more go through a `lax.fori_loop` over a table of their ids.
UNROLL_TAGGERS = 16
#: How the feature table is written: ``"tile"`` (one ``[E, MP, 8]`` store, each lane's
#: 32 bytes together) or ``"strided"`` (eight stores of one feature each, 32 bytes apart).
TABLE_STORE = "tile"
TABLE_STORE_FORMS = ("tile", "strided")
#: How the tagging step gets each tagger's new position: ``"reduce"`` (a masked max over
#: the env's row, two row reductions per tagger) or ``"recompute"`` (each program steps
#: its envs' taggers again as ``[E, 1]`` values, from the same loads and with the same
#: operations as the tagger's own lane, so the same bits; every thread computes them).
#: H200, the kernel in the env at 2000 × (5+995), 16 warps: 83.6 µs (reduce) and 86.7
#: (recompute); at 1000 × (10+100) recomputing ten taggers in programs of 256 elements
#: made the step 8% slower (2026-11-25 runs 79-80).
#: ``"scratch"``: the taggers' lanes store their new positions in a small ``[N·2·T]``
#: scratch output, and after one barrier every lane loads them (the same address across
#: a row: broadcast loads), instead of two row reductions (each with its own barriers)
#: per tagger. Same bits. H100, 2000 × (5+995): 92.8 → 88.0 µs (62 registers), the step
#: −0.4%; 1000 × (10+100): 9.9 → 10.1 µs, the step within noise (2026-11-26 run 97).
TAGGER_POSITIONS = "scratch"
TAGGER_POSITION_FORMS = ("recompute", "reduce", "scratch")
#: With the taggers unrolled: the per-tagger tag counts and the runners left summed as
#: bit fields of a few int32 row sums (``⌊31 / b⌋`` fields of ``b = bit_length(R)`` bits
#: each: no field can overflow), instead of one row sum each; the tags are the counts'
#: sum and the reward loop's bound their maximum, so no reductions of their own.
PACKED_COUNTS = True
#: Probe-only ablation (`experiments.benchmarks.vector_step_probe`): parts of the kernel
#: left out to time the rest, giving wrong results: ``"tagging"`` (the nearest-tagger
#: loop and the gains), ``"tables"`` (the action tables), ``"trig"`` (cos and sin).
_ABLATE: frozenset[str] = frozenset()


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def lanes(m: int) -> int:
    """``MP``: the lanes one env's ``m`` agents take in a program (next power of two, >= 2)."""
    return max(2, _next_pow2(m))


def uniform_from_key_data(k0: jax.Array, k1: jax.Array, index: jax.Array) -> jax.Array:
    """Element ``index`` (uint32, the row-major position in the drawn shape, below
    ``2**32``) of ``jax.random.uniform(key, shape, float32)`` for a threefry key with
    data ``(k0, k1)``, under ``jax_threefry_partitionable`` (jax's default): the
    counter ``(0, index)`` hashed, the two words XORed, the top 23 bits as a float in
    ``[1, 2)`` minus 1."""
    b0, b1 = threefry2x32(k0, k1, jnp.zeros_like(index), index)
    bits = ((b0 ^ b1) >> jnp.uint32(9)) | jnp.uint32(0x3F800000)
    return lax.bitcast_convert_type(bits, jnp.float32) - jnp.float32(1.0)


def key_data_for_uniforms(keys: jax.Array) -> jax.Array | None:
    """``[..., 2]`` uint32: the data of the threefry keys ``keys [...]`` (typed, or raw
    ``[..., 2]`` uint32), from which `threefry2x32` and `uniform_from_key_data`
    reproduce ``jax.random.split`` and ``jax.random.uniform``; ``None`` where they
    cannot (another PRNG implementation, or ``jax_threefry_partitionable`` off)."""
    if not jax.config.jax_threefry_partitionable:
        return None
    if jnp.issubdtype(keys.dtype, jax.dtypes.prng_key):
        if str(jax.random.key_impl(keys)) != "threefry2x32":
            return None
        return jax.random.key_data(keys)
    if keys.dtype == jnp.uint32 and keys.ndim >= 1 and keys.shape[-1] == 2:
        if jax.config.jax_default_prng_impl != "threefry2x32":
            return None
        return keys
    return None


class _Layout(NamedTuple):
    """Static sizes: ``mq``/``mc`` the lanes of the search's padded query/candidate rows
    (0: not written)."""

    n: int
    m: int
    mp: int
    be: int
    nt: int
    nr: int
    la: int
    lt: int
    mq: int
    mc: int


def _vector_kernel(
    *refs, lay, ids, episode_length, exits, fence, reset, table_out, interpret
):  # fmt: skip
    """``E`` envs of a batch; the refs are `tag_vector_step`'s inputs then outputs."""
    n, m, mp, be, nt, nr, la, lt, mq, mc = lay
    refs = list(refs)
    prm = {name: refs.pop(0) for name in RAW_PARAMS}
    kind_ref, pos_ref = refs.pop(0), refs.pop(0)
    tid_ref = refs.pop(0) if ids is None else None
    x_ref, y_ref, v_ref, th_ref, a_ref, g_ref, t_ref, at_ref, ar_ref = refs[:9]
    del refs[:9]
    u_ref = refs.pop(0) if reset else None  # uniforms [N·3·M], key data [N·2] or [2]
    (xo_ref, yo_ref, vo_ref, tho_ref, ao_ref, go_ref, to_ref, rew_t_ref, rew_r_ref,
     term_t_ref, term_r_ref, trunc_t_ref, trunc_r_ref, act_t_ref, act_r_ref, done_ref,
     left_ref, tags_ref, time_ref) = refs[:19]  # fmt: skip
    del refs[:19]
    search_refs = refs[:4] if mq else None  # xq, yq, xc, yc
    del refs[: 4 if mq else 0]
    tab_ref = refs.pop(0) if table_out else None
    tpos_ref = refs.pop(0) if TAGGER_POSITIONS == "scratch" else None
    f32 = jnp.float32
    fz = f32(0.0)
    mul = (lambda a, b: _fence(a * b)) if fence else (lambda a, b: a * b)

    def param(name):
        return prm[name][0]

    shape = (be, mp)
    row = lax.broadcasted_iota(jnp.int32, shape, 0)
    lane = lax.broadcasted_iota(jnp.int32, shape, 1)
    env_raw = pl.program_id(0) * be + row
    valid = (env_raw < n) & (lane < m)  # [E, MP] the elements that exist
    env = jnp.minimum(env_raw, n - 1)
    ic = jnp.minimum(lane, m - 1)
    flat = env * m + ic  # [E, MP] index into the [N·M] arrays
    is_t = kind_ref[ic] == 1
    is_r = ~is_t
    pos = pos_ref[ic]
    pt = 2 * jnp.minimum(pos, nt - 1)
    pr = 2 * jnp.minimum(pos, nr - 1)
    # each lane reads its own group's actions only (masked loads: 0 elsewhere)
    mt, mr = valid & is_t, valid & is_r
    erow = lax.broadcasted_iota(jnp.int32, (be, 1), 0)
    env1 = jnp.minimum(pl.program_id(0) * be + erow, n - 1)  # [E, 1]

    def act(col):
        a_t = pl_triton.load(at_ref.at[env * (2 * nt) + pt + col], mask=mt, other=0)
        a_r = pl_triton.load(ar_ref.at[env * (2 * nr) + pr + col], mask=mr, other=0)
        return jnp.where(is_t, a_t, a_r)

    def table(a, lo, hi, levels, shp):
        """``action_values(lo, hi, levels)[a]``, as XLA gathers it (indices wrapped if
        negative, then clamped): 0 for the no-op, else ``(a−1)·step + lo`` with
        ``step = (hi − lo) / (levels − 1)`` rounded once each (no FMA), ``hi`` last."""
        a = jnp.where(a < 0, a + (levels + 1), a)
        a = jnp.minimum(jnp.maximum(a, 0), levels)
        if levels == 1:
            val = jnp.broadcast_to(lo, shp)
        else:
            # ``+ lo·0``: a divisor XLA cannot see as a constant (interpret mode), as in
            # `env.action_values`; exact, so the same value on GPU.
            num, den = hi - lo, f32(levels - 1) + lo * fz
            num, den = jnp.broadcast_to(num, shp), jnp.broadcast_to(den, shp)
            step = num / den if interpret else _div_rn(num, den)  # (Triton's asm: tensors)
            val = _fence((a - 1).astype(f32) * step) + lo
            val = jnp.where(a == levels, hi, val)
        return jnp.where(a == 0, fz, val)

    def deltas(a_acc, a_turn, shp):
        """The acceleration and turn of action indices ``a_acc, a_turn`` (shape ``shp``)."""
        if "tables" in _ABLATE:
            return a_acc.astype(f32), a_turn.astype(f32)
        return (
            table(a_acc, param("min_acceleration"), param("max_acceleration"), la, shp),
            table(a_turn, param("min_turn"), param("max_turn"), lt, shp),
        )

    L = param("grid_length")
    two_pi = f32(_TWO_PI)
    cos, sin = (lambda v: v, lambda v: v) if "trig" in _ABLATE else (jnp.cos, jnp.sin)

    def move(idx, d_acc, d_turn, g, skill):
        """Spec steps 1-5 for the agents at flat indices ``idx``: ``(theta, speed, acc,
        x, y, crossed)``. The lanes and the taggers' recomputation share it, so the
        same operations in the same order give the same bits."""
        gf = g.astype(f32)
        # 1-4: turn (jnp.mod), accelerate, cap the speed (jnp.clip), drop the acceleration.
        r = lax.rem(th_ref[idx] + d_turn, two_pi)
        plus = (r < fz) & (r != fz)  # jnp.mod's fix-up, for a positive divisor
        theta_in = jnp.where(plus, r + two_pi, r)
        theta = theta_in * gf
        acc = a_ref[idx] + d_acc
        cap = param("max_speed") * skill
        speed = jnp.minimum(cap, jnp.maximum(fz, v_ref[idx] + acc)) * gf
        acc = acc * ((speed > fz) & (speed < cap)).astype(f32)
        # 5: move (cos/sin of ``theta_in``: see `step_kernel`), clip into the square.
        x = x_ref[idx] + mul(speed, cos(theta_in))
        y = y_ref[idx] + mul(speed, sin(theta_in))
        crossed = ~((x >= fz) & (x <= L) & (y >= fz) & (y <= L))
        x = jnp.minimum(L, jnp.maximum(fz, x))
        y = jnp.minimum(L, jnp.maximum(fz, y))
        return theta, speed, acc, x, y, crossed

    d_acc, d_turn = deltas(act(0), act(1), shape)
    g = g_ref[flat]
    skill = jnp.where(is_t, param("skill_level_tagger"), param("skill_level_runner"))
    theta, speed, acc, x, y, crossed = move(flat, d_acc, d_turn, g, skill)
    # 6: edge penalty and step rewards.
    step_reward = jnp.where(is_t, param("step_penalty_for_tagger"), param("step_reward_for_runner"))
    reward = jnp.where(g, mul(param("edge_hit_penalty"), crossed.astype(f32)) + step_reward, fz)

    # Stores are scatters at computed indices; a masked lane's index is made unique and
    # out of range, so no two lanes name one element (interpret mode writes masked lanes
    # back as a gather-select-scatter, where a duplicate could undo a real write).
    spare = row * mp + lane

    def at(mask, idx, size):
        return jnp.where(mask, idx, size + spare)

    if tpos_ref is not None:  # the taggers' new positions, visible to the whole program
        tp = env * (2 * nt) + pt  # [E, MP]: the tagger lane's slot (pt = 2·its index)
        pl_triton.store(tpos_ref.at[at(mt, tp, n * 2 * nt)], x, mask=mt)
        pl_triton.store(tpos_ref.at[at(mt, tp + 1, n * 2 * nt)], y, mask=mt)
        if not interpret:
            pl_triton.debug_barrier()

    def tagger_xy(j, tid):
        """``[E, 1]``: tagger ``j``'s (id ``tid``) new position in each env."""
        if tpos_ref is not None:
            base = env1 * (2 * nt) + 2 * j
            return tpos_ref[base], tpos_ref[base + 1]
        if TAGGER_POSITIONS == "reduce":  # a masked max over the row (exact)
            here = lane == tid
            xt = jnp.max(jnp.where(here, x, -jnp.inf), axis=1, keepdims=True)
            yt = jnp.max(jnp.where(here, y, -jnp.inf), axis=1, keepdims=True)
            return xt, yt
        idx = env1 * m + tid
        base = env1 * (2 * nt) + 2 * j
        dt_acc, dt_turn = deltas(at_ref[base], at_ref[base + 1], (be, 1))
        skill_t = param("skill_level_tagger")
        return move(idx, dt_acc, dt_turn, g_ref[idx], skill_t)[3:5]

    # 7: tagging: each runner's nearest tagger (lowest index on ties).
    def nearest(j, tid, carry):
        bd, bj = carry
        xt, yt = tagger_xy(j, tid)  # [E, 1]
        dx = x - xt
        dy = y - yt
        d = mul(dx, dx) + dy * dy
        better = d < bd
        return jnp.where(better, d, bd), jnp.where(better, j, bj)

    def count(j, tid, c):  # on tagger j's lane: the runners it tags
        cj = jnp.sum((tagged & (bj == j)).astype(jnp.int32), axis=1, keepdims=True)  # [E, 1]
        return jnp.where(lane == tid, cj, c)

    def over_taggers(fn, carry):
        if ids is not None:  # unrolled, the ids static
            for j, tid in enumerate(ids):
                carry = fn(j, tid, carry)
            return carry
        return lax.fori_loop(0, nt, lambda j, c: fn(j, tid_ref[j], c), carry)

    bd, bj = (jnp.full(shape, jnp.inf, f32), jnp.zeros(shape, jnp.int32))
    if "tagging" not in _ABLATE:
        bd, bj = over_taggers(nearest, (bd, bj))
    threshold = param("tagging_distance") * L
    tagged = is_r & g & valid & (jnp.sqrt(bd) < threshold)
    tag_f = tagged.astype(f32)
    gain_r = param("tag_reward_for_tagger")
    in_game = g & ~tagged if exits else g
    runner_in = in_game & is_r & valid
    packed = PACKED_COUNTS and ids is not None and "tagging" not in _ABLATE
    if packed:
        # Bit fields: tagger j's count is field j, the runners left field nt; ``per``
        # fields of ``bits`` bits in each int32 word (every field's total is <= R).
        bits = max(1, nr.bit_length())
        per = 31 // bits
        mask_f = (1 << bits) - 1
        words = []
        for w in range(-(-(nt + 1) // per)):
            sel = tagged & (bj >= w * per) & (bj < (w + 1) * per)
            shift = bits * jnp.clip(bj - w * per, 0, per - 1)
            v = jnp.where(sel, jnp.left_shift(jnp.int32(1), shift), 0)
            if w == nt // per:
                v = v + jnp.where(runner_in, 1 << (bits * (nt % per)), 0)
            words.append(jnp.sum(v, axis=1, keepdims=True))  # [E, 1]

        def field(f):
            return jnp.right_shift(words[f // per], bits * (f % per)) & mask_f

        counts = [field(j) for j in range(nt)]  # [E, 1] each
        left = field(nt)
        num_tags = functools.reduce(jnp.add, counts)
        c = jnp.zeros(shape, jnp.int32)
        for j, tid in enumerate(ids):
            c = jnp.where(lane == tid, counts[j], c)
        bound = jnp.max(functools.reduce(jnp.maximum, counts))
    else:
        c = jnp.zeros(shape, jnp.int32)
        if "tagging" not in _ABLATE:
            c = over_taggers(count, c)
        left = jnp.sum(runner_in.astype(jnp.int32), axis=1, keepdims=True)  # [E, 1]
        num_tags = jnp.sum(tagged.astype(jnp.int32), axis=1, keepdims=True)
        bound = jnp.max(c)

    def add(i, s):
        return jnp.where(i < c, s + gain_r, s)

    # ``c`` sequential additions of the reward from +0 on each tagger's lane: what the
    # reference's segment_sum (a scatter-add of equal values, in any order) gives.
    gain = lax.fori_loop(0, bound, add, jnp.zeros(shape, f32))
    reward = reward + jnp.where(is_t, gain, tag_f * param("tag_penalty_for_runner"))
    # 8: end-of-game reward; 9: done.
    t1 = t_ref[env] + 1  # [E, MP], equal along rows
    end = t1 == episode_length
    reward = reward + jnp.where(end & in_game & is_r, param("end_of_game_reward_for_runner"), fz)
    done = (t1 >= episode_length) | (left == 0)  # [E, MP]
    terminated = (g & ~in_game) | (done & g)

    if reset:  # the start state of `reset_env`, selected where the episode ended
        fresh = done & valid  # only the envs that reset read their uniforms
        if reset in ("keys", "step_key"):  # drawn here, only in programs where one resets

            def draw(_):
                if reset == "step_key":  # each env's reset key: element (1, e) of the split
                    k0, k1 = threefry2x32(
                        u_ref[0], u_ref[1], jnp.zeros(shape, jnp.uint32),
                        (n + env).astype(jnp.uint32),
                    )  # fmt: skip
                else:
                    k0, k1 = (
                        pl_triton.load(u_ref.at[env * 2 + w], mask=fresh, other=0) for w in range(2)
                    )
                return tuple(
                    uniform_from_key_data(k0, k1, (ic + c * m).astype(jnp.uint32)) for c in range(3)
                )

            zeros = jnp.zeros(shape, f32)
            if packed:  # from the [E, 1] per-env values: no reduction over the row
                here = pl.program_id(0) * be + erow < n
                done_e = (t_ref[env1] + 1 >= episode_length) | (left == 0)
                some = jnp.max((done_e & here).astype(jnp.int32)) > 0
            else:
                some = jnp.max(fresh.astype(jnp.int32)) > 0  # (Triton has no reduce_or)
            u0, u1, u2 = lax.cond(some, draw, lambda _: (zeros,) * 3, None)
        else:
            u0, u1, u2 = (
                pl_triton.load(u_ref.at[env * (3 * m) + ic + c * m], mask=fresh, other=0.0)
                for c in range(3)
            )
        quarter = jnp.minimum(jnp.floor(u2 * f32(4.0)), f32(3.0))
        x = jnp.where(done, u0 * L, x)
        y = jnp.where(done, u1 * L, y)
        speed = jnp.where(done, fz, speed)
        theta = jnp.where(done, quarter * f32(_HALF_PI), theta)
        acc = jnp.where(done, fz, acc)
        in_game = done | in_game
        t1 = jnp.where(done, 0, t1)

    for ref, val in (
        (xo_ref, x),
        (yo_ref, y),
        (vo_ref, speed),
        (tho_ref, theta),
        (ao_ref, acc),
        (go_ref, in_game),
    ):
        pl_triton.store(ref.at[at(valid, flat, n * m)], val, mask=valid)
    false = jnp.zeros(shape, jnp.bool_)
    for (t_out, r_out), val in (
        ((rew_t_ref, rew_r_ref), reward),
        ((term_t_ref, term_r_ref), terminated),
        ((trunc_t_ref, trunc_r_ref), false),
        ((act_t_ref, act_r_ref), in_game),
    ):
        pl_triton.store(t_out.at[at(mt, env * nt + pos, n * nt)], val, mask=mt)
        pl_triton.store(r_out.at[at(mr, env * nr + pos, n * nr)], val, mask=mr)
    first = valid & (lane == 0)
    e1 = at(first, env, n)
    pl_triton.store(to_ref.at[e1], t1, mask=first)
    pl_triton.store(done_ref.at[e1], done, mask=first)
    pl_triton.store(left_ref.at[e1], jnp.broadcast_to(left, shape), mask=first)
    pl_triton.store(tags_ref.at[e1], jnp.broadcast_to(num_tags, shape), mask=first)
    # the observations' time ``t / E``, as XLA computes it: times the rounded reciprocal
    recip = f32(np.float32(1.0) / np.float32(episode_length))
    pl_triton.store(time_ref.at[e1], t1.astype(f32) * recip, mask=first)
    if search_refs is not None:
        # the brute-force search's padded rows (`kernels.brute_padding`): queries as
        # they are (padding lanes: any value), candidates at +inf when out of the game.
        xq_ref, yq_ref, xc_ref, yc_ref = search_refs
        here = env_raw < n
        inf = f32(jnp.inf)
        mask_q, mask_c = here & (lane < mq), here & (lane < mc)
        for ref, val, width, mask in (
            (xq_ref, x, mq, mask_q),
            (yq_ref, y, mq, mask_q),
            (xc_ref, jnp.where(in_game & (lane < m), x, inf), mc, mask_c),
            (yc_ref, jnp.where(in_game & (lane < m), y, inf), mc, mask_c),
        ):
            pl_triton.store(ref.at[at(mask, env * width + lane, n * width)], val, mask=mask)
    if tab_ref is not None:
        # the observation writer's agent-major feature table (`knn_obs._agent_major`)
        gf = in_game.astype(f32)
        values = (x, y, speed, acc, theta, is_t.astype(f32), gf, gf)
        if TABLE_STORE == "tile":  # one [E, MP, 8] store: each lane's 32 bytes at once
            f = lax.broadcasted_iota(jnp.int32, (be, mp, TABLE_ROW), 2)
            tile = jnp.zeros((be, mp, TABLE_ROW), f32)
            for i, val in enumerate(values):
                tile = jnp.where(f == i, val[:, :, None], tile)
            mask3 = valid[:, :, None] & (f >= 0)
            idx3 = jnp.where(
                mask3,
                flat[:, :, None] * TABLE_ROW + f,
                n * m * TABLE_ROW + spare[:, :, None] * TABLE_ROW + f,
            )
            pl_triton.store(tab_ref.at[idx3], tile, mask=mask3)
        else:  # one strided store per feature
            base = at(valid, flat * TABLE_ROW, n * m * TABLE_ROW)
            for i, val in enumerate(values):
                pl_triton.store(tab_ref.at[base + i], val, mask=valid)


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
    fence_products: bool = False,
    envs_per_program: int | None = None,
    num_warps: int | None = None,
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
        env's threefry reset key (`key_data_for_uniforms`): the kernel draws the same
        uniforms itself (`uniform_from_key_data`), only in programs where an env resets.
      step_key_data: instead of either, ``[2]`` uint32, the data of the threefry key the
        reset keys are split from (`jaxdrive.vector.split_step_key`: env ``e``'s is
        element ``N + e`` of the split): the kernel derives each env's key, then draws.
      tagger_ids: static sorted tagger ids; the runners are the other ids.
      search_padding: ``(MQ, MC)``, each at most ``MP``: also write the brute-force
        search's padded inputs of the new state (`kernels.brute_padding`).
      feature_table: also write the observation writer's agent-major feature table of
        the new state (`knn_obs._agent_major`'s layout).
      fence_products: stop FMA contraction of the step's product-plus-sum forms.
      envs_per_program: ``E`` (power of two; default ``max(1, DEFAULT_ELEMENTS // MP)``).
      num_warps: Triton warps (default `DEFAULT_WARPS`, or `LARGE_PROGRAM_WARPS` for
        programs of ``E·MP >= 1024`` elements, else ``max(1, min(8, E·MP // 128))``).
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
    la, lt = int(num_acceleration_levels), int(num_turn_levels)
    mp = lanes(m)
    mq, mc = (0, 0) if search_padding is None else (int(v) for v in search_padding)
    if search_padding is not None and not (m <= mq <= mp and m <= mc <= mp):
        raise ValueError(f"search_padding must be within [{m}, {mp}], got {search_padding}")
    be = max(1, DEFAULT_ELEMENTS // mp) if envs_per_program is None else int(envs_per_program)
    if be < 1 or be & (be - 1):
        raise ValueError(f"envs_per_program must be a power of two >= 1, got {be}")
    be = min(be, _next_pow2(n))
    if num_warps is None:
        num_warps = DEFAULT_WARPS
    if num_warps is not None:
        warps = int(num_warps)
    elif be * mp >= 1024:
        warps = LARGE_PROGRAM_WARPS
    else:
        warps = max(1, min(8, be * mp // 128))
    interpret = jax.default_backend() == "cpu" if interpret is None else bool(interpret)
    kind = np.zeros(m, np.int32)
    kind[list(ids)] = 1
    pos = np.zeros(m, np.int32)
    pos[list(ids)] = np.arange(nt)
    pos[kind == 0] = np.arange(nr)
    unrolled = nt <= UNROLL_TAGGERS
    f32 = jnp.float32
    # Behind a barrier: in interpret mode the kernel's arithmetic is XLA's, which would
    # fold constant params (the action tables) with other roundings (`env.action_values`).
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
    lay = _Layout(n, m, mp, be, nt, nr, la, lt, mq, mc)
    kernel = functools.partial(
        _vector_kernel, lay=lay, ids=ids if unrolled else None,
        episode_length=int(episode_length), exits=bool(runner_exits_game_after_tagged),
        fence=bool(fence_products), reset=reset, table_out=bool(feature_table),
        interpret=interpret,
    )  # fmt: skip

    def sds(shape, dtype):
        return jax.ShapeDtypeStruct(shape, dtype)

    out_shape = (
        [sds((n * m,), f32)] * 5
        + [sds((n * m,), jnp.bool_), sds((n,), jnp.int32)]
        + [sds((n * nt,), f32), sds((n * nr,), f32)]
        + [sds((n * nt,), jnp.bool_), sds((n * nr,), jnp.bool_)] * 3
        + [sds((n,), jnp.bool_), sds((n,), jnp.int32), sds((n,), jnp.int32), sds((n,), f32)]
    )
    if search_padding is not None:
        out_shape += [sds((n * mq,), f32)] * 2 + [sds((n * mc,), f32)] * 2
    if feature_table:
        out_shape.append(sds((n * m * TABLE_ROW,), f32))
    if TAGGER_POSITIONS not in TAGGER_POSITION_FORMS:
        raise ValueError(
            f"TAGGER_POSITIONS must be one of {TAGGER_POSITION_FORMS}, got {TAGGER_POSITIONS!r}"
        )
    if TAGGER_POSITIONS == "scratch":
        out_shape.append(sds((n * 2 * nt,), f32))  # the taggers' new positions (scratch)
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
    xo, yo, vo, tho, ao, go, to, rt, rr, mt, mr, ut, ur, vt, vr, done, left, tags, tm = outs[:19]
    rest = list(outs[19:])
    search = None
    if search_padding is not None:
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
