"""Per-lane neighbour lists shared by the three searches: packed keys, merge networks,
the exact re-sort, the list store, and the searches' input checks and output form.

Every search kernel holds, per query lane, a sorted list of its best candidates as a
tuple of ``S`` ``[BM]`` vectors (one vector per slot, one element per lane), updated
elementwise across lanes: nothing is reduced across lanes, nothing ``[BM, M]`` exists.

**Exact lists** (`insert_pair`): distances ``ld`` and indices ``lj``. Inserting
``(d, j)`` is a branch-free sorting network, per slot ``s``::

    ld[s] <- min(ld[s], max(ld[s-1], d))
    lj[s] <- d < ld[s-1] ? lj[s-1] : (d < ld[s] ? j : lj[s])

With strict ``<`` a candidate goes after listed ones at the same distance, which is
"ties by lower index" when candidates arrive in increasing index order (the brute-force
search); ``lex`` orders by ``(d, j)`` whatever the arrival order.

**Packed keys** (`packed_key`): a float32 ``d >= 0`` orders like its int32 bit pattern,
so ``bits(d)`` with its low ``b`` bits replaced by the candidate's ``b``-bit index is one
int32 that orders by ``(d truncated to 2**b ulps, index)``. A list of keys costs one
integer min and max per slot per candidate (`packed_insert`), against five operations
for the exact pair of lists. `packed_merge` takes a loop step's ``U`` keys at once: an
odd-even merge sort of the batch, ``c_i = min(list_i, batch_{S-1-i})`` (the ``S``
smallest of both, rising then falling), then a bitonic merger: about 11 min/max per
candidate at ``U = 8``, ``S = 12`` instead of ``2S - 1 = 23``; keys are distinct, so the
result is the one-by-one insertion's.

**Back to exact lists** (`packed_lists`): with ``S = k + EXTRA_SLOTS`` slots, where the
last slot's truncation is above the ``k``-th's, every candidate left out is strictly
farther than every listed one of truncation at most the ``k``-th's, so the listed ones
are the exact candidates for the first ``k`` places; only their order within one
truncation can be wrong. The listed distances are recomputed exactly and re-sorted
(stable odd-even transposition). A lane whose ``k``-th and last truncations coincide, or
whose list stays unsorted, is flagged ambiguous and the kernel searches again exactly.
A block where no lane lists two keys of one truncation skips the re-sort: the keys'
order is then exact.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental.pallas import triton as pl_triton

from environments.tag_continuous.kernels.triton import INF, any_lane, next_pow2, spill_index

__all__ = [
    "EMPTY_KEY",
    "EXTRA_SLOTS",
    "INF_KEY",
    "MAX_KEY_BITS",
    "check_inputs",
    "finish",
    "insert_pair",
    "key_bits",
    "oddeven_merge_sort",
    "packed_insert",
    "packed_key",
    "packed_lists",
    "packed_merge",
    "store_lists",
]

#: A list slot holding this key is empty.
EMPTY_KEY = 0x7FFFFFFF
#: Keys at or above this come from a ``+inf`` distance (not a neighbour).
INF_KEY = 0x7F800000
#: The searches use packed keys when the agent indices fit in this many bits (``M <=
#: 1024``); more index bits make ambiguous lists, and exact re-searches, common.
MAX_KEY_BITS = 10
#: Slots of a packed list beyond ``k``: a tie of this many truncated distances across the
#: ``k``-th place still resolves without a re-search.
EXTRA_SLOTS = 2
#: Odd-even transposition passes of the exact re-sort: runs of up to this many keys of
#: one truncated distance are put in exact order.
_RESORT_PASSES = 3


def key_bits(m: int, packed_keys: bool | None = None) -> int:
    """Index bits of the packed keys for ``m`` candidates, or 0 for exact lists.

    ``packed_keys=None``: packed when the indices fit in `MAX_KEY_BITS` bits."""
    bits = max(1, (m - 1).bit_length())
    if packed_keys is None:
        packed_keys = bits <= MAX_KEY_BITS
    return bits if packed_keys else 0


def packed_key(d: jax.Array, j: jax.Array, bits: int) -> jax.Array:
    """The key of candidate ``j`` at distance ``d [BM]``: ``bits(d)`` with its low
    ``bits`` bits replaced by ``j`` (int32 ``[BM]``)."""
    low = (1 << bits) - 1
    return (lax.bitcast_convert_type(d, jnp.int32) & ~low) | j  # [BM]


def packed_insert(lk: tuple, d: jax.Array, j: jax.Array, bits: int) -> tuple:
    """Inserts candidate ``j`` at distance ``d [BM]`` into the ascending key lists ``lk``
    (a tuple of ``[BM]`` int32): one integer min and max per slot."""
    key = packed_key(d, j, bits)
    out = [jnp.minimum(lk[0], key)]
    for s in range(1, len(lk)):
        out.append(jnp.minimum(lk[s], jnp.maximum(lk[s - 1], key)))
    return tuple(out)


class _Bound:
    """A compile-time key below (``_LO``) or above (``_HI``) every real key: a
    compare-exchange with one is resolved when the network is traced, not at run time."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


_LO = _Bound("LO")
_HI = _Bound("HI")


def _cmpx(a, b):
    """``(min(a, b), max(a, b))`` of two ``[BM]`` keys or `_Bound` s."""
    if a is _LO or b is _HI:
        return a, b
    if a is _HI or b is _LO:
        return b, a
    return jnp.minimum(a, b), jnp.maximum(a, b)


def oddeven_merge_sort(n: int) -> list[tuple[int, int]]:
    """Batcher's odd-even merge sort for ``n`` (a power of two) keys as compare-exchange
    pairs ``(i, j)``, ``i < j``, in an order that sorts ascending (19 for ``n = 8``)."""
    pairs: list[tuple[int, int]] = []
    p = 1
    while p < n:
        q = p
        while q >= 1:
            for j in range(q % p, n - q, 2 * q):
                for i in range(min(q, n - j - q)):
                    if (i + j) // (2 * p) == (i + j + q) // (2 * p):
                        pairs.append((i + j, i + j + q))
            q //= 2
        p *= 2
    return pairs


def _sort_keys(keys: list) -> list:
    """``keys`` (``[BM]`` arrays) sorted ascending elementwise across the list, by an
    odd-even merge sort network (padded with `_HI` to a power of two, then dropped)."""
    n = next_pow2(len(keys))
    vals = list(keys) + [_HI] * (n - len(keys))
    for i, j in oddeven_merge_sort(n):
        vals[i], vals[j] = _cmpx(vals[i], vals[j])
    return vals[: len(keys)]


def packed_merge(lk: tuple, keys: list) -> tuple:
    """The ``S = len(lk)`` smallest of the sorted list ``lk`` (a tuple of ``[BM]`` keys,
    ascending) and the keys ``keys`` (any order), sorted ascending.

    Sorts ``keys``, then takes ``c_i = min(lk_i, b_{S-1-i})``, which holds the ``S``
    smallest of both and rises then falls, and sorts that bitonic sequence with a bitonic
    merger (padded with `_LO` after its end, which keeps it bitonic; pads are resolved
    at trace time). With distinct keys the result equals `packed_insert` applied to each
    key in turn.
    """
    s = len(lk)
    b = _sort_keys(keys)
    c = [jnp.minimum(lk[i], b[s - 1 - i]) if s - 1 - i < len(b) else lk[i] for i in range(s)]
    n = next_pow2(s)
    c = c + [_LO] * (n - s)
    d = n // 2
    while d >= 1:
        for i in range(n):
            if not i & d:
                c[i], c[i + d] = _cmpx(c[i], c[i + d])
        d //= 2
    return tuple(c[n - s :])


def packed_lists(
    lk: tuple,
    k: int,
    bits: int,
    dist: Callable[[jax.Array], jax.Array],
    ids: Callable[[jax.Array], jax.Array] | None = None,
) -> tuple[tuple, jax.Array]:
    """The exact lists from a packed search's ``S = len(lk) > k`` sorted keys, and which
    lanes cannot be resolved from them (module doc).

    ``dist(low [BM]) -> [BM]``: the exact distances (the search's own formula) of the
    candidates whose key holds the low bits ``low``. ``ids``: when the low bits are not
    the agents' indices but positions in some other order (the grid search's),
    ``ids(low) -> [BM]`` maps them to indices, and the re-sort breaks ties of equal
    distances by index explicitly (the keys' order is not the index order).

    Returns ``(lists, ambiguous)``: ``k`` tuples of ``[BM]`` int32 indices (-1 = none)
    and ``[BM]`` bool.
    """
    low = (1 << bits) - 1
    fin = [key < INF_KEY for key in lk]
    # No two listed (finite) keys share a truncation: then the keys' order is the exact
    # (d, j) order and no agent left out can precede the k-th, so the lists are the keys'
    # indices. Only a block where some lane has such a pair re-sorts.
    same = [fin[s + 1] & ((lk[s] >> bits) == (lk[s + 1] >> bits)) for s in range(len(lk) - 1)]
    collide = functools.reduce(jnp.logical_or, same, jnp.zeros(lk[0].shape, bool))

    def direct():
        lists = tuple(
            jnp.where(f, key & low if ids is None else ids(key & low), -1)
            for f, key in zip(fin[:k], lk, strict=False)
        )
        return lists, jnp.zeros(lk[0].shape, bool)

    return lax.cond(any_lane(collide), lambda: _resort(lk, k, bits, dist, fin, ids), direct)


def _resort(lk, k: int, bits: int, dist, fin, ids=None):
    """`packed_lists` by the exact re-sort (see there)."""
    low = (1 << bits) - 1
    amb = fin[k - 1] & ((lk[k - 1] >> bits) == (lk[-1] >> bits))
    keys = [key & low if ids is None else ids(key & low) for key in lk]  # indices
    ds = [jnp.where(f, dist(key & low), INF) for f, key in zip(fin, lk, strict=True)]
    for p in range(_RESORT_PASSES):
        for s in range(p % 2, len(keys) - 1, 2):
            swap = ds[s + 1] < ds[s]
            if ids is not None:  # equal distances by index (the keys were by position)
                swap = swap | ((ds[s + 1] == ds[s]) & (keys[s + 1] < keys[s]))
            ds[s], ds[s + 1] = jnp.where(swap, ds[s + 1], ds[s]), jnp.where(swap, ds[s], ds[s + 1])
            keys[s], keys[s + 1] = (
                jnp.where(swap, keys[s + 1], keys[s]),
                jnp.where(swap, keys[s], keys[s + 1]),
            )
    for s in range(len(keys) - 1):
        amb = amb | (ds[s + 1] < ds[s])
        if ids is not None:  # a run of equal distances longer than the passes sort
            amb = amb | ((ds[s + 1] == ds[s]) & (ds[s] < INF) & (keys[s + 1] < keys[s]))
    return tuple(jnp.where(d < INF, key, -1) for d, key in zip(ds[:k], keys[:k], strict=True)), amb


def insert_pair(ld: tuple, lj: tuple, d: jax.Array, j: jax.Array, lex: bool) -> tuple:
    """Inserts ``(d [BM], j)`` into the sorted lists ``(ld, lj)`` (tuples of ``[BM]``
    distances and indices): ordered by ``(d, j)`` if ``lex``, else by ``d`` with a new
    ``d`` after equal ones (strict ``<``). Returns the new ``(ld, lj)``."""
    nd, nj = [], []
    before = None  # the candidate goes before slot s - 1
    for s in range(len(ld)):
        here = d < ld[s]
        if lex:
            here = here | ((d == ld[s]) & (j < lj[s]))
        if s == 0:
            nd.append(jnp.minimum(ld[0], d))
            nj.append(jnp.where(here, j, lj[0]))
        else:
            nd.append(jnp.minimum(ld[s], jnp.maximum(ld[s - 1], d)))
            nj.append(jnp.where(before, lj[s - 1], jnp.where(here, j, lj[s])))
        before = here
    return tuple(nd), tuple(nj)


def store_lists(out_ref, agent: jax.Array, lists: tuple, k: int, m: int) -> None:
    """Writes lane ``q``'s list (``k`` slots of ``[BM]`` int32, -1 = none) at
    ``out[agent[q]·k + s]`` (the env's row-major ``[M, k]``); lanes with ``agent >= m``
    (padding) write nothing.

    The slots are gathered into one ``[BM, next_pow2(k)]`` tile and stored in one masked
    store, whose lanes Triton lays out along the slots: a row's ``k`` ids come from
    consecutive lanes, a few memory sectors per instruction instead of one per lane."""
    keep = agent < m
    kp = next_pow2(k)
    slot = lax.broadcasted_iota(jnp.int32, (1, kp), 1)  # [1, KP]
    tile = jnp.broadcast_to(lists[0][:, None], (agent.shape[0], kp))  # [BM, KP]
    for s in range(1, k):
        tile = jnp.where(slot == s, lists[s][:, None], tile)
    ok = keep[:, None] & (slot < k)  # [BM, KP]
    lane = lax.broadcasted_iota(jnp.int32, ok.shape, 0)
    at = spill_index(ok, agent[:, None] * k + slot, m * k + lane * kp + slot)
    pl_triton.store(out_ref.at[at], tile, mask=ok)


def check_inputs(x, y, in_game, k) -> tuple[int, jax.Array, jax.Array, jax.Array]:
    """Validated ``(k, x, y, in_game)`` of a batched search (``[N, M]`` each)."""
    k = int(k)
    if k < 1:
        raise ValueError(f"nearest_k needs k >= 1, got k={k}")
    x = jnp.asarray(x, jnp.float32)
    y = jnp.asarray(y, jnp.float32)
    in_game = jnp.asarray(in_game)
    if x.ndim != 2 or y.shape != x.shape or in_game.shape != x.shape:
        raise ValueError(
            "nearest_k_batched needs x, y, in_game of one shape [N, M], got "
            f"{x.shape}, {y.shape}, {in_game.shape}"
        )
    if in_game.dtype != jnp.bool_:
        raise ValueError(f"in_game must be bool, got {in_game.dtype}")
    if x.shape[1] < 1:
        raise ValueError("nearest_k needs at least one agent")
    return k, x, y, in_game


def finish(out: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``out [N, M, k]`` (-1 = none) -> ``(idx, valid)`` with ``idx = i`` padding."""
    valid = out >= 0
    self_idx = jnp.arange(out.shape[1], dtype=jnp.int32)[None, :, None]
    return jnp.where(valid, out, self_idx), valid
