"""Tests of TagContinuous's spatially sorted k-nearest search (`kernels.nearest_k_sorted*`).

The kernel runs in Pallas interpret mode on CPU and must equal the plain-JAX reference
`neighbors.nearest_k` bit for bit (indices and validity, padding included) on states
built to stress its pruning and tie handling: uniform and clustered positions, exact
ties (coarse lattices, duplicated positions, everyone at one point), agents out of the
game (random, all but a few, fewer than ``k`` candidates, none left), ``M`` that is not
a multiple of the block sizes, and both insertion modes (``tie_check``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from environments.tag_continuous import kernels, neighbors

KINDS = (
    "uniform",
    "cluster",
    "lattice",
    "duplicates",
    "out_random",
    "out_most",
    "lattice_out",
    "one_point",
    "out_all",
    "two_clusters",
)


def make_states(m, kinds, seed, length=20.0):
    """One env per entry of ``kinds``: ``x, y [n, m]`` float32 and ``in_game [n, m]``."""
    rng = np.random.default_rng(seed)
    xs, ys, gs = [], [], []
    for kind in kinds:
        x = rng.uniform(0, length, m)
        y = rng.uniform(0, length, m)
        g = np.ones(m, bool)
        if kind == "cluster":  # everyone in one small spot
            x = 7.0 + 1e-3 * rng.random(m)
            y = 3.0 + 1e-3 * rng.random(m)
        elif kind == "lattice":  # exact distances, many ties
            x = rng.integers(0, 6, m) * 0.5
            y = rng.integers(0, 6, m) * 0.5
        elif kind == "duplicates":
            src = rng.integers(0, max(1, m // 4), m)
            x, y = x[src], y[src]
        elif kind == "out_random":
            g = rng.random(m) < 0.6
        elif kind == "out_most":  # fewer candidates than k for everyone
            g = np.zeros(m, bool)
            g[rng.choice(m, size=min(m, 3), replace=False)] = True
        elif kind == "lattice_out":
            x = rng.integers(0, 4, m) * 0.25
            y = rng.integers(0, 4, m) * 0.25
            g = rng.random(m) < 0.7
        elif kind == "one_point":
            x = np.full(m, 3.5)
            y = np.full(m, 1.25)
        elif kind == "out_all":
            g = np.zeros(m, bool)
        elif kind == "two_clusters":  # far apart, one of them mostly out of the game
            half = rng.random(m) < 0.5
            x = np.where(half, 1.0 + 0.1 * rng.random(m), 19.0 + 0.1 * rng.random(m))
            y = np.where(half, 1.0 + 0.1 * rng.random(m), 18.0 + 0.1 * rng.random(m))
            g = half | (rng.random(m) < 0.1)
        xs.append(np.asarray(x, np.float32))
        ys.append(np.asarray(y, np.float32))
        gs.append(g)
    return np.stack(xs), np.stack(ys), np.stack(gs)


@functools.cache
def _reference(k):
    return jax.jit(jax.vmap(functools.partial(neighbors.nearest_k, k=k)))


@functools.cache
def _sorted(k, **options):
    return jax.jit(functools.partial(kernels.sorted_search_stats, k=k, interpret=True, **options))


def assert_same(idx, valid, ref_idx, ref_valid, what):
    np.testing.assert_array_equal(np.asarray(valid), np.asarray(ref_valid), err_msg=f"valid {what}")
    np.testing.assert_array_equal(np.asarray(idx), np.asarray(ref_idx), err_msg=f"idx {what}")


# (M, k, block_rows, chunk_size, block_cols, tie_check): M below / not a multiple of
# the blocks, BM < BC and BM > BC, an unrolled chunk, k above the candidates (padding).
CASES = [
    (7, 3, None, None, None, True),
    (7, 9, 4, 2, 1, False),
    (130, 10, 32, 16, 1, True),
    (130, 4, 16, 32, 2, False),
    (600, 10, 32, 16, 1, True),
    (600, 10, 64, 8, 1, False),
    (300, 10, 32, 16, 8, True),  # the compiled default unroll: merged batches of 8 keys
]


@pytest.mark.parametrize("m,k,bm,bc,u,tie_check", CASES)
def test_sorted_matches_reference(m, k, bm, bc, u, tie_check):
    kinds = KINDS if m < 600 else KINDS[:8]
    x, y, g = make_states(m, kinds, seed=m + 7 * k)
    fn = _sorted(k, block_rows=bm, chunk_size=bc, block_cols=u, tie_check=tie_check)
    idx, valid, _ = fn(x, y, g)
    ref_idx, ref_valid = _reference(k)(x, y, g)
    assert idx.shape == (len(kinds), m, k) and idx.dtype == np.int32
    assert valid.shape == (len(kinds), m, k) and valid.dtype == bool
    for e, kind in enumerate(kinds):
        assert_same(idx[e], valid[e], ref_idx[e], ref_valid[e], f"{kind} (env {e})")


@pytest.mark.parametrize("order", ["best", "keyed"])
@pytest.mark.parametrize("m,k,bm,bc,u,tie_check", [CASES[0], CASES[1], CASES[2], CASES[5]])
def test_best_first_chunk_order_matches_reference(m, k, bm, bc, u, tie_check, order):
    """``chunk_order="best"`` (nearest chunk box first, early stop) and ``"keyed"`` (the
    same with one packed (bound, chunk) key per chunk) give the same lists on every state
    kind (ties, lattices, out-of-game clusters, padding)."""
    kinds = KINDS if m < 600 else KINDS[:8]
    x, y, g = make_states(m, kinds, seed=m + 7 * k + 1)
    fn = _sorted(
        k, block_rows=bm, chunk_size=bc, block_cols=u, tie_check=tie_check, chunk_order=order
    )
    idx, valid, _ = fn(x, y, g)
    ref_idx, ref_valid = _reference(k)(x, y, g)
    for e, kind in enumerate(kinds):
        assert_same(idx[e], valid[e], ref_idx[e], ref_valid[e], f"{order} {kind} (env {e})")


def test_chunk_orders_agree_and_best_first_prunes_at_least_as_well():
    m, k = 1000, 10
    x, y, g = make_states(m, ("uniform", "out_random"), seed=9)
    opts = dict(block_rows=32, chunk_size=16, block_cols=1, tie_check=True)
    c_idx, c_valid, curve = _sorted(k, **opts, chunk_order="curve")(x, y, g)
    idx, valid, best = _sorted(k, **opts, chunk_order="best")(x, y, g)
    k_idx, k_valid, keyed = _sorted(k, **opts, chunk_order="keyed")(x, y, g)
    assert np.all(np.asarray(best) <= np.asarray(curve) + 1e-6), (best, curve)
    # Truncated bounds can only add visits, and only near ties of the bound.
    assert np.all(np.asarray(keyed) >= np.asarray(best) - 1e-6), (keyed, best)
    assert np.all(np.asarray(keyed) <= 1.05 * np.asarray(best)), (keyed, best)
    ref = _reference(k)(x, y, g)
    assert_same(idx, valid, *ref, "best m=1000")
    assert_same(k_idx, k_valid, *ref, "keyed m=1000")
    assert_same(c_idx, c_valid, *ref, "curve m=1000")
    assert kernels.CHUNK_ORDER == "keyed"
    with pytest.raises(ValueError, match="chunk_order must be one of"):
        kernels.nearest_k_sorted_batched(x, y, g, k, chunk_order="random")


def test_sorted_prunes_uniform_agents():
    """At the benchmark's density (1000 agents per 20 x 20) most pairs are skipped."""
    m, k = 1000, 10
    x, y, g = make_states(m, ("uniform", "cluster", "out_random"), seed=3)
    idx, valid, pairs = _sorted(k, block_rows=32, chunk_size=16, block_cols=1, tie_check=True)(
        x, y, g
    )
    pairs = np.asarray(pairs)
    assert np.all(pairs < 0.25), pairs
    ref_idx, ref_valid = _reference(k)(x, y, g)
    assert_same(idx, valid, ref_idx, ref_valid, "m=1000")


def test_sorted_under_vmap_and_single_env():
    m, k = 130, 6
    kinds = ("uniform", "lattice_out", "out_most", "duplicates")
    x, y, g = make_states(m, kinds, seed=5)
    single = functools.partial(
        kernels.nearest_k_sorted, k=k, block_rows=16, chunk_size=8, block_cols=1, interpret=True
    )
    v_idx, v_valid = jax.jit(jax.vmap(single))(x, y, g)
    ref_idx, ref_valid = _reference(k)(x, y, g)
    assert_same(v_idx, v_valid, ref_idx, ref_valid, "vmap")
    s_idx, s_valid = jax.jit(single)(x[1], y[1], g[1])
    assert_same(s_idx, s_valid, ref_idx[1], ref_valid[1], "single env")


def test_sorted_equals_brute_force_kernel():
    m, k = 130, 8
    x, y, g = make_states(m, KINDS, seed=11)
    idx, valid, _ = _sorted(k, block_rows=32, chunk_size=16, block_cols=1, tie_check=True)(x, y, g)
    b_idx, b_valid = jax.jit(
        functools.partial(kernels.nearest_k_batched, k=k, method="brute", interpret=True)
    )(x, y, g)
    assert_same(idx, valid, b_idx, b_valid, "vs brute")


def test_auto_method_selection(monkeypatch):
    monkeypatch.setattr(kernels, "LARGE_METHOD", "sorted")
    assert kernels._resolve_method(None, kernels.SORTED_MIN_AGENTS - 1) == "brute"
    assert kernels._resolve_method(None, kernels.SORTED_MIN_AGENTS) == "sorted"
    assert kernels._resolve_method("brute", 10_000) == "brute"
    assert kernels._resolve_method("sorted", 3) == "sorted"
    with pytest.raises(ValueError, match="method must be"):
        kernels._resolve_method("grids", 3)
    # The default path at M >= SORTED_MIN_AGENTS is the large search (same results).
    m, k = kernels.SORTED_MIN_AGENTS, 4
    x, y, g = make_states(m, ("out_random",), seed=2)
    idx, valid = jax.jit(functools.partial(kernels.nearest_k, k=k, interpret=True))(
        x[0], y[0], g[0]
    )
    ref_idx, ref_valid = neighbors.nearest_k(x[0], y[0], g[0], k)
    assert_same(idx, valid, ref_idx, ref_valid, "auto")


@pytest.mark.parametrize("form", kernels.SORT_KEY_FORMS)
def test_spatial_order_is_a_local_permutation(form, monkeypatch):
    monkeypatch.setattr(kernels, "SORT_KEYS", form)
    x, y, _ = make_states(500, ("uniform", "one_point", "lattice"), seed=4)
    perm = np.asarray(kernels.spatial_order(x, y))
    for e in range(3):
        np.testing.assert_array_equal(np.sort(perm[e]), np.arange(500))
    np.testing.assert_array_equal(perm[1], np.arange(500))  # equal keys: index order
    # Lattice: 36 distinct points; within each run of one point, ids ascend.
    xl, yl = x[2][perm[2]], y[2][perm[2]]
    same = (np.diff(xl) == 0) & (np.diff(yl) == 0)
    assert np.all(np.diff(perm[2])[same] > 0)
    # Consecutive agents along the curve are close (uniform: mean step << side 20).
    step = np.hypot(np.diff(x[0][perm[0]]), np.diff(y[0][perm[0]]))
    assert step.mean() < 1.5, step.mean()


def test_sort_key_forms_give_the_same_lists(monkeypatch):
    """The packed (one-operand) and the argsort curve orders are different permutations
    with the same search results; a bad `SORT_KEYS` is named."""
    x, y, g = make_states(300, ("uniform", "out_random", "lattice_out"), seed=9)
    perms, lists = {}, {}
    for form in kernels.SORT_KEY_FORMS:
        monkeypatch.setattr(kernels, "SORT_KEYS", form)
        perms[form] = np.asarray(kernels.spatial_order(x, y))
        lists[form] = kernels.nearest_k_sorted_batched(x, y, g, 5)
    assert not np.array_equal(perms["packed"], perms["argsort"])  # coarser cells
    for a, b in zip(lists["packed"], lists["argsort"], strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    monkeypatch.setattr(kernels, "SORT_KEYS", "radix")
    with pytest.raises(ValueError, match="SORT_KEYS must be one of"):
        kernels.spatial_order(x, y)


def test_sorted_bad_options_raise():
    x = np.zeros((1, 7), np.float32)
    g = np.ones((1, 7), bool)
    with pytest.raises(ValueError, match="chunk_size must be a power of two"):
        kernels.nearest_k_sorted_batched(x, x, g, 2, chunk_size=6)
    with pytest.raises(ValueError, match="at most chunk_size"):
        kernels.nearest_k_sorted_batched(x, x, g, 2, chunk_size=2, block_cols=4)
    with pytest.raises(ValueError, match="k >= 1"):
        kernels.nearest_k_sorted_batched(x, x, g, 0)
    with pytest.raises(ValueError, match="method must be"):
        kernels.nearest_k(x[0], x[0], g[0], 2, method="grids")


@pytest.mark.parametrize(("prepick", "lane_test"), [(True, True), (True, False), (False, False)])
@pytest.mark.parametrize("m,k,bm,bc,u,tie_check", [CASES[2], CASES[6]])
def test_visit_loop_options_match_reference(
    monkeypatch, m, k, bm, bc, u, tie_check, prepick, lane_test
):
    """`kernels.SORTED_PREPICK` (the next chunk picked before the visit) and
    `kernels.SORTED_LANE_TEST` off (every chunk that passes the block bound is streamed)
    change the work, never the lists."""
    monkeypatch.setattr(kernels, "SORTED_PREPICK", prepick)
    monkeypatch.setattr(kernels, "SORTED_LANE_TEST", lane_test)
    kinds = KINDS[:8]
    x, y, g = make_states(m, kinds, seed=m + 3 * k + int(prepick) + 2 * int(lane_test))
    fn = jax.jit(
        functools.partial(
            kernels.sorted_search_stats, k=k, interpret=True, block_rows=bm, chunk_size=bc,
            block_cols=u, tie_check=tie_check, chunk_order="keyed",
        )
    )  # fmt: skip
    idx, valid, _ = fn(x, y, g)
    ref_idx, ref_valid = _reference(k)(x, y, g)
    for e, kind in enumerate(kinds):
        what = f"prepick={prepick} lane_test={lane_test} {kind} (env {e})"
        assert_same(idx[e], valid[e], ref_idx[e], ref_valid[e], what)


@pytest.mark.parametrize(
    "m,bm,bc", [(7, 4, 2), (40, 32, 8), (130, 32, 16), (300, 16, 32), (1000, 32, 8)]
)
@pytest.mark.parametrize("sort", ["xla", "kernel"])
def test_pallas_preparation_equals_xla(monkeypatch, m, bm, bc, sort):
    """`kernels._prep_pallas` (one program per env: gathers, a cumsum, scatters, boxes
    read back), given the curve order or sorting it itself (`kernels._radix_order`: the
    same keys, one-bit stable partitions), gives `sorted_inputs`' arrays exactly, on every
    state kind (none in the game, all of them, ties of keys, one point), ``M`` below and
    not a multiple of the blocks."""
    monkeypatch.setattr(kernels, "PREP_SORT_BITS", None)  # spatial_order's bits
    kinds = KINDS if m < 600 else KINDS[:4]
    x, y, g = make_states(m, kinds, seed=m + bm)
    perm, ref = kernels.sorted_inputs(x, y, g, bm, bc)
    prep = functools.partial(kernels._prep_pallas, bm=bm, bc=bc, interpret=True)
    given = perm if sort == "xla" else None
    got, (pq, xo, yo) = jax.jit(lambda x, y, g: prep(x, y, g, given))(x, y, g)
    names = ("cb", "xq", "yq", "qc", "xc", "yc", "oc", "bx0", "bx1", "by0", "by1")
    for name, a, b in zip(names, ref, got, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype, (name, a.shape, b.shape)
        np.testing.assert_array_equal(np.asarray(b), np.asarray(a), err_msg=f"{name} m={m}")
    mp = ref[1].shape[1]
    pad = ((0, 0), (0, mp - m))
    np.testing.assert_array_equal(np.asarray(pq), np.asarray(np.pad(perm, pad, constant_values=m)))
    np.testing.assert_array_equal(np.asarray(xo), np.pad(np.asarray(x), pad))
    np.testing.assert_array_equal(np.asarray(yo), np.pad(np.asarray(y), pad))


@pytest.mark.parametrize("bits", [5, 2])
def test_in_kernel_sort_with_fewer_bits_is_the_coarser_curve_order(monkeypatch, bits):
    """With `kernels.PREP_SORT_BITS` below `spatial_order`'s bits the order is the stable
    argsort of the Hilbert index on a ``2**bits``-cell grid over the env's bounding
    square (ties, many of them on a coarse grid, by agent id)."""
    monkeypatch.setattr(kernels, "PREP_SORT_BITS", bits)
    m, bm, bc = 300, 32, 8
    x, y, g = make_states(m, KINDS[:4], seed=bits)
    _, (pq, _, _) = kernels._prep_pallas(x, y, g, None, bm, bc, True)
    x, y = jnp.asarray(x), jnp.asarray(y)
    lo_x, lo_y = x.min(1, keepdims=True), y.min(1, keepdims=True)
    ext = jnp.maximum(
        jnp.maximum(x.max(1, keepdims=True) - lo_x, y.max(1, keepdims=True) - lo_y), 1e-30
    )
    n = 1 << bits
    q = lambda v, lo: jnp.clip(jnp.floor((v - lo) * ((n - 1) / ext)), 0, n - 1).astype(jnp.int32)
    key = kernels._hilbert_index(q(x, lo_x), q(y, lo_y), bits)
    want = np.argsort(np.asarray(key), axis=1, kind="stable")
    np.testing.assert_array_equal(np.asarray(pq)[:, :m], want)


def test_search_with_either_preparation_matches_reference(monkeypatch):
    m, k = 130, 10
    x, y, g = make_states(m, KINDS[:6], seed=5)
    ref_idx, ref_valid = _reference(k)(x, y, g)
    for impl, sort, bits in [
        ("xla", "xla", None),
        ("pallas", "xla", None),
        ("pallas", "kernel", 3),
    ]:
        monkeypatch.setattr(kernels, "PREP_IMPL", impl)
        monkeypatch.setattr(kernels, "PREP_SORT", sort)
        monkeypatch.setattr(kernels, "PREP_SORT_BITS", bits)  # a coarser order: same lists
        idx, valid = jax.jit(
            functools.partial(kernels.nearest_k_sorted_batched, k=k, interpret=True)
        )(x, y, g)
        assert_same(idx, valid, ref_idx, ref_valid, f"prep {impl}, sort {sort}, bits {bits}")
    monkeypatch.setattr(kernels, "PREP_SORT", "bitonic")
    with pytest.raises(ValueError, match="PREP_SORT must be one of"):
        kernels.nearest_k_sorted_batched(x, y, g, k)
    monkeypatch.setattr(kernels, "PREP_SORT", "kernel")
    monkeypatch.setattr(kernels, "PREP_IMPL", "cuda")
    with pytest.raises(ValueError, match="PREP_IMPL must be one of"):
        kernels.nearest_k_sorted_batched(x, y, g, k)
