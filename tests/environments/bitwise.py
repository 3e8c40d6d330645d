"""Bit-for-bit comparison of pytrees of arrays, shared by the Tag kernel tests."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

__all__ = ["assert_bitwise"]


def _bits(x: Any) -> np.ndarray:
    """The array's bytes as unsigned integers of its item size (so −0.0 ≠ 0.0, NaN = NaN)."""
    a = np.asarray(x)
    if a.dtype == np.bool_:
        return a
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_bitwise(a: Any, b: Any, what: str) -> None:
    """Asserts ``a`` and ``b`` have the same tree structure, dtypes, shapes and bits;
    the message names ``what``, the leaf, the count of differing elements and the first."""
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb, f"{what}: tree structures differ: {ta} vs {tb}"
    for i, (x, y) in enumerate(zip(la, lb, strict=True)):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape, (
            f"{what}[{i}]: {x.dtype}{x.shape} vs {y.dtype}{y.shape}"
        )
        bad = _bits(x) != _bits(y)
        if np.any(bad):
            idx = tuple(np.argwhere(bad)[0])
            raise AssertionError(
                f"{what}[{i}]: {int(bad.sum())} elements differ, first at {idx}: "
                f"{x[idx]!r} vs {y[idx]!r}"
            )
