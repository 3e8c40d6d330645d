"""The grid search's preparation (`kernels.grid_prep`): the sort by cell and the tables.

The search itself is checked against the reference in `test_tag_kernels` (both query
sets, both loop forms). Here: the two-bit radix passes sort stably (also where a digit
count overflows its bit field), and the preparation's outputs equal a NumPy model of
them (cells, agents sorted by (cell, id) with the ones out of the game last, cell starts,
summed-area table, parameters) on states with agents out of the game down to none.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from environments.tag_continuous.kernels import grid_prep
from tests.environments.test_tag_kernels import make_states
from tests.environments.test_tag_sorted_knn import radix_sort


@pytest.mark.parametrize(
    ("case", "p2"), [("random", 64), ("all twos", 1024), ("one key", 256), ("threes", 32)]
)
def test_two_bit_radix_passes_sort_stably(case, p2):
    """A stable sort by the 10 cell bits above the ids (shuffled here), in ``bufs[1]``
    too; "all twos" at 1024 lanes overflows the digit-2 field of the totals in every
    pass (harmless, see `_radix_passes_2bit`)."""
    rng = np.random.default_rng(p2)
    id_bits = (p2 - 1).bit_length()
    cells = {
        "random": rng.integers(0, 1024, p2),
        "all twos": np.full(p2, 0b1010101010),
        "one key": np.full(p2, 517),
        "threes": np.where(rng.random(p2) < 0.5, 1023, rng.integers(0, 1024, p2)),
    }[case]
    keys = ((cells.astype(np.int64) << id_bits) | rng.permutation(p2)).astype(np.int32)
    want = keys[np.argsort(cells, kind="stable")]  # ids in input order within a key
    out, b1 = radix_sort(keys, grid_prep._radix_passes_2bit, id_bits, 10)
    np.testing.assert_array_equal(out, want, err_msg=case)
    np.testing.assert_array_equal(b1, want, err_msg=f"{case} bufs[1]")


def _model(x, y, g):
    """NumPy model of one env's preparation: ``(order, cs, sat, prm)``."""
    f32 = np.float32
    m = x.shape[0]
    n_in = int(g.sum())
    if n_in:
        x0, y0 = x[g].min(), y[g].min()
        ext = max(max(x[g].max() - x0, y[g].max() - y0), f32(1e-30))
    else:
        x0, y0, ext = f32(0), f32(0), f32(1)
    cells = np.clip(np.floor(np.sqrt(f32(n_in) / f32(1.5)) + f32(0.5)), 1, 31).astype(f32)
    s = cells * f32(1.0 - 2.0**-20) / ext
    cell = lambda v, lo: np.clip(np.floor((v - lo) * s), 0, cells - 1).astype(np.int64)
    key = np.where(g, cell(y, y0) * 32 + cell(x, x0), 1023)
    order = np.lexsort((np.arange(m), key))  # by key, then id
    cs = np.searchsorted(key[order], np.arange(1024), side="left")
    counts = np.bincount(key[g], minlength=1024).reshape(32, 32)
    sat = np.cumsum(np.cumsum(counts, axis=0), axis=1).reshape(1024)
    prm = np.array([x0, y0, s, cells, n_in, 0, 0, 0], f32)
    return order, cs, sat, prm, int(cells)


def test_preparation_matches_a_numpy_model():
    m = 50
    kinds = ("uniform", "out_random", "lattice_out", "out_most", "out_all", "one_point")
    x, y, g = make_states(m, kinds, seed=3)
    fn = jax.jit(lambda a, b, c: grid_prep.grid_prep(a, b, c, True))
    xc, yc, oc, cs, sat, prm = (np.asarray(v) for v in fn(x, y, g))
    mp = 64  # M rounded up to 32
    assert xc.shape == (len(kinds), 2 * mp) and cs.shape == sat.shape == (len(kinds), 1024)
    for e, kind in enumerate(kinds):
        order, w_cs, w_sat, w_prm, cells = _model(x[e], y[e], g[e])
        np.testing.assert_array_equal(oc[e, :m], order, err_msg=kind)
        assert np.all(oc[e, m:mp] == m), kind  # padding
        np.testing.assert_array_equal(xc[e, :m], x[e][order], err_msg=kind)
        np.testing.assert_array_equal(yc[e, :m], y[e][order], err_msg=kind)
        np.testing.assert_array_equal(cs[e], w_cs, err_msg=kind)
        np.testing.assert_array_equal(prm[e], w_prm, err_msg=kind)
        # The summed-area table is read only in the grid's G x G cells.
        got = sat[e].reshape(32, 32)[:cells, :cells]
        np.testing.assert_array_equal(got, w_sat.reshape(32, 32)[:cells, :cells], err_msg=kind)
