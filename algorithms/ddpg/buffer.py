"""A replay buffer held on the device: fixed-size arrays, circular insert, uniform sample.

Dimension letters: ``C`` capacity (transitions), ``O`` observation shape, ``D``
action size, ``B`` a batch of transitions. Every function is pure and jits; the
buffer is a pytree, so it lives in the runner state and vmaps over seeds.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from algorithms.ddpg import buffer
    >>> buf = buffer.init(capacity=4, obs_shape=(3,), action_dim=1)
    >>> batch = buffer.Transition(
    ...     obs=jnp.ones((2, 3)), action=jnp.zeros((2, 1)), reward=jnp.ones(2),
    ...     next_obs=jnp.ones((2, 3)), terminated=jnp.zeros(2), active=jnp.ones(2))
    >>> buf = buffer.add_batch(buf, batch)
    >>> int(buf.size), int(buf.ptr)
    (2, 2)
    >>> buffer.sample(buf, jax.random.key(0), 5).obs.shape
    (5, 3)
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import struct

__all__ = ["ReplayBuffer", "Transition", "add_batch", "init", "sample"]


@struct.dataclass
class Transition:
    """A batch of ``B`` transitions (one agent each); all float32.

    ``terminated`` is 1 where the next state is terminal (no bootstrap); ``active``
    is 1 where the agent was in the game when it acted (0 weights it out of the loss).
    """

    obs: jax.Array  # [B, *O]
    action: jax.Array  # [B, D], normalised to [-1, 1]
    reward: jax.Array  # [B]
    next_obs: jax.Array  # [B, *O]
    terminated: jax.Array  # [B]
    active: jax.Array  # [B]


@struct.dataclass
class ReplayBuffer:
    """``C`` slots of transitions; slots ``[0, size)`` hold data, ``ptr`` is the next write."""

    data: Transition  # every leaf [C, ...]
    ptr: jax.Array  # [] int32, next slot to write
    size: jax.Array  # [] int32, filled slots (<= C)

    @property
    def capacity(self) -> int:
        return self.data.reward.shape[0]


def init(capacity: int, obs_shape: Sequence[int], action_dim: int) -> ReplayBuffer:
    """An empty buffer of ``capacity`` zeroed slots."""
    capacity = int(capacity)
    if capacity < 1:
        raise ValueError(f"replay buffer capacity must be >= 1, got {capacity}")
    obs_shape = tuple(int(s) for s in obs_shape)
    zeros = lambda *shape: jnp.zeros((capacity, *shape), jnp.float32)
    data = Transition(
        obs=zeros(*obs_shape),
        action=zeros(int(action_dim)),
        reward=zeros(),
        next_obs=zeros(*obs_shape),
        terminated=zeros(),
        active=zeros(),
    )
    return ReplayBuffer(data=data, ptr=jnp.zeros((), jnp.int32), size=jnp.zeros((), jnp.int32))


def add_batch(buf: ReplayBuffer, batch: Transition) -> ReplayBuffer:
    """Writes the ``B`` transitions of ``batch`` at ``ptr, ptr+1, …`` (mod ``C``).

    When ``B > C`` only the last ``C`` transitions are kept, as ``B`` one-by-one writes
    would leave them. ``B`` is static (the batch's shape).
    """
    cap = buf.capacity
    n = batch.reward.shape[0]
    skip = max(n - cap, 0)  # static: the oldest writes are overwritten within the batch
    if skip:
        batch = jax.tree.map(lambda x: x[skip:], batch)
    idx = (buf.ptr + skip + jnp.arange(n - skip, dtype=jnp.int32)) % cap
    data = jax.tree.map(
        lambda store, x: store.at[idx].set(x.astype(store.dtype), unique_indices=True),
        buf.data,
        batch,
    )
    ptr = (buf.ptr + n) % cap
    size = jnp.minimum(buf.size + n, cap).astype(jnp.int32)
    return ReplayBuffer(data=data, ptr=ptr.astype(jnp.int32), size=size)


def sample(buf: ReplayBuffer, key: jax.Array, batch_size: int) -> Transition:
    """``batch_size`` transitions drawn uniformly, with replacement, from the filled slots.

    On an empty buffer it returns slot 0 (zeros); callers sample once ``size > 0``.
    """
    hi = jnp.maximum(buf.size, 1)
    idx = jax.random.randint(key, (int(batch_size),), 0, hi)
    return jax.tree.map(lambda x: x[idx], buf.data)
