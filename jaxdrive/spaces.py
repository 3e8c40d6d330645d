"""Action and observation spaces: `Discrete`, `MultiDiscrete` and `Box`.

A space describes the value of *one* agent. A group of ``A`` agents stacks them
with the agent axis first: ``[A, *space.shape]``.

Example:
    >>> import jax
    >>> from jaxdrive.spaces import MultiDiscrete
    >>> space = MultiDiscrete([21, 21])
    >>> a = space.sample(jax.random.key(0), (4,))
    >>> a.shape, bool(space.contains(a))
    ((4, 2), True)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Box", "Discrete", "MultiDiscrete", "Space"]


class Space:
    """Base class: a set of arrays of one ``shape`` and ``dtype``."""

    shape: tuple[int, ...]
    dtype: Any

    def sample(self, key: jax.Array, batch_shape: Sequence[int] = ()) -> jax.Array:
        """Draws uniformly; returns ``[*batch_shape, *self.shape]``."""
        raise NotImplementedError

    def contains(self, x: Any) -> jax.Array:
        """True (a scalar bool array) when every element of ``x`` lies in the space.

        ``x`` may carry leading batch axes: ``[..., *self.shape]``.
        """
        raise NotImplementedError

    @property
    def is_discrete(self) -> bool:
        return jnp.issubdtype(self.dtype, jnp.integer)

    def _check_trailing_shape(self, x: jax.Array) -> bool:
        n = len(self.shape)
        return tuple(x.shape[len(x.shape) - n :]) == self.shape if n else True


class Discrete(Space):
    """Integers ``{0, …, n−1}``; one per agent (``shape == ()``)."""

    def __init__(self, n: int, dtype: Any = jnp.int32):
        if int(n) < 1:
            raise ValueError(f"Discrete space needs n >= 1, got n={n}")
        self.n = int(n)
        self.shape = ()
        self.dtype = dtype

    def sample(self, key: jax.Array, batch_shape: Sequence[int] = ()) -> jax.Array:
        """Draws ``min(floor(u · n), n − 1)`` from one float32 uniform ``u`` per sample:
        one random draw instead of `jax.random.randint`'s two (fewer kernels per env
        step). Exactly uniform for ``n`` a power of two, else off by at most
        ``n · 2^-23`` per value (``u`` has 23 random bits); ``n > 2^23`` draws by
        `jax.random.randint`, so every value is reachable."""
        if self.n > 2**23:
            return jax.random.randint(key, tuple(batch_shape), 0, self.n, self.dtype)
        u = jax.random.uniform(key, tuple(batch_shape))
        return jnp.minimum(jnp.floor(u * self.n), self.n - 1).astype(self.dtype)

    def contains(self, x: Any) -> jax.Array:
        x = jnp.asarray(x)
        if not jnp.issubdtype(x.dtype, jnp.integer):
            return jnp.asarray(False)
        return jnp.all((x >= 0) & (x < self.n))

    def __repr__(self) -> str:
        return f"Discrete({self.n})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Discrete) and other.n == self.n

    def __hash__(self) -> int:
        return hash(("Discrete", self.n))


class MultiDiscrete(Space):
    """Integer vectors with ``0 <= x[i] < nvec[i]``; ``shape == (len(nvec),)``."""

    def __init__(self, nvec: Sequence[int], dtype: Any = jnp.int32):
        nvec = tuple(int(n) for n in np.asarray(nvec).reshape(-1))
        if not nvec or min(nvec) < 1:
            raise ValueError(f"MultiDiscrete space needs every n >= 1, got nvec={nvec}")
        self.nvec = nvec
        self.shape = (len(nvec),)
        self.dtype = dtype

    def sample(self, key: jax.Array, batch_shape: Sequence[int] = ()) -> jax.Array:
        """Draws ``[*batch_shape, len(nvec)]`` with independent, uniform components:
        one `jax.random.randint` call, its upper bound ``nvec`` broadcast along the last
        axis (exact for every size), in the space's dtype."""
        shape = (*tuple(batch_shape), len(self.nvec))
        return jax.random.randint(key, shape, 0, jnp.asarray(self.nvec), self.dtype)

    def contains(self, x: Any) -> jax.Array:
        x = jnp.asarray(x)
        if not jnp.issubdtype(x.dtype, jnp.integer) or not self._check_trailing_shape(x):
            return jnp.asarray(False)
        return jnp.all((x >= 0) & (x < jnp.asarray(self.nvec)))

    def __repr__(self) -> str:
        return f"MultiDiscrete({list(self.nvec)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MultiDiscrete) and other.nvec == self.nvec

    def __hash__(self) -> int:
        return hash(("MultiDiscrete", self.nvec))


class Box(Space):
    """Real arrays of ``shape`` with ``low <= x <= high`` elementwise (bounds may be ±inf)."""

    def __init__(
        self,
        low: Any,
        high: Any,
        shape: Sequence[int] | None = None,
        dtype: Any = jnp.float32,
    ):
        low_np = np.asarray(low, dtype=np.float64)
        high_np = np.asarray(high, dtype=np.float64)
        if shape is None:
            shape = np.broadcast_shapes(low_np.shape, high_np.shape)
        self.shape = tuple(int(s) for s in shape)
        self.low = np.broadcast_to(low_np, self.shape).astype(np.float32)
        self.high = np.broadcast_to(high_np, self.shape).astype(np.float32)
        if np.any(self.low > self.high):
            raise ValueError("Box space needs low <= high everywhere")
        self.dtype = dtype

    def sample(self, key: jax.Array, batch_shape: Sequence[int] = ()) -> jax.Array:
        """Uniform where both bounds are finite; normal draws where a side is unbounded."""
        shape = (*tuple(batch_shape), *self.shape)
        k1, k2 = jax.random.split(key)
        low, high = jnp.asarray(self.low), jnp.asarray(self.high)
        finite = jnp.isfinite(low) & jnp.isfinite(high)
        u = jax.random.uniform(
            k1,
            shape,
            self.dtype,
            jnp.where(finite, low, 0.0),
            jnp.where(finite, high, 1.0),
        )
        n = jax.random.normal(k2, shape, self.dtype)
        n = jnp.clip(n, low, high)
        return jnp.where(finite, u, n).astype(self.dtype)

    def contains(self, x: Any) -> jax.Array:
        x = jnp.asarray(x)
        if not jnp.issubdtype(x.dtype, jnp.floating) or not self._check_trailing_shape(x):
            return jnp.asarray(False)
        return jnp.all((x >= self.low) & (x <= self.high))

    def __repr__(self) -> str:
        lo, hi = self.low.min(), self.high.max()
        return f"Box(low={lo}, high={hi}, shape={self.shape})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Box)
            and other.shape == self.shape
            and np.array_equal(other.low, self.low)
            and np.array_equal(other.high, self.high)
        )

    def __hash__(self) -> int:
        return hash(("Box", self.shape, self.low.tobytes(), self.high.tobytes()))
