"""DDPG losses and target-network arithmetic, as pure functions (TD3 and SAC share
`td_target`, `ensemble_td_loss`, `soft_update` and `weighted_mean`).

Dimension letters: ``B`` transitions in a batch (one agent each). Every loss is a
mean weighted by the transitions' ``active`` flags, so inactive agents count for
nothing (``sum(w · x) / max(sum(w), 1)``).

Example:
    >>> import jax.numpy as jnp
    >>> from algorithms.ddpg.losses import td_target
    >>> td_target(jnp.array([1.0, 1.0]), jnp.array([0.0, 1.0]), jnp.array([10.0, 10.0]), 0.9)
    Array([10.,  1.], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from algorithms.ddpg.buffer import Transition

__all__ = [
    "actor_loss",
    "critic_loss",
    "ensemble_td_loss",
    "soft_update",
    "td_target",
    "weighted_mean",
]

ActorFn = Callable[[Any, jax.Array], jax.Array]  # (params, obs [B, *O]) -> [B, D]
CriticFn = Callable[[Any, jax.Array, jax.Array], jax.Array]  # (params, obs, act) -> [B]


def weighted_mean(x: jax.Array, w: jax.Array) -> jax.Array:
    """``sum(w · x) / max(sum(w), 1)`` over ``[B]``."""
    return jnp.sum(w * x) / jnp.maximum(jnp.sum(w), 1.0)


def td_target(
    reward: jax.Array, terminated: jax.Array, next_q: jax.Array, gamma: float | jax.Array
) -> jax.Array:
    """``r + γ (1 − terminated) Q'(s', μ'(s'))``: all ``[B]`` float32 -> ``[B]``."""
    term = terminated.astype(jnp.float32)
    return (reward + gamma * (1.0 - term) * next_q).astype(jnp.float32)


def ensemble_td_loss(q: jax.Array, target: jax.Array, active: jax.Array) -> jax.Array:
    """``½ Σ_k mean_active((Q_k − y)²)`` for critics ``q [K, B]`` and a fixed target
    ``y [B]`` (each critic of a twin regresses on the same target)."""
    err = (q - jax.lax.stop_gradient(target)[None]) ** 2
    return 0.5 * jnp.sum(jax.vmap(weighted_mean, in_axes=(0, None))(err, active))


def soft_update(target: Any, online: Any, tau: float | jax.Array) -> Any:
    """Polyak averaging, leaf by leaf: ``τ · online + (1 − τ) · target``."""
    return jax.tree.map(lambda t, o: tau * o + (1.0 - tau) * t, target, online)


def critic_loss(
    critic_params: Any,
    target_actor_params: Any,
    target_critic_params: Any,
    batch: Transition,
    gamma: float | jax.Array,
    actor_fn: ActorFn,
    critic_fn: CriticFn,
) -> tuple[jax.Array, jax.Array]:
    """Weighted mean squared TD error of ``Q(s, a)`` against a fixed target.

    The target uses the target networks (no gradient flows into it). Returns
    ``(loss [], mean Q(s, a) [])``.
    """
    next_a = actor_fn(target_actor_params, batch.next_obs)
    next_q = critic_fn(target_critic_params, batch.next_obs, next_a)
    y = jax.lax.stop_gradient(td_target(batch.reward, batch.terminated, next_q, gamma))
    q = critic_fn(critic_params, batch.obs, batch.action)
    loss = weighted_mean((q - y) ** 2, batch.active)
    return loss, weighted_mean(q, batch.active)


def actor_loss(
    actor_params: Any,
    critic_params: Any,
    batch: Transition,
    actor_fn: ActorFn,
    critic_fn: CriticFn,
) -> jax.Array:
    """``−Q(s, μ(s))`` averaged over active transitions (gradient only into the actor)."""
    a = actor_fn(actor_params, batch.obs)
    q = critic_fn(jax.lax.stop_gradient(critic_params), batch.obs, a)
    return -weighted_mean(q, batch.active)
