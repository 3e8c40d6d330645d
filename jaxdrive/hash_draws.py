"""`MultiDiscrete` draws from one Threefry hash per pair of components.

`jaxdrive.spaces.MultiDiscrete.sample` with `spaces.MULTI_DISCRETE_DRAW` ``"hash"``:
sample ``s`` (row-major in the batch) hashes the counter ``(h, s)`` for ``h = 0, 1, …``
with Threefry-2x32 (20 rounds, the key's own data) and takes component ``c`` from word
``c % 2`` of hash ``c // 2``: its top 23 bits as ``u`` in ``[0, 1)``, then
``min(floor(u · n_c), n_c − 1)``, as the other draws do (off from uniform by at most
``n_c · 2^-23`` per value). On a GPU one Pallas (Triton) kernel computes each sample's
hashes once and writes its components together, one ``[B, C]`` tile per program; jax's
own draws compute a hash per element, and XLA either recomputes it for each component
or keeps it in memory between two kernels. Elsewhere the same values come from XLA
(integer operations and exact float steps: the same bits on every backend).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

__all__ = ["BLOCK", "multi_discrete", "threefry2x32"]

#: Samples per Pallas program.
BLOCK = 1024
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def threefry2x32(k0: jax.Array, k1: jax.Array, x0: jax.Array, x1: jax.Array):
    """Threefry-2x32 with 20 rounds (jax's ``threefry2x32`` primitive) of the counters
    ``(x0, x1)`` under the key ``(k0, k1)``; uint32 arrays of broadcastable shapes.
    Returns the two uint32 output words. Integer operations only, so the same bits in
    XLA, in Pallas interpret mode and in a Triton kernel."""
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


def _components(k0, k1, s, nvec: tuple[int, ...]) -> list[jax.Array]:
    """The ``C`` int32 components (each shaped like ``s``) of the samples ``s`` (uint32)."""
    out = []
    for h in range(-(-len(nvec) // 2)):
        words = threefry2x32(k0, k1, jnp.full_like(s, h), s)
        for w, n in zip(words, nvec[2 * h : 2 * h + 2], strict=False):
            bits = (w >> jnp.uint32(9)) | jnp.uint32(0x3F800000)
            u = lax.bitcast_convert_type(bits, jnp.float32) - jnp.float32(1.0)
            v = jnp.minimum(jnp.floor(u * jnp.float32(n)), jnp.float32(n - 1))
            out.append(v.astype(jnp.int32))
    return out


def _kernel(kd_ref, out_ref, *, count: int, nvec: tuple[int, ...], block: int) -> None:
    """``B`` samples: their hashes, and one ``[B, CP]`` tile store of their components."""
    c = len(nvec)
    cp = max(2, 1 << (c - 1).bit_length())
    s = pl.program_id(0) * block + lax.broadcasted_iota(jnp.int32, (block,), 0)
    parts = _components(kd_ref[0], kd_ref[1], s.astype(jnp.uint32), nvec)
    col = lax.broadcasted_iota(jnp.int32, (1, cp), 1)
    tile = jnp.broadcast_to(parts[0][:, None], (block, cp))
    for i in range(1, c):
        tile = jnp.where(col == i, parts[i][:, None], tile)
    ok = (s < count)[:, None] & (col < c)
    # masked elements: distinct indices past the end (interpret mode drops them)
    row = lax.broadcasted_iota(jnp.int32, ok.shape, 0)
    at = jnp.where(ok, s[:, None] * c + col, count * c + row * cp + col)
    pl_triton.store(out_ref.at[at], tile, mask=ok)


def multi_discrete(
    key: jax.Array,
    batch_shape: Sequence[int],
    nvec: Sequence[int],
    dtype: Any = jnp.int32,
    *,
    use_pallas: bool | None = None,
    interpret: bool | None = None,
) -> jax.Array:
    """``[*batch_shape, C]`` components ``0 <= x[..., c] < nvec[c]`` (module doc).

    Args:
      key: a threefry key (typed, scalar).
      batch_shape: the samples' shape (fewer than ``2^31`` samples).
      nvec: the components' sizes, each ``>= 1``.
      dtype: the result's integer dtype.
      use_pallas: the Pallas kernel (default: on a GPU backend) or XLA; same values.
      interpret: the kernel in Pallas interpret mode (default: off a GPU backend).
    """
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key) or key.ndim != 0:
        raise ValueError(f"hash draws need one typed key, got {key.dtype} {key.shape}")
    if str(jax.random.key_impl(key)) != "threefry2x32":
        raise ValueError(f"hash draws need a threefry2x32 key, got {jax.random.key_impl(key)}")
    nvec = tuple(int(n) for n in nvec)
    if not nvec or min(nvec) < 1:
        raise ValueError(f"nvec must be non-empty with every n >= 1, got {nvec}")
    batch = tuple(int(b) for b in batch_shape)
    count = math.prod(batch)
    if count >= 2**31:
        raise ValueError(f"hash draws take fewer than 2**31 samples, got {count}")
    kd = jax.random.key_data(key).astype(jnp.uint32)  # [2]
    if use_pallas is None:
        use_pallas = jax.default_backend() == "gpu"
    if count == 0:
        return jnp.zeros((*batch, len(nvec)), dtype)
    if use_pallas:
        block = min(BLOCK, max(32, 1 << (count - 1).bit_length()))
        out = pl.pallas_call(
            functools.partial(_kernel, count=count, nvec=nvec, block=block),
            out_shape=jax.ShapeDtypeStruct((count * len(nvec),), jnp.int32),
            grid=(pl.cdiv(count, block),),
            compiler_params=pl_triton.CompilerParams(num_warps=4, num_stages=1),
            interpret=jax.default_backend() != "gpu" if interpret is None else interpret,
            name="hash_draws",
        )(kd)
        out = out.reshape(count, len(nvec))
    else:
        s = jnp.arange(count, dtype=jnp.uint32)
        out = jnp.stack(_components(kd[0], kd[1], s, nvec), -1)
    return out.reshape(*batch, len(nvec)).astype(dtype)
