"""Helpers shared by TagContinuous's Pallas kernels (Triton lowering, interpret mode).

Nothing here is a kernel: sizes of blocks and padding, the choice between interpret mode
and the Triton lowering, the Triton compiler parameters, and a few in-kernel operations
whose Triton lowering needs care:

* `div_rn`: IEEE round-to-nearest float32 division (Triton's ``/`` is approximate), so a
  compiled kernel divides exactly as XLA and the CPU do.
* `fence`: a product passed through a select that stops the compiler from contracting
  it into a fused multiply-add, so a kernel rounds ``a*b + c`` as XLA does.
* `any_lane`: a scalar "some lane is set" (a max-reduction across the program's lanes).
* `spill_index`: where a masked scatter sends its masked lanes. Interpret mode's masked
  scatter writes back, at every index, what it read there, so no masked lane may share an
  index with a real one: each goes to its own index past the array's end.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental.pallas import triton as pl_triton

__all__ = [
    "INF",
    "any_lane",
    "check_block",
    "compiler_params",
    "div_rn",
    "fence",
    "next_pow2",
    "resolve_interpret",
    "round_up",
    "spill_index",
]

#: ``float("inf")``: the distance of a candidate that is out of the game or padding.
INF = float("inf")


def next_pow2(n: int) -> int:
    """The least power of two ``>= n`` (1 for ``n <= 1``)."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def round_up(n: int, m: int) -> int:
    """``n`` rounded up to a multiple of ``m``."""
    return -(-n // m) * m


def resolve_interpret(interpret: bool | None) -> bool:
    """Pallas interpret mode: ``interpret`` if given, else whether the default backend is
    the CPU (where the Triton lowering cannot run)."""
    return jax.default_backend() == "cpu" if interpret is None else bool(interpret)


def check_block(name: str, value: int) -> int:
    """``value`` as an int, checked to be a power of two ``>= 1`` (Triton tiles)."""
    value = int(value)
    if value < 1 or value & (value - 1):
        raise ValueError(f"{name} must be a power of two >= 1 (Triton tiles), got {value}")
    return value


def compiler_params(rows: int) -> pl_triton.CompilerParams:
    """Triton compiler parameters for a program of ``rows`` lanes (passed explicitly, so
    Pallas does not pick Mosaic GPU): one warp per 32 lanes, between 1 and 4 warps, and
    Triton's default pipelining."""
    return pl_triton.CompilerParams(num_warps=max(1, min(4, rows // 32)), num_stages=None)


def div_rn(x: jax.Array, y: jax.Array) -> jax.Array:
    """IEEE round-to-nearest float32 division on GPU (Triton's ``/`` is approximate).

    ``x`` and ``y`` must have the same shape (Triton's inline asm takes equal shapes).
    Compiled kernels only: interpret mode cannot run PTX, and the CPU's ``/`` is exact.
    """
    [out] = pl_triton.elementwise_inline_asm(
        "div.rn.f32 $0, $1, $2;",
        args=[x, y],
        constraints="=f,f,f",
        pack=1,
        result_shape_dtypes=[jax.ShapeDtypeStruct(x.shape, jnp.float32)],
    )
    return out


def fence(p: jax.Array) -> jax.Array:
    """``p`` (finite), through a select that keeps a compiler from fusing it into an FMA."""
    return jnp.where(p == p, p, jnp.float32(0.0))


def any_lane(mask: jax.Array) -> jax.Array:
    """Scalar bool: some lane of ``mask`` is set."""
    return jnp.max(jnp.where(mask, 1, 0)) > 0


def spill_index(mask: jax.Array, idx: jax.Array, spill: jax.Array) -> jax.Array:
    """``idx`` where ``mask``, else ``spill``: the index array of a masked scatter whose
    masked lanes must not touch a real index (``spill``: distinct indices past the end;
    see the module doc)."""
    return jnp.where(mask, idx, spill)
