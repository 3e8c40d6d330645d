"""Orthogonal kernel init that stays safe under ``vmap`` on small CPUs.

`orthogonal` computes exactly what ``flax.linen.initializers.orthogonal`` computes (the
orthogonal factor of a standard normal matrix, its columns' signs fixed so that the
triangular factor has a positive diagonal: a Haar-distributed orthogonal matrix), with
one difference in how it batches. Under ``jax.vmap`` (several seeds or population
members in one program) flax's ``jnp.linalg.qr`` becomes one batched LAPACK ``geqrf``
custom call, and jaxlib's CPU kernel splits its batch over the same intra-op thread pool
that runs the program: on a machine with two cores, two such calls running side by side
(an actor's and a critic's layer) each wait for pool threads the other holds, and the
program never finishes. Here a vmapped factorisation runs as a loop of unbatched ones
(`qr_orthogonal_factor`'s batching rule), so the values are the unbatched ones bit for
bit, in every program that computes them.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["orthogonal", "qr_orthogonal_factor"]


@jax.custom_batching.custom_vmap
def qr_orthogonal_factor(a: jax.Array) -> jax.Array:
    """``Q [m, n]`` of the thin QR factorisation ``a = Q R`` (``a [m, n]``, ``m ≥ n``)
    with the signs of ``Q``'s columns chosen so that ``diag(R) ≥ 0``. Vmapped, it loops
    over the batch (one unbatched factorisation at a time)."""
    q, r = jnp.linalg.qr(a)
    return q * jnp.sign(jnp.diagonal(r))[None, :]


@qr_orthogonal_factor.def_vmap
def _qr_loop(axis_size: int, in_batched: list[bool], a: jax.Array) -> tuple[jax.Array, bool]:
    del axis_size
    if not in_batched[0]:
        return qr_orthogonal_factor(a), False
    return jax.lax.map(qr_orthogonal_factor, a), True


def orthogonal(scale: float = 1.0, column_axis: int = -1) -> Any:
    """A kernel initializer ``(key, shape, dtype) -> [*shape]``: ``scale`` times a matrix
    with orthonormal rows or columns (whichever are fewer) after flattening every axis
    but ``column_axis``; the same values as flax's ``orthogonal(scale, column_axis)``."""

    def init(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
        if len(shape) < 2:
            raise ValueError(f"orthogonal init needs at least 2 dimensions, got {shape}")
        axis = column_axis % len(shape)
        n_cols = shape[axis]
        n_rows = math.prod(shape) // n_cols
        rows, cols = (n_cols, n_rows) if n_rows < n_cols else (n_rows, n_cols)
        q = qr_orthogonal_factor(jax.random.normal(key, (rows, cols), dtype))
        if n_rows < n_cols:
            q = q.T
        q = q.reshape(*shape[:axis], *shape[axis + 1 :], n_cols)
        return scale * jnp.moveaxis(q, -1, axis)

    return init
