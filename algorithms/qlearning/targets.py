"""Q-learning targets and action selection: λ-returns, double-Q bootstraps, ε-greedy.

Pure functions over arrays with the time axis first. Dimension letters: ``T`` steps of
a sequence, ``...`` any batch axes (sequences, agents), ``n`` actions. Action masks
(`jaxdrive.types.TimeStep.action_mask` layout for `Discrete` actions) are boolean
``[..., n]``, True where the action is allowed; every row allows at least one action.

Example:
    >>> import jax.numpy as jnp
    >>> r = jnp.ones((3, 1)); d = jnp.full((3, 1), 0.5); v = jnp.full((3, 1), 2.0)
    >>> cut = jnp.zeros((3, 1), bool)
    >>> lambda_returns(r, d, v, cut, 0.0)[:, 0].tolist()  # one-step: 1 + 0.5 * 2
    [2.0, 2.0, 2.0]
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = [
    "bootstrap_value",
    "epsilon_greedy",
    "greedy",
    "lambda_returns",
    "masked_q",
]

#: What a masked action's Q-value becomes before a max/argmax (finite: no NaN gradients).
_MASKED_Q = -1e9


def masked_q(q: jax.Array, mask: jax.Array | None) -> jax.Array:
    """``q [..., n]`` with masked actions set to a large negative value (``q`` if no mask)."""
    if mask is None:
        return q
    return jnp.where(mask, q, jnp.asarray(_MASKED_Q, q.dtype))


def greedy(q: jax.Array, mask: jax.Array | None) -> jax.Array:
    """``argmax`` over the allowed actions: ``[..., n] -> [...]`` int32."""
    return jnp.argmax(masked_q(q, mask), axis=-1).astype(jnp.int32)


def epsilon_greedy(
    key: jax.Array, q: jax.Array, epsilon: jax.Array | float, mask: jax.Array | None
) -> jax.Array:
    """ε-greedy actions ``[..., n] -> [...]`` int32: with probability ``epsilon`` (per
    element) an action drawn uniformly from the allowed ones, else `greedy`'s. A masked
    action is never returned."""
    k_explore, k_action = jax.random.split(key)
    logits = jnp.zeros(q.shape, jnp.float32)
    if mask is not None:
        logits = jnp.where(mask, logits, -jnp.inf)
    random = jax.random.categorical(k_action, logits, axis=-1).astype(jnp.int32)
    explore = jax.random.uniform(k_explore, q.shape[:-1]) < epsilon
    return jnp.where(explore, random, greedy(q, mask))


def bootstrap_value(
    q_target: jax.Array, q_select: jax.Array | None, mask: jax.Array | None
) -> jax.Array:
    """The bootstrap ``Q_target(s', a*)``: ``[..., n] -> [...]``.

    Double Q (``q_select`` given, the online network's ``Q(s', ·)``): ``a* = argmax_a
    q_select`` over allowed actions, evaluated by ``q_target``. Without ``q_select``:
    ``max_a q_target`` over the allowed actions.
    """
    if q_select is None:
        return jnp.max(masked_q(q_target, mask), axis=-1)
    a = greedy(q_select, mask)
    return jnp.take_along_axis(q_target, a[..., None], axis=-1)[..., 0]


def lambda_returns(
    reward: jax.Array,
    discount: jax.Array,
    next_value: jax.Array,
    cut: jax.Array,
    lam: float,
) -> jax.Array:
    """Q(λ) returns over a sequence, all arrays ``[T, ...]``:

    ``G_t = r_t + d_t · ((1 − λ) v_t + λ G_{t+1})``, and ``G_t = r_t + d_t · v_t`` where
    ``cut_t`` (the episode ended at step ``t``: the next step of the sequence belongs to
    another episode) or at the last step ``t = T − 1``.

    ``reward`` r_t; ``discount`` d_t = γ (0 where the step's next state is terminal);
    ``next_value`` v_t the bootstrap value of step ``t``'s next state (e.g.
    `bootstrap_value`); ``lam`` λ ∈ [0, 1]: λ = 0 gives one-step targets, λ = 1 the
    discounted return bootstrapped at the cut.
    """
    cut = cut.at[-1].set(True)

    def body(g_next, xs):
        r, d, v, c = xs
        g = r + d * jnp.where(c, v, (1.0 - lam) * v + lam * g_next)
        return g, g

    init = jnp.zeros_like(next_value[0])
    _, g = jax.lax.scan(body, init, (reward, discount, next_value, cut), reverse=True)
    return g
