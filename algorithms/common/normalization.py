"""Running mean/variance statistics for observation and return normalisation.

`RunningMeanStd` pools a batch into its statistics with Chan's parallel update, so a
masked batch of any size updates it in one step (inactive agents left out).

Example:
    >>> import jax.numpy as jnp
    >>> rms = RunningMeanStd.create((3,))
    >>> rms = rms.update(jnp.ones((8, 3)) * 2.0)
    >>> round(float(rms.mean[0]), 3)
    2.0
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

__all__ = ["RunningMeanStd"]


@struct.dataclass
class RunningMeanStd:
    """Running statistics of values of shape ``S``."""

    mean: jax.Array  # [*S] float32
    var: jax.Array  # [*S] float32
    count: jax.Array  # [] float32, samples seen (a small prior of 1e-4 at creation)

    @classmethod
    def create(cls, shape: tuple[int, ...] = ()) -> RunningMeanStd:
        """Zero mean, unit variance, a count of ``1e-4``."""
        return cls(
            mean=jnp.zeros(shape, jnp.float32),
            var=jnp.ones(shape, jnp.float32),
            count=jnp.asarray(1e-4, jnp.float32),
        )

    def update(
        self, x: jax.Array, mask: jax.Array | None = None, axis_name: str | None = None
    ) -> RunningMeanStd:
        """Adds the rows of ``x: [M, *S]`` (only where ``mask: [M]`` is True). With
        ``axis_name`` (inside ``shard_map``), the rows of every device of that axis are
        pooled (their sums ``psum``'d), so every device gets the same statistics."""

        def total(v: jax.Array) -> jax.Array:
            return v if axis_name is None else jax.lax.psum(v, axis_name)

        x = x.astype(jnp.float32)
        if mask is None:
            mask = jnp.ones(x.shape[:1], bool)
        w = mask.astype(jnp.float32).reshape(mask.shape + (1,) * (x.ndim - 1))
        n = total(jnp.sum(mask.astype(jnp.float32)))
        safe_n = jnp.maximum(n, 1.0)
        b_mean = total(jnp.sum(x * w, axis=0)) / safe_n
        b_var = total(jnp.sum(w * (x - b_mean) ** 2, axis=0)) / safe_n
        tot = self.count + n
        delta = b_mean - self.mean
        mean = self.mean + delta * n / tot
        m2 = self.var * self.count + b_var * n + delta**2 * self.count * n / tot
        return RunningMeanStd(mean=mean, var=m2 / tot, count=tot)

    @property
    def std(self) -> jax.Array:
        return jnp.sqrt(self.var + 1e-8)

    def normalize(self, x: jax.Array, clip: float = 10.0) -> jax.Array:
        """``clip((x − mean) / std, ±clip)``; ``x: [..., *S]``."""
        return jnp.clip((x - self.mean) / self.std, -clip, clip)
