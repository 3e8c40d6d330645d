"""SAC losses (soft actor-critic with a learned temperature), as pure functions.

Dimension letters: ``B`` transitions of a batch (one agent each), ``K`` critics (a
twin: 2), ``D`` action size. Actions are normalised to ``[-1, 1]``; the actor is a
tanh-squashed Gaussian (`algorithms.common.distributions.TanhGaussian` with bounds
``±1``), whose ``log_prob`` of the raw sample ``u`` is the density of ``a = tanh(u)``:
``log N(u; μ, σ) − Σ_d log(1 − tanh²(u_d))``. Means are over active transitions
(`algorithms.ddpg.losses.weighted_mean`).

* critic: ``y = r + γ (1 − terminated) (min_k Q'_k(s', a') − α log π(a'|s'))`` with
  ``a' ~ π(·|s')`` and the target critics; loss ``½ Σ_k mean((Q_k(s, a) − y)²)``.
* actor: ``mean(α log π(ã|s) − min_k Q_k(s, ã))``, ``ã ~ π(·|s)`` reparameterised.
* temperature: ``−log α · mean(log π(ã|s) + H̄)`` (``log π`` held fixed), which raises
  α while the policy's entropy is below the target ``H̄`` (``−D`` by default).

Example:
    >>> import jax.numpy as jnp
    >>> from algorithms.sac.losses import soft_td_target
    >>> y = soft_td_target(jnp.array([1.0]), jnp.array([0.0]), jnp.array([10.0]),
    ...                    jnp.array([-2.0]), 0.5, 0.9)
    >>> round(float(y[0]), 4)  # 1 + 0.9 * (10 + 0.5 * 2)
    10.9
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from algorithms.ddpg.buffer import Transition
from algorithms.ddpg.losses import ensemble_td_loss, td_target, weighted_mean

__all__ = ["actor_loss", "critic_loss", "sample_action", "soft_td_target", "temperature_loss"]

DistFn = Callable[[Any, jax.Array], Any]  # (actor params, obs [B, *O]) -> TanhGaussian
CriticFn = Callable[[Any, jax.Array, jax.Array], jax.Array]  # -> [K, B]


def soft_td_target(
    reward: jax.Array,
    terminated: jax.Array,
    next_q: jax.Array,
    next_logp: jax.Array,
    alpha: float | jax.Array,
    gamma: float | jax.Array,
) -> jax.Array:
    """``r + γ (1 − terminated) (Q' − α log π')``; every input ``[B]`` -> ``[B]``."""
    return td_target(reward, terminated, next_q - alpha * next_logp, gamma)


def sample_action(dist: Any, key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A reparameterised draw from a tanh-Gaussian: ``(a [..., D] in [-1, 1], log π(a)
    [...])`` (the log-prob taken of the raw pre-squash sample)."""
    u = dist.sample(key)
    return dist.to_env(u), dist.log_prob(u)


def critic_loss(
    critic_params: Any,
    target_critic_params: Any,
    actor_params: Any,
    alpha: float | jax.Array,
    batch: Transition,
    key: jax.Array,
    gamma: float | jax.Array,
    dist_fn: DistFn,
    critic_fn: CriticFn,
) -> tuple[jax.Array, jax.Array]:
    """The twin critics' loss on ``batch`` against the soft target (no gradient flows
    into the target); ``key`` draws ``a'``. Returns ``(loss [], mean Q_1(s, a) [])``."""
    next_a, next_logp = sample_action(dist_fn(actor_params, batch.next_obs), key)
    next_q = jnp.min(critic_fn(target_critic_params, batch.next_obs, next_a), axis=0)
    y = soft_td_target(batch.reward, batch.terminated, next_q, next_logp, alpha, gamma)
    q = critic_fn(critic_params, batch.obs, batch.action)  # [K, B]
    return ensemble_td_loss(q, y, batch.active), weighted_mean(q[0], batch.active)


def actor_loss(
    actor_params: Any,
    critic_params: Any,
    alpha: float | jax.Array,
    batch: Transition,
    key: jax.Array,
    dist_fn: DistFn,
    critic_fn: CriticFn,
) -> tuple[jax.Array, jax.Array]:
    """``mean(α log π(ã|s) − min_k Q_k(s, ã))`` (gradient only into the actor); returns
    ``(loss [], log π(ã|s) [B])``."""
    a, logp = sample_action(dist_fn(actor_params, batch.obs), key)
    q = jnp.min(critic_fn(jax.lax.stop_gradient(critic_params), batch.obs, a), axis=0)
    return weighted_mean(alpha * logp - q, batch.active), logp


def temperature_loss(
    log_alpha: jax.Array, logp: jax.Array, target_entropy: float, active: jax.Array
) -> jax.Array:
    """``−log α · mean(log π + H̄)`` with ``log π [B]`` held fixed."""
    return -log_alpha * weighted_mean(jax.lax.stop_gradient(logp) + target_entropy, active)
