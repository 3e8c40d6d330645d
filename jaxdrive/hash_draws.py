"""`MultiDiscrete` draws from counter-based hashes: one Threefry hash per pair of
components, or one Philox hash per four.

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

With ``method="philox"`` (`spaces.MULTI_DISCRETE_DRAW` ``"philox"``) the components,
flattened row-major (``j = s · C + c``), come four at a time from Philox-4x32-10
(Random123's; the generator of cuRAND's Philox and of XLA's ``RngBitGenerator`` on a
GPU) of the counter ``(j // 4, 0, 0, 0)`` under the key's two words: word ``j % 4`` is
``w`` and the component is ``mulhi(w, n_c) = floor(w · n_c / 2^32)`` (off from uniform
by at most ``n_c · 2^-32`` per value). A Philox round is two 32 × 32 → 64-bit multiplies
and two three-way XORs; for 128 bits it takes about a third of Threefry's integer work
for 64. The Triton kernel takes the high words with inline PTX (``mul.hi.u32``: Pallas
has no ``mulhi`` for Triton); interpret mode and XLA use `jax.lax.mulhi`.
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

__all__ = [
    "BLOCK",
    "METHODS",
    "MIN_PROGRAMS",
    "WARPS",
    "block_size",
    "multi_discrete",
    "multi_discrete_groups",
    "philox4x32",
    "threefry2x32",
]

#: Samples per Pallas program, at most.
BLOCK = 1024
#: Smaller programs (down to 128 samples) until the grid has this many: a small batch
#: spread over the GPU rather than a few programs hashing in turn.
MIN_PROGRAMS = 512
#: Triton warps per program.
WARPS = 4
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PHILOX_M = (0xD2511F53, 0xCD9E8D57)  # Random123's multipliers
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)  # its key increments (Weyl sequence)
#: The hashes `multi_discrete` can draw from.
METHODS = ("threefry", "philox")


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


def _mulhilo_xla(a: jax.Array, m: int) -> tuple[jax.Array, jax.Array]:
    """``(lo, hi)`` words of ``a · m`` (uint32 ``a``, constant ``m``) by jax ops."""
    b = jnp.full_like(a, m)
    return a * b, lax.mulhi(a, b)


def _mulhilo_ptx(a: jax.Array, m: int) -> tuple[jax.Array, jax.Array]:
    """``(lo, hi)`` words of ``a · m`` in a Triton kernel: the high word by inline PTX
    (``mul.hi.u32``; one result per asm, as Pallas lowers them)."""
    (hi,) = pl_triton.elementwise_inline_asm(
        f"mul.hi.u32 $0, $1, {m};",
        args=[a],
        constraints="=r,r",
        pack=1,
        result_shape_dtypes=[jax.ShapeDtypeStruct(a.shape, jnp.int32)],  # (see _mulhi_ptx)
    )
    return a * jnp.uint32(m), lax.bitcast_convert_type(hi, jnp.uint32)


def _mulhi_ptx(a: jax.Array, b: jax.Array) -> jax.Array:
    """``floor(a · b / 2^32)`` of uint32 arrays in a Triton kernel (``mul.hi.u32``). The
    asm's result is declared int32 and bitcast: Pallas types an unsigned asm result
    ``ui32``, its own uint32 values signless ``i32``, and the two do not mix."""
    (hi,) = pl_triton.elementwise_inline_asm(
        "mul.hi.u32 $0, $1, $2;",
        args=[a, b],
        constraints="=r,r,r",
        pack=1,
        result_shape_dtypes=[jax.ShapeDtypeStruct(a.shape, jnp.int32)],
    )
    return lax.bitcast_convert_type(hi, jnp.uint32)


def philox4x32(
    k0: jax.Array, k1: jax.Array, c0: jax.Array, c1: jax.Array, c2: jax.Array, c3: jax.Array,
    *, ptx: bool = False,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:  # fmt: skip
    """Philox-4x32-10 (Random123) of the counters ``(c0, c1, c2, c3)`` under the key
    ``(k0, k1)``; uint32 arrays of one shape (the key words may be scalars). Returns the
    four uint32 output words. ``ptx``: the multiplies as inline PTX (Triton kernels)."""
    mulhilo = _mulhilo_ptx if ptx else _mulhilo_xla
    for r in range(10):
        if r:
            k0 = k0 + jnp.uint32(_PHILOX_W[0])
            k1 = k1 + jnp.uint32(_PHILOX_W[1])
        lo0, hi0 = mulhilo(c0, _PHILOX_M[0])
        lo1, hi1 = mulhilo(c2, _PHILOX_M[1])
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def _philox_values(words: jax.Array, n: jax.Array, ptx: bool) -> jax.Array:
    """``floor(words · n / 2^32)`` as int32 (uint32 arrays of one shape)."""
    hi = _mulhi_ptx(words, n) if ptx else lax.mulhi(words, n)
    return hi.astype(jnp.int32)


def _sizes_of(j: jax.Array, nvec: tuple[int, ...]) -> jax.Array:
    """``nvec[j % C]`` as uint32, for the flat component indices ``j`` (int32)."""
    c = j % len(nvec)
    n = jnp.full(j.shape, nvec[0], jnp.uint32)
    for i in range(1, len(nvec)):
        n = jnp.where(c == i, jnp.uint32(nvec[i]), n)
    return n


def _philox_kernel(kd_ref, *out_refs, parts: tuple[tuple[Any, ...], ...], groups: int,
                   ptx: bool) -> None:  # fmt: skip
    """One program of the draws ``parts`` (``(total, nvec, first_program, programs)``
    each, with its key at ``kd_ref[2i : 2i + 2]`` and its flat output ``out_refs[i]``):
    ``groups`` Philox hashes of its part, their ``[groups, 4]`` words mapped to
    components, one tile store of the flat components ``4q + w`` below ``total``."""
    pid = pl.program_id(0)

    def draw(i: int, total: int, nvec: tuple[int, ...], first: int) -> None:
        q = (pid - first) * groups + lax.broadcasted_iota(jnp.int32, (groups,), 0)
        zero = jnp.zeros((groups,), jnp.uint32)
        k0, k1 = kd_ref[2 * i], kd_ref[2 * i + 1]
        words = philox4x32(k0, k1, q.astype(jnp.uint32), zero, zero, zero, ptx=ptx)
        col = lax.broadcasted_iota(jnp.int32, (groups, 4), 1)
        tile = jnp.broadcast_to(words[0][:, None], (groups, 4))
        for w in range(1, 4):
            tile = jnp.where(col == w, words[w][:, None], tile)
        j = q[:, None] * 4 + col
        if 4 % len(nvec) == 0:  # the component of each column is fixed: col % C
            n = _sizes_of(col, nvec)
        else:
            n = _sizes_of(j, nvec)
        ok = j < total
        at = jnp.where(ok, j, total + lax.broadcasted_iota(jnp.int32, ok.shape, 0) * 4 + col)
        pl_triton.store(out_refs[i].at[at], _philox_values(tile, n, ptx), mask=ok)

    if len(parts) == 1:
        draw(0, *parts[0][:3])
        return
    for i, (total, nvec, first, programs) in enumerate(parts):
        pl.when((pid >= first) & (pid < first + programs))(
            functools.partial(draw, i, total, nvec, first)
        )


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


def block_size(count: int) -> int:
    """Samples per program for ``count`` samples: a power of two, at most `BLOCK`, at
    least 32 (at least 128 where `BLOCK` allows) and no more than ``next_pow2(count)``,
    the largest that still gives `MIN_PROGRAMS` programs."""
    want = 1 << max(0, (-(-count // MIN_PROGRAMS) - 1).bit_length())
    floor = min(BLOCK, 128)
    return max(32, min(BLOCK, max(floor, want), 1 << max(0, (count - 1).bit_length())))


def _checked(
    key: jax.Array, batch_shape: Sequence[int], nvec: Sequence[int], method: str
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(batch, nvec)`` as int tuples, after checking the key, sizes and method."""
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key) or key.ndim != 0:
        raise ValueError(f"hash draws need one typed key, got {key.dtype} {key.shape}")
    if str(jax.random.key_impl(key)) != "threefry2x32":
        raise ValueError(f"hash draws need a threefry2x32 key, got {jax.random.key_impl(key)}")
    nvec = tuple(int(n) for n in nvec)
    if not nvec or min(nvec) < 1:
        raise ValueError(f"nvec must be non-empty with every n >= 1, got {nvec}")
    batch = tuple(int(b) for b in batch_shape)
    count = math.prod(batch)
    if min(batch, default=0) < 0:
        raise ValueError(f"batch shape must have no negative size, got {batch}")
    if count >= 2**31:
        raise ValueError(f"hash draws take fewer than 2**31 samples, got {count}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method == "philox" and count * len(nvec) >= 2**31:
        raise ValueError(f"philox draws take fewer than 2**31 components, got {count * len(nvec)}")
    return batch, nvec


def _backend(use_pallas: bool | None, interpret: bool | None) -> tuple[bool, bool]:
    """The defaults of ``use_pallas`` (on a GPU backend) and ``interpret`` (off one)."""
    gpu = jax.default_backend() == "gpu"
    return (gpu if use_pallas is None else use_pallas), (
        not gpu if interpret is None else interpret
    )


def multi_discrete(
    key: jax.Array,
    batch_shape: Sequence[int],
    nvec: Sequence[int],
    dtype: Any = jnp.int32,
    *,
    method: str = "threefry",
    use_pallas: bool | None = None,
    interpret: bool | None = None,
) -> jax.Array:
    """``[*batch_shape, C]`` components ``0 <= x[..., c] < nvec[c]`` (module doc).

    Args:
      key: a threefry key (typed, scalar).
      batch_shape: the samples' shape (fewer than ``2^31`` samples).
      nvec: the components' sizes, each ``>= 1``.
      dtype: the result's integer dtype.
      method: ``"threefry"`` (a hash per pair of components) or ``"philox"`` (per four).
      use_pallas: the Pallas kernel (default: on a GPU backend) or XLA; same values.
      interpret: the kernel in Pallas interpret mode (default: off a GPU backend).
    """
    batch, nvec = _checked(key, batch_shape, nvec, method)
    count = math.prod(batch)
    total = count * len(nvec)
    kd = jax.random.key_data(key).astype(jnp.uint32)  # [2]
    use_pallas, interpret = _backend(use_pallas, interpret)
    if count == 0:
        return jnp.zeros((*batch, len(nvec)), dtype)
    if method == "philox":
        (out,) = _philox_draws(kd, [total], [nvec], use_pallas, interpret)
        return out.reshape(*batch, len(nvec)).astype(dtype)
    if use_pallas:
        block = block_size(count)
        out = pl.pallas_call(
            functools.partial(_kernel, count=count, nvec=nvec, block=block),
            out_shape=jax.ShapeDtypeStruct((count * len(nvec),), jnp.int32),
            grid=(pl.cdiv(count, block),),
            compiler_params=pl_triton.CompilerParams(num_warps=WARPS, num_stages=1),
            interpret=interpret,
            name="hash_draws",
        )(kd)
        out = out.reshape(count, len(nvec))
    else:
        s = jnp.arange(count, dtype=jnp.uint32)
        out = jnp.stack(_components(kd[0], kd[1], s, nvec), -1)
    return out.reshape(*batch, len(nvec)).astype(dtype)


def _philox_draws(
    kd: jax.Array,
    totals: Sequence[int],
    nvecs: Sequence[tuple[int, ...]],
    use_pallas: bool,
    interpret: bool,
) -> tuple[jax.Array, ...]:
    """The flat int32 components of Philox draws (module doc), ``totals[i]`` of them with
    sizes ``nvecs[i]`` under the key ``kd[2i : 2i + 2]``; on the kernel path all of them
    from one kernel launch."""
    if not use_pallas:
        out = []
        for i, (total, nvec) in enumerate(zip(totals, nvecs, strict=True)):
            q = jnp.arange(-(-total // 4), dtype=jnp.uint32)
            zero = jnp.zeros_like(q)
            words = philox4x32(kd[2 * i], kd[2 * i + 1], q, zero, zero, zero)
            flat = jnp.stack(words, -1).reshape(-1)[:total]
            out.append(_philox_values(flat, _sizes_of(jnp.arange(total), nvec), ptx=False))
        return tuple(out)
    groups = max(8, block_size(sum(-(-t // 4) for t in totals)))
    parts, first = [], 0
    for total, nvec in zip(totals, nvecs, strict=True):
        programs = pl.cdiv(-(-total // 4), groups)
        parts.append((total, nvec, first, programs))
        first += programs
    kernel = functools.partial(_philox_kernel, parts=tuple(parts), groups=groups, ptx=not interpret)
    return tuple(
        pl.pallas_call(
            kernel,
            out_shape=tuple(jax.ShapeDtypeStruct((t,), jnp.int32) for t in totals),
            grid=(first,),
            compiler_params=pl_triton.CompilerParams(num_warps=WARPS, num_stages=1),
            interpret=interpret,
            name="philox_draws",
        )(kd)
    )


def multi_discrete_groups(
    keys: jax.Array,
    batch_shapes: Sequence[Sequence[int]],
    nvecs: Sequence[Sequence[int]],
    dtypes: Sequence[Any],
    *,
    use_pallas: bool | None = None,
    interpret: bool | None = None,
) -> tuple[jax.Array, ...]:
    """Several Philox draws in one kernel launch: draw ``i`` is
    ``multi_discrete(keys[i], batch_shapes[i], nvecs[i], dtypes[i], method="philox")``,
    the same values (e.g. every agent group's random actions of one env step).

    Args:
      keys: ``[P]`` typed threefry keys, one per draw.
      batch_shapes, nvecs, dtypes: ``P`` each, as `multi_discrete` takes them.
      use_pallas, interpret: as for `multi_discrete`.
    """
    if not jnp.issubdtype(keys.dtype, jax.dtypes.prng_key) or keys.ndim != 1:
        raise ValueError(f"grouped draws need a [P] typed key array, got {keys.dtype} {keys.shape}")
    if not len(batch_shapes) == len(nvecs) == len(dtypes) == keys.shape[0]:
        raise ValueError(
            f"grouped draws need one batch shape, nvec and dtype per key ({keys.shape[0]}), "
            f"got {len(batch_shapes)}, {len(nvecs)} and {len(dtypes)}"
        )
    shapes = [
        _checked(keys[i], batch, nvec, "philox")
        for i, (batch, nvec) in enumerate(zip(batch_shapes, nvecs, strict=True))
    ]
    use_pallas, interpret = _backend(use_pallas, interpret)
    live = [i for i, (batch, _) in enumerate(shapes) if math.prod(batch)]
    kd = jax.random.key_data(keys).astype(jnp.uint32)  # [P, 2]
    if len(live) < len(shapes):  # draws of no samples: no part of the kernel
        kd = kd[jnp.asarray(live, jnp.int32)]
    flat = iter(
        _philox_draws(
            kd.reshape(-1),
            [math.prod(shapes[i][0]) * len(shapes[i][1]) for i in live],
            [shapes[i][1] for i in live],
            use_pallas,
            interpret,
        )
        if live
        else ()
    )
    out = []
    for i, ((batch, nvec), dtype) in enumerate(zip(shapes, dtypes, strict=True)):
        x = next(flat) if i in live else jnp.zeros((0,), jnp.int32)
        out.append(x.reshape(*batch, len(nvec)).astype(dtype))
    return tuple(out)
