"""Tests of TagContinuous's Pallas neighbour kernels against a brute-force NumPy search.

The kernels run in Pallas interpret mode on CPU. States cover random positions, exact
ties (duplicated and grid-quantised positions), agents out of the game, a single agent
left, ``k = M - 1`` and ``k`` above the number of candidates (padding). Compilations are
shared: each configuration is checked on a whole batch of states at once through the
batched entry points.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

from environments.tag_continuous import kernels

# ------------------------------------------------------------------------- references


def np_nearest_k(x, y, in_game, k):
    """Brute force for one env: ``idx [M, k]`` (pad: ``i``), ``valid [M, k]``, ``d [M, k]``."""
    x = np.asarray(x, np.float32)
    y = np.asarray(y, np.float32)
    m = x.shape[0]
    idx = np.repeat(np.arange(m, dtype=np.int32)[:, None], k, axis=1)
    valid = np.zeros((m, k), bool)
    dist = np.full((m, k), np.inf, np.float32)
    for i in range(m):
        cand = [j for j in range(m) if j != i and in_game[j]]
        dx = x[i] - x[cand]
        dy = y[i] - y[cand]
        d = (dx * dx + dy * dy).astype(np.float32)
        order = sorted(range(len(cand)), key=lambda t: (d[t], cand[t]))[:k]
        idx[i, : len(order)] = [cand[t] for t in order]
        valid[i, : len(order)] = True
        dist[i, : len(order)] = d[order]
    return idx, valid, dist


def np_nearest_tagger(x_r, y_r, x_t, y_t):
    """Brute force for one env: ``idx [R]`` (lowest index on ties) and ``dist2 [R]``."""
    dx = np.asarray(x_r, np.float32)[:, None] - np.asarray(x_t, np.float32)[None, :]
    dy = np.asarray(y_r, np.float32)[:, None] - np.asarray(y_t, np.float32)[None, :]
    d = dx * dx + dy * dy
    j = np.argmin(d, axis=1)  # first minimum
    return j.astype(np.int32), d[np.arange(d.shape[0]), j]


def tagger_d64(x_r, y_r, x_t, y_t, j):
    """Float64 squared distance of each runner to tagger ``j [R]``."""
    dx = np.asarray(x_r, np.float64) - np.asarray(x_t, np.float64)[j]
    dy = np.asarray(y_r, np.float64) - np.asarray(y_t, np.float64)[j]
    return dx * dx + dy * dy


def d64(x, y, i, j):
    """Float64 squared distances between agents ``i`` and ``j`` (broadcasting)."""
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    return (x[i] - x[j]) ** 2 + (y[i] - y[j]) ** 2


def assert_neighbours_match(x, y, idx, valid, ref_idx, ref_valid, exact, what=""):
    """``valid`` equal; ``idx`` equal where valid and, unless ``exact``, a differing ``idx``
    allowed only at a near-tie (float64 distances within 1e-5 relative): compilers may
    contract ``dx*dx + dy*dy`` into an FMA, moving a distance by an ulp."""
    idx, valid = np.asarray(idx), np.asarray(valid)
    np.testing.assert_array_equal(valid, ref_valid, err_msg=f"valid {what}")
    rows = np.arange(idx.shape[0])[:, None]
    diff = valid & (idx != ref_idx)
    if exact or not diff.any():
        np.testing.assert_array_equal(np.where(valid, idx, -1), np.where(ref_valid, ref_idx, -1))
        return
    a = d64(x, y, rows, idx)[diff]
    b = d64(x, y, rows, ref_idx)[diff]
    np.testing.assert_allclose(a, b, rtol=1e-5, err_msg=f"idx {what} differs beyond a near-tie")


# ----------------------------------------------------------------------------- states


def make_states(m, n, seed):
    """``n`` envs of ``m`` agents: ``x, y [n, m]`` float32, ``in_game [n, m]`` bool, and
    ``exact [n]`` (positions on a coarse grid: all distances exact in float32, many ties)."""
    rng = np.random.default_rng(seed)
    xs, ys, gs, exact = [], [], [], []
    for e in range(n):
        kind = e % 8
        x = rng.uniform(0, 10, m).astype(np.float32)
        y = rng.uniform(0, 10, m).astype(np.float32)
        g = np.ones(m, bool)
        is_exact = False
        if kind == 1:  # grid-quantised: lots of exact distance ties
            x = (rng.integers(0, 5, m) * 0.5).astype(np.float32)
            y = (rng.integers(0, 5, m) * 0.5).astype(np.float32)
            is_exact = True
        elif kind == 2:  # duplicated positions
            src = rng.integers(0, max(1, m // 3), m)
            x, y = x[src], y[src]
        elif kind == 3:  # random agents out of the game
            g = rng.random(m) < 0.5
        elif kind == 4:  # all but one out
            g = np.zeros(m, bool)
            g[rng.integers(m)] = True
        elif kind == 5:  # everyone out
            g = np.zeros(m, bool)
        elif kind == 6:  # grid ties and agents out
            x = (rng.integers(0, 3, m) * 0.25).astype(np.float32)
            y = (rng.integers(0, 3, m) * 0.25).astype(np.float32)
            g = rng.random(m) < 0.7
            is_exact = True
        elif kind == 7:  # everyone at one point
            x = np.full(m, 3.5, np.float32)
            y = np.full(m, 1.25, np.float32)
            is_exact = True
        xs.append(x)
        ys.append(y)
        gs.append(g)
        exact.append(is_exact)
    return np.stack(xs), np.stack(ys), np.stack(gs), np.asarray(exact)


def check_batch(x, y, g, exact, k, idx, valid):
    idx, valid = np.asarray(idx), np.asarray(valid)
    assert idx.shape == (*x.shape, k) and idx.dtype == np.int32
    assert valid.shape == (*x.shape, k) and valid.dtype == bool
    for e in range(x.shape[0]):
        ref_idx, ref_valid, _ = np_nearest_k(x[e], y[e], g[e], k)
        assert_neighbours_match(
            x[e], y[e], idx[e], valid[e], ref_idx, ref_valid, exact[e], what=f"env {e}"
        )
        # Padding convention: invalid slots hold the agent's own index.
        m = x.shape[1]
        self_idx = np.broadcast_to(np.arange(m)[:, None], (m, k))
        np.testing.assert_array_equal(idx[e][~valid[e]], self_idx[~valid[e]])


# ------------------------------------------------------------------------- nearest_k

# (M, k, block_rows, block_cols, split_self_range): one and several row blocks, unrolled
# candidate steps with padding, the three-loop split (the compiled path) and the single
# masked loop, k below / at / above a power of two, k = M - 1, and k > M (padding only).
NEAREST_K_CASES = [
    (7, 3, None, None, None),
    (7, 6, None, 2, True),
    (7, 12, None, None, None),
    (33, 8, 8, 2, True),
    (33, 16, 16, 1, False),
    (70, 10, 32, 2, True),
    (70, 5, 64, 1, None),
    (70, 10, 32, 8, True),  # the compiled default unroll: the merge network's batches
    (33, 2, 8, 8, False),  # a batch longer than the packed list (k + 2 < U)
]


@functools.cache
def _batched_fn(k, bm, u, split):
    return jax.jit(
        functools.partial(
            kernels.nearest_k_batched, k=k, block_rows=bm, block_cols=u, split_self_range=split
        )
    )


@pytest.mark.parametrize("m,k,bm,u,split", NEAREST_K_CASES)
def test_nearest_k_batched_matches_numpy(m, k, bm, u, split):
    x, y, g, exact = make_states(m, 16, seed=m * 100 + k)
    idx, valid = _batched_fn(k, bm, u, split)(x, y, g)
    check_batch(x, y, g, exact, k, idx, valid)


@pytest.fixture(scope="module")
def vmap_case():
    m, k = 33, 8
    x, y, g, exact = make_states(m, 8, seed=7)
    single = functools.partial(
        kernels.nearest_k, k=k, block_rows=8, block_cols=2, split_self_range=True
    )
    idx, valid = jax.jit(jax.vmap(single))(x, y, g)
    return m, k, x, y, g, exact, np.asarray(idx), np.asarray(valid)


def test_nearest_k_under_vmap_matches_numpy(vmap_case):
    _, k, x, y, g, exact, idx, valid = vmap_case
    check_batch(x, y, g, exact, k, idx, valid)


def test_nearest_k_vmap_equals_batched(vmap_case):
    _, k, x, y, g, _, idx, valid = vmap_case
    b_idx, b_valid = _batched_fn(k, 8, 2, True)(x, y, g)
    np.testing.assert_array_equal(idx, np.asarray(b_idx))
    np.testing.assert_array_equal(valid, np.asarray(b_valid))


def test_nearest_k_single_env():
    x, y, g, _ = make_states(7, 4, seed=3)  # env 3: random agents out of the game
    idx, valid = jax.jit(kernels.nearest_k, static_argnums=3)(x[3], y[3], g[3], 3)
    ref_idx, ref_valid, _ = np_nearest_k(x[3], y[3], g[3], 3)
    assert idx.shape == (7, 3) and valid.shape == (7, 3)
    np.testing.assert_array_equal(np.asarray(valid), ref_valid)
    np.testing.assert_array_equal(np.asarray(idx), ref_idx)


def test_nearest_k_matches_plain_jax_reference():
    neighbors = pytest.importorskip("environments.tag_continuous.neighbors")
    m, k = 33, 8
    x, y, g, exact = make_states(m, 16, seed=11)
    idx, valid = _batched_fn(k, 8, 2, True)(x, y, g)
    r_idx, r_valid = jax.jit(jax.vmap(functools.partial(neighbors.nearest_k, k=k)))(x, y, g)
    for e in range(x.shape[0]):
        assert_neighbours_match(
            x[e], y[e], idx[e], valid[e], np.asarray(r_idx[e]), np.asarray(r_valid[e]),
            exact[e], what=f"env {e}",
        )  # fmt: skip
    # Same padding convention too (idx = i where not valid).
    np.testing.assert_array_equal(
        np.asarray(idx)[~np.asarray(valid)], np.asarray(r_idx)[~np.asarray(r_valid)]
    )


# --------------------------------------------------------------------- nearest_tagger

# (R, T, block_rows, block_cols): one tagger, several chunks of taggers (ties across
# chunk boundaries), several runner blocks.
NEAREST_TAGGER_CASES = [(33, 1, None, None), (33, 5, 8, 2), (70, 10, 32, None)]


def make_tagger_states(r, t, n, seed):
    rng = np.random.default_rng(seed)
    out = []
    for e in range(n):
        if e % 3 == 0:  # continuous
            pts = [rng.uniform(0, 10, s).astype(np.float32) for s in (r, r, t, t)]
        elif e % 3 == 1:  # coarse grid: many exact ties, some runners on a tagger
            pts = [(rng.integers(0, 4, s) * 0.5).astype(np.float32) for s in (r, r, t, t)]
        else:  # all taggers at one point: every runner ties across all of them
            pts = [rng.uniform(0, 10, r).astype(np.float32) for _ in range(2)]
            pts += [np.full(t, 2.0, np.float32), np.full(t, 7.0, np.float32)]
        out.append(pts)
    return [np.stack(a) for a in zip(*out, strict=True)]


@pytest.mark.parametrize("r,t,br,bt", NEAREST_TAGGER_CASES)
def test_nearest_tagger_batched_matches_numpy(r, t, br, bt):
    xr, yr, xt, yt = make_tagger_states(r, t, 9, seed=r + t)
    fn = jax.jit(functools.partial(kernels.nearest_tagger_batched, block_rows=br, block_cols=bt))
    idx, d2 = fn(xr, yr, xt, yt)
    idx, d2 = np.asarray(idx), np.asarray(d2)
    assert idx.shape == (9, r) and idx.dtype == np.int32
    assert d2.shape == (9, r) and d2.dtype == np.float32
    for e in range(9):
        ref_idx, ref_d2 = np_nearest_tagger(xr[e], yr[e], xt[e], yt[e])
        if e % 3 == 0:  # continuous: a differing index only at a near-tie
            diff = idx[e] != ref_idx
            a = tagger_d64(xr[e], yr[e], xt[e], yt[e], idx[e])
            b = tagger_d64(xr[e], yr[e], xt[e], yt[e], ref_idx)
            np.testing.assert_allclose(a[diff], b[diff], rtol=1e-5)
        else:  # exact ties: the lowest tagger index (all of them when taggers coincide)
            np.testing.assert_array_equal(idx[e], ref_idx)
        if e % 3 == 1:  # exact arithmetic: bitwise equal
            np.testing.assert_array_equal(d2[e], ref_d2)
        else:  # an FMA may move the last bit
            np.testing.assert_allclose(d2[e], ref_d2, rtol=1e-6, atol=1e-12)


def test_nearest_tagger_single_env_and_vmap():
    xr, yr, xt, yt = make_tagger_states(33, 5, 3, seed=5)
    single = functools.partial(kernels.nearest_tagger, block_cols=2)
    i0, d0 = jax.jit(single)(xr[1], yr[1], xt[1], yt[1])
    ref_idx, ref_d2 = np_nearest_tagger(xr[1], yr[1], xt[1], yt[1])
    np.testing.assert_array_equal(np.asarray(i0), ref_idx)
    np.testing.assert_array_equal(np.asarray(d0), ref_d2)
    vi, vd = jax.jit(jax.vmap(single))(xr, yr, xt, yt)
    np.testing.assert_array_equal(np.asarray(vi)[1], ref_idx)
    np.testing.assert_array_equal(np.asarray(vd)[1], ref_d2)
    assert vi.shape == (3, 33) and vd.shape == (3, 33)


def test_nearest_tagger_matches_plain_jax_reference():
    neighbors = pytest.importorskip("environments.tag_continuous.neighbors")
    xr, yr, xt, yt = make_tagger_states(33, 5, 6, seed=9)
    fn = jax.jit(functools.partial(kernels.nearest_tagger_batched, block_cols=2))
    idx, d2 = fn(xr, yr, xt, yt)
    r_idx, r_d2 = jax.jit(jax.vmap(neighbors.nearest_tagger))(xr, yr, xt, yt)
    for e in (1, 2, 4, 5):  # exact ties: equal indices
        np.testing.assert_array_equal(np.asarray(idx[e]), np.asarray(r_idx[e]))
    for e in (1, 4):  # exact arithmetic: bitwise equal distances
        np.testing.assert_array_equal(np.asarray(d2[e]), np.asarray(r_d2[e]))
    np.testing.assert_allclose(np.asarray(d2), np.asarray(r_d2), rtol=1e-6, atol=1e-12)


# ----------------------------------------------------------------------------- errors


def test_bad_inputs_raise_value_errors():
    x = np.zeros(7, np.float32)
    g = np.ones(7, bool)
    with pytest.raises(ValueError, match="k >= 1"):
        kernels.nearest_k(x, x, g, 0)
    with pytest.raises(ValueError, match="one shape"):
        kernels.nearest_k(x, x[:5], g, 2)
    with pytest.raises(ValueError, match="one shape"):
        kernels.nearest_k(x[None], x[None], g[None], 2)
    with pytest.raises(ValueError, match="one shape"):
        kernels.nearest_k_batched(x, x, g, 2)
    with pytest.raises(ValueError, match="in_game must be bool"):
        kernels.nearest_k(x, x, g.astype(np.int32), 2)
    with pytest.raises(ValueError, match="block_rows must be a power of two"):
        kernels.nearest_k(x, x, g, 2, block_rows=6)
    with pytest.raises(ValueError, match="block_cols must be a power of two"):
        kernels.nearest_k(x, x, g, 2, block_cols=0)
    with pytest.raises(ValueError, match="at least one tagger"):
        kernels.nearest_tagger(x, x, x[:0], x[:0])
    with pytest.raises(ValueError, match="at least one runner"):
        kernels.nearest_tagger(x[:0], x[:0], x, x)
    with pytest.raises(ValueError, match="one shape"):
        kernels.nearest_tagger(x, x[:3], x, x)
    with pytest.raises(ValueError, match="runners' N"):
        kernels.nearest_tagger_batched(x[None], x[None], np.zeros((2, 3)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="block_cols must be a power of two"):
        kernels.nearest_tagger(x, x, x, x, block_cols=3)


def test_interpret_default_follows_backend():
    assert kernels._resolve_interpret(None) == (jax.default_backend() == "cpu")
    assert kernels._resolve_interpret(False) is False


def test_docstring_example():
    import doctest

    result = doctest.testmod(kernels, verbose=False)
    assert result.attempted >= 1 and result.failed == 0


def test_knn_probe_checks_kernels_against_plain_jax():
    """`knn_probe`'s GPU check, on the CPU: the brute-force kernel's lists equal the
    plain-JAX search's on its four state kinds (ties included), and a wrong neighbour is
    reported as a mismatch, not passed as a near-tie."""
    import jax.numpy as jnp

    from environments.tag_continuous import neighbors
    from experiments.benchmarks import knn_probe

    states = list(knn_probe.make_states(jax.random.key(3), 3, 40, 20.0).values())
    ref_fn = jax.vmap(lambda x, y, g: neighbors.nearest_k(x, y, g, 5))
    brute = [kernels.nearest_k_brute_batched(*s, k=5) for s in states]
    refs = [ref_fn(*s) for s in states]
    res = [(*b, *r) for b, r in zip(brute, refs, strict=True)]
    assert knn_probe.check_equal(res, states) == "exact"
    idx, valid = brute[0]
    wrong = jnp.where(idx[0, 0, 0] == 7, 8, 7)  # another agent, not equally near
    bad = (idx.at[0, 0, 0].set(wrong), valid)
    assert knn_probe.check_equal([(*bad, *refs[0])], states[:1]) == "MISMATCH(1)"
