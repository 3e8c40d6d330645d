"""Random actions for the env-stepping benchmark: every group's draw in one Philox kernel.

The env-only suites time an env stepped under uniformly random actions, as WarpDrive's
benchmark does. With `jaxdrive.random_policy` each group draws by its space's
``sample`` (plain `jax.random`, a few XLA kernels per group and step). `random_policy`
here draws the same distribution for every group of `MultiDiscrete` spaces in one
kernel launch per step, so the timed step is the env's work rather than the draws'.

The draw: the components of a group's ``[*batch, C]`` actions, flattened row-major
(``j = s · C + c``), come four at a time from Philox-4x32-10 (Random123's; the generator
of cuRAND's Philox and of XLA's ``RngBitGenerator`` on a GPU) of the counter
``(j // 4, 0, 0, 0)`` under the group key's two words: word ``j % 4`` is ``w`` and the
component is ``mulhi(w, n_c) = floor(w · n_c / 2^32)``, off from uniform by at most
``n_c · 2^-32`` per value. A Philox round is two 32 × 32 → 64-bit multiplies and two
three-way XORs, so one hash gives 128 bits for about a third of Threefry's integer work
per bit. On a GPU one Pallas (Triton) kernel computes all groups' hashes (a program
covers a contiguous range of one group's hashes and writes its components with one tile
store); the high words come from inline PTX (``mul.hi.u32``: Pallas has no ``mulhi``
for Triton). Elsewhere, or with ``use_pallas=False``, XLA computes the same values with
`jax.lax.mulhi` (integer operations only: the same bits on every backend).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

import jaxdrive
from jaxdrive.vector import group_keys

__all__ = ["multi_discrete_groups", "philox4x32", "random_policy"]

# Fixed tuning of the kernel (not meant to be changed): hashes per program at most, the
# number of programs wanted before programs shrink below that (a small batch spread over
# the GPU rather than a few programs hashing in turn), and Triton warps per program.
_BLOCK = 1024
_MIN_PROGRAMS = 512
_WARPS = 4
_PHILOX_M = (0xD2511F53, 0xCD9E8D57)  # Random123's multipliers
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)  # its key increments (Weyl sequence)


def _mulhilo_xla(a: jax.Array, m: int) -> tuple[jax.Array, jax.Array]:
    """``(lo, hi)`` words of ``a · m`` (uint32 ``a``, constant ``m``) by jax ops."""
    b = jnp.full_like(a, m)
    return a * b, lax.mulhi(a, b)


def _mulhi_ptx(a: jax.Array, b: jax.Array | int) -> jax.Array:
    """``floor(a · b / 2^32)`` of uint32 values in a Triton kernel (``mul.hi.u32``; ``b``
    an array or a constant). The asm's result is declared int32 and bitcast: Pallas types
    an unsigned asm result ``ui32``, its own uint32 values signless ``i32``, and the two
    do not mix."""
    args, code = ([a], f"mul.hi.u32 $0, $1, {b};") if isinstance(b, int) else ([a, b], None)
    (hi,) = pl_triton.elementwise_inline_asm(
        code or "mul.hi.u32 $0, $1, $2;",
        args=args,
        constraints="=r" + ",r" * len(args),
        pack=1,
        result_shape_dtypes=[jax.ShapeDtypeStruct(a.shape, jnp.int32)],
    )
    return lax.bitcast_convert_type(hi, jnp.uint32)


def _mulhilo_ptx(a: jax.Array, m: int) -> tuple[jax.Array, jax.Array]:
    """``(lo, hi)`` words of ``a · m`` in a Triton kernel (the high word by inline PTX)."""
    return a * jnp.uint32(m), _mulhi_ptx(a, m)


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


def _values(words: jax.Array, n: jax.Array, ptx: bool) -> jax.Array:
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


def _kernel(kd_ref, *out_refs, parts: tuple[tuple[Any, ...], ...], groups: int, ptx: bool):
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
        # where C divides 4 each column's component is fixed (col % C)
        n = _sizes_of(col if 4 % len(nvec) == 0 else j, nvec)
        ok = j < total
        # masked elements: distinct indices past the end (interpret mode drops them)
        at = jnp.where(ok, j, total + lax.broadcasted_iota(jnp.int32, ok.shape, 0) * 4 + col)
        pl_triton.store(out_refs[i].at[at], _values(tile, n, ptx), mask=ok)

    if len(parts) == 1:
        draw(0, *parts[0][:3])
        return
    for i, (total, nvec, first, programs) in enumerate(parts):
        pl.when((pid >= first) & (pid < first + programs))(
            functools.partial(draw, i, total, nvec, first)
        )


def _block_size(count: int) -> int:
    """Hashes per program for ``count`` hashes: the largest power of two that still
    gives `_MIN_PROGRAMS` programs, but at least 128 (32 where ``count`` is smaller) and
    at most `_BLOCK` and ``next_pow2(count)``."""
    want = 1 << max(0, (-(-count // _MIN_PROGRAMS) - 1).bit_length())
    return max(32, min(_BLOCK, max(128, want), 1 << max(0, (count - 1).bit_length())))


def _draws(
    kd: jax.Array, totals: Sequence[int], nvecs: Sequence[tuple[int, ...]], use_pallas: bool,
    interpret: bool,
) -> tuple[jax.Array, ...]:  # fmt: skip
    """The flat int32 components of the draws (module doc), ``totals[i]`` of them with
    sizes ``nvecs[i]`` under the key ``kd[2i : 2i + 2]``; on the kernel path all of them
    from one kernel launch."""
    if not use_pallas:
        out = []
        for i, (total, nvec) in enumerate(zip(totals, nvecs, strict=True)):
            q = jnp.arange(-(-total // 4), dtype=jnp.uint32)
            zero = jnp.zeros_like(q)
            words = philox4x32(kd[2 * i], kd[2 * i + 1], q, zero, zero, zero)
            flat = jnp.stack(words, -1).reshape(-1)[:total]
            out.append(_values(flat, _sizes_of(jnp.arange(total), nvec), ptx=False))
        return tuple(out)
    groups = _block_size(sum(-(-t // 4) for t in totals))
    parts, first = [], 0
    for total, nvec in zip(totals, nvecs, strict=True):
        programs = pl.cdiv(-(-total // 4), groups)
        parts.append((total, nvec, first, programs))
        first += programs
    kernel = functools.partial(_kernel, parts=tuple(parts), groups=groups, ptx=not interpret)
    return tuple(
        pl.pallas_call(
            kernel,
            out_shape=tuple(jax.ShapeDtypeStruct((t,), jnp.int32) for t in totals),
            grid=(first,),
            compiler_params=pl_triton.CompilerParams(num_warps=_WARPS, num_stages=1),
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
    """``P`` draws of `MultiDiscrete` values (module doc), on the kernel path in one
    kernel launch: draw ``i`` is ``[*batch_shapes[i], C_i]`` of dtype ``dtypes[i]`` with
    ``0 <= x[..., c] < nvecs[i][c]``, from ``keys[i]`` alone (the other draws do not
    change it).

    Args:
      keys: ``[P]`` typed threefry keys, one per draw.
      batch_shapes, nvecs, dtypes: ``P`` each; fewer than ``2^31`` components per draw.
      use_pallas: the Pallas kernel (default: on a GPU backend) or XLA; same values.
      interpret: the kernel in Pallas interpret mode (default: off a GPU backend).
    """
    if not jnp.issubdtype(keys.dtype, jax.dtypes.prng_key) or keys.ndim != 1:
        raise ValueError(f"grouped draws need a [P] typed key array, got {keys.dtype} {keys.shape}")
    if str(jax.random.key_impl(keys)) != "threefry2x32":
        raise ValueError(f"grouped draws need threefry2x32 keys, got {jax.random.key_impl(keys)}")
    if not len(batch_shapes) == len(nvecs) == len(dtypes) == keys.shape[0]:
        raise ValueError(
            f"grouped draws need one batch shape, nvec and dtype per key ({keys.shape[0]}), "
            f"got {len(batch_shapes)}, {len(nvecs)} and {len(dtypes)}"
        )
    shapes = []
    for batch, nvec in zip(batch_shapes, nvecs, strict=True):
        batch, nvec = tuple(int(b) for b in batch), tuple(int(n) for n in nvec)
        if not nvec or min(nvec) < 1 or min(batch, default=0) < 0:
            raise ValueError(f"bad draw: batch shape {batch}, nvec {nvec}")
        if math.prod(batch) * len(nvec) >= 2**31:
            raise ValueError(f"a draw takes fewer than 2**31 components, got {batch} × {nvec}")
        shapes.append((batch, nvec))
    gpu = jax.default_backend() == "gpu"
    use_pallas = gpu if use_pallas is None else use_pallas
    interpret = not gpu if interpret is None else interpret
    live = [i for i, (batch, _) in enumerate(shapes) if math.prod(batch)]
    kd = jax.random.key_data(keys).astype(jnp.uint32)  # [P, 2]
    if len(live) < len(shapes):  # draws of no samples: no part of the kernel
        kd = kd[jnp.asarray(live, jnp.int32)]
    totals = [math.prod(shapes[i][0]) * len(shapes[i][1]) for i in live]
    flat = iter(
        _draws(kd.reshape(-1), totals, [shapes[i][1] for i in live], use_pallas, interpret)
        if live
        else ()
    )
    out = []
    for i, ((batch, nvec), dtype) in enumerate(zip(shapes, dtypes, strict=True)):
        x = next(flat) if i in live else jnp.zeros((0,), jnp.int32)
        out.append(x.reshape(*batch, len(nvec)).astype(dtype))
    return tuple(out)


def random_policy(
    env: jaxdrive.Env, use_pallas: bool | None = None
) -> Callable[[jax.Array, dict[str, jax.Array]], Any]:
    """`jaxdrive.random_policy`'s contract (one key, or a ``[G]`` array of the groups'
    keys; ``obs {g: [N, A_g, ...]}`` gives the batch size), drawing every group's actions
    by `multi_discrete_groups` (``use_pallas`` as there: by default one kernel launch on a
    GPU) where every action space is a `jaxdrive.MultiDiscrete` and the keys are threefry
    keys. Otherwise (other spaces or key kinds) it is `jaxdrive.random_policy` itself."""
    spaces = [env.action_space(g) for g in env.groups]
    plain = jaxdrive.random_policy(env)
    if not all(isinstance(s, jaxdrive.MultiDiscrete) for s in spaces):
        return plain

    def policy(key: jax.Array, obs: dict[str, jax.Array]) -> dict[str, jax.Array]:
        typed = jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
        if not typed or str(jax.random.key_impl(key)) != "threefry2x32":
            return plain(key, obs)
        n = next(iter(obs.values())).shape[0]
        keys = group_keys(key, len(env.groups))
        draws = multi_discrete_groups(
            key if key.ndim == 1 else jnp.stack(keys),
            [(n, env.num_agents(g)) for g in env.groups],
            [s.nvec for s in spaces],
            [s.dtype for s in spaces],
            use_pallas=use_pallas,
        )
        return dict(zip(env.groups, draws, strict=True))

    return policy
