"""The kernel function of `environments.tag_continuous.kernels.batched_step` (see its
docstring for what is computed, the layout and why it is exact): one program steps ``E``
envs of a batch as the rows of ``[E, MP]`` tiles, one agent per column, then auto-resets
the finished ones and stores the outputs.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

from environments.tag_continuous.kernels.obs_writer import TABLE_ROW
from environments.tag_continuous.kernels.threefry import threefry2x32, uniform_from_key_data
from environments.tag_continuous.kernels.triton import div_rn, fence, next_pow2

__all__ = ["RAW_PARAMS", "UNROLL_TAGGERS", "Layout", "lanes", "vector_kernel"]

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
#: Taggers up to this many are looped over statically (unrolled: the per-tagger row
#: reductions overlap); more go through a `lax.fori_loop` over a table of their ids.
UNROLL_TAGGERS = 16
_OUTPUTS = (
    "xo", "yo", "vo", "tho", "ao", "go", "to", "rew_t", "rew_r", "term_t", "term_r",
    "trunc_t", "trunc_r", "act_t", "act_r", "done", "left", "tags", "time",
)  # fmt: skip


def lanes(m: int) -> int:
    """``MP``: the lanes one env's ``m`` agents take in a program (next power of two, >= 2)."""
    return max(2, next_pow2(m))


class Layout(NamedTuple):
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


def _unpack(refs, lay: Layout, loop_ids: bool, reset, table_out: bool) -> SimpleNamespace:
    """The kernel's refs by name (`tag_vector_step`'s inputs, then its outputs)."""
    refs = list(refs)
    r = SimpleNamespace()
    r.prm = {name: refs.pop(0) for name in RAW_PARAMS}
    r.kind, r.pos = refs.pop(0), refs.pop(0)
    r.tid = refs.pop(0) if loop_ids else None
    r.x, r.y, r.v, r.th, r.a, r.g, r.t, r.at, r.ar = refs[:9]
    del refs[:9]
    r.u = refs.pop(0) if reset else None  # uniforms [N·3·M], key data [N·2] or [2]
    for name in _OUTPUTS:
        setattr(r, name, refs.pop(0))
    r.search = tuple(refs[:4]) if lay.mq else None  # xq, yq, xc, yc
    del refs[: 4 if lay.mq else 0]
    r.tab = refs.pop(0) if table_out else None
    (r.tpos,) = refs  # the taggers' new positions (scratch)
    return r


def _lanes(r: SimpleNamespace, lay: Layout) -> SimpleNamespace:
    """The program's ``[E, MP]`` lane indices: env, agent, group, flat indices, masks."""
    n, m, mp, be, nt, nr = lay.n, lay.m, lay.mp, lay.be, lay.nt, lay.nr
    c = SimpleNamespace(shape=(be, mp))
    c.row = lax.broadcasted_iota(jnp.int32, c.shape, 0)
    c.lane = lax.broadcasted_iota(jnp.int32, c.shape, 1)
    c.env_raw = pl.program_id(0) * be + c.row
    c.valid = (c.env_raw < n) & (c.lane < m)  # [E, MP] the elements that exist
    c.env = jnp.minimum(c.env_raw, n - 1)
    c.ic = jnp.minimum(c.lane, m - 1)
    c.flat = c.env * m + c.ic  # [E, MP] index into the [N·M] arrays
    c.is_t = r.kind[c.ic] == 1
    c.is_r = ~c.is_t
    c.pos = r.pos[c.ic]
    c.pt = 2 * jnp.minimum(c.pos, nt - 1)
    c.pr = 2 * jnp.minimum(c.pos, nr - 1)
    # each lane reads its own group's actions only (masked loads: 0 elsewhere)
    c.mt, c.mr = c.valid & c.is_t, c.valid & c.is_r
    c.erow = lax.broadcasted_iota(jnp.int32, (be, 1), 0)
    c.env1 = jnp.minimum(pl.program_id(0) * be + c.erow, n - 1)  # [E, 1]
    return c


def _at(c: SimpleNamespace, mask, idx, size):
    """A scatter index: ``idx`` where ``mask``, else a distinct index past ``size``."""
    return jnp.where(mask, idx, size + c.spare)


def _action_value(a, lo, hi, levels: int, shp, interpret: bool):
    """``action_values(lo, hi, levels)[a]``, as XLA gathers it (indices wrapped if
    negative, then clamped): 0 for the no-op, else ``(a−1)·step + lo`` with ``step =
    (hi − lo) / (levels − 1)`` rounded once each (no FMA), ``hi`` last."""
    f32, fz = jnp.float32, jnp.float32(0.0)
    a = jnp.where(a < 0, a + (levels + 1), a)
    a = jnp.minimum(jnp.maximum(a, 0), levels)
    if levels == 1:
        val = jnp.broadcast_to(lo, shp)
    else:
        # ``+ lo·0``: a divisor XLA cannot see as a constant (interpret mode), as in
        # `params.action_values`; exact, so the same value on GPU.
        num, den = hi - lo, f32(levels - 1) + lo * fz
        num, den = jnp.broadcast_to(num, shp), jnp.broadcast_to(den, shp)
        step = num / den if interpret else div_rn(num, den)  # (Triton's asm: tensors)
        val = fence((a - 1).astype(f32) * step) + lo
        val = jnp.where(a == levels, hi, val)
    return jnp.where(a == 0, fz, val)


def _move(r, idx, d_acc, d_turn, g, skill, L):
    """Spec steps 1-5 for the agents at flat indices ``idx``: ``(theta, speed, acc, x, y,
    crossed)``: turn (``jnp.mod``), accelerate, cap the speed (``jnp.clip``), drop the
    acceleration at a bound, move (cos/sin of the turned, unmasked direction), clip."""
    f32, fz = jnp.float32, jnp.float32(0.0)
    two_pi = f32(_TWO_PI)
    gf = g.astype(f32)
    rem = lax.rem(r.th[idx] + d_turn, two_pi)
    plus = (rem < fz) & (rem != fz)  # jnp.mod's fix-up, for a positive divisor
    theta_in = jnp.where(plus, rem + two_pi, rem)
    theta = theta_in * gf
    acc = r.a[idx] + d_acc
    cap = r.prm["max_speed"][0] * skill
    speed = jnp.minimum(cap, jnp.maximum(fz, r.v[idx] + acc)) * gf
    acc = acc * ((speed > fz) & (speed < cap)).astype(f32)
    x = r.x[idx] + speed * jnp.cos(theta_in)
    y = r.y[idx] + speed * jnp.sin(theta_in)
    crossed = ~((x >= fz) & (x <= L) & (y >= fz) & (y <= L))
    x = jnp.minimum(L, jnp.maximum(fz, x))
    y = jnp.minimum(L, jnp.maximum(fz, y))
    return theta, speed, acc, x, y, crossed


def _nearest_taggers(r, c, lay: Layout, ids, x, y, interpret: bool):
    """Each lane's nearest tagger ``(d², j)`` (lowest index on ties), from the taggers'
    new positions passed through the scratch output."""
    n, nt = lay.n, lay.nt
    tp = c.env * (2 * nt) + c.pt  # [E, MP]: the tagger lane's slot (pt = 2·its index)
    pl_triton.store(r.tpos.at[_at(c, c.mt, tp, n * 2 * nt)], x, mask=c.mt)
    pl_triton.store(r.tpos.at[_at(c, c.mt, tp + 1, n * 2 * nt)], y, mask=c.mt)
    if not interpret:
        pl_triton.debug_barrier()

    def nearest(j, carry):
        bd, bj = carry
        base = c.env1 * (2 * nt) + 2 * j
        xt, yt = r.tpos[base], r.tpos[base + 1]  # [E, 1] tagger j's new position
        dx = x - xt
        dy = y - yt
        d = dx * dx + dy * dy
        better = d < bd
        return jnp.where(better, d, bd), jnp.where(better, j, bj)

    carry = (jnp.full(c.shape, jnp.inf, jnp.float32), jnp.zeros(c.shape, jnp.int32))
    if ids is not None:  # unrolled, the ids static
        for j in range(nt):
            carry = nearest(j, carry)
        return carry
    return lax.fori_loop(0, nt, nearest, carry)


def _packed_counts(c, lay: Layout, ids, tagged, bj, runner_in):
    """``(c, left, num_tags, bound)`` from bit fields of a few int32 row sums: tagger
    ``j``'s count is field ``j``, the runners left field ``T`` (``per`` fields of
    ``bits`` bits in each word; every field's total is ``<= R``)."""
    nt, nr = lay.nt, lay.nr
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
    cnt = jnp.zeros(c.shape, jnp.int32)
    for j, tid in enumerate(ids):
        cnt = jnp.where(c.lane == tid, counts[j], cnt)
    bound = jnp.max(functools.reduce(jnp.maximum, counts))
    return cnt, left, num_tags, bound


def _loop_counts(r, c, lay: Layout, tagged, bj, runner_in):
    """``(c, left, num_tags, bound)`` by a loop over the taggers (more than
    `UNROLL_TAGGERS`): on tagger ``j``'s lane, the runners it tags."""

    def count(j, cnt):
        tid = r.tid[j]
        cj = jnp.sum((tagged & (bj == j)).astype(jnp.int32), axis=1, keepdims=True)  # [E, 1]
        return jnp.where(c.lane == tid, cj, cnt)

    cnt = lax.fori_loop(0, lay.nt, count, jnp.zeros(c.shape, jnp.int32))
    left = jnp.sum(runner_in.astype(jnp.int32), axis=1, keepdims=True)  # [E, 1]
    num_tags = jnp.sum(tagged.astype(jnp.int32), axis=1, keepdims=True)
    return cnt, left, num_tags, jnp.max(cnt)


def _reset_uniforms(r, c, lay: Layout, reset: str, fresh, some):
    """The reset's three uniforms ``[E, MP]`` each, where ``fresh``: loaded, or drawn
    from the keys' data only when ``some()`` env of the program resets."""
    n, m = lay.n, lay.m
    if reset == "uniforms":
        return tuple(
            pl_triton.load(r.u.at[c.env * (3 * m) + c.ic + k * m], mask=fresh, other=0.0)
            for k in range(3)
        )

    def draw(_):
        if reset == "step_key":  # each env's reset key: element (1, e) of the split
            k0, k1 = threefry2x32(
                r.u[0], r.u[1], jnp.zeros(c.shape, jnp.uint32), (n + c.env).astype(jnp.uint32)
            )
        else:
            k0, k1 = (pl_triton.load(r.u.at[c.env * 2 + w], mask=fresh, other=0) for w in range(2))
        return tuple(
            uniform_from_key_data(k0, k1, (c.ic + k * m).astype(jnp.uint32)) for k in range(3)
        )

    zeros = jnp.zeros(c.shape, jnp.float32)
    return lax.cond(some(), draw, lambda _: (zeros,) * 3, None)


def vector_kernel(*refs, lay, ids, episode_length, exits, reset, table_out, interpret) -> None:
    """``E`` envs of a batch; the refs are `tag_vector_step`'s inputs then outputs."""
    n, m, mp, be, nt, nr, la, lt, mq, mc = lay
    r = _unpack(refs, lay, ids is None, reset, table_out)
    c = _lanes(r, lay)
    f32, fz = jnp.float32, jnp.float32(0.0)

    def param(name):
        return r.prm[name][0]

    def act(col):
        a_t = pl_triton.load(r.at.at[c.env * (2 * nt) + c.pt + col], mask=c.mt, other=0)
        a_r = pl_triton.load(r.ar.at[c.env * (2 * nr) + c.pr + col], mask=c.mr, other=0)
        return jnp.where(c.is_t, a_t, a_r)

    L = param("grid_length")
    a_acc, a_turn = act(0), act(1)
    lo, hi = param("min_acceleration"), param("max_acceleration")
    d_acc = _action_value(a_acc, lo, hi, la, c.shape, interpret)
    lo, hi = param("min_turn"), param("max_turn")
    d_turn = _action_value(a_turn, lo, hi, lt, c.shape, interpret)
    g = r.g[c.flat]
    skill = jnp.where(c.is_t, param("skill_level_tagger"), param("skill_level_runner"))
    theta, speed, acc, x, y, crossed = _move(r, c.flat, d_acc, d_turn, g, skill, L)
    # 6: edge penalty and step rewards.
    step_reward = jnp.where(
        c.is_t, param("step_penalty_for_tagger"), param("step_reward_for_runner")
    )
    reward = jnp.where(g, param("edge_hit_penalty") * crossed.astype(f32) + step_reward, fz)
    # Stores are scatters at computed indices; a masked lane's index is made unique and
    # out of range, so no two lanes name one element (interpret mode writes masked lanes
    # back as a gather-select-scatter, where a duplicate could undo a real write).
    c.spare = c.row * mp + c.lane
    # 7: tagging: each runner's nearest tagger (lowest index on ties).
    bd, bj = _nearest_taggers(r, c, lay, ids, x, y, interpret)
    threshold = param("tagging_distance") * L
    tagged = c.is_r & g & c.valid & (jnp.sqrt(bd) < threshold)
    tag_f = tagged.astype(f32)
    gain_r = param("tag_reward_for_tagger")
    in_game = g & ~tagged if exits else g
    runner_in = in_game & c.is_r & c.valid
    packed = ids is not None
    if packed:
        cnt, left, num_tags, bound = _packed_counts(c, lay, ids, tagged, bj, runner_in)
    else:
        cnt, left, num_tags, bound = _loop_counts(r, c, lay, tagged, bj, runner_in)

    def add(i, s):
        return jnp.where(i < cnt, s + gain_r, s)

    # ``c`` sequential additions of the reward from +0 on each tagger's lane: what the
    # reference's segment_sum (a scatter-add of equal values, in any order) gives.
    gain = lax.fori_loop(0, bound, add, jnp.zeros(c.shape, f32))
    reward = reward + jnp.where(c.is_t, gain, tag_f * param("tag_penalty_for_runner"))
    # 8: end-of-game reward; 9: done.
    t1 = r.t[c.env] + 1  # [E, MP], equal along rows
    end = t1 == episode_length
    reward = reward + jnp.where(end & in_game & c.is_r, param("end_of_game_reward_for_runner"), fz)
    done = (t1 >= episode_length) | (left == 0)  # [E, MP]
    terminated = (g & ~in_game) | (done & g)

    if reset:  # the start state of `reset_env`, selected where the episode ended
        fresh = done & c.valid  # only the envs that reset read their uniforms

        def some():  # whether an env of the program resets
            if packed:  # from the [E, 1] per-env values
                here = pl.program_id(0) * be + c.erow < n
                done_e = (r.t[c.env1] + 1 >= episode_length) | (left == 0)
                return jnp.max((done_e & here).astype(jnp.int32)) > 0
            return jnp.max(fresh.astype(jnp.int32)) > 0  # (Triton has no reduce_or)

        u0, u1, u2 = _reset_uniforms(r, c, lay, reset, fresh, some)
        quarter = jnp.minimum(jnp.floor(u2 * f32(4.0)), f32(3.0))
        x = jnp.where(done, u0 * L, x)
        y = jnp.where(done, u1 * L, y)
        speed = jnp.where(done, fz, speed)
        theta = jnp.where(done, quarter * f32(_HALF_PI), theta)
        acc = jnp.where(done, fz, acc)
        in_game = done | in_game
        t1 = jnp.where(done, 0, t1)

    state = (x, y, speed, theta, acc, in_game)
    per_group = (reward, terminated, None, in_game)  # truncated: all False
    _store_step(r, c, lay, state, per_group, (t1, done, left, num_tags), episode_length)
    _store_extras(r, c, lay, state)


def _store_step(r, c, lay: Layout, state, per_group, scalars, episode_length: int) -> None:
    """The new state ``[N·M]``, the TimeStep's group arrays and the per-env scalars."""
    n, m, nt, nr = lay.n, lay.m, lay.nt, lay.nr
    for ref, val in zip((r.xo, r.yo, r.vo, r.tho, r.ao, r.go), state, strict=True):
        pl_triton.store(ref.at[_at(c, c.valid, c.flat, n * m)], val, mask=c.valid)
    false = jnp.zeros(c.shape, jnp.bool_)
    group_refs = ((r.rew_t, r.rew_r), (r.term_t, r.term_r), (r.trunc_t, r.trunc_r))
    for (t_out, r_out), val in zip((*group_refs, (r.act_t, r.act_r)), per_group, strict=True):
        val = false if val is None else val
        pl_triton.store(t_out.at[_at(c, c.mt, c.env * nt + c.pos, n * nt)], val, mask=c.mt)
        pl_triton.store(r_out.at[_at(c, c.mr, c.env * nr + c.pos, n * nr)], val, mask=c.mr)
    t1, done, left, num_tags = scalars
    first = c.valid & (c.lane == 0)
    e1 = _at(c, first, c.env, n)
    pl_triton.store(r.to.at[e1], t1, mask=first)
    pl_triton.store(r.done.at[e1], done, mask=first)
    pl_triton.store(r.left.at[e1], jnp.broadcast_to(left, c.shape), mask=first)
    pl_triton.store(r.tags.at[e1], jnp.broadcast_to(num_tags, c.shape), mask=first)
    # the observations' time ``t / E``, as XLA computes it: times the rounded reciprocal
    recip = jnp.float32(np.float32(1.0) / np.float32(episode_length))
    pl_triton.store(r.time.at[e1], t1.astype(jnp.float32) * recip, mask=first)


def _store_extras(r, c, lay: Layout, state) -> None:
    """The observation path's inputs, where asked for: the brute-force search's padded
    rows and the writer's agent-major feature table."""
    n, m, mp, be, mq, mc = lay.n, lay.m, lay.mp, lay.be, lay.mq, lay.mc
    x, y, speed, theta, acc, in_game = state
    f32 = jnp.float32
    if r.search is not None:
        # the brute-force search's padded rows (`kernels.brute_padding`): queries as
        # they are (padding lanes: any value), candidates at +inf when out of the game.
        xq_ref, yq_ref, xc_ref, yc_ref = r.search
        here = c.env_raw < n
        inf = f32(jnp.inf)
        mask_q, mask_c = here & (c.lane < mq), here & (c.lane < mc)
        for ref, val, width, mask in (
            (xq_ref, x, mq, mask_q),
            (yq_ref, y, mq, mask_q),
            (xc_ref, jnp.where(in_game & (c.lane < m), x, inf), mc, mask_c),
            (yc_ref, jnp.where(in_game & (c.lane < m), y, inf), mc, mask_c),
        ):
            idx = _at(c, mask, c.env * width + c.lane, n * width)
            pl_triton.store(ref.at[idx], val, mask=mask)
    if r.tab is not None:
        # the writer's agent-major table (`obs_writer.agent_major`): one [E, MP, 8]
        # store, each lane's 32 bytes at once
        gf = in_game.astype(f32)
        values = (x, y, speed, acc, theta, c.is_t.astype(f32), gf, gf)
        f = lax.broadcasted_iota(jnp.int32, (be, mp, TABLE_ROW), 2)
        tile = jnp.zeros((be, mp, TABLE_ROW), f32)
        for i, val in enumerate(values):
            tile = jnp.where(f == i, val[:, :, None], tile)
        mask3 = c.valid[:, :, None] & (f >= 0)
        idx3 = jnp.where(
            mask3,
            c.flat[:, :, None] * TABLE_ROW + f,
            n * m * TABLE_ROW + c.spare[:, :, None] * TABLE_ROW + f,
        )
        pl_triton.store(r.tab.at[idx3], tile, mask=mask3)
