"""The MPE world shared by every scenario: state, physics, actions and geometry helpers.

The semantics are those of mpe2 1.1.1's ``_mpe_utils.core.World`` and
``SimpleEnv._set_action``, vectorised over agents (no Python loop over entities):

* Forces: a movable agent's force is its action ``u`` (times its sensitivity, the
  ``accel``) plus, for every other colliding entity ``b``, the soft contact force
  ``F · (p_a − p_b)/|p_a − p_b| · k · softplus(−(|p_a − p_b| − (s_a + s_b))/k)``
  (``F`` = `MPEParams.contact_force`, ``k`` = `MPEParams.contact_margin`).
* Integration (in this order): ``p += v dt``; ``v *= 1 − damping``; ``v += f/m dt``;
  where the agent has a maximum speed ``v`` is scaled down onto it. Immovable agents
  keep their position and velocity.
* Communication: an agent's utterance ``c`` is its communication action (one-hot of the
  discrete choice, or the continuous values); silent agents say zeros.

Landmarks never move (none is movable in any scenario). Dimension letters: ``N``
agents, ``L`` landmarks, ``C`` communication channels, ``K`` goal indices.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxdrive.types import EnvParams, EnvState

__all__ = [
    "MPEParams",
    "MPEState",
    "Role",
    "bound_penalty",
    "contact_forces",
    "decode_actions",
    "distances",
    "fold",
    "integrate",
    "move_size",
    "nearest",
    "off_diagonal",
    "relative",
]

#: Movement choices of a discrete action: no-op, −x, +x, −y, +y.
_MOVES = 5
#: Reductions over at most this many entries are unrolled (`fold`).
_UNROLL = 8
_FOLDS = {
    "sum": (jnp.add, jnp.sum),
    "min": (jnp.minimum, jnp.min),
    "any": (jnp.logical_or, jnp.any),
}


@struct.dataclass
class MPEState(EnvState):
    """One MPE world. Agents in mpe2's order (groups contiguous, in `Env.groups` order).

    Attributes:
      agent_pos: ``[N, 2]`` float32 positions.
      agent_vel: ``[N, 2]`` float32 velocities.
      comm: ``[N, C]`` float32 utterances ``c`` (zeros for silent agents; one zero column
        where the scenario has ``C = 0``).
      landmark_pos: ``[L, 2]`` float32 landmark positions (fixed in an episode).
      goal: ``[K]`` int32 the scenario's random assignments (goal landmark indices, keys),
        documented by each scenario; one unused zero where it has none.
      t: ``[]`` int32 steps taken in this episode.
    """

    agent_pos: jax.Array  # [N, 2]
    agent_vel: jax.Array  # [N, 2]
    comm: jax.Array  # [N, C]
    landmark_pos: jax.Array  # [L, 2]
    goal: jax.Array  # [K]
    t: jax.Array  # []


@struct.dataclass
class MPEParams(EnvParams):
    """The world's physics (mpe2's ``World`` defaults); scenarios add their own fields."""

    dt: float = 0.1  # simulation time step
    damping: float = 0.25  # fraction of velocity lost per step
    contact_force: float = 100.0  # F, stiffness of the soft contact
    contact_margin: float = 1e-3  # k, softness of the contact
    mass: float = 1.0  # every agent's mass


@dataclasses.dataclass(frozen=True)
class Role:
    """A group of agents with one action layout: ``movable`` agents move (5 choices),
    non-``silent`` ones speak (``C`` channels)."""

    name: str
    count: int
    movable: bool = True
    silent: bool = True


def move_size(role: Role, dim_c: int, continuous: bool) -> int:
    """The action size of ``role`` (mpe2's ``space_dim``): discrete ``Discrete(n)`` with
    ``n = 5·C`` (moves × words) for a movable speaker, ``5`` for a silent mover, ``C`` for
    an immovable speaker; continuous ``Box(0, 1, (5 [movable] + C [speaks],))``."""
    if continuous:
        return (_MOVES if role.movable else 0) + (0 if role.silent else dim_c)
    n = _MOVES if role.movable else 1
    return n * (1 if role.silent else dim_c)


def decode_actions(
    action: jax.Array, role: Role, dim_c: int, continuous: bool
) -> tuple[jax.Array, jax.Array]:
    """Actions of one group -> ``(u [A, 2], c [A, C])``: the unit movement (before the
    sensitivity) and the utterance.

    Discrete ``a [A]``: the move is ``a % 5`` and the word ``a // 5`` for a movable speaker,
    the move ``a`` for a silent mover, the word ``a`` for an immovable speaker; move 1/2
    is −x/+x, 3/4 is −y/+y. Continuous ``a [A, n]`` (clipped into ``[0, 1]``, as mpe2's
    ``ClipOutOfBoundsWrapper``): ``u = (a₂ − a₁, a₄ − a₃)``, ``c`` the values after the
    five movement entries."""
    a_count = action.shape[0]
    zeros_u = jnp.zeros((a_count, 2), jnp.float32)
    zeros_c = jnp.zeros((a_count, dim_c), jnp.float32)
    if continuous:
        a = jnp.clip(action.astype(jnp.float32), 0.0, 1.0)
        u, c = zeros_u, zeros_c
        if role.movable:
            u = jnp.stack([a[:, 2] - a[:, 1], a[:, 4] - a[:, 3]], axis=-1)
            a = a[:, _MOVES:]
        if not role.silent:
            c = a[:, :dim_c]
        return u, c
    a = action.astype(jnp.int32)
    move, word = a, a
    if role.movable and not role.silent:
        move, word = a % _MOVES, a // _MOVES
    u, c = zeros_u, zeros_c
    if role.movable:
        is_move = [(move == v).astype(jnp.float32) for v in range(_MOVES)]
        u = jnp.stack([is_move[2] - is_move[1], is_move[4] - is_move[3]], axis=-1)
    if not role.silent:
        c = (word[:, None] == jnp.arange(dim_c)[None, :]).astype(jnp.float32)
    return u, c


def fold(kind: str, x: jax.Array, axis: int) -> jax.Array:
    """``x`` reduced over ``axis`` by ``kind`` (``"sum"``, ``"min"`` or ``"any"``). An axis
    of at most 8 entries becomes a chain of elementwise operations, which XLA fuses with
    their producers and consumers (on a GPU a reduction ends a fused kernel); longer axes
    use XLA's reduction."""
    axis = axis % x.ndim
    op, reduce = _FOLDS[kind]
    n = x.shape[axis]
    if n == 0 or n > _UNROLL:
        return reduce(x, axis=axis)
    out = jax.lax.index_in_dim(x, 0, axis, keepdims=False)
    for i in range(1, n):
        out = op(out, jax.lax.index_in_dim(x, i, axis, keepdims=False))
    return out


def relative(targets: jax.Array, origins: jax.Array) -> jax.Array:
    """``targets [M, 2]``, ``origins [N, 2]`` -> ``[N, M, 2]``: ``targets[m] − origins[n]``."""
    return targets[None, :, :] - origins[:, None, :]


def distances(a: jax.Array, b: jax.Array) -> jax.Array:
    """``a [N, 2]``, ``b [M, 2]`` -> ``[N, M]`` Euclidean distances ``|a_n − b_m|``."""
    d = a[:, None, :] - b[None, :, :]
    return jnp.sqrt(d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1])


def off_diagonal(x: jax.Array) -> jax.Array:
    """``[N, N, ...]`` -> ``[N, N − 1, ...]``: each row without its diagonal entry, the
    others in increasing column order (by reshapes and slices; no gather)."""
    n = x.shape[0]
    if n == 1:
        return x[:, :0]
    rest = x.shape[2:]
    flat = x.reshape((n * n, *rest))[1:]
    return flat.reshape((n - 1, n + 1, *rest))[:, :n].reshape((n, n - 1, *rest))


def _pair_force(delta: jax.Array, dist: jax.Array, dmin: jax.Array, params: MPEParams):
    """The contact force ``[..., 2]`` of mpe2's ``get_collision_force`` on entity ``a``
    from ``b`` given ``delta = p_a − p_b [..., 2]``, ``dist = |delta|`` and
    ``dmin = s_a + s_b``."""
    k = params.contact_margin
    penetration = jax.nn.softplus(-(dist - dmin) / k) * k
    return (params.contact_force * penetration / dist)[..., None] * delta


def contact_forces(
    pos: jax.Array,
    size: jax.Array,
    params: MPEParams,
    *,
    agents_collide: bool,
    obstacle_pos: jax.Array | None = None,
    obstacle_size: jax.Array | float = 0.0,
) -> jax.Array:
    """``[N, 2]``: the sum of contact forces on each agent from every other agent (when
    ``agents_collide``) and from the colliding landmarks ``obstacle_pos [Lc, 2]`` (size
    ``obstacle_size``). ``pos [N, 2]``, ``size [N]``. ``O(N²)`` pairwise, vectorised."""
    force = jnp.zeros_like(pos)
    n = pos.shape[0]
    if agents_collide and n > 1:
        delta = pos[:, None, :] - pos[None, :, :]  # [N, N, 2]
        dist = jnp.sqrt(delta[..., 0] * delta[..., 0] + delta[..., 1] * delta[..., 1])
        eye = np.eye(n, dtype=bool)
        dist = jnp.where(eye, 1.0, dist)
        pair = _pair_force(delta, dist, size[:, None] + size[None, :], params)
        force = force + fold("sum", jnp.where(eye[..., None], 0.0, pair), 1)
    if obstacle_pos is not None and obstacle_pos.shape[0] > 0:
        delta = pos[:, None, :] - obstacle_pos[None, :, :]  # [N, Lc, 2]
        dist = jnp.sqrt(delta[..., 0] * delta[..., 0] + delta[..., 1] * delta[..., 1])
        pair = _pair_force(delta, dist, size[:, None] + obstacle_size, params)
        force = force + fold("sum", pair, 1)
    return force


def integrate(
    pos: jax.Array,
    vel: jax.Array,
    force: jax.Array,
    params: MPEParams,
    *,
    max_speed: jax.Array | None = None,
    movable: np.ndarray | None = None,
) -> tuple[jax.Array, jax.Array]:
    """One step of mpe2's ``integrate_state``: ``p' = p + v dt``,
    ``v' = v (1 − damping) + f/m dt``, then ``v'`` scaled onto ``max_speed [N]`` where its
    norm exceeds it (``None``: no cap). ``movable [N]`` (static; ``None`` = all): other
    agents keep ``p, v``. Returns ``(p' [N, 2], v' [N, 2])``."""
    new_pos = pos + vel * params.dt
    new_vel = vel * (1.0 - params.damping) + force * (params.dt / params.mass)
    if max_speed is not None:
        speed = jnp.sqrt(new_vel[:, 0] * new_vel[:, 0] + new_vel[:, 1] * new_vel[:, 1])
        over = speed > max_speed
        scale = jnp.where(over, max_speed / jnp.where(over, speed, 1.0), 1.0)
        new_vel = new_vel * scale[:, None]
    if movable is not None and not np.all(movable):
        m = jnp.asarray(movable)[:, None]
        new_pos, new_vel = jnp.where(m, new_pos, pos), jnp.where(m, new_vel, vel)
    return new_pos, new_vel


def bound_penalty(pos: jax.Array) -> jax.Array:
    """``[N, 2]`` -> ``[N]``: mpe2's boundary penalty ``Σ_p bound(|x_p|)`` with
    ``bound(x) = 0`` below 0.9, ``10 (x − 0.9)`` below 1, else ``min(exp(2x − 2), 10)``."""
    x = jnp.abs(pos)
    b = jnp.where(
        x < 0.9, 0.0, jnp.where(x < 1.0, (x - 0.9) * 10.0, jnp.minimum(jnp.exp(2 * x - 2), 10.0))
    )
    return b[..., 0] + b[..., 1]


def nearest(rel: jax.Array, k: int | None, *extras: jax.Array) -> list[jax.Array]:
    """mpe2's partial observability (``padded_relative_positions`` and friends): from
    ``rel [N, M, 2]`` (entities relative to each agent) and ``extras [N, M, D]`` (their
    other features), the ``k`` nearest entities per agent, nearest first (ties: lower
    index), flattened and zero-padded to ``k`` slots: ``[rel [N, 2k], *extras [N, D·k]]``.
    ``k = None``: every entity in order (full observation). ``O(N·M)`` distances and a
    ``top_k`` per agent."""
    n, m = rel.shape[:2]
    arrays = (rel, *extras)
    if k is None:
        return [a.reshape(n, -1) for a in arrays]
    kk = min(k, m)
    out = []
    if kk > 0:
        dist = jnp.sqrt(rel[..., 0] * rel[..., 0] + rel[..., 1] * rel[..., 1])
        _, idx = jax.lax.top_k(-dist, kk)  # [N, kk]
    for a in arrays:
        got = jnp.take_along_axis(a, idx[..., None], axis=1) if kk > 0 else a[:, :0]
        if k > kk:
            got = jnp.concatenate([got, jnp.zeros((n, k - kk, a.shape[-1]), a.dtype)], axis=1)
        out.append(got.reshape(n, -1))
    return out
