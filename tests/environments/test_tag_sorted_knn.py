"""The sorted search's preparation (`kernels.sorted_prep`): the curve order and its inputs.

The search itself is checked against the reference in `test_tag_kernels`. Here: the
Hilbert index walks neighbouring cells; `spatial_order` is a stable, spatially local
permutation; the Pallas preparation's order is the stable sort by its 5-bit Hilbert
keys (computed here in NumPy), and given that order every input it writes equals the
XLA preparation's (`sorted_inputs`, the path beyond `PREP_MAX_AGENTS`); the radix sort's
one-bit passes sort stably.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl

from environments.tag_continuous.kernels import sorted_prep
from tests.environments.test_tag_kernels import make_states


@pytest.mark.parametrize("bits", [1, 3, 5])
def test_hilbert_index_walks_neighbouring_cells(bits):
    n = 1 << bits
    qx, qy = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    d = np.asarray(sorted_prep.hilbert_index(jnp.asarray(qx), jnp.asarray(qy), bits)).ravel()
    np.testing.assert_array_equal(np.sort(d), np.arange(n * n))  # a bijection
    order = np.argsort(d)
    step = np.abs(np.diff(qx.ravel()[order])) + np.abs(np.diff(qy.ravel()[order]))
    assert np.all(step == 1)  # consecutive indices: neighbouring cells


def test_spatial_order_is_a_stable_local_permutation():
    m = 500
    x, y, _ = make_states(m, ("uniform", "one_point", "lattice"), seed=4)
    perm = np.asarray(jax.jit(sorted_prep.spatial_order)(x, y))
    for e in range(3):
        np.testing.assert_array_equal(np.sort(perm[e]), np.arange(m))
    np.testing.assert_array_equal(perm[1], np.arange(m))  # equal keys: index order
    # Lattice: 36 distinct points; within each run of one point, ids ascend.
    xl, yl = x[2][perm[2]], y[2][perm[2]]
    same = (np.diff(xl) == 0) & (np.diff(yl) == 0)
    assert np.all(np.diff(perm[2])[same] > 0)
    # Consecutive agents along the curve are close (uniform: mean step << side 20).
    step = np.hypot(np.diff(x[0][perm[0]]), np.diff(y[0][perm[0]]))
    assert step.mean() < 1.5, step.mean()


def _prep_order(x, y, m):
    """The Pallas preparation's order in NumPy: the stable sort of the agents by the
    Hilbert index of their positions on a ``2**B``-cell grid (``B`` = `sort_bits`) over
    their bounding square, as the kernel quantises them in interpret mode."""
    _, bits = sorted_prep.sort_bits(m)
    n_cells = 1 << bits
    ext = np.maximum(np.maximum(x.max() - x.min(), y.max() - y.min()), np.float32(1e-30))
    scale = np.float32(n_cells - 1) / ext

    def quantise(v):
        return np.clip(np.floor((v - v.min()) * scale), 0, n_cells - 1).astype(np.int32)

    key = np.asarray(sorted_prep.hilbert_index(quantise(x), quantise(y), bits))
    return np.argsort(key, kind="stable")


@pytest.fixture(scope="module")
def prep():
    """The Pallas preparation (interpret mode) on 37 agents, ``BM = 16, BC = 8``: query
    blocks and chunks not filled, agents out of the game down to none."""
    m, bm, bc = 37, 16, 8
    kinds = ("uniform", "out_random", "lattice_out", "out_all", "two_clusters", "one_point")
    x, y, g = make_states(m, kinds, seed=6)
    fn = jax.jit(lambda a, b, c: sorted_prep.prep_pallas(a, b, c, bm, bc, True))
    inputs, extra = jax.tree.map(np.asarray, fn(x, y, g))
    return x, y, g, bm, bc, inputs, extra


def test_pallas_preparation_order_is_the_stable_curve_sort(prep):
    x, y, g, *_, extra = prep
    pq = extra[0]
    m = x.shape[1]
    for e in range(x.shape[0]):
        np.testing.assert_array_equal(pq[e, :m], _prep_order(x[e], y[e], m), err_msg=f"env {e}")
        assert np.all(pq[e, m:] == m)  # padding


def test_pallas_preparation_equals_the_xla_one(prep):
    """Given the Pallas preparation's own order, `sorted_inputs` (XLA) writes the same
    queries, candidates, block starts and chunk boxes; ``xo, yo`` are the positions by id."""
    x, y, g, bm, bc, inputs, (pq, xo, yo) = prep
    m = x.shape[1]
    xla = jax.jit(sorted_prep.sorted_inputs, static_argnums=(3, 4))
    perm, ref = xla(x, y, g, bm, bc, jnp.asarray(pq[:, :m]))
    names = ("cb", "xq", "yq", "qc", "xc", "yc", "oc", "bx0", "bx1", "by0", "by1")
    for name, got, want in zip(names, inputs, ref, strict=True):
        np.testing.assert_array_equal(got, np.asarray(want), err_msg=name)
    np.testing.assert_array_equal(np.asarray(perm), pq[:, :m])
    np.testing.assert_array_equal(xo[:, :m], x)
    np.testing.assert_array_equal(yo[:, :m], y)
    # The XLA preparation's own order is `spatial_order`'s.
    own = jax.jit(lambda a, b, c: xla(a, b, c, bm, bc)[0])(x, y, g)
    np.testing.assert_array_equal(
        np.asarray(own), np.asarray(jax.jit(sorted_prep.spatial_order)(x, y))
    )


def radix_sort(keys: np.ndarray, radix, lo: int, nbits: int) -> tuple[np.ndarray, np.ndarray]:
    """``radix`` (a radix-pass function) in a one-program interpret-mode kernel:
    ``(returned, bufs[1])``."""

    def kernel(k_ref, o_ref, b0, b1):
        o_ref[...] = radix(k_ref[...], (b0, b1), lo, nbits, interpret=True)

    sds = jax.ShapeDtypeStruct(keys.shape, np.int32)
    out, _, b1 = pl.pallas_call(kernel, out_shape=(sds, sds, sds), interpret=True)(keys)
    return np.asarray(out), np.asarray(b1)


def test_one_bit_radix_passes_sort_stably():
    rng = np.random.default_rng(1)
    p2, id_bits = 64, 6
    cells = rng.integers(0, 16, p2)  # four key bits: many equal keys
    keys = ((cells << id_bits) | rng.permutation(p2)).astype(np.int32)
    want = keys[np.argsort(cells, kind="stable")]
    out, b1 = radix_sort(keys, sorted_prep.radix_passes, id_bits, 4)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(b1, want)
    with pytest.raises(ValueError, match="even number of bits"):
        radix_sort(keys, sorted_prep.radix_passes, id_bits, 3)
