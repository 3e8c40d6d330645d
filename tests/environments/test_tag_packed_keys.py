"""The k-nearest kernels' packed-key search (`kernels._packed_insert`, `_packed_lists`).

The packed search orders candidates by ``(truncated distance, index)`` and then recovers
the exact ``(distance, index)`` lists, or says it cannot (and the kernel searches again
exactly). Checked three ways: the pure-JAX building blocks on random distance tables with
forced exact ties and near-ties (hypothesis: whatever it does not flag ambiguous equals
the exact top-k, and it flags only where truncation actually collides); constructed
near-ties that take each path (resolved by the re-sort, or re-searched) through both
kernels in interpret mode; and both kernels with ``packed_keys=False`` on the shared
state batch, so the exact insertion stays tested now that the packed one is the default.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from environments.tag_continuous import kernels
from tests.environments.test_tag_kernels import check_batch, make_states, np_nearest_k

# ---------------------------------------------------------------- building blocks


def _packed_search(d: np.ndarray, k: int, bits: int, extra: int):
    """``d [BM, C]`` float32 (``inf``: not a candidate) streamed through `_packed_insert`
    in candidate order; then `_packed_lists`. Returns ``(lists [BM, k], amb [BM])``."""
    d = jnp.asarray(d, jnp.float32)
    bm, c = d.shape
    lk = tuple(jnp.full((bm,), kernels._EMPTY_KEY, jnp.int32) for _ in range(k + extra))
    for j in range(c):
        lk = kernels._packed_insert(lk, d[:, j], jnp.int32(j), bits)
    rows = jnp.arange(bm)
    lists, amb = kernels._packed_lists(lk, k, bits, lambda idx: d[rows, idx])
    return np.stack([np.asarray(v) for v in lists], axis=1), np.asarray(amb)


def _exact_top_k(d: np.ndarray, k: int) -> np.ndarray:
    """Per row the ``k`` smallest ``(d, j)`` with finite ``d`` (-1 past them)."""
    out = np.full((d.shape[0], k), -1, np.int32)
    for i, row in enumerate(d):
        order = [j for j in sorted(range(len(row)), key=lambda j: (row[j], j)) if row[j] < np.inf]
        out[i, : min(k, len(order))] = order[:k]
    return out


def _near_tie_table(seed: int, bm: int, c: int, ulps: int, ties: float) -> np.ndarray:
    """Random distances where a fraction ``ties`` of entries are moved to within
    ``ulps`` float32 ulps of another entry of their row (or onto it), some ``inf``."""
    rng = np.random.default_rng(seed)
    d = rng.uniform(0.5, 4.0, (bm, c)).astype(np.float32)
    for i in range(bm):
        for j in range(c):
            if rng.random() < ties:
                src = d[i, rng.integers(c)]
                step = int(rng.integers(-ulps, ulps + 1))
                d[i, j] = np.float32(src.view(np.int32) + step).view(np.float32) if step else src
        d[i, rng.random(c) < 0.1] = np.inf
    return d


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    k=st.integers(1, 6),
    extra=st.integers(1, 3),
    ulps=st.integers(0, 40),
    ties=st.floats(0.0, 0.6),
    skip=st.booleans(),
    rows=st.sampled_from([1, 16]),
)
def test_packed_lists_are_exact_where_not_ambiguous(seed, k, extra, ulps, ties, skip, rows):
    """Whatever `_packed_lists` does not flag ambiguous is the exact top-k, with and
    without the re-sort's skip (`PACKED_SKIP_DISTINCT`; one row: the skip decides per
    lane; 16: per block of lanes)."""
    bits = 5  # 32 candidates; a bucket is 32 ulps wide
    d = _near_tie_table(seed, rows, 32, ulps, ties)
    saved = kernels.PACKED_SKIP_DISTINCT
    kernels.PACKED_SKIP_DISTINCT = skip
    try:
        lists, amb = _packed_search(d, k, bits, extra)
    finally:
        kernels.PACKED_SKIP_DISTINCT = saved
    exact = _exact_top_k(d, k)
    np.testing.assert_array_equal(lists[~amb], exact[~amb])
    # A lane is only ambiguous when truncation collides among its k + extra best.
    for i in np.flatnonzero(amb):
        best = sorted(range(d.shape[1]), key=lambda j: (d[i, j], j))[: k + extra]
        buckets = [int(d[i, j].view(np.int32)) >> bits for j in best if d[i, j] < np.inf]
        assert len(set(buckets)) < len(buckets), f"lane {i} flagged without a collision"


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_sort_network_sorts_every_zero_one_input(n):
    """The 0-1 principle: a comparator network sorts everything if it sorts all 0/1
    inputs."""
    pairs = kernels._oddeven_merge_sort(n)
    assert len(pairs) == {2: 1, 4: 5, 8: 19, 16: 63}[n]
    for code in range(2**n):
        v = [(code >> i) & 1 for i in range(n)]
        for i, j in pairs:
            if v[i] > v[j]:
                v[i], v[j] = v[j], v[i]
        assert v == sorted(v), (n, code)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    s=st.integers(1, 16),
    u=st.integers(1, 17),
    empty=st.integers(0, 16),
)
def test_packed_merge_equals_insertion(seed, s, u, empty):
    """`_packed_merge` of a batch into a sorted list (some slots still empty) keeps the
    same ``S`` smallest keys, sorted, as inserting the batch's keys one at a time."""
    rng = np.random.default_rng(seed)
    bm = 5
    keys = rng.choice(1 << 20, size=(bm, s + u), replace=False).astype(np.int32)
    listed = np.sort(keys[:, :s], axis=1)
    listed[:, s - min(empty, s) :] = kernels._EMPTY_KEY
    lk = tuple(jnp.asarray(listed[:, i]) for i in range(s))
    batch = [jnp.asarray(keys[:, s + i]) for i in range(u)]
    merged = np.stack([np.asarray(v) for v in kernels._packed_merge(lk, batch)], axis=1)
    ref = np.sort(np.concatenate([listed, keys[:, s:]], axis=1), axis=1)[:, :s]
    np.testing.assert_array_equal(merged, ref)
    # the one-by-one insertion (distance 0 bits: the key is the index) agrees
    inserted = lk
    for key in batch:
        low = (1 << 20) - 1
        d = jax.lax.bitcast_convert_type(key & ~low, jnp.float32)
        inserted = kernels._packed_insert(inserted, d, key & low, 20)
    np.testing.assert_array_equal(merged, np.stack([np.asarray(v) for v in inserted], axis=1))


def test_packed_network_setting_is_checked_and_both_agree(monkeypatch):
    x, y, g, exact = make_states(40, 4, seed=11)
    fn = functools.partial(kernels.nearest_k_brute_batched, k=6, block_cols=4)
    lists = {}
    for network in kernels.PACKED_NETWORKS:
        monkeypatch.setattr(kernels, "PACKED_NETWORK", network)
        lists[network] = fn(x, y, g)
        check_batch(x, y, g, exact, 6, *lists[network])
    monkeypatch.setattr(kernels, "PACKED_NETWORK", "bubble")
    with pytest.raises(ValueError, match="PACKED_NETWORK must be one of"):
        fn(x, y, g)


def test_packed_lists_resolve_near_ties_inside_the_list():
    """Distances one ulp apart in one bucket, listed in index order opposite to distance
    order: the re-sort puts them right without flagging the lane."""
    one = np.float32(1.0)
    up = np.nextafter(one, np.float32(2.0))
    d = np.array([[up, one, np.float32(3.0), np.float32(5.0), np.inf]], np.float32)
    lists, amb = _packed_search(d, k=2, bits=3, extra=2)
    assert not amb[0]
    np.testing.assert_array_equal(lists[0], [1, 0])


def test_packed_lists_flag_a_collision_at_the_kth_place():
    """Three distances in one bucket around the k-th place with only k + 1 slots: the
    slots cannot tell which belongs, so the lane is flagged for the exact re-search."""
    one = np.float32(1.0)
    d = np.array([[np.nextafter(one, np.float32(2)), np.nextafter(np.nextafter(one, np.float32(2)),
                  np.float32(2)), one, np.float32(0.25)]], np.float32)  # fmt: skip
    _, amb = _packed_search(d, k=2, bits=3, extra=1)
    assert amb[0]


def test_key_bits_default_and_switches():
    assert kernels._key_bits(None, 110) == 7
    assert kernels._key_bits(None, 1024) == 10
    assert kernels._key_bits(None, 1025) == 0  # past PACKED_MAX_BITS: exact insertion
    assert kernels._key_bits(True, 1025) == 11
    assert kernels._key_bits(False, 110) == 0


# ------------------------------------------------------------------- both kernels


def _ulp_line(m: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``[2, m]`` envs on a line where many agents are one or two ulps of distance apart
    from their neighbours' neighbours (same truncated distance, different exact one)."""
    rng = np.random.default_rng(seed)
    base = np.sort(rng.uniform(1.0, 2.0, m // 2)).astype(np.float32)
    nudged = np.nextafter(base, np.float32(3.0))
    x = np.concatenate([base, nudged])[rng.permutation(m)]
    xs = np.stack([x, x[::-1]])
    return xs, np.zeros_like(xs), np.ones_like(xs, bool)


@functools.cache
def _kernel(method: str, k: int, packed: bool):
    if method == "brute":
        fn = functools.partial(
            kernels.nearest_k_brute_batched, k=k, block_rows=16, block_cols=2, packed_keys=packed
        )
    else:
        fn = functools.partial(
            kernels.nearest_k_sorted_batched, k=k, block_rows=16, chunk_size=8, block_cols=2,
            packed_keys=packed,
        )  # fmt: skip
    return jax.jit(fn)


@pytest.mark.parametrize("method", ["brute", "sorted"])
def test_kernels_exact_on_ulp_near_ties(method):
    m, k = 40, 6
    x, y, g = _ulp_line(m, seed=5)
    idx, valid = _kernel(method, k, True)(x, y, g)
    for e in range(2):
        ref_idx, ref_valid, _ = np_nearest_k(x[e], y[e], g[e], k)
        np.testing.assert_array_equal(np.asarray(valid[e]), ref_valid)
        np.testing.assert_array_equal(np.asarray(idx[e]), ref_idx)


@pytest.mark.parametrize("method", ["brute", "sorted"])
def test_exact_insertion_still_matches_numpy(method):
    m, k = 33, 8
    x, y, g, exact = make_states(m, 16, seed=21)
    idx, valid = _kernel(method, k, False)(x, y, g)
    check_batch(x, y, g, exact, k, idx, valid)


def test_sorted_packed_search_prunes_like_the_exact_one():
    """Same lists, and the packed search streams about the pairs the ordered one does
    (its bound is one truncation step looser; near-ties re-search some blocks)."""
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.uniform(0, 20, (2, 300)), jnp.float32)
    y = jnp.asarray(rng.uniform(0, 20, (2, 300)), jnp.float32)
    g = jnp.ones((2, 300), bool)
    opts = dict(block_rows=32, chunk_size=16, block_cols=1)
    p_idx, p_valid, p_pairs = kernels.sorted_search_stats(x, y, g, 10, packed_keys=True, **opts)
    e_idx, e_valid, e_pairs = kernels.sorted_search_stats(x, y, g, 10, packed_keys=False, **opts)
    np.testing.assert_array_equal(np.asarray(p_idx), np.asarray(e_idx))
    np.testing.assert_array_equal(np.asarray(p_valid), np.asarray(e_valid))
    assert float(jnp.mean(p_pairs)) <= 1.25 * float(jnp.mean(e_pairs))


def test_packed_probe_env_states_and_loop():
    """`packed_probe`'s Tag states (agents piled on the walls after random steps): the
    packed lists equal the exact ones; its device loop runs the kernel and returns +0."""
    from experiments.benchmarks import packed_probe

    x, y, g = packed_probe.env_states(3, 2, 30, steps=40)
    for method in ("brute", "sorted"):
        packed = _kernel(method, 6, True)(x, y, g)
        exact = _kernel(method, 6, False)(x, y, g)
        for a, b in zip(packed, exact, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    fn = functools.partial(kernels.nearest_k_brute_batched, k=3, packed_keys=True)
    assert float(packed_probe.looped(fn, 2)(x, y, g)) == 0.0
