"""The searches' packed-key lists (`kernels.packed`): keys, merge network, exact re-sort.

The packed search orders candidates by ``(truncated distance, index)`` and then recovers
the exact ``(distance, index)`` lists, or says it cannot (and the kernel searches again
exactly). Checked on the pure-JAX building blocks: random distance tables with forced
exact ties and near-ties (hypothesis: whatever is not flagged ambiguous equals the exact
top-k, and only lanes where truncation collides are flagged), the sorting network by the
0-1 principle, the batched merge against one-by-one insertion, and constructed near-ties
that take each path. The kernels themselves run these paths on near-tie states in
`test_tag_kernels`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from environments.tag_continuous.kernels import packed

# ---------------------------------------------------------------- building blocks


def _packed_search(d: np.ndarray, k: int, bits: int, extra: int):
    """``d [BM, C]`` float32 (``inf``: not a candidate) streamed through `packed_insert`
    in candidate order; then `packed_lists`. Returns ``(lists [BM, k], amb [BM])``."""
    d = jnp.asarray(d, jnp.float32)
    bm, c = d.shape
    lk = tuple(jnp.full((bm,), packed.EMPTY_KEY, jnp.int32) for _ in range(k + extra))
    for j in range(c):
        lk = packed.packed_insert(lk, d[:, j], jnp.int32(j), bits)
    rows = jnp.arange(bm)
    lists, amb = packed.packed_lists(lk, k, bits, lambda idx: d[rows, idx])
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


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    k=st.integers(1, 6),
    extra=st.integers(1, 3),
    ulps=st.integers(0, 40),
    ties=st.floats(0.0, 0.6),
    rows=st.sampled_from([1, 16]),
)
def test_packed_lists_are_exact_where_not_ambiguous(seed, k, extra, ulps, ties, rows):
    """Whatever `packed_lists` does not flag ambiguous is the exact top-k (one row: the
    re-sort's skip decides per lane; 16: per block of lanes)."""
    bits = 5  # 32 candidates; a bucket is 32 ulps wide
    d = _near_tie_table(seed, rows, 32, ulps, ties)
    lists, amb = _packed_search(d, k, bits, extra)
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
    pairs = packed.oddeven_merge_sort(n)
    assert len(pairs) == {2: 1, 4: 5, 8: 19, 16: 63}[n]
    for code in range(2**n):
        v = [(code >> i) & 1 for i in range(n)]
        for i, j in pairs:
            if v[i] > v[j]:
                v[i], v[j] = v[j], v[i]
        assert v == sorted(v), (n, code)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    s=st.integers(1, 16),
    u=st.integers(1, 17),
    empty=st.integers(0, 16),
)
def test_packed_merge_equals_insertion(seed, s, u, empty):
    """`packed_merge` of a batch into a sorted list (some slots still empty) keeps the
    same ``S`` smallest keys, sorted, as inserting the batch's keys one at a time."""
    rng = np.random.default_rng(seed)
    bm = 5
    keys = rng.choice(1 << 20, size=(bm, s + u), replace=False).astype(np.int32)
    listed = np.sort(keys[:, :s], axis=1)
    listed[:, s - min(empty, s) :] = packed.EMPTY_KEY
    lk = tuple(jnp.asarray(listed[:, i]) for i in range(s))
    batch = [jnp.asarray(keys[:, s + i]) for i in range(u)]
    merged = np.stack([np.asarray(v) for v in packed.packed_merge(lk, batch)], axis=1)
    ref = np.sort(np.concatenate([listed, keys[:, s:]], axis=1), axis=1)[:, :s]
    np.testing.assert_array_equal(merged, ref)
    # the one-by-one insertion (distance 0 bits: the key is the index) agrees
    inserted = lk
    for key in batch:
        low = (1 << 20) - 1
        d = jax.lax.bitcast_convert_type(key & ~low, jnp.float32)
        inserted = packed.packed_insert(inserted, d, key & low, 20)
    np.testing.assert_array_equal(merged, np.stack([np.asarray(v) for v in inserted], axis=1))


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
    assert packed.key_bits(110) == 7
    assert packed.key_bits(1024) == 10
    assert packed.key_bits(1025) == 0  # past MAX_KEY_BITS: exact lists
    assert packed.key_bits(1025, True) == 11
    assert packed.key_bits(110, False) == 0
