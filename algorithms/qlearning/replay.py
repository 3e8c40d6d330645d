"""A ring buffer of fixed-shape items (transitions or ``[T]`` sequences) on the device.

An item is any pytree of arrays; the buffer holds ``C`` of them as leaves ``[C, ...]``,
inserts batches circularly (the oldest item is overwritten first) and samples
uniformly with replacement from the filled slots. Pure functions; the buffer is a
pytree, so it lives in the runner state, jits and vmaps.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from algorithms.qlearning import replay
    >>> buf = replay.init({"x": jnp.zeros((2, 3))}, capacity=4)
    >>> buf = replay.add(buf, {"x": jnp.ones((3, 2, 3))})
    >>> int(buf.size), int(buf.ptr)
    (3, 3)
    >>> replay.sample(buf, jax.random.key(0), 5)["x"].shape
    (5, 2, 3)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

__all__ = ["Replay", "add", "init", "sample"]


@struct.dataclass
class Replay:
    """``C`` item slots; slots ``[0, size)`` hold data and ``ptr`` is the next write."""

    data: Any  # the item pytree with every leaf [C, ...]
    ptr: jax.Array  # [] int32, next slot to write
    size: jax.Array  # [] int32, filled slots (<= C)

    @property
    def capacity(self) -> int:
        return jax.tree.leaves(self.data)[0].shape[0]


def init(item: Any, capacity: int) -> Replay:
    """An empty buffer of ``capacity`` zeroed slots shaped like ``item`` (a pytree)."""
    capacity = int(capacity)
    if capacity < 1:
        raise ValueError(f"replay capacity must be >= 1, got {capacity}")
    data = jax.tree.map(lambda x: jnp.zeros((capacity, *jnp.shape(x)), jnp.asarray(x).dtype), item)
    zero = jnp.zeros((), jnp.int32)
    return Replay(data=data, ptr=zero, size=zero)


def add(buf: Replay, items: Any) -> Replay:
    """Writes the ``B`` items of ``items`` (leaves ``[B, ...]``) at slots ``ptr, ptr+1, …``
    (mod ``C``), as ``B`` one-by-one inserts would; only the last ``C`` survive when
    ``B > C``. ``B`` is static."""
    cap = buf.capacity
    n = jax.tree.leaves(items)[0].shape[0]
    skip = max(n - cap, 0)
    if skip:
        items = jax.tree.map(lambda x: x[skip:], items)
    idx = (buf.ptr + skip + jnp.arange(n - skip, dtype=jnp.int32)) % cap
    data = jax.tree.map(
        lambda store, x: store.at[idx].set(x.astype(store.dtype), unique_indices=True),
        buf.data,
        items,
    )
    ptr = ((buf.ptr + n) % cap).astype(jnp.int32)
    size = jnp.minimum(buf.size + n, cap).astype(jnp.int32)
    return Replay(data=data, ptr=ptr, size=size)


def sample(buf: Replay, key: jax.Array, batch_size: int) -> Any:
    """``batch_size`` items drawn uniformly with replacement from the filled slots
    (slot 0's zeros from an empty buffer: sample once ``size > 0``)."""
    idx = jax.random.randint(key, (int(batch_size),), 0, jnp.maximum(buf.size, 1))
    return jax.tree.map(lambda x: x[idx], buf.data)
