"""Generalised advantage estimation and discounted returns, time-major ``[T, B]``.

``T`` steps of a rollout, ``B`` sequences (envs × agents). Step ``t`` holds the reward
``r_t`` of the transition from ``s_t``, the value ``v_t = V(s_t)`` and:

* ``episode_ends[t]``: the sequence stops after step ``t`` (the agent was terminated
  or truncated, or its env's episode ended); nothing flows back across it.
* ``next_values[t]``: the value to bootstrap step ``t`` from: ``v_{t+1}`` inside an
  episode; ``0`` when the agent was *terminated*; the value of the final observation
  when it was *truncated* (time limit). `bootstrap_values` builds it.

When the env auto-resets, ``obs_{t+1}`` already belongs to the next episode, so the
truncation bootstrap needs the finished episode's last observation: the trainers ask
`jaxdrive.vectorize` for ``extras["final_obs"]`` and pass ``V(final_obs)`` as
``final_values``. (A centralised critic has no final *global* state after the reset;
it uses the global state of step ``t`` with the final observation, an approximation.)

Then ``δ_t = r_t + γ·next_values_t − v_t`` and
``A_t = δ_t + γλ·(1 − episode_ends_t)·A_{t+1}``, ``returns_t = A_t + v_t``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["bootstrap_values", "discounted_returns", "gae_advantages"]


def bootstrap_values(
    values: jax.Array,
    last_value: jax.Array,
    terminated: jax.Array,
    episode_ends: jax.Array,
    final_values: jax.Array,
) -> jax.Array:
    """``next_values [T, B]`` for `gae_advantages`.

    Args:
      values: ``[T, B]`` ``V(s_t)``.
      last_value: ``[B]`` value of the observation after the last step.
      terminated: ``[T, B]`` bool, the agent reached a terminal state at step ``t``.
      episode_ends: ``[T, B]`` bool (see the module docstring).
      final_values: ``[T, B]`` value of the episode's final observation where it ended
        without termination (read only where ``episode_ends & ~terminated``).
    """
    following = jnp.concatenate([values[1:], last_value[None]], axis=0)
    ended = jnp.where(terminated, 0.0, final_values)
    return jnp.where(episode_ends, ended, following).astype(jnp.float32)


def gae_advantages(
    rewards: jax.Array,
    values: jax.Array,
    next_values: jax.Array,
    episode_ends: jax.Array,
    gamma: float | jax.Array,
    gae_lambda: float | jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """GAE(λ): returns ``(advantages [T, B], returns [T, B])`` (returns = A + V).

    All inputs ``[T, B]``; ``episode_ends`` bool. A reverse `lax.scan` over ``T``.
    """
    rewards = rewards.astype(jnp.float32)
    values = values.astype(jnp.float32)
    deltas = rewards + gamma * next_values - values
    cont = gamma * gae_lambda * (1.0 - episode_ends.astype(jnp.float32))

    def body(acc, x):
        delta, c = x
        acc = delta + c * acc
        return acc, acc

    _, adv = jax.lax.scan(body, jnp.zeros_like(deltas[0]), (deltas, cont), reverse=True)
    return adv, adv + values


def discounted_returns(
    rewards: jax.Array,
    next_values: jax.Array,
    episode_ends: jax.Array,
    gamma: float | jax.Array,
) -> jax.Array:
    """Discounted returns ``[T, B]``: ``G_t = r_t + γ·(ends_t ? next_values_t : G_{t+1})``,
    with ``G_{T} := next_values_{T−1}`` bootstrapping the rollout's end (GAE with λ=1).
    """
    rewards = rewards.astype(jnp.float32)
    ends = episode_ends.astype(bool)

    def body(g_next, x):
        r, nv, end = x
        g = r + gamma * jnp.where(end, nv, g_next)
        return g, g

    _, ret = jax.lax.scan(body, next_values[-1], (rewards, next_values, ends), reverse=True)
    return ret
