"""jax's Threefry draws reproduced from a key's data, for use inside a kernel.

The batched Tag step (`environments.tag_continuous.kernels.batched_step`) draws an
auto-reset's uniforms itself, only in programs where an env resets, instead of an XLA
kernel drawing ``[N, 3, M]`` every step. `threefry2x32` is jax's ``threefry2x32``
primitive (20 rounds) in integer operations only, so it gives the same bits in XLA, in
Pallas interpret mode and in a Triton kernel; `uniform_from_key_data` is one element of
``jax.random.uniform`` under ``jax_threefry_partitionable`` (jax's default).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["key_data_for_uniforms", "threefry2x32", "uniform_from_key_data"]

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def threefry2x32(
    k0: jax.Array, k1: jax.Array, x0: jax.Array, x1: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Threefry-2x32 with 20 rounds (jax's ``threefry2x32`` primitive) of the counters
    ``(x0, x1)`` under the key ``(k0, k1)``; uint32 arrays of broadcastable shapes.
    Returns the two uint32 output words."""
    u32 = jnp.uint32
    ks = (k0, k1, k0 ^ k1 ^ u32(0x1BD11BDA))
    x0 = x0 + ks[0]
    x1 = x1 + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x0 = x0 + x1
            x1 = (x1 << u32(r)) | (x1 >> u32(32 - r))
            x1 = x0 ^ x1
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ks[(i + 2) % 3] + u32(i + 1)
    return x0, x1


def uniform_from_key_data(k0: jax.Array, k1: jax.Array, index: jax.Array) -> jax.Array:
    """Element ``index`` (uint32, the row-major position in the drawn shape, below
    ``2**32``) of ``jax.random.uniform(key, shape, float32)`` for a threefry key with
    data ``(k0, k1)``, under ``jax_threefry_partitionable``: the counter ``(0, index)``
    hashed, the two words XORed, the top 23 bits as a float in ``[1, 2)`` minus 1."""
    b0, b1 = threefry2x32(k0, k1, jnp.zeros_like(index), index)
    bits = ((b0 ^ b1) >> jnp.uint32(9)) | jnp.uint32(0x3F800000)
    return lax.bitcast_convert_type(bits, jnp.float32) - jnp.float32(1.0)


def key_data_for_uniforms(keys: jax.Array) -> jax.Array | None:
    """``[..., 2]`` uint32: the data of the threefry keys ``keys [...]`` (typed, or raw
    ``[..., 2]`` uint32), from which `threefry2x32` and `uniform_from_key_data`
    reproduce ``jax.random.split`` and ``jax.random.uniform``; ``None`` where they
    cannot (another PRNG implementation, or ``jax_threefry_partitionable`` off)."""
    if not jax.config.jax_threefry_partitionable:
        return None
    if jnp.issubdtype(keys.dtype, jax.dtypes.prng_key):
        if str(jax.random.key_impl(keys)) != "threefry2x32":
            return None
        return jax.random.key_data(keys)
    if keys.dtype == jnp.uint32 and keys.ndim >= 1 and keys.shape[-1] == 2:
        if jax.config.jax_default_prng_impl != "threefry2x32":
            return None
        return keys
    return None
