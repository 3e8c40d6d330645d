"""Exploration noise for deterministic policies: Gaussian and Ornstein–Uhlenbeck.

Noise lives in normalised action units (actions scaled to ``[-1, 1]``). The OU
process is a discretised (``dt = 1``) mean-reverting random walk around 0::

    x_{t+1} = x_t − θ x_t + σ ε_t,   ε_t ~ N(0, I)

Its state has the shape of the actions (e.g. ``[N, A, D]``: one process per env and
agent) and is carried in the runner state; `reset_where` zeroes it where an episode
ended. Its stationary standard deviation is ``σ / sqrt(θ (2 − θ))``.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from algorithms.ddpg import noise
    >>> x = noise.ou_init((4, 1, 2))
    >>> x = noise.ou_step(jax.random.key(0), x, theta=0.15, sigma=0.2)
    >>> x.shape
    (4, 1, 2)
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

__all__ = ["gaussian", "ou_init", "ou_stationary_std", "ou_step", "reset_where"]


def gaussian(key: jax.Array, shape: Sequence[int], scale: float | jax.Array) -> jax.Array:
    """Independent ``N(0, scale²)`` draws of ``shape`` (float32)."""
    return scale * jax.random.normal(key, tuple(shape), jnp.float32)


def ou_init(shape: Sequence[int]) -> jax.Array:
    """The OU state at the start of an episode: zeros of ``shape`` (float32)."""
    return jnp.zeros(tuple(shape), jnp.float32)


def ou_step(
    key: jax.Array, x: jax.Array, theta: float | jax.Array, sigma: float | jax.Array
) -> jax.Array:
    """One OU step: ``x − θ x + σ ε`` with ``ε ~ N(0, I)`` of ``x``'s shape."""
    eps = jax.random.normal(key, x.shape, jnp.float32)
    return x - theta * x + sigma * eps


def ou_stationary_std(theta: float, sigma: float) -> float:
    """The stationary standard deviation of `ou_step`'s process, ``σ / sqrt(θ (2 − θ))``."""
    return float(sigma) / (float(theta) * (2.0 - float(theta))) ** 0.5


def reset_where(done: jax.Array, x: jax.Array) -> jax.Array:
    """Zeroes ``x[i]`` where ``done[i]``; ``done``: ``[N]`` bool, ``x``: ``[N, ...]``."""
    mask = jnp.reshape(done, done.shape + (1,) * (x.ndim - done.ndim))
    return jnp.where(mask, jnp.zeros_like(x), x)
