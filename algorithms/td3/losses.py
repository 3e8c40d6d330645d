"""TD3 losses (twin delayed DDPG), as pure functions.

Dimension letters: ``B`` transitions of a batch, ``K`` critics (2), ``D`` action size;
actions normalised to ``[-1, 1]``; means over active transitions.

* target policy smoothing: ``a' = clip(μ'(s') + clip(ε, −c, c), −1, 1)``,
  ``ε ~ N(0, σ̃²)`` (`smoothed_target_action`, σ̃ ``target_noise``, c ``noise_clip``);
* critic: ``y = r + γ (1 − terminated) min_k Q'_k(s', a')``, loss
  ``½ Σ_k mean((Q_k(s, a) − y)²)``;
* actor (every ``policy_delay``-th step): ``−mean Q_1(s, μ(s))``
  (`algorithms.ddpg.losses.actor_loss` on the first critic).

Example:
    >>> import jax, jax.numpy as jnp
    >>> a = smoothed_target_action(jnp.array([[0.95]]), jax.random.key(0), 0.0, 0.5)
    >>> a.tolist()
    [[0.949999988079071]]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from algorithms.ddpg.buffer import Transition
from algorithms.ddpg.losses import ensemble_td_loss, td_target, weighted_mean

__all__ = ["critic_loss", "smoothed_target_action"]

ActorFn = Callable[[Any, jax.Array], jax.Array]  # (params, obs [B, *O]) -> [B, D]
CriticFn = Callable[[Any, jax.Array, jax.Array], jax.Array]  # -> [K, B]


def smoothed_target_action(
    mu: jax.Array,
    key: jax.Array,
    target_noise: float | jax.Array,
    noise_clip: float | jax.Array,
) -> jax.Array:
    """``clip(μ + clip(σ̃ ε, −c, c), −1, 1)`` with ``ε ~ N(0, I)`` of ``mu``'s shape."""
    eps = target_noise * jax.random.normal(key, mu.shape, jnp.float32)
    return jnp.clip(mu + jnp.clip(eps, -noise_clip, noise_clip), -1.0, 1.0)


def critic_loss(
    critic_params: Any,
    target_actor_params: Any,
    target_critic_params: Any,
    batch: Transition,
    key: jax.Array,
    gamma: float | jax.Array,
    target_noise: float | jax.Array,
    noise_clip: float | jax.Array,
    actor_fn: ActorFn,
    critic_fn: CriticFn,
) -> tuple[jax.Array, jax.Array]:
    """The twin critics' loss against the clipped double-Q target with target policy
    smoothing (``key`` draws the smoothing noise; no gradient flows into the target).
    Returns ``(loss [], mean Q_1(s, a) [])``."""
    mu = actor_fn(target_actor_params, batch.next_obs)
    next_a = smoothed_target_action(mu, key, target_noise, noise_clip)
    next_q = jnp.min(critic_fn(target_critic_params, batch.next_obs, next_a), axis=0)
    y = td_target(batch.reward, batch.terminated, next_q, gamma)
    q = critic_fn(critic_params, batch.obs, batch.action)  # [K, B]
    return ensemble_td_loss(q, y, batch.active), weighted_mean(q[0], batch.active)
