"""Orthogonal kernel init without a LAPACK call (safe under ``vmap`` on small CPUs).

`orthogonal` draws the same matrices as ``flax.linen.initializers.orthogonal`` (the
orthogonal factor of a standard normal matrix, its columns' signs fixed so that the
triangular factor has a positive diagonal: a Haar-distributed orthogonal matrix), but
computes the factor with Gram–Schmidt (two passes per column) in plain array ops instead
of ``jnp.linalg.qr``. Why: under ``jax.vmap`` (several seeds or population members in one
program) ``qr`` becomes one batched LAPACK ``geqrf`` custom call, and jaxlib's CPU kernel
splits its batch over the same intra-op thread pool that runs the program. On a machine
with two cores, two such calls running side by side (an actor's and a critic's layer)
each wait for pool threads the other holds, and the program never finishes. The
Gram–Schmidt form runs as ordinary XLA ops on every backend.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["orthogonal", "orthonormal_columns"]

_HIGHEST = jax.lax.Precision.HIGHEST


def orthonormal_columns(a: jax.Array) -> jax.Array:
    """``Q [m, n]`` of the thin QR factorisation ``a = Q R`` (``a [m, n]``, ``m ≥ n``,
    full column rank) with ``diag(R) > 0``: classical Gram–Schmidt with a second
    orthogonalisation pass per column (orthogonal to float precision)."""
    m, n = a.shape
    if m < n:
        raise ValueError(f"orthonormal_columns needs rows >= columns, got {a.shape}")

    def column(k, q):  # q [m, n]: columns < k orthonormal, the rest zero
        v = jax.lax.dynamic_index_in_dim(a, k, axis=1, keepdims=False)
        for _ in range(2):
            v = v - jnp.dot(q, jnp.dot(v, q, precision=_HIGHEST), precision=_HIGHEST)
        v = v / jnp.sqrt(jnp.sum(v * v))
        return jax.lax.dynamic_update_index_in_dim(q, v, k, axis=1)

    return jax.lax.fori_loop(0, n, column, jnp.zeros_like(a))


def orthogonal(scale: float = 1.0, column_axis: int = -1) -> Any:
    """A kernel initializer ``(key, shape, dtype) -> [*shape]``: ``scale`` times a matrix
    with orthonormal rows or columns (whichever are fewer) after flattening every axis
    but ``column_axis``, distributed as flax's ``orthogonal(scale, column_axis)``."""

    def init(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
        if len(shape) < 2:
            raise ValueError(f"orthogonal init needs at least 2 dimensions, got {shape}")
        n_cols = shape[column_axis]
        n_rows = math.prod(shape) // n_cols
        rows, cols = (n_cols, n_rows) if n_rows < n_cols else (n_rows, n_cols)
        a = jax.random.normal(key, (rows, cols), jnp.float32)
        q = orthonormal_columns(a)
        if n_rows < n_cols:
            q = q.T
        moved = (*shape[: column_axis % len(shape)], *shape[column_axis % len(shape) + 1 :])
        q = jnp.moveaxis(q.reshape(*moved, n_cols), -1, column_axis)
        return (scale * q).astype(dtype)

    return init
