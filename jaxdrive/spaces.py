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

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "MULTI_DISCRETE_DRAW",
    "MULTI_DISCRETE_DRAWS",
    "Box",
    "Discrete",
    "MultiDiscrete",
    "Space",
]


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
        """Draws ``floor(u · n)`` from one float32 uniform ``u`` per sample, as
        `MultiDiscrete` does: exactly uniform for ``n`` a power of two up to 2^23 (``u``
        has 23 random bits), else off by at most ``n · 2^-23`` per value. One draw
        instead of `jax.random.randint`'s two (fewer kernels per env step)."""
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


#: How `MultiDiscrete.sample` draws (all uniform, other values): ``"joint"``, one
#: uniform per sample decoded into its digits (one random hash per sample, then the
#: digits stacked: XLA keeps the joint index in memory between two kernels);
#: ``"components"``, one uniform per component (a hash per component, one kernel);
#: ``"hash"``, one Threefry hash per pair of components; or ``"philox"`` (the default),
#: one Philox-4x32-10 hash per four components, about a third of Threefry's integer work
#: per bit. Both hash forms are `jaxdrive.hash_draws`: on a GPU one Pallas kernel, and
#: for threefry keys only (other keys draw as ``"components"``).
#: The env-only step at 2000 × (5+995) (random actions for 2M agents of ``[21, 21]``),
#: components → hash → philox: H100 0.7670 → 0.7571 → 0.7538 ms (2026-11-26 run 108;
#: the draw kernel itself ~18 → ~6 µs); H200 components → hash 0.6999 → 0.6907 ms
#: (run 105). At 1000 × (10+100) all three are within the rounds' spread (run 108).
MULTI_DISCRETE_DRAW = "philox"
MULTI_DISCRETE_DRAWS = ("joint", "components", "hash", "philox")


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
        """Draws ``[*batch_shape, len(nvec)]``. With `MULTI_DISCRETE_DRAW` ``"joint"``:
        one float32 uniform ``u`` per sample gives
        the joint index ``j = floor(u · P)`` over the ``P = prod(nvec)`` vectors, decoded in
        mixed radix (last component fastest, as ``np.unravel_index(j, nvec)``). As for
        `Discrete`: exactly uniform for ``P`` a power of two, else off by at most
        ``P · 2^-23`` per vector; one draw per sample instead of one per component. For
        ``P > 2^23``, or with `MULTI_DISCRETE_DRAW` ``"components"``, each component
        draws its own ``u`` (``floor(u · nvec[i])``); ``"hash"`` and ``"philox"`` (the
        default) are `jaxdrive.hash_draws`' (module doc there)."""
        batch = tuple(batch_shape)
        total = math.prod(self.nvec)
        if MULTI_DISCRETE_DRAW not in MULTI_DISCRETE_DRAWS:
            raise ValueError(
                f"MULTI_DISCRETE_DRAW must be one of {MULTI_DISCRETE_DRAWS}, "
                f"got {MULTI_DISCRETE_DRAW!r}"
            )
        if (
            MULTI_DISCRETE_DRAW in ("hash", "philox")
            and jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
            and key.ndim == 0
            and str(jax.random.key_impl(key)) == "threefry2x32"
        ):
            from jaxdrive import hash_draws

            method = "philox" if MULTI_DISCRETE_DRAW == "philox" else "threefry"
            return hash_draws.multi_discrete(key, batch, self.nvec, self.dtype, method=method)
        if total > 2**23 or MULTI_DISCRETE_DRAW != "joint":
            u = jax.random.uniform(key, (*batch, len(self.nvec)))
            hi = jnp.asarray(self.nvec, jnp.float32)
            return jnp.minimum(jnp.floor(u * hi), hi - 1).astype(self.dtype)
        u = jax.random.uniform(key, batch)
        j = jnp.minimum(jnp.floor(u * total), total - 1).astype(jnp.int32)
        parts, stride = [], total
        for n in self.nvec:  # j in [0, P): each digit in [0, n) by the modulo
            stride //= n
            parts.append((j // stride) % n)
        return jnp.stack(parts, -1).astype(self.dtype)

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
