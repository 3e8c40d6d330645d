"""TagContinuous's step dynamics (spec steps 1–9) in one Pallas (Triton) kernel.

`tag_step` computes, for one env, what `TagContinuous.step_env` computes before building
the TimeStep: turn, accelerate, cap the speed, move and clip, edge penalty and step
rewards, tagging (each in-game runner against its nearest tagger, lowest tagger index
on ties, ``sqrt(d²) < tagging_distance · L``), the taggers' gains, runners leaving the
game, the end-of-game reward and ``done``. Under `jax.vmap` (as `jaxdrive.vectorize`
calls ``step_env``) Pallas adds the env axis to the grid: one program per env, one
kernel launch per batched step, instead of ~20 small XLA kernels.

Dimension letters: ``M`` agents (id order), ``T`` taggers, ``R`` runners, ``MP`` the
next power of two of ``M`` (lanes of a program; lanes past ``M`` are masked).

Layout: every per-agent ref is 1-D ``[M]``, read by gathers at ``min(lane, M−1)`` and
written by masked block stores (the conventions of `environments.tag_continuous.knn_obs`),
so nothing is padded by XLA. The actions are read from the two groups' ``[T·2]`` and
``[R·2]`` arrays through a constant table of each agent's position in its group (no
concatenation). The parameters come in one small float32 vector (`PARAMS`, then the
two action tables of `env.action_values`, computed by XLA outside: tiny; the env puts
the bounds through an optimization barrier so that the tables are np.linspace's float32
values whatever XLA folds), so traced params work.

Nearest tagger: a loop over the ``T`` taggers (their ids from a constant ``[T]`` table);
each tagger's position is extracted from the lane vectors by a masked max-reduction
(exact), and each runner keeps a running ``(d², j)`` minimum with strict ``<`` (the lower
index wins ties, as ``jnp.argmin``). Gains: per tagger the number ``c`` of runners it
tags (a masked integer sum over lanes), then ``c`` sequential additions of
``tag_reward_for_tagger`` starting at ``+0`` -- exactly what the reference's
``jax.ops.segment_sum`` (a scatter-add of equal values, in any order) produces. No
atomics, race-free by construction.

Bit-exactness: the operations are those of ``step_env`` in the same order (``jnp.mod``
as ``lax.rem`` plus its sign fix-up, ``jnp.clip`` as ``minimum(hi, maximum(lo, x))``,
selects for the action tables), so in Pallas interpret mode on the CPU the results
equal the XLA step bit for bit (tests). On GPU three things may differ from XLA's
compilation by an ulp and must be checked (`experiments.benchmarks.step_kernel_probe`):
``cos``/``sin`` (Triton calls libdevice ``__nv_cosf``/``__nv_sinf``), ``sqrt``
(``__nv_sqrtf``), and fused multiply-adds (``x + speed·cos θ``, ``dx·dx + dy·dy``,
``penalty·crossed + step``): Triton contracts them, XLA may not. ``fence_products=True``
puts a no-op select between each such product and its sum, which stops contraction
(the trick of `env.action_values`). There is no division in the kernel (the action
tables' division is done by XLA).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

__all__ = ["PARAMS", "num_params", "tag_step"]

#: The scalar parameters, in the order of the parameter vector (then the action tables).
PARAMS = (
    "grid_length",  # L
    "cap_tagger",  # max_speed · skill_level_tagger
    "cap_runner",  # max_speed · skill_level_runner
    "edge_hit_penalty",
    "tag_threshold",  # tagging_distance · L
    "tag_reward_for_tagger",
    "tag_penalty_for_runner",
    "step_penalty_for_tagger",
    "step_reward_for_runner",
    "end_of_game_reward_for_runner",
)
_P = {name: i for i, name in enumerate(PARAMS)}
_TWO_PI = np.float32(2.0 * np.pi)


def num_params(num_acceleration_levels: int, num_turn_levels: int) -> int:
    """Length of the parameter vector: the scalars, then ``levels + 1`` values per table."""
    return len(PARAMS) + num_acceleration_levels + 1 + num_turn_levels + 1


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def _fence(p: jax.Array) -> jax.Array:
    """``p`` (finite), through a select that keeps a compiler from fusing it into an FMA."""
    return jnp.where(p == p, p, jnp.float32(0.0))


def _step_kernel(
    p_ref, kind_ref, pos_ref, tid_ref, x_ref, y_ref, v_ref, th_ref, a_ref, g_ref, t_ref,
    at_ref, ar_ref,
    xo_ref, yo_ref, vo_ref, tho_ref, ao_ref, go_ref, rew_ref, term_ref, scal_ref,
    *, m, mp, nt, nr, la, lt, episode_length, exits, fence,
):  # fmt: skip
    """One env. Inputs: ``p_ref [P]`` params (`PARAMS`, acceleration table ``[la+1]``,
    turn table ``[lt+1]``), ``kind_ref [M]`` (1 tagger, 0 runner), ``pos_ref [M]``
    (position in the group), ``tid_ref [T]`` tagger ids, state ``x, y, speed,
    direction, acceleration [M]`` float32, ``g_ref [M]`` int32 in game, ``t_ref [1]``,
    actions ``at_ref [2T]``, ``ar_ref [2R]`` int32. Outputs: the new state fields
    ``[M]``, in game ``[M]`` int32, reward ``[M]``, terminated ``[M]`` int32, and
    ``scal_ref [2]`` int32: done, number of runners tagged.
    """
    f32 = jnp.float32
    fz = f32(0.0)
    mul = (lambda a, b: _fence(a * b)) if fence else (lambda a, b: a * b)
    lane = lax.broadcasted_iota(jnp.int32, (mp,), 0)
    inside = lane < m
    ic = jnp.minimum(lane, m - 1)
    is_t = kind_ref[ic] == 1
    is_r = ~is_t
    pos = pos_ref[ic]
    pt = 2 * jnp.minimum(pos, nt - 1)
    pr = 2 * jnp.minimum(pos, nr - 1)
    a_acc = jnp.where(is_t, at_ref[pt], ar_ref[pr])
    a_turn = jnp.where(is_t, at_ref[pt + 1], ar_ref[pr + 1])

    def param(name):
        return p_ref[_P[name]]

    def table(a, off, levels):  # the reference's ``table[a]``, by selects
        val = jnp.zeros((mp,), f32)
        for lv in range(levels + 1):
            val = jnp.where(a == lv, p_ref[off + lv], val)
        return val

    d_acc = table(a_acc, len(PARAMS), la)
    d_turn = table(a_turn, len(PARAMS) + la + 1, lt)

    g = g_ref[ic] != 0
    gf = g.astype(f32)
    L = param("grid_length")
    # 1-4: turn (jnp.mod), accelerate, cap the speed (jnp.clip), drop the acceleration.
    two_pi = f32(_TWO_PI)
    a = th_ref[ic] + d_turn
    r = lax.rem(a, two_pi)
    plus = (r < fz) & (r != fz)  # jnp.mod's fix-up, for a positive divisor
    theta_in = jnp.where(plus, r + two_pi, r)  # theta of an agent in the game
    theta = theta_in * gf
    acc = a_ref[ic] + d_acc
    cap = jnp.where(is_t, param("cap_tagger"), param("cap_runner"))
    speed = jnp.minimum(cap, jnp.maximum(fz, v_ref[ic] + acc)) * gf
    acc = acc * ((speed > fz) & (speed < cap)).astype(f32)
    # 5: move, clip into the square.
    # cos/sin of ``theta_in``, not ``theta``: the same products (an agent out of the game
    # has speed 0, and ``0·c`` adds nothing to a position ``>= +0``), and XLA on the CPU
    # then contracts ``x + speed·cos`` into an FMA as it does in the reference (it does not
    # through the select that ``·gf`` becomes), so interpret mode matches bit for bit.
    x = x_ref[ic] + mul(speed, jnp.cos(theta_in))
    y = y_ref[ic] + mul(speed, jnp.sin(theta_in))
    crossed = ~((x >= fz) & (x <= L) & (y >= fz) & (y <= L))
    x = jnp.minimum(L, jnp.maximum(fz, x))
    y = jnp.minimum(L, jnp.maximum(fz, y))
    # 6: edge penalty and step rewards.
    step_reward = jnp.where(is_t, param("step_penalty_for_tagger"), param("step_reward_for_runner"))
    reward = jnp.where(g, mul(param("edge_hit_penalty"), crossed.astype(f32)) + step_reward, fz)

    # 7: tagging: each runner's nearest tagger (lowest index on ties).
    def nearest(j, carry):
        bd, bj = carry
        tid = tid_ref[j]
        here = lane == tid
        xt = jnp.max(jnp.where(here, x, -jnp.inf))
        yt = jnp.max(jnp.where(here, y, -jnp.inf))
        dx = x - xt
        dy = y - yt
        d = mul(dx, dx) + dy * dy
        better = d < bd
        return jnp.where(better, d, bd), jnp.where(better, j, bj)

    init = (jnp.full((mp,), jnp.inf, f32), jnp.zeros((mp,), jnp.int32))
    bd, bj = lax.fori_loop(0, nt, nearest, init)
    tagged = is_r & g & inside & (jnp.sqrt(bd) < param("tag_threshold"))
    tag_f = tagged.astype(f32)
    gain_r = param("tag_reward_for_tagger")

    def gains(j, addend):
        c = jnp.sum((tagged & (bj == j)).astype(jnp.int32))
        gain = lax.fori_loop(0, c, lambda _, s: s + gain_r, fz)  # segment_sum's order
        return jnp.where(lane == tid_ref[j], gain, addend)

    addend = jnp.where(is_t, fz, tag_f * param("tag_penalty_for_runner"))
    reward = reward + lax.fori_loop(0, nt, gains, addend)
    in_game = g & ~tagged if exits else g
    # 8: end-of-game reward; 9: done.
    t1 = t_ref[0] + 1
    end = t1 == episode_length
    eog = param("end_of_game_reward_for_runner")
    reward = reward + jnp.where(end & in_game & is_r, eog, fz)
    left = jnp.sum((in_game & is_r & inside).astype(jnp.int32))
    done = (t1 >= episode_length) | (left == 0)
    terminated = (g & ~in_game) | (done & g)
    num_tags = jnp.sum(tagged.astype(jnp.int32))

    def put(ref, val):
        pl_triton.store(ref.at[pl.ds(0, mp)], val, mask=inside)

    for ref, val in (
        (xo_ref, x),
        (yo_ref, y),
        (vo_ref, speed),
        (tho_ref, theta),
        (ao_ref, acc),
        (go_ref, in_game.astype(jnp.int32)),
        (rew_ref, reward),
        (term_ref, terminated.astype(jnp.int32)),
    ):
        put(ref, val)
    scal = jnp.where(lane == 0, done.astype(jnp.int32), num_tags)
    pl_triton.store(scal_ref.at[pl.ds(0, mp)], scal, mask=lane < 2)


def tag_step(
    params: jax.Array,
    x: jax.Array,
    y: jax.Array,
    speed: jax.Array,
    direction: jax.Array,
    acceleration: jax.Array,
    in_game: jax.Array,
    t: jax.Array,
    act_tagger: jax.Array,
    act_runner: jax.Array,
    *,
    tagger_ids: Sequence[int],
    num_acceleration_levels: int,
    num_turn_levels: int,
    episode_length: int,
    runner_exits_game_after_tagged: bool,
    fence_products: bool = False,
    num_warps: int | None = None,
    interpret: bool | None = None,
) -> tuple[jax.Array, ...]:
    """One env's step dynamics in one kernel (see the module docstring).

    Args:
      params: ``[num_params(la, lt)]`` float32: `PARAMS`, then the acceleration and turn
        tables (`env.action_values`).
      x, y, speed, direction, acceleration: ``[M]`` float32, agents in id order.
      in_game: ``[M]`` bool (or 0/1 integers).
      t: ``[]`` int32, steps taken before this one.
      act_tagger, act_runner: ``[T, 2]`` and ``[R, 2]`` int32 action indices (valid ones).
      tagger_ids: static sorted tagger ids; the runners are the other ids.
      fence_products: stop FMA contraction of the three product-plus-sum forms.
      num_warps: Triton warps (default ``max(1, min(4, MP // 64))``).
      interpret: Pallas interpret mode; ``None``: when the default backend is the CPU.

    Returns:
      ``x, y, speed, direction, acceleration [M]`` float32 (the new state), ``in_game``
      ``[M]`` bool, ``reward [M]`` float32, ``terminated [M]`` bool, ``done []`` bool,
      ``num_tags []`` int32. Under `jax.vmap` every output gains the env axis.
    """
    m = x.shape[0]
    ids = tuple(int(i) for i in tagger_ids)
    nt = len(ids)
    nr = m - nt
    mp = max(2, _next_pow2(m))
    kind = np.zeros(m, np.int32)
    kind[list(ids)] = 1
    pos = np.zeros(m, np.int32)
    pos[list(ids)] = np.arange(nt)
    pos[kind == 0] = np.arange(nr)
    interpret = jax.default_backend() == "cpu" if interpret is None else bool(interpret)
    warps = max(1, min(4, mp // 64)) if num_warps is None else int(num_warps)
    la, lt = int(num_acceleration_levels), int(num_turn_levels)
    if params.shape != (num_params(la, lt),):
        raise ValueError(f"params must be [{num_params(la, lt)}], got {params.shape}")
    f32 = jnp.float32
    args = [
        params.astype(f32),
        jnp.asarray(kind),
        jnp.asarray(pos),
        jnp.asarray(np.asarray(ids, np.int32)),
        *(a.astype(f32) for a in (x, y, speed, direction, acceleration)),
        in_game.astype(jnp.int32),
        jnp.reshape(t, (1,)).astype(jnp.int32),
        act_tagger.astype(jnp.int32).reshape(-1),
        act_runner.astype(jnp.int32).reshape(-1),
    ]
    kernel = functools.partial(
        _step_kernel,
        m=m,
        mp=mp,
        nt=nt,
        nr=nr,
        la=la,
        lt=lt,
        episode_length=int(episode_length),
        exits=bool(runner_exits_game_after_tagged),
        fence=bool(fence_products),
    )
    vec_f = jax.ShapeDtypeStruct((m,), f32)
    vec_i = jax.ShapeDtypeStruct((m,), jnp.int32)
    out_shape = [vec_f] * 5 + [vec_i, vec_f, vec_i, jax.ShapeDtypeStruct((2,), jnp.int32)]
    xo, yo, vo, tho, ao, go, rew, term, scal = pl.pallas_call(
        kernel,
        out_shape=out_shape,
        grid=(1,),
        compiler_params=pl_triton.CompilerParams(num_warps=warps, num_stages=1),
        cost_estimate=pl.CostEstimate(
            flops=int(m * (40 + 8 * nt)),
            transcendentals=int(3 * m),
            bytes_accessed=int(4 * (16 * m + params.shape[0] + 3)),
        ),
        interpret=interpret,
        name="tag_step",
    )(*args)
    return xo, yo, vo, tho, ao, go != 0, rew, term != 0, scal[0] != 0, scal[1]
