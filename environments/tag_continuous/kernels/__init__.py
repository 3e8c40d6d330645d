"""Pallas kernels for TagContinuous's two neighbour searches (the env's hot paths).

They compute the functions of `environments.tag_continuous.neighbors` (the plain-JAX
reference; the tests compare them with it and with a brute-force NumPy search):

* `nearest_k` / `nearest_k_batched`: for every agent ``i``, the ``k`` nearest agents
  ``j != i`` with ``in_game[j]``, nearest first, ties by lower ``j``; padded with
  ``idx = i`` (the agent itself, so gathers stay in range) and ``valid = False`` when
  fewer than ``k`` qualify. The partial observation's neighbour list. Two exact
  methods here, same results: the brute-force kernel below (`nearest_k_brute_batched`,
  ``O(M²)``) and a spatially sorted, chunk-pruned search (`nearest_k_sorted_batched`,
  about ``0.15·M²`` pairs at ``M = 1000``, fewer at larger ``M``), and a third in
  `grid_knn` (per-query cells, ``M <= 1024``); from ``M >= SORTED_MIN_AGENTS`` (256)
  `LARGE_METHOD` picks between the last two unless ``method=`` says otherwise.
* `nearest_tagger` / `nearest_tagger_batched`: for every runner, the index of its
  nearest tagger (lowest index on ties) and that squared distance. The tagging test,
  ``O(R·T)``.

"Distance" is the float32 ``dx*dx + dy*dy`` with ``dx = x_i - x_j`` (squared Euclidean,
no square root). Positions must be finite. A compiler may contract ``dx*dx + dy*dy``
into a fused multiply-add (XLA on CPU does, Triton on GPU may), which can move a
distance by one ulp against another compilation of the same formula: orders agree
except at near-ties of that size, and exactly on exactly representable inputs.

Dimension letters: ``N`` envs, ``M`` agents, ``T`` taggers, ``R`` runners, ``k``
neighbours, ``BM`` query rows per program, ``U`` candidates per loop step, ``BC``
candidates per chunk (sorted search).

Design
------
Grid ``(N, ceil(M / BM))``: one program per env and block of ``BM`` query agents, **one
query row per lane** (``BM = 32`` rows on one warp by default). The program streams the
candidates ``j = 0, 1, …`` in increasing order (``U`` per loop step, unrolled; each a
scalar load of ``x_j, y_j`` that every lane shares), computes the ``[BM]`` distances and
inserts them into each row's sorted top-k list, held in registers as ``k`` separate
``[BM]`` vectors ``ld[0] <= … <= ld[k-1]`` (distances) and ``lj[s]`` (indices). The
insertion is a branch-free sorting network, elementwise across lanes::

    ld[s] <- min(ld[s], max(ld[s-1], d))          (2 ops)
    lj[s] <- d < ld[s-1] ? lj[s-1] : (d < ld[s] ? j : lj[s])    (1 compare, 2 selects)

Because ``j`` only grows, a candidate at the distance of a listed one goes after it:
that is exactly "ties by lower ``j``". Nothing is reduced across lanes, nothing
``[M, M]`` (nor even ``[BM, M]``) exists in memory, and the only traffic is the positions
in and ``k`` indices per agent out. Masks cost nothing: the wrapper puts candidates out
of the game, and the padding past ``M``, at ``+inf`` (distance ``+inf``, never inserted:
``inf < inf`` is false); the ``j == i`` mask is applied only in the loop over the
block's own rows (the candidate range is split in three loops when compiled).

With packed keys (the default up to 1024 agents: the distance's bits with the index in
the low bits, one int32 per slot, `_packed_insert`) a list of ``S = k + 2`` slots costs
``2S − 1`` integer min/max per candidate inserted one by one. The default
(`PACKED_NETWORK = "merge"`) takes each loop step's ``U`` keys at once instead: an
odd-even merge sort of the ``U`` keys, ``c_i = min(list_i, batch_{S−1−i})`` (the ``S``
smallest of both, rising then falling) and a bitonic merger that sorts ``c``
(`_packed_merge`): ≈ 11 min/max per candidate at ``U = 8`` or 16 and ``S = 12``, against
23. Measured (H200, 1000 × 110, ``k = 10``, the search alone): 49.6 → 35 µs per call.
The keys are distinct (the index is in them), so the result is the same list. After the
stream, a block where no lane lists two keys of one truncated distance takes the keys'
indices as they are (`PACKED_SKIP_DISTINCT`); otherwise the listed distances are
recomputed and re-sorted exactly (`_packed_lists`).

Floors and cost, per env step and env: bytes in ``8M`` (query positions) plus ``8M``
per row block (candidate positions, from L1/L2), bytes out ``4kM``; work ``M²`` pairs at
about ``5 + 5k`` simple ops each (55 at ``k = 10``): compute-bound at ``M = 1000``.

Measured (H100, jax 0.11.2, Triton; default blocks, 90% of agents in game, timed in a
jitted loop; the XLA reference is `neighbors.nearest_k` vmapped over envs):

* 1000 envs x 110 agents, k = 10: 0.07 ms against 0.60 ms (8.6x; about 14M env steps/s)
* 2000 envs x 1000 agents, k = 4: 2.1 ms against 100 ms (47x)
* 2000 envs x 1000 agents, k = 10: 5.1 ms against 100 ms (19.5x; about 390k env steps/s)
* 2000 envs x 1000 agents, k = 16: 8.1 ms against 100 ms (12x)

At ``M = 1000`` that is about 390 G pairs/s, ~22 T simple ops/s, near the FP32 issue
rate: the time grows linearly in ``k`` (about 0.5 ms per slot) and block sizes hardly
matter (``BM`` 32..512, ``U`` 4..16, 1..8 warps all within 3%; at ``M = 110``, ``BM >=
256`` is 2x slower, too few programs). A first design that merged ``[BM, BC]`` distance
tiles into a running top-k by min-reductions over the tile (the textbook GPU
k-selection) ran 4-5x slower (23 ms and 0.35 ms at its best blocks): each reduction and
its broadcast back cross lanes, and a tile needs up to ``k`` rounds. Going much faster
needs fewer pairs (agents binned into grid cells, candidates visited cell by cell), not
a better merge: that is `nearest_k_sorted_batched` (agents sorted along a Hilbert
curve, candidates in chunks with bounding boxes, chunks skipped when no lane of the
block can gain from them; its docstring has the details and the exactness argument).

The sorted search's preparation (the curve order, the queries, the candidates in the
same order with agents out of the game partitioned to the end, the chunk boxes) is one
Pallas program per env (`PREP_IMPL = "pallas"`, `_prep_kernel`) rather than a sort and
about ten XLA kernels (`sorted_inputs`, the reference it equals): the program computes
the packed Hilbert keys, sorts them itself by an LSD radix sort of one-bit stable
partitions (`_radix_order`: a cumsum, a scatter and a barrier per key bit), partitions
the candidates with another cumsum, and reads them back for the boxes. The order uses a
5-bit-per-axis Hilbert grid (`PREP_SORT_BITS`; ``None`` gives `spatial_order`'s
order): 10 passes, and on this grid (about one agent per cell at ``M = 1000``) the
pruning is unchanged. H200, 2000 × (5+995), ``k = 10``, env step: 1.260 ms (XLA
preparation) → 1.140 (Pallas, XLA's sort) → 1.100 (sorted in the kernel, 10 bits) →
1.060 ms (5 bits).

`nearest_tagger` has the same layout with a running ``(d, j)`` minimum (strict ``<``,
so the lower tagger index wins ties) over taggers streamed ``U`` at a time. It is
``O(R·T)`` and memory/launch-bound: measured 0.025 ms (1000 x (10 + 100)) and 0.045 ms
(2000 x (5 + 995)) against 0.020 and 0.035-0.045 ms for the vmapped XLA reference,
which also fuses with its neighbours in the env step. Prefer the reference inside the
env unless profiling says otherwise.

Backends: ``interpret=None`` runs the kernels in Pallas interpret mode when the default
backend is the CPU (the test path) and compiles them with the Triton lowering otherwise
(the Triton `CompilerParams` are passed explicitly so Pallas does not pick Mosaic GPU).
Interpret mode defaults to ``U = 1`` and one masked loop (same results, much shorter
compile). Under `jax.vmap` Pallas adds a grid axis, so the one-env entry points work
inside a vmapped env step; the ``*_batched`` entry points put the env axis into the grid
directly (same kernel, same speed).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

from environments.tag_continuous.kernels.triton import INF as _INF
from environments.tag_continuous.kernels.triton import any_lane as _any
from environments.tag_continuous.kernels.triton import check_block as _check_block
from environments.tag_continuous.kernels.triton import compiler_params as _compiler_params
from environments.tag_continuous.kernels.triton import div_rn as _div_rn
from environments.tag_continuous.kernels.triton import next_pow2 as _next_pow2
from environments.tag_continuous.kernels.triton import resolve_interpret as _resolve_interpret
from environments.tag_continuous.kernels.triton import round_up as _round_up

__all__ = [
    "BRUTE_UNROLL",
    "CHUNK_ORDER",
    "CHUNK_ORDERS",
    "CHUNK_SIZE",
    "ENV_QUERIES",
    "LARGE_METHOD",
    "LARGE_METHODS",
    "LIST_STORE",
    "LIST_STORES",
    "PACKED_EXTRA_SLOTS",
    "PACKED_MAX_BITS",
    "PACKED_NETWORK",
    "PACKED_NETWORKS",
    "PACKED_SKIP_DISTINCT",
    "PREP_IMPL",
    "PREP_IMPLS",
    "PREP_MAX_AGENTS",
    "PREP_SORT",
    "PREP_SORTS",
    "PREP_SORT_BITS",
    "PREP_WARPS",
    "SORTED_BLOCK_ROWS",
    "SORTED_LANE_TEST",
    "SORTED_MIN_AGENTS",
    "SORTED_PREPICK",
    "SORTED_UNROLL",
    "SORT_KEYS",
    "SORT_KEY_FORMS",
    "brute_lists_padded",
    "brute_padding",
    "lists_in_game_only",
    "nearest_k",
    "nearest_k_batched",
    "nearest_k_brute_batched",
    "nearest_k_lists",
    "nearest_k_lists_ordered",
    "nearest_k_sorted",
    "nearest_k_sorted_batched",
    "nearest_tagger",
    "nearest_tagger_batched",
    "sorted_inputs",
    "sorted_search_stats",
    "spatial_order",
]

# ------------------------------------------------------------------------------ nearest_k
def _nearest_k_kernel(
    xq_ref, yq_ref, xc_ref, yc_ref, out_ref, *, k, bm, unroll, mc, split, m, key_bits,
    network="insert",
):  # fmt: skip
    """One env, ``BM`` query rows (one per lane); writes their lists into the env's
    ``out [M·k]`` int32 (row-major ``[M, k]``, -1 = none; padding rows masked).

    ``xq/yq [BM]`` query positions; ``xc/yc [MC]`` candidate positions (``+inf`` when the
    candidate is out of the game or padding). ``split``: stream the candidates in three
    loops so that only the middle one (this block's own rows) applies the ``j != i``
    mask; otherwise one masked loop. ``key_bits``: search with packed keys of that many
    index bits (`_packed_insert`), then exactly only if some lane's result is ambiguous;
    ``0``: the exact insertion only. ``network``: `PACKED_NETWORK`'s choice for the packed
    search (``"merge"`` takes each loop step's ``U`` keys at once).
    """
    b = pl.program_id(1)
    rows = b * bm + lax.broadcasted_iota(jnp.int32, (bm,), 0)  # [BM]
    xq = xq_ref[...]  # [BM]
    yq = yq_ref[...]  # [BM]

    def insert(lists, d, j):
        """Inserts ``(d [BM], j)`` into the sorted lists ``(ld, lj)`` (k-tuples of [BM]);
        candidates arrive in increasing ``j``, so the strict insertion keeps ties by ``j``."""
        return _insert_pair(*lists, d, j, False)

    def stream(ins, carry, batch=None):
        """Streams every candidate through ``ins(carry, d [BM], j)``, or each loop step's
        ``U`` candidates at once through ``batch(carry, [d [BM]], [j])``."""

        def steps(masked):
            def step(c, carry):
                ds, js = [], []
                for u in range(unroll):
                    j = c * unroll + u
                    dx = xq - xc_ref[j]
                    dy = yq - yc_ref[j]
                    d = dx * dx + dy * dy  # [BM]
                    if masked:
                        d = jnp.where(rows == j, _INF, d)
                    if batch is None:
                        carry = ins(carry, d, j)
                    else:
                        ds.append(d)
                        js.append(j)
                return carry if batch is None else batch(carry, ds, js)

            return step

        num_steps = mc // unroll
        if split:
            lo = (b * bm) // unroll  # first step that may hold one of this block's rows
            hi = jnp.minimum(((b + 1) * bm + unroll - 1) // unroll, num_steps)
            carry = lax.fori_loop(0, lo, steps(False), carry)
            carry = lax.fori_loop(lo, hi, steps(True), carry)
            return lax.fori_loop(hi, num_steps, steps(False), carry)
        return lax.fori_loop(0, num_steps, steps(True), carry)

    def exact():
        init = (
            tuple(jnp.full((bm,), _INF, jnp.float32) for _ in range(k)),
            tuple(jnp.full((bm,), -1, jnp.int32) for _ in range(k)),
        )
        ld, lj = stream(insert, init)
        return tuple(jnp.where(ld[s] < _INF, lj[s], -1) for s in range(k))

    if key_bits:
        merge = None
        if network == "merge" and unroll > 1:

            def merge(lk, ds, js):
                keys = [_packed_key(d, j, key_bits) for d, j in zip(ds, js, strict=True)]
                return _packed_merge(lk, keys)

        keys = stream(
            lambda lk, d, j: _packed_insert(lk, d, j, key_bits),
            tuple(jnp.full((bm,), _EMPTY_KEY, jnp.int32) for _ in range(k + PACKED_EXTRA_SLOTS)),
            merge,
        )

        def dist(j):  # [BM] exact distances to candidates j [BM]
            dx = xq - xc_ref[j]
            dy = yq - yc_ref[j]
            return dx * dx + dy * dy

        lists, amb = _packed_lists(keys, k, key_bits, dist)
        lists = lax.cond(_any(amb & (rows < m)), exact, lambda: lists)
    else:
        lists = exact()
    _store_lists(out_ref, rows, lists, k, m)


#: The brute-force kernel's default candidates per unrolled loop step ``U`` (compiled).
BRUTE_UNROLL = 16

#: Packed search keys (`_packed_insert`): a slot holding this is empty.
_EMPTY_KEY = 0x7FFFFFFF
#: Keys at or above this come from a ``+inf`` distance (not a neighbour).
_INF_KEY = 0x7F800000
#: `nearest_k`'s kernels use packed keys when the agent indices fit in this many bits
#: (``M <= 1024``; more index bits make ambiguous results, and exact re-searches, common).
PACKED_MAX_BITS = 10


def _key_bits(packed_keys: bool | None, m: int) -> int:
    """Index bits of the packed keys for ``m`` agents, or 0 for the exact insertion."""
    bits = max(1, (m - 1).bit_length())
    if packed_keys is None:
        packed_keys = bits <= PACKED_MAX_BITS
    return bits if packed_keys else 0


def _packed_insert(lk, d, j, bits: int):
    """Inserts candidate ``j`` at distance ``d [BM]`` into the sorted key lists ``lk``
    (a tuple of ``[BM]`` int32, ascending), as the key ``bits(d)`` with its low ``bits``
    bits replaced by ``j``. A float32 ``d >= 0`` orders like its bit pattern, so the key
    orders by ``(d truncated, j)``; one integer min and max per slot, against five
    operations for the exact ``(d, j)`` pair of lists."""
    key = _packed_key(d, j, bits)
    out = [jnp.minimum(lk[0], key)]
    for s in range(1, len(lk)):
        out.append(jnp.minimum(lk[s], jnp.maximum(lk[s - 1], key)))
    return tuple(out)


#: How the packed search takes in a loop step's ``U`` candidates: ``"merge"`` sorts their
#: keys with a sorting network and merges them into the list (`_packed_merge`: ≈ 11
#: integer min/max per candidate at ``U = 8``, ``S = 12`` slots), ``"insert"`` inserts them
#: one by one (`_packed_insert`: ``2S - 1`` per candidate). Same lists (keys are unique).
PACKED_NETWORK = "merge"
PACKED_NETWORKS = ("merge", "insert")


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


def _oddeven_merge_sort(n: int) -> list[tuple[int, int]]:
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
    n = _next_pow2(len(keys))
    vals = list(keys) + [_HI] * (n - len(keys))
    for i, j in _oddeven_merge_sort(n):
        vals[i], vals[j] = _cmpx(vals[i], vals[j])
    return vals[: len(keys)]


def _packed_merge(lk, keys: list):
    """The ``S = len(lk)`` smallest of the sorted list ``lk`` (a tuple of ``[BM]`` keys,
    ascending) and the keys ``keys`` (any order), sorted ascending.

    Sorts ``keys`` (`_sort_keys`), then takes ``c_i = min(lk_i, b_{S-1-i})``, which holds
    the ``S`` smallest of both and rises then falls (``lk`` rises, the reversed batch
    falls), and sorts that bitonic sequence with a bitonic merger (padded with `_LO` after
    its end, which keeps it bitonic; pads are resolved at trace time). With distinct keys
    the result equals `_packed_insert` applied to each key in turn.
    """
    s = len(lk)
    b = _sort_keys(keys)
    c = [jnp.minimum(lk[i], b[s - 1 - i]) if s - 1 - i < len(b) else lk[i] for i in range(s)]
    n = _next_pow2(s)
    c = c + [_LO] * (n - s)
    d = n // 2
    while d >= 1:
        for i in range(n):
            if not i & d:
                c[i], c[i + d] = _cmpx(c[i], c[i + d])
        d //= 2
    return tuple(c[n - s :])


def _check_network(network: str) -> str:
    if network not in PACKED_NETWORKS:
        raise ValueError(f"PACKED_NETWORK must be one of {PACKED_NETWORKS}, got {network!r}")
    return network


def _packed_key(d, j, bits: int):
    """The packed key of candidate ``j`` at distance ``d [BM]`` (`_packed_insert`)."""
    low = (1 << bits) - 1
    return (lax.bitcast_convert_type(d, jnp.int32) & ~low) | j  # [BM]


#: Extra slots of the packed search beyond ``k`` (`_packed_lists`): a tie of this many
#: distances' truncations across the ``k``-th place still resolves without a re-search.
PACKED_EXTRA_SLOTS = 2
#: `_packed_lists` returns the keys' indices directly, without the exact re-sort, in a
#: block where no lane lists two keys of one truncated distance (rare: two of a lane's
#: listed distances within ``2**bits`` ulps of each other). ``False``: always re-sort.
#: Same lists either way.
PACKED_SKIP_DISTINCT = True
#: Odd-even transposition passes that re-sort the packed list by exact distance: runs of
#: up to this many keys of one truncated distance are put in exact order.
_RESORT_PASSES = 3


def _packed_lists(lk, k: int, bits: int, dist, ids=None):
    """The exact lists from a packed search's ``S = len(lk) > k`` sorted keys, and which
    lanes cannot be resolved from them.

    The keys order by ``(truncated distance, index)`` (`_packed_insert`). Where the last
    slot's truncation is above the ``k``-th's, every agent not listed is strictly
    farther than every listed one of truncation at most the ``k``-th's, so those are
    the exact candidates for the first ``k`` places; only their order within one
    truncation (by index, not distance) can be wrong. So: recompute each listed
    distance exactly (``dist(idx [BM]) -> [BM]``, the search's own formula), re-sort
    the ``S`` entries by it (stable odd-even transposition: equal distances keep index
    order), and check the result is sorted. A lane whose ``k``-th and last truncations
    are equal (more than ``S - k`` near-ties at the ``k``-th place) or whose list is
    still unsorted is ambiguous: the caller searches again exactly if a real one is.

    Returns ``(lists, ambiguous)``: ``k`` tuples of ``[BM]`` int32 indices (-1 = none)
    and ``[BM]`` bool. With `PACKED_SKIP_DISTINCT`, a block where no lane lists two
    finite keys of one truncation skips the re-sort: the keys' order is then exact.

    ``ids``: when the keys' low bits are not the agents' indices but positions in some
    other order (the grid search's), ``ids(low [BM]) -> [BM]`` maps them to indices;
    ``dist`` then takes the low bits as they are, and the re-sort breaks ties of equal
    distances by index explicitly (the keys' order is not the index order).
    """
    low = (1 << bits) - 1
    fin = [key < _INF_KEY for key in lk]
    if PACKED_SKIP_DISTINCT:
        # No two listed (finite) keys share a truncation: then the keys' order is the
        # exact (d, j) order and no agent left out can precede the k-th, so the lists
        # are the keys' indices. Only a block where some lane has such a pair re-sorts.
        same = [fin[s + 1] & ((lk[s] >> bits) == (lk[s + 1] >> bits)) for s in range(len(lk) - 1)]
        collide = functools.reduce(jnp.logical_or, same, jnp.zeros(lk[0].shape, bool))

        def direct():
            lists = tuple(
                jnp.where(f, key & low if ids is None else ids(key & low), -1)
                for f, key in zip(fin[:k], lk, strict=False)
            )
            return lists, jnp.zeros(lk[0].shape, bool)

        return lax.cond(_any(collide), lambda: _resort(lk, k, bits, dist, fin, ids), direct)
    return _resort(lk, k, bits, dist, fin, ids)


def _resort(lk, k: int, bits: int, dist, fin, ids=None):
    """`_packed_lists` by the exact re-sort (see there)."""
    low = (1 << bits) - 1
    amb = fin[k - 1] & ((lk[k - 1] >> bits) == (lk[-1] >> bits))
    keys = [key & low if ids is None else ids(key & low) for key in lk]  # indices
    ds = [jnp.where(f, dist(key & low), _INF) for f, key in zip(fin, lk, strict=True)]
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
            amb = amb | ((ds[s + 1] == ds[s]) & (ds[s] < _INF) & (keys[s + 1] < keys[s]))
    return tuple(jnp.where(d < _INF, key, -1) for d, key in zip(ds[:k], keys[:k], strict=True)), amb


def _insert_pair(ld, lj, d, j, lex: bool):
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


#: How the searches store their lists (`_store_lists`): ``"lanes"``, one store per slot,
#: each lane at its own row (32 rows, a partial 32-byte sector each, per instruction); or
#: ``"tile"``, the slots gathered into a ``[BM, next_pow2(k)]`` tile and stored in one
#: masked store, whose lanes Triton lays out along the slots (a row's ``k`` ids from
#: consecutive lanes: about 4 sectors per instruction instead of 32). Same values.
#: Measured (H200, 2026-11-26, run 88): the grid search at 2000 × (5+995) 305.1 →
#: 265.0 µs, the env step −5.1%; at 1000 × (10+100) the brute-force search 17.5 → 18.1 µs
#: and the step within noise (−2%).
LIST_STORES = ("lanes", "tile")
LIST_STORE = "tile"


def _store_lists(out_ref, agent, lists, k: int, m: int) -> None:
    """Writes lane ``q``'s list (``k`` slots of ``[BM]`` int32, -1 = none) at
    ``out[agent[q]·k + s]`` (the env's row-major ``[M, k]``); lanes with ``agent >= m``
    (padding) write nothing. `LIST_STORE` says how."""
    if LIST_STORE not in LIST_STORES:
        raise ValueError(f"kernels.LIST_STORE must be one of {LIST_STORES}, got {LIST_STORE!r}")
    keep = agent < m
    if LIST_STORE == "lanes":
        for s in range(k):
            pl_triton.store(out_ref.at[agent * k + s], lists[s], mask=keep)
        return
    kp = _next_pow2(k)
    slot = lax.broadcasted_iota(jnp.int32, (1, kp), 1)  # [1, KP]
    tile = jnp.broadcast_to(lists[0][:, None], (agent.shape[0], kp))  # [BM, KP]
    for s in range(1, k):
        tile = jnp.where(slot == s, lists[s][:, None], tile)
    ok = keep[:, None] & (slot < k)  # [BM, KP]
    # masked elements: distinct indices past the end (interpret mode drops them)
    lane = lax.broadcasted_iota(jnp.int32, ok.shape, 0)
    at = jnp.where(ok, agent[:, None] * k + slot, m * k + lane * kp + slot)
    pl_triton.store(out_ref.at[at], tile, mask=ok)


def _check_batched_inputs(x, y, in_game, k) -> tuple[int, jax.Array, jax.Array, jax.Array]:
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


def nearest_k_brute_batched(
    x: jax.Array,
    y: jax.Array,
    in_game: jax.Array,
    k: int,
    *,
    block_rows: int | None = None,
    block_cols: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    split_self_range: bool | None = None,
    interpret: bool | None = None,
    packed_keys: bool | None = None,
) -> tuple[jax.Array, jax.Array]:
    """`nearest_k_batched` by the brute-force kernel (every pair; see the module doc).

    Args:
      x, y: ``[N, M]`` float32 positions (finite).
      in_game: ``[N, M]`` bool; only agents with ``in_game[n, j]`` are candidates.
      k: neighbours per agent (static), ``k >= 1`` (``k > M - 1`` pads).
      block_rows: query rows per program ``BM``, one per lane (power of two; default
        ``min(32, next_pow2(M))``).
      block_cols: candidates per loop step ``U``, unrolled (power of two; default
        `BRUTE_UNROLL` compiled, 1 in interpret mode).
      num_warps: Triton warps (default ``max(1, min(4, BM // 32))``); num_stages: Triton
        pipelining stages (default Triton's). Both ignored in interpret mode.
      split_self_range: stream candidates in three loops so only the block's own range
        pays the ``j != i`` mask (default: compiled yes, interpret no; same results).
      interpret: Pallas interpret mode; ``None``: only when the default backend is CPU.
      packed_keys: search with packed ``(distance, index)`` integer keys and ``k + 1``
        slots, and exactly again where that result is ambiguous (see the module doc);
        ``None``: when the indices fit in `PACKED_MAX_BITS` bits. Same results.

    Returns:
      ``idx [N, M, k]`` int32 and ``valid [N, M, k]`` bool, as `nearest_k` per env.
    """
    return _finish(
        _brute_lists(
            x, y, in_game, k, block_rows=block_rows, block_cols=block_cols,
            num_warps=num_warps, num_stages=num_stages, split_self_range=split_self_range,
            interpret=interpret, packed_keys=packed_keys,
        )
    )  # fmt: skip


def brute_padding(m: int, interpret: bool | None = None) -> tuple[int, int]:
    """``(MQ, MC)``: the lengths the brute-force kernel pads an env's ``M`` query and
    candidate positions to, with its default blocks (`brute_lists_padded`)."""
    interpret = _resolve_interpret(interpret)
    bm = min(32, _next_pow2(m))
    return _round_up(m, bm), _round_up(m, 1 if interpret else BRUTE_UNROLL)


def brute_lists_padded(
    xq: jax.Array,
    yq: jax.Array,
    xc: jax.Array,
    yc: jax.Array,
    m: int,
    k: int,
    *,
    interpret: bool | None = None,
) -> jax.Array:
    """The brute-force kernel's lists ``[N, M, k]`` int32 (``-1`` = none) from inputs
    already padded (`brute_padding`'s lengths, default blocks): ``xq, yq [N, MQ]`` the
    positions (any value past ``M``), ``xc, yc [N, MC]`` the positions with ``+inf``
    where an agent is out of the game and past ``M`` (what the search would pad; the
    batched Tag step writes them, `vector_step`)."""
    mq, mc = brute_padding(m, interpret)
    n = xq.shape[0]
    if xq.shape != (n, mq) or yq.shape != (n, mq) or xc.shape != (n, mc) or yc.shape != (n, mc):
        raise ValueError(
            f"brute_lists_padded needs xq, yq [N, {mq}] and xc, yc [N, {mc}], got "
            f"{xq.shape}, {yq.shape}, {xc.shape}, {yc.shape}"
        )
    dummy = jnp.zeros((n, m), jnp.float32)
    return _brute_lists(
        dummy, dummy, jnp.zeros((n, m), bool), k, block_rows=None, block_cols=None,
        num_warps=None, num_stages=None, split_self_range=None, interpret=interpret,
        padded=(xq, yq, xc, yc),
    )  # fmt: skip


def _brute_lists(
    x, y, in_game, k, *, block_rows, block_cols, num_warps, num_stages, split_self_range,
    interpret, packed_keys=None, padded=None,
) -> jax.Array:  # fmt: skip
    """The brute-force kernel's lists ``[N, M, k]`` int32, ``-1`` = none (``padded``: the
    kernel's inputs, see `brute_lists_padded`; ``x, y, in_game`` then give shapes only)."""
    k, x, y, in_game = _check_batched_inputs(x, y, in_game, k)
    n, m = x.shape
    interpret = _resolve_interpret(interpret)
    bm = _check_block("block_rows", min(32, _next_pow2(m)) if block_rows is None else block_rows)
    default_u = 1 if interpret else BRUTE_UNROLL
    u = _check_block("block_cols", default_u if block_cols is None else block_cols)
    split = (not interpret) if split_self_range is None else bool(split_self_range)
    mq, mc = _round_up(m, bm), _round_up(m, u)
    if padded is not None:
        xq, yq, xc, yc = padded
    else:
        xq = jnp.pad(x, ((0, 0), (0, mq - m)))
        yq = jnp.pad(y, ((0, 0), (0, mq - m)))
        # Candidates out of the game and the padding sit at +inf: their distance is +inf.
        xc = jnp.pad(jnp.where(in_game, x, _INF), ((0, 0), (0, mc - m)), constant_values=_INF)
        yc = jnp.pad(jnp.where(in_game, y, _INF), ((0, 0), (0, mc - m)), constant_values=_INF)

    kernel = functools.partial(
        _nearest_k_kernel, k=k, bm=bm, unroll=u, mc=mc, split=split, m=m,
        key_bits=_key_bits(packed_keys, mc), network=_check_network(PACKED_NETWORK),
    )  # fmt: skip
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n, m * k), jnp.int32),
        grid=(n, mq // bm),
        in_specs=[
            pl.BlockSpec((None, bm), lambda e, b: (e, b)),
            pl.BlockSpec((None, bm), lambda e, b: (e, b)),
            pl.BlockSpec((None, mc), lambda e, b: (e, 0)),
            pl.BlockSpec((None, mc), lambda e, b: (e, 0)),
        ],
        out_specs=pl.BlockSpec((None, m * k), lambda e, b: (e, 0)),
        compiler_params=_compiler_params(num_warps, num_stages, bm),
        cost_estimate=pl.CostEstimate(
            flops=int(n * mq * mc * (5 + 5 * k)),
            transcendentals=0,
            bytes_accessed=int(4 * n * (2 * mq + 2 * mc * (mq // bm) + k * mq)),
        ),
        interpret=interpret,
        name="tag_nearest_k",
    )(xq, yq, xc, yc)
    return out.reshape(n, m, k)


#: The search ``method=None`` picks from `SORTED_MIN_AGENTS` agents: ``"sorted"``
#: (`nearest_k_sorted_batched`) or ``"grid"`` (`grid_knn.nearest_k_grid_batched`, up to
#: `grid_knn.GRID_MAX_AGENTS`; ``"sorted"`` above). Same results.
LARGE_METHODS = ("sorted", "grid")
LARGE_METHOD = "grid"
#: The queries the env asks its Pallas search for when the Pallas observation writer
#: takes the lists (`nearest_k_lists`' ``queries``): ``"in_game"`` lets a search leave
#: the lists of agents out of the game empty (the writer zeroes those rows' neighbour
#: features whatever the lists hold: the same values, though an empty slot gives +0.0
#: where a listed neighbour can give −0.0), ``"all"`` asks for every list.
ENV_QUERIES = "in_game"
_METHODS = ("brute", "sorted", "grid")


def lists_in_game_only(m: int, method: str | None = None, queries: str = "all") -> bool:
    """Whether `nearest_k_lists` for ``m`` agents with ``method`` and ``queries`` leaves
    every row of an agent out of the game all ``-1`` (the grid search with ``queries=
    "in_game"``; the other searches list those agents anyway). The observation writer
    then needs no in-game flag for its mask (`knn_obs.knn_obs_pallas`'s
    ``lists_in_game``)."""
    return queries == "in_game" and _resolve_method(method, m) == "grid"


def _resolve_method(method: str | None, m: int) -> str:
    if method is None:
        if m < SORTED_MIN_AGENTS:
            return "brute"
        if LARGE_METHOD not in LARGE_METHODS:
            raise ValueError(
                f"kernels.LARGE_METHOD must be one of {LARGE_METHODS}, got {LARGE_METHOD!r}"
            )
        from environments.tag_continuous.grid_knn import GRID_MAX_AGENTS

        return "grid" if LARGE_METHOD == "grid" and m <= GRID_MAX_AGENTS else "sorted"
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS} or None, got {method!r}")
    return method


def nearest_k_batched(
    x: jax.Array,
    y: jax.Array,
    in_game: jax.Array,
    k: int,
    *,
    method: str | None = None,
    block_rows: int | None = None,
    block_cols: int | None = None,
    chunk_size: int | None = None,
    tie_check: bool = True,
    num_warps: int | None = None,
    num_stages: int | None = None,
    split_self_range: bool | None = None,
    interpret: bool | None = None,
) -> tuple[jax.Array, jax.Array]:
    """`nearest_k` for ``N`` envs at once, the env axis in the kernel's grid.

    Args:
      x, y: ``[N, M]`` float32 positions (finite).
      in_game: ``[N, M]`` bool; only agents with ``in_game[n, j]`` are candidates.
      k: neighbours per agent (static), ``k >= 1`` (``k > M - 1`` pads).
      method: ``"brute"`` (`nearest_k_brute_batched`, every pair), ``"sorted"``
        (`nearest_k_sorted_batched`, pruned per block of queries), ``"grid"``
        (`grid_knn.nearest_k_grid_batched`, per query, ``M <= 1024``) or ``None``:
        `LARGE_METHOD` when ``M >= SORTED_MIN_AGENTS`` (256; ``"sorted"`` where the
        grid cannot), else ``"brute"``. Same results whichever.
      block_rows, block_cols, num_warps, num_stages, interpret: the chosen method's
        options (see its docstring; ``block_rows`` is ``BM``, ``block_cols`` the unroll
        ``U`` in all). chunk_size, tie_check: ``"sorted"`` only; split_self_range:
        ``"brute"`` only (each ignored by the other methods).

    Returns:
      ``idx [N, M, k]`` int32 and ``valid [N, M, k]`` bool, as `nearest_k` per env.
    """
    return _finish(
        _lists_batched(
            x, y, in_game, k, method=method, block_rows=block_rows, block_cols=block_cols,
            chunk_size=chunk_size, tie_check=tie_check, num_warps=num_warps,
            num_stages=num_stages, split_self_range=split_self_range, interpret=interpret,
        )
    )  # fmt: skip


def _lists_batched(
    x, y, in_game, k, *, method=None, block_rows=None, block_cols=None, chunk_size=None,
    tie_check=True, num_warps=None, num_stages=None, split_self_range=None, interpret=None,
    queries="all",
) -> jax.Array:  # fmt: skip
    """The chosen kernel's lists ``[N, M, k]`` int32, ``-1`` = none (`nearest_k_batched`'s
    arguments; ``queries``: `nearest_k_lists`')."""
    m = jnp.shape(x)[-1] if jnp.ndim(x) == 2 else 0
    resolved = _resolve_method(method, m)
    if resolved == "grid":
        from environments.tag_continuous import grid_knn

        return grid_knn._grid_search(
            x, y, in_game, k, queries=queries, block_cols=block_cols, interpret=interpret
        )
    if queries not in ("all", "in_game"):
        raise ValueError(f"queries must be 'all' or 'in_game', got {queries!r}")
    opts = dict(
        block_rows=block_rows, block_cols=block_cols, num_warps=num_warps,
        num_stages=num_stages, interpret=interpret,
    )  # fmt: skip
    if resolved == "sorted":
        return _sorted_search(x, y, in_game, k, chunk_size=chunk_size, tie_check=tie_check, **opts)
    return _brute_lists(x, y, in_game, k, split_self_range=split_self_range, **opts)


def nearest_k_lists(
    x: jax.Array, y: jax.Array, in_game: jax.Array, k: int, **options: Any
) -> jax.Array:
    """`nearest_k`'s neighbour lists of one env as the kernels write them: ``[M, k]``
    int32, ``-1`` in the slots that `nearest_k` pads (``valid = False``). One pass over
    ``[M, k]`` fewer than `nearest_k`; `knn_obs.knn_obs` takes these lists directly
    (``valid=None``) and `knn_obs.with_valid` converts them. Arguments and ``options``
    as `nearest_k`, plus ``queries``: ``"all"`` (default) or ``"in_game"``, which lets
    the search leave the rows of agents out of the game all ``-1`` (the grid search does;
    the others list them anyway); vmaps over envs."""
    x, y, in_game = _one_env(x, y, in_game, "nearest_k_lists")
    return _lists_batched(x[None], y[None], in_game[None], k, **options)[0]


def nearest_k_lists_ordered(
    x: jax.Array,
    y: jax.Array,
    in_game: jax.Array,
    k: int,
    *,
    method: str | None = None,
    queries: str = "all",
    block_cols: int | None = None,
    interpret: bool | None = None,
) -> tuple[jax.Array, jax.Array]:
    """`nearest_k_lists` by the grid search (``method`` must resolve to ``"grid"``), with
    the search's spatial order of the agents: ``(lists [M, k], order [M])`` int32, where
    ``order`` is a permutation of the ids, the agents in the game by cell row, cell column
    and id, then the others by id (agents near in ``order`` are near in space, which
    `knn_obs.knn_obs_pallas`'s ``row_order`` uses). Vmaps over envs."""
    x, y, in_game = _one_env(x, y, in_game, "nearest_k_lists_ordered")
    m = x.shape[0]
    if _resolve_method(method, m) != "grid":
        raise ValueError(f"nearest_k_lists_ordered needs the grid search, got M={m}, {method=}")
    from environments.tag_continuous import grid_knn

    lists, order = grid_knn._grid_search(
        x[None], y[None], in_game[None], k, queries=queries, block_cols=block_cols,
        interpret=interpret, with_order=True,
    )  # fmt: skip
    return lists[0], order[0]


def _one_env(x, y, in_game, name: str) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``x, y`` float32 and ``in_game`` of one env, checked to be ``[M]`` each."""
    x = jnp.asarray(x, jnp.float32)
    y = jnp.asarray(y, jnp.float32)
    in_game = jnp.asarray(in_game)
    if x.ndim != 1 or y.shape != x.shape or in_game.shape != x.shape:
        raise ValueError(
            f"{name} needs x, y, in_game of one shape [M], got {x.shape}, {y.shape}, "
            f"{in_game.shape}"
        )
    return x, y, in_game


def nearest_k(
    x: jax.Array,
    y: jax.Array,
    in_game: jax.Array,
    k: int,
    *,
    method: str | None = None,
    block_rows: int | None = None,
    block_cols: int | None = None,
    chunk_size: int | None = None,
    tie_check: bool = True,
    num_warps: int | None = None,
    num_stages: int | None = None,
    split_self_range: bool | None = None,
    interpret: bool | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The ``k`` nearest other in-game agents of every agent of one env, nearest first.

    Args:
      x, y: ``[M]`` float32 positions (finite).
      in_game: ``[M]`` bool; only agents with ``in_game[j]`` are candidates.
      k: neighbours per agent (static), ``k >= 1``.
      method: ``"brute"``, ``"sorted"``, ``"grid"`` or ``None`` (`LARGE_METHOD` from
        ``SORTED_MIN_AGENTS`` agents), as `nearest_k_batched`.
      block_rows, block_cols, chunk_size, tie_check, num_warps, num_stages,
        split_self_range, interpret: as `nearest_k_batched`.

    Returns:
      ``idx [M, k]`` int32 and ``valid [M, k]`` bool. Row ``i`` lists the ``j != i`` with
      ``in_game[j]`` by increasing ``(x_i-x_j)² + (y_i-y_j)²`` (float32), ties by lower
      ``j``. When fewer than ``k`` qualify the row is padded with ``idx = i`` (the agent
      itself) and ``valid = False``. Rows of agents out of the game are computed alike.
      Works under `jax.vmap` (Pallas adds a grid axis; the sort and gathers batch).

    Example:
      >>> import jax.numpy as jnp
      >>> idx, valid = nearest_k(
      ...     jnp.array([0.0, 1.0, 3.0]), jnp.zeros(3), jnp.array([True, True, True]), 2
      ... )
      >>> idx.tolist(), valid.tolist()
      ([[1, 2], [0, 2], [1, 0]], [[True, True], [True, True], [True, True]])
    """
    x, y, in_game = _one_env(x, y, in_game, "nearest_k")
    idx, valid = nearest_k_batched(
        x[None],
        y[None],
        in_game[None],
        k,
        method=method,
        block_rows=block_rows,
        block_cols=block_cols,
        chunk_size=chunk_size,
        tie_check=tie_check,
        num_warps=num_warps,
        num_stages=num_stages,
        split_self_range=split_self_range,
        interpret=interpret,
    )
    return idx[0], valid[0]


def nearest_k_sorted(
    x: jax.Array,
    y: jax.Array,
    in_game: jax.Array,
    k: int,
    **options: Any,
) -> tuple[jax.Array, jax.Array]:
    """`nearest_k` by the spatially pruned search, whatever ``M`` (one env; vmaps).

    Args:
      x, y, in_game, k: as `nearest_k`; options: `nearest_k_sorted_batched`'s keywords.

    Returns:
      ``idx [M, k]`` int32 and ``valid [M, k]`` bool, as `nearest_k`.
    """
    return nearest_k(x, y, in_game, k, method="sorted", **options)


# ----------------------------------------------------------------------- nearest_k (sorted)
#: ``nearest_k``/``nearest_k_batched`` use the spatially sorted search from this many agents.
SORTED_MIN_AGENTS = 256

#: The sorted search's orders of visiting candidate chunks (`nearest_k_sorted_batched`'s
#: ``chunk_order``), and the default (H200, 2000 envs × 1000 agents: search 1.86–2.09 ms
#: curve, 1.78–1.80 ms best, interleaved in one process, 2026-11-23; the env step at
#: 2000 × (5+995) 1.5724 ms best, 1.5494 ms keyed, at 10 × (100+10,000) 0.2678 and
#: 0.2605 ms, interleaved, 2026-11-24 run 8).
CHUNK_ORDERS = ("curve", "best", "keyed")
CHUNK_ORDER = "keyed"
#: The sorted search's default candidates per chunk ``BC`` (capped at ``next_pow2(M)``).
#: H200, 2000 envs × 1000 agents, packed keys: the search alone 1.451 ms at 16, 1.277 ms
#: at 8; the env step 1.676 → 1.577 ms (interleaved, `env_ab_probe`, 2026-11-24 run 2).
CHUNK_SIZE = 8
#: The sorted search's default candidates per unrolled loop step ``U`` (compiled; capped at
#: the chunk size). H200, 2000 × (5+995): 8 and 16 (with 16-candidate chunks) equal, 4
#: 3% slower (2026-11-24 run 26).
SORTED_UNROLL = 8
#: The sorted search's default query rows per program ``BM`` (one per lane; Triton warps
#: ``BM / 32``). H200, 2000 × (5+995): 64 (two warps, a looser block bound) 17% slower
#: per env step (2026-11-24 run 30).
SORTED_BLOCK_ROWS = 32
#: Chunk orders ``"best"``/``"keyed"``: reduce the unvisited chunks to the next one before
#: visiting the current one (independent work, issued ahead of the visit's branch)
#: rather than after it. Same results. H200, 2000 × (5+995): no faster (run 30).
SORTED_PREPICK = False
#: Chunk orders ``"best"``/``"keyed"``: before visiting a chunk whose box passed the
#: block's bound, test each lane's point-to-box bound and skip the chunk if no lane can
#: gain (one more reduction and branch per visit). Same results either way. H200, 2000 ×
#: (5+995): without it the env step is 1.3% slower (run 30).
SORTED_LANE_TEST = True

#: Bits per axis of the quantised positions whose Hilbert index orders the agents.
_HILBERT_BITS = 15

#: How `spatial_order` sorts: ``"packed"`` (the default: one int32 key per agent, the
#: Hilbert index in the high bits and the agent index in the low bits, sorted alone;
#: the index bits leave ``(31 − index bits) // 2`` bits per axis, at most
#: ``_HILBERT_BITS``) or ``"argsort"`` (a stable argsort of ``_HILBERT_BITS``-per-axis
#: indices: key and index sorted as two operands). Either is a valid order: the searches
#: give the same results for any permutation. H200, 2000 envs × (5+995): the env step
#: 1.5757 (argsort) vs 1.5716 ms (packed), interleaved (2026-11-24 run 6).
SORT_KEY_FORMS = ("packed", "argsort")
SORT_KEYS = "packed"
#: Below this many bits per axis the packed key is too coarse: `spatial_order` argsorts.
_MIN_PACKED_AXIS_BITS = 5

#: A chunk is skipped only when ``bound * _SLACK > k-th distance``: the slack (about 80
#: float32 ulps) covers a compiler contracting ``dx*dx + dy*dy`` into an FMA in one of
#: the two formulas (bound and distance) and not in the other.
_SLACK = 1.0 - 2.0**-17


def _hilbert_index(qx: jax.Array, qy: jax.Array, bits: int) -> jax.Array:
    """Hilbert-curve index of integer cell coordinates ``qx, qy`` in ``[0, 2**bits)``.

    Elementwise (any shape), int32, in ``[0, 4**bits)``: consecutive indices are
    neighbouring cells, so a run of consecutive agents is a compact patch of the plane.
    """
    n = 1 << bits
    d = jnp.zeros_like(qx)
    s = n >> 1
    while s > 0:  # static: `bits` steps
        rx = (qx & s) > 0
        ry = (qy & s) > 0
        d = d + s * s * ((3 * rx.astype(jnp.int32)) ^ ry.astype(jnp.int32))
        flip = ~ry & rx
        qx = jnp.where(flip, n - 1 - qx, qx)
        qy = jnp.where(flip, n - 1 - qy, qy)
        qx, qy = jnp.where(ry, qx, qy), jnp.where(ry, qy, qx)
        s >>= 1
    return d


def _packed_key_bits(m: int) -> tuple[int, int]:
    """``(id bits, Hilbert bits per axis)`` of the packed int32 curve keys for ``M``
    agents: the index in the low bits, at most `_HILBERT_BITS` per axis above it."""
    id_bits = max(1, (m - 1).bit_length())
    return id_bits, min(_HILBERT_BITS, (31 - id_bits) // 2)


def spatial_order(x: jax.Array, y: jax.Array) -> jax.Array:
    """Per env, a permutation of the agents along a Hilbert curve.

    Args:
      x, y: ``[N, M]`` float32 positions (finite).

    Returns:
      ``perm [N, M]`` int32: ``perm[n, p]`` is the agent at sorted position ``p``, by the
      Hilbert index of the positions quantised to ``2**B`` cells per axis over the
      env's bounding square (so the order adapts to clustered agents); equal keys keep
      index order. ``B`` is 15 with `SORT_KEYS` ``"argsort"``; ``"packed"`` sorts one
      int32 ``index · 2**b + agent`` per agent (``b`` bits for the agent ids, ``B =
      min(15, (31 − b) // 2)``: 10 at ``M = 1000``, 8 at 10,100), falling back to the
      argsort when ``B < 5``. Any permutation gives the same search results; this one
      makes runs of consecutive agents spatially compact, which is what makes the
      search fast.
    """
    if SORT_KEYS not in SORT_KEY_FORMS:
        raise ValueError(f"kernels.SORT_KEYS must be one of {SORT_KEY_FORMS}, got {SORT_KEYS!r}")
    m = x.shape[1]
    id_bits, bits = _packed_key_bits(m)
    packed = SORT_KEYS == "packed" and bits >= _MIN_PACKED_AXIS_BITS
    if not packed:
        bits = _HILBERT_BITS
    n_cells = 1 << bits
    x0 = jnp.min(x, axis=1, keepdims=True)  # [N, 1]
    y0 = jnp.min(y, axis=1, keepdims=True)
    ext = jnp.maximum(
        jnp.maximum(jnp.max(x, axis=1, keepdims=True) - x0, jnp.max(y, axis=1, keepdims=True) - y0),
        1e-30,
    )  # square cells

    def quantise(v, lo):
        q = jnp.floor((v - lo) * ((n_cells - 1) / ext))
        return jnp.clip(q, 0, n_cells - 1).astype(jnp.int32)

    key = _hilbert_index(quantise(x, x0), quantise(y, y0), bits)  # < 2**(2 bits)
    if packed:  # < 2**31: one operand to sort, ties by agent id as the stable argsort
        ids = jnp.arange(m, dtype=jnp.int32)[None, :]
        return jnp.sort((key << id_bits) | ids, axis=1) & jnp.int32((1 << id_bits) - 1)
    return jnp.argsort(key, axis=1, stable=True).astype(jnp.int32)


def _sorted_knn_kernel(
    cb_ref, xq_ref, yq_ref, qc_ref, xc_ref, yc_ref, oc_ref, bx0_ref, bx1_ref, by0_ref,
    by1_ref, pq_ref, xo_ref, yo_ref, *out_refs, k, m, bm, bc, unroll, nb, nc, tie_check,
    stats, order, ncp, key_bits, network="insert",
):  # fmt: skip
    """One env, ``BM`` consecutive sorted query rows (one per lane); chunk-pruned search.

    ``cb [NB + 1]`` int32: ``cb[b]`` in-game agents before query block ``b`` (the
    block's in-game queries are candidates ``cb[b] .. cb[b+1]-1``; ``cb[NB]`` all of
    them). ``xq/yq [BM]``: the block's query positions; ``qc [BM]`` int32: each query's
    candidate position (``-1`` out of the game). ``xc/yc [MP]``: candidate positions,
    in-game agents in curve order then ``+inf``; ``oc [MP]`` int32: their original
    indices. ``bx0/bx1/by0/by1 [NC]``: each chunk's bounding box (``+inf/-inf`` when
    empty). ``pq [BM]`` int32: each query's original index (``M`` for padding);
    ``xo/yo [MP]``: positions by original index (the packed search's re-sort). Writes
    the queries' lists of original indices (``-1`` = none) at their original rows of the
    env's row-major ``out [M·k]`` and, with ``stats``, ``visits [BM]`` (chunk visits,
    every lane the same).

    ``order``: after the block's own chunks, the others ``"curve"``: outward along the
    curve, each tested against the current bound; ``"best"``: by increasing box-to-box
    bound (all chunks' bounds computed at once; the next is the nearest unvisited one),
    stopping at the first whose bound exceeds every lane's k-th distance; ``"keyed"``:
    as ``"best"`` with each chunk's bound and index packed into one int32 key (the
    bound's bits, its low ``log2(NCP)`` bits replaced by the index), so one min-reduction
    per visit finds the next chunk and a lower bound of its bound (``"best"`` takes two).

    ``key_bits`` (when not 0): search with packed keys (`_packed_insert`, the original
    index in the low ``key_bits`` bits) and ``k + PACKED_EXTRA_SLOTS`` slots, re-sort
    them exactly, and search again with the ``(d, j)``-ordered insertion if some lane's
    result is still ambiguous (`_packed_lists`). ``network``: `PACKED_NETWORK`'s choice
    for the packed search (``"merge"``: each loop step's ``U`` keys at once).
    Otherwise ``tie_check``: search with the brute-force kernel's cheaper strict
    insertion and ``k + 1`` slots (exact unless two of a lane's ``k + 1`` best distances
    are equal), and search again with the ordered insertion if some lane has such a tie.
    """
    b = pl.program_id(1)
    xq = xq_ref[...]  # [BM]
    yq = yq_ref[...]  # [BM]
    qc = qc_ref[...]  # [BM]
    qx0, qx1 = jnp.min(xq), jnp.max(xq)  # the block's bounding box (scalars)
    qy0, qy1 = jnp.min(yq), jnp.max(yq)
    c_lo, c_hi = cb_ref[b], cb_ref[b + 1]
    own_lo = c_lo // bc  # chunks holding the block's in-game queries: own_lo..own_hi
    own_hi = jnp.where(c_hi > c_lo, (c_hi - 1) // bc, own_lo - 1)
    nc_in = (cb_ref[nb] + bc - 1) // bc  # chunks past these are empty
    steps = jnp.maximum(nc_in - 1 - own_hi, own_lo)

    def search(slots, mode):
        """Per lane the ``slots`` best candidates and the number of chunks visited.
        ``mode``: ``"lex"`` / ``"strict"`` (`insert` with or without ``lex``; lists
        ``(ld, lj)``, tuples of ``[BM]``) or ``"packed"`` (`_packed_insert`; a tuple of
        ``[BM]`` keys)."""
        if mode == "packed":
            low = (1 << key_bits) - 1

            def ins(lists, d, j):
                return _packed_insert(lists, d, j, key_bits)

            def last(lists):  # [BM]: no listed key's distance is above this
                key = lists[-1]
                top = lax.bitcast_convert_type(key | low, jnp.float32)
                return jnp.where(key >= _INF_KEY, _INF, top)

            init = tuple(jnp.full((bm,), _EMPTY_KEY, jnp.int32) for _ in range(slots))
        else:

            def ins(lists, d, j):
                return _insert_pair(*lists, d, j, mode == "lex")

            def last(lists):
                return lists[0][-1]

            init = (
                tuple(jnp.full((bm,), _INF, jnp.float32) for _ in range(slots)),
                tuple(jnp.full((bm,), -1, jnp.int32) for _ in range(slots)),
            )

        batched = mode == "packed" and network == "merge" and unroll > 1

        def visit(c, masked):
            def step(t, lists):
                keys = []
                for u in range(unroll):
                    p = c * bc + t * unroll + u  # candidate position
                    dx = xq - xc_ref[p]
                    dy = yq - yc_ref[p]
                    d = dx * dx + dy * dy  # [BM]
                    if masked:  # the pair (i, i)
                        d = jnp.where(qc == p, _INF, d)
                    if batched:
                        keys.append(_packed_key(d, oc_ref[p], key_bits))
                    else:
                        lists = ins(lists, d, oc_ref[p])
                return _packed_merge(lists, keys) if batched else lists

            def run(carry):
                lists, _, count = carry
                lists = lax.fori_loop(0, bc // unroll, step, lists)
                return lists, jnp.max(last(lists)), count + 1

            return run

        def consider(c, masked, carry):
            """Visits chunk ``c`` unless no lane can gain from it (or it is out of range)."""
            inside = (c >= 0) & (c < nc)
            cs = jnp.clip(c, 0, nc - 1)
            cx0, cx1, cy0, cy1 = bx0_ref[cs], bx1_ref[cs], by0_ref[cs], by1_ref[cs]
            # Box-to-box lower bound: every candidate of the chunk is at least this far
            # from every query of the block (float rounding is monotone; see _SLACK).
            gx = jnp.maximum(jnp.maximum(cx0 - qx1, qx0 - cx1), 0.0)
            gy = jnp.maximum(jnp.maximum(cy0 - qy1, qy0 - cy1), 0.0)
            bound = (gx * gx + gy * gy) * _SLACK
            worst = carry[1]  # max over lanes of the last slot (+inf: a list not full)
            # An empty chunk has bound +inf: skipped even while some list is not full.
            go = inside & (bound <= worst) & (bound < _INF)
            return lax.cond(go, lambda cr: per_lane(cs, masked, cr), lambda cr: cr, carry)

        def per_lane(c, masked, carry):
            """Visits chunk ``c`` if some lane's list may change (point-to-box bound)."""
            cx0, cx1, cy0, cy1 = bx0_ref[c], bx1_ref[c], by0_ref[c], by1_ref[c]
            lx = jnp.maximum(jnp.maximum(cx0 - xq, xq - cx1), 0.0)
            ly = jnp.maximum(jnp.maximum(cy0 - yq, yq - cy1), 0.0)
            need = (lx * lx + ly * ly) * _SLACK <= last(carry[0])
            any_need = jnp.max(jnp.where(need, 1, 0)) > 0
            return lax.cond(any_need, visit(c, masked), lambda cr: cr, carry)

        carry = (init, jnp.float32(_INF), jnp.int32(0))
        # The block's own chunks first (the only ones needing the self mask; none when
        # the block has no in-game query), then outward along the curve: near
        # neighbours come early and make the bounds tight.
        carry = lax.fori_loop(own_lo, own_hi + 1, lambda c, cr: consider(c, True, cr), carry)

        if order in ("best", "keyed"):
            ci = lax.broadcasted_iota(jnp.int32, (ncp,), 0)
            cs = jnp.minimum(ci, nc - 1)
            # Box-to-box bounds of all chunks (+inf: empty, the block's own, padding).
            gx = jnp.maximum(jnp.maximum(bx0_ref[cs] - qx1, qx0 - bx1_ref[cs]), 0.0)
            gy = jnp.maximum(jnp.maximum(by0_ref[cs] - qy1, qy0 - by1_ref[cs]), 0.0)
            skip = (ci >= nc_in) | ((ci >= own_lo) & (ci <= own_hi))
            bounds = jnp.where(skip, _INF, (gx * gx + gy * gy) * _SLACK)

            if order == "keyed":
                # One int32 key per chunk: the bound's bits (a float >= 0 orders like its
                # bits) with the low bits replaced by the chunk index, so one min gives the
                # nearest chunk and a lower bound of its bound (truncation only lowers it:
                # stopping when that exceeds the worst k-th distance stays exact).
                low = ncp - 1
                done = jnp.int32(0x7FFFFFFF)
                vals = jnp.where(
                    skip, done, (lax.bitcast_convert_type(bounds, jnp.int32) & ~low) | ci
                )

                def pick(v, vmin):
                    return vmin & low

                def bound_of(vmin):
                    lower = lax.bitcast_convert_type(vmin & ~low, jnp.float32)
                    return jnp.where(vmin < _INF_KEY, lower, _INF)

            else:  # "best": the bounds, then the lowest chunk index at the minimum
                done, vals = jnp.float32(_INF), bounds

                def pick(v, vmin):
                    return jnp.min(jnp.where(v == vmin, ci, ncp))

                def bound_of(vmin):
                    return vmin

            def more(state):  # the nearest unvisited box may still matter
                bound = bound_of(state[2])
                return (bound < _INF) & (bound <= state[0][1])

            def go(c, cr):
                if SORTED_LANE_TEST:
                    return per_lane(c, False, cr)
                return visit(c, False)(cr)

            def nearest(state):
                cr, v, vmin = state
                c = pick(v, vmin)
                if SORTED_PREPICK:  # the next pick's reduction before the visit's branch
                    v = jnp.where(ci == c, done, v)
                    vmin = jnp.min(v)
                    return go(c, cr), v, vmin
                cr = go(c, cr)
                v = jnp.where(ci == c, done, v)
                return cr, v, jnp.min(v)

            state = (carry, vals, jnp.min(vals))
            lists, _, count = lax.while_loop(more, nearest, state)[0]
            return lists, count

        def outward(s, cr):
            cr = consider(own_hi + s, False, cr)
            return consider(own_lo - s, False, cr)

        lists, _, count = lax.fori_loop(1, steps + 1, outward, carry)
        return lists, count

    def indices(lists):  # ``k`` slots of [BM] int32, -1 = none
        ld, lj = lists
        return tuple(jnp.where(ld[s] < _INF, lj[s], -1) for s in range(k))

    def exact():
        lists, count = search(k, "lex")
        return indices(lists), count

    real = b * bm + lax.broadcasted_iota(jnp.int32, (bm,), 0) < m  # not padding
    if key_bits:
        keys, count = search(k + PACKED_EXTRA_SLOTS, "packed")

        def dist(j):  # [BM] exact distances to the agents j [BM] (original indices)
            dx = xq - xo_ref[j]
            dy = yq - yo_ref[j]
            return dx * dx + dy * dy

        def again():
            lists, count2 = exact()
            return lists, count + count2

        packed, amb = _packed_lists(keys, k, key_bits, dist)
        if _SORTED_EXACT_FALLBACK:
            lists, count = lax.cond(_any(amb & real), again, lambda: (packed, count))
        else:
            lists = packed
    elif tie_check:
        (ld, lj), count = search(k + 1, "strict")
        tie = jnp.zeros((bm,), jnp.bool_)
        for s in range(k):
            tie = tie | ((ld[s] == ld[s + 1]) & (ld[s] < _INF))
        any_tie = jnp.max(jnp.where(tie & real, 1, 0)) > 0

        def again_lex():
            lists, count2 = exact()
            return lists, count + count2

        lists, count = lax.cond(any_tie, again_lex, lambda: (indices((ld[:k], lj[:k])), count))
    else:
        lists, count = exact()
    _store_lists(out_refs[0], pq_ref[...], lists, k, m)
    if stats:
        out_refs[1][...] = jnp.full((bm,), count, jnp.int32)


def sorted_inputs(
    x: jax.Array, y: jax.Array, in_game: jax.Array, bm: int, bc: int
) -> tuple[jax.Array, tuple[jax.Array, ...]]:
    """The sorted search's preparation in XLA: curve order, candidates, chunk boxes.

    Args:
      x, y: ``[N, M]`` float32 positions; in_game: ``[N, M]`` bool.
      bm, bc: query block ``BM`` and chunk ``BC`` sizes (powers of two).

    Returns:
      ``perm [N, M]`` int32 (the query order, `spatial_order`) and the kernel's inputs
      ``(cb [N, NB+1], xq, yq [N, MP], qc [N, MP], xc, yc [N, MP], oc [N, MP], bx0, bx1,
      by0, by1 [N, NC])`` with ``MP = M`` rounded up to ``max(BM, BC)``, ``NB = MP/BM``,
      ``NC = MP/BC`` (see `_sorted_knn_kernel`).
    """
    n, m = x.shape
    mp = _round_up(m, max(bm, bc))
    nb, nc = mp // bm, mp // bc
    rows = jnp.arange(n)[:, None]
    p = jnp.arange(m, dtype=jnp.int32)[None, :]
    # Queries: every agent, along the curve.
    perm = spatial_order(x, y)  # [N, M]
    xs = jnp.take_along_axis(x, perm, axis=1)
    ys = jnp.take_along_axis(y, perm, axis=1)
    gs = jnp.take_along_axis(in_game, perm, axis=1)
    # Candidates: the in-game agents in the same order (a stable partition), then the
    # others (at +inf). cpos [N, M]: the candidate position of sorted query p.
    before = jnp.cumsum(gs, axis=1, dtype=jnp.int32) - gs  # in-game agents before p
    num_in = before[:, -1:] + gs[:, -1:]  # [N, 1]
    cpos = jnp.where(gs, before, num_in + p - before)
    pad = ((0, 0), (0, mp - m))
    # Query padding repeats the last agent (keeps the last block's box unchanged).
    xq = jnp.pad(xs, pad, mode="edge")
    yq = jnp.pad(ys, pad, mode="edge")
    qc = jnp.pad(jnp.where(gs, cpos, -1), pad, constant_values=-1)
    cb = jnp.concatenate([before, num_in], axis=1)[:, ::bm]  # block starts
    cb = jnp.concatenate([cb, jnp.broadcast_to(num_in, (n, nb + 1 - cb.shape[1]))], axis=1)
    xc = jnp.full((n, mp), _INF, jnp.float32).at[rows, cpos].set(jnp.where(gs, xs, _INF))
    yc = jnp.full((n, mp), _INF, jnp.float32).at[rows, cpos].set(jnp.where(gs, ys, _INF))
    oc = jnp.full((n, mp), m, jnp.int32).at[rows, cpos].set(perm)
    xcb = xc.reshape(n, nc, bc)
    ycb = yc.reshape(n, nc, bc)
    real = jnp.isfinite(xcb)
    bx0 = jnp.min(xcb, axis=2)  # [N, NC]; +inf when empty
    bx1 = jnp.max(jnp.where(real, xcb, -_INF), axis=2)  # -inf when empty
    by0 = jnp.min(ycb, axis=2)
    by1 = jnp.max(jnp.where(real, ycb, -_INF), axis=2)
    return perm, (cb, xq, yq, qc, xc, yc, oc, bx0, bx1, by0, by1)


#: How the sorted search's inputs are prepared from the curve order: ``"pallas"`` (one
#: program per env, `_prep_kernel`, where ``next_pow2(MP) <= PREP_MAX_AGENTS``) or
#: ``"xla"`` (`sorted_inputs`: gathers, a cumsum, three scatters, pads and reductions,
#: about ten XLA kernels). Same values.
PREP_IMPLS = ("pallas", "xla")
PREP_IMPL = "pallas"
#: The Pallas preparation holds an env's padded agents in one ``[next_pow2(MP)]`` vector.
PREP_MAX_AGENTS = 4096


#: Where the Pallas preparation's curve order comes from: ``"xla"`` (`spatial_order`'s
#: sort) or ``"kernel"`` (`_radix_order` inside the preparation kernel: the same packed
#: keys, sorted by one-bit stable partitions).
PREP_SORTS = ("xla", "kernel")
PREP_SORT = "kernel"
#: Bits per axis of the in-kernel sort's Hilbert cells (``None``: `spatial_order`'s, so
#: the same order; fewer bits, fewer partition passes and a coarser order). H200,
#: 2000 × (5+995): 10 bits (20 passes) 1.0997, 5 bits 1.0599 ms per step (run 35).
PREP_SORT_BITS = 5
#: Triton warps of the Pallas preparation (``None``: ``max(1, min(8, next_pow2(MP) //
#: 256))``, 4 at ``M = 1000``).
PREP_WARPS: int | None = None
#: Probe-only ablation (`experiments.benchmarks.env_ab_probe`'s ``fallback=0``): the
#: sorted search without its exact re-search of ambiguous blocks (wrong lists where a
#: block's packed keys collide), to see what that branch costs in registers and time.
_SORTED_EXACT_FALLBACK = True


def _sort_bits(m: int) -> tuple[int, int]:
    """`_packed_key_bits` with the Hilbert bits capped at `PREP_SORT_BITS`."""
    id_bits, bits = _packed_key_bits(m)
    if PREP_SORT_BITS is not None:
        bits = max(1, min(bits, int(PREP_SORT_BITS)))
    return id_bits, bits


def _radix_order(x_ref, y_ref, bufs, *, m, p2, interpret):
    """In a preparation program: the curve order of its env's ``M`` agents, written to
    ``bufs[1]`` (``[P]`` int32 packed keys, agent id in the low bits; the passes are an
    even number, alternating ``bufs[0]``, ``bufs[1]``), which it returns.

    The keys are `spatial_order`'s packed ones (Hilbert index of the quantised position
    over the env's bounding square, then the agent id); an LSD radix sort of their key
    bits, one bit per pass (a cumsum gives each lane its place in the stable partition,
    a scatter into the next buffer and a barrier, then every lane reads its new value),
    leaves them sorted by ``(Hilbert index, id)``. Lanes past ``M`` carry the largest key,
    so they stay last.
    """
    id_bits, bits = _sort_bits(m)
    p = lax.broadcasted_iota(jnp.int32, (p2,), 0)
    real = p < m
    own = jnp.minimum(p, m - 1)
    x, y = x_ref[own], y_ref[own]
    x0 = jnp.min(jnp.where(real, x, _INF))
    y0 = jnp.min(jnp.where(real, y, _INF))
    wx = jnp.max(jnp.where(real, x, -_INF)) - x0
    wy = jnp.max(jnp.where(real, y, -_INF)) - y0
    ext = jnp.maximum(jnp.maximum(wx, wy), jnp.float32(1e-30))  # square cells
    n_cells = 1 << bits
    if interpret:
        scale = jnp.float32(n_cells - 1) / ext
    else:  # IEEE division, as XLA's
        scale = _div_rn(jnp.full((1,), n_cells - 1, jnp.float32), jnp.reshape(ext, (1,)))[0]

    def quantise(v, lo):
        q = jnp.floor((v - lo) * scale)
        return jnp.clip(q, 0, n_cells - 1).astype(jnp.int32)

    key = _hilbert_index(quantise(x, x0), quantise(y, y0), bits)
    top = ((1 << (2 * bits)) - 1) << id_bits | ((1 << id_bits) - 1)
    packed = jnp.where(real, (key << id_bits) | p, top)
    _radix_passes(packed, bufs, id_bits, 2 * bits, interpret=interpret)
    return bufs[1]


def _radix_passes(packed, bufs, lo: int, nbits: int, *, interpret: bool):
    """Sorts the ``[P]`` int32 keys ``packed`` (one per lane, non-negative) stably by
    their bits ``lo .. lo + nbits - 1``: an LSD radix sort, one bit per pass (a cumsum
    gives each lane its place in the stable partition, a scatter into the other of the
    two ``[P]`` int32 ``bufs`` and a barrier, then every lane reads its new value).
    ``nbits`` must be even (the result lands in ``bufs[1]``); returns it as ``[P]``."""
    if nbits % 2:
        raise ValueError(f"_radix_passes needs an even number of bits, got {nbits}")
    p = lax.broadcasted_iota(jnp.int32, packed.shape, 0)
    for t, d in enumerate(range(lo, lo + nbits)):
        one = (packed >> d) & 1
        zero = 1 - one
        before = jnp.cumsum(zero) - zero  # zeros before lane p
        pos = jnp.where(one == 0, before, jnp.sum(zero) + p - before)
        buf = bufs[t % 2]
        pl_triton.store(buf.at[pos], packed)
        if not interpret:
            pl_triton.debug_barrier()
        packed = buf[p]
    return packed


def _prep_kernel(*refs, m, mp, bm, bc, interpret, sort_in_kernel):  # fmt: skip
    """One env's `sorted_inputs` (the same values) and the kernel's ``pq, xo, yo``.

    ``perm [M]`` int32 (the curve order; absent with ``sort_in_kernel``, which computes
    it with `_radix_order` in two extra ``[P]`` int32 outputs), ``x, y [M]`` float32,
    ``g [M]`` int32 (in the game: 1). Writes ``cb [NB+1]``, ``xq, yq, qc, xc, yc, oc, pq,
    xo, yo [MP]`` and the chunk boxes ``[NC]`` (see `_sorted_knn_kernel`). Works on ``P
    = next_pow2(MP)`` lanes: sorted position ``p`` gathers its agent, an exclusive
    cumsum of the in-game flags gives each in-game agent's candidate position (the
    stable partition), the candidates are scattered there, and after a barrier the
    program reads them back in chunks of ``BC`` for the boxes.
    """
    p2 = _next_pow2(mp)
    if sort_in_kernel:
        x_ref, y_ref, g_ref, *outs = refs
        bufs = outs[-2:]
        last = _radix_order(x_ref, y_ref, bufs, m=m, p2=p2, interpret=interpret)
        id_mask = (1 << _sort_bits(m)[0]) - 1

        def perm_at(i):
            return last[i] & id_mask

    else:
        perm_ref, x_ref, y_ref, g_ref, *outs = refs

        def perm_at(i):
            return perm_ref[i]

    (cb_ref, xq_ref, yq_ref, qc_ref, xc_ref, yc_ref, oc_ref, bx0_ref, bx1_ref, by0_ref,
     by1_ref, pq_ref, xo_ref, yo_ref) = outs[:14]  # fmt: skip
    p = lax.broadcasted_iota(jnp.int32, (p2,), 0)
    inside = p < mp
    real = p < m
    own = jnp.minimum(p, m - 1)
    agent = perm_at(own)  # padding repeats the last sorted agent
    xs = x_ref[agent]
    ys = y_ref[agent]
    gs = real & (g_ref[agent] != 0)
    gi = gs.astype(jnp.int32)
    before = jnp.cumsum(gi) - gi  # in-game agents before sorted position p
    num_in = jnp.sum(gi)
    cpos = jnp.where(gs, before, num_in + p - before)

    # Masked lanes (p >= MP) keep their own index past the end: interpret mode's masked
    # scatter writes back what it read at every index, so none may share a real one.
    def put(ref, val, at=None):
        idx = p if at is None else jnp.where(inside, at, p)
        pl_triton.store(ref.at[idx], val, mask=inside)

    put(xq_ref, xs)
    put(yq_ref, ys)
    put(qc_ref, jnp.where(gs, cpos, -1))
    put(pq_ref, jnp.where(real, agent, m))
    put(xo_ref, jnp.where(real, x_ref[own], jnp.float32(0.0)))
    put(yo_ref, jnp.where(real, y_ref[own], jnp.float32(0.0)))
    dst = jnp.where(real, cpos, p)  # a permutation of 0 .. MP-1
    put(xc_ref, jnp.where(gs, xs, _INF), dst)
    put(yc_ref, jnp.where(gs, ys, _INF), dst)
    put(oc_ref, jnp.where(real, agent, m), dst)
    # Block starts: in-game agents before each block of BM sorted positions.
    nb, nbp = mp // bm, p2 // bm
    counts = jnp.sum(gi.reshape(nbp, bm), axis=1)  # [NBP]
    ends = jnp.cumsum(counts)  # cb[b + 1]
    b = lax.broadcasted_iota(jnp.int32, (nbp,), 0)
    pl_triton.store(cb_ref.at[b + 1], ends, mask=b < nb)
    pl_triton.store(cb_ref.at[b], jnp.zeros((nbp,), jnp.int32), mask=b == 0)
    # Chunk boxes, from the candidates as written (+inf / -inf when a chunk is empty).
    if not interpret:
        pl_triton.debug_barrier()  # the scatters above, visible to every lane
    nc, ncp = mp // bc, p2 // bc
    c = lax.broadcasted_iota(jnp.int32, (ncp,), 0)
    for src, lo_ref, hi_ref in ((xc_ref, bx0_ref, bx1_ref), (yc_ref, by0_ref, by1_ref)):
        v = pl_triton.load(src.at[jnp.minimum(p, mp - 1)], mask=inside, other=_INF)
        v = v.reshape(ncp, bc)
        lo = jnp.min(v, axis=1)
        hi = jnp.max(jnp.where(v < _INF, v, -_INF), axis=1)
        pl_triton.store(lo_ref.at[c], lo, mask=c < nc)
        pl_triton.store(hi_ref.at[c], hi, mask=c < nc)


def _prep_pallas(x, y, in_game, perm, bm: int, bc: int, interpret: bool):
    """`sorted_inputs`' kernel inputs from the curve order ``perm [N, M]`` (``None``:
    sorted in the kernel, `_radix_order`) by `_prep_kernel`, plus ``pq, xo, yo [N, MP]``
    (the search's last three inputs)."""
    n, m = x.shape
    mp = _round_up(m, max(bm, bc))
    nb, nc = mp // bm, mp // bc
    row = lambda length: pl.BlockSpec((None, length), lambda e: (e, 0))
    f32 = lambda length: jax.ShapeDtypeStruct((n, length), jnp.float32)
    i32 = lambda length: jax.ShapeDtypeStruct((n, length), jnp.int32)
    shapes = (
        i32(nb + 1), f32(mp), f32(mp), i32(mp), f32(mp), f32(mp), i32(mp),
        f32(nc), f32(nc), f32(nc), f32(nc), i32(mp), f32(mp), f32(mp),
    )  # fmt: skip
    p2 = _next_pow2(mp)
    sort = perm is None
    if sort:
        shapes = (*shapes, i32(p2), i32(p2))  # the in-kernel sort's two buffers
    inputs = ([] if sort else [perm]) + [x, y, in_game.astype(jnp.int32)]
    kernel = functools.partial(
        _prep_kernel, m=m, mp=mp, bm=bm, bc=bc, interpret=interpret, sort_in_kernel=sort
    )
    outs = pl.pallas_call(
        kernel,
        out_shape=shapes,
        grid=(n,),
        in_specs=[row(m)] * len(inputs),
        out_specs=tuple(row(sh.shape[1]) for sh in shapes),
        compiler_params=pl_triton.CompilerParams(
            num_warps=max(1, min(8, p2 // 256)) if PREP_WARPS is None else int(PREP_WARPS)
        ),
        interpret=interpret,
        name="tag_nearest_k_prep",
    )(*inputs)
    return outs[:11], outs[11:14]


def _sorted_knn_call(
    x, y, in_game, k, *, bm, bc, u, tie_check, num_warps, num_stages, interpret, stats,
    order, packed_keys=None,
):  # fmt: skip
    """Prepare, then the kernel. Returns ``out [N, M, k]`` (-1 = none) and, with
    ``stats``, ``pairs [N]`` (pairs streamed over ``M²``)."""
    n, m = x.shape
    mp = _round_up(m, max(bm, bc))
    nb, nc = mp // bm, mp // bc
    if PREP_IMPL not in PREP_IMPLS:
        raise ValueError(f"kernels.PREP_IMPL must be one of {PREP_IMPLS}, got {PREP_IMPL!r}")
    if PREP_IMPL == "pallas" and _next_pow2(mp) <= PREP_MAX_AGENTS:
        if PREP_SORT not in PREP_SORTS:
            raise ValueError(f"kernels.PREP_SORT must be one of {PREP_SORTS}, got {PREP_SORT!r}")
        perm = None if PREP_SORT == "kernel" else spatial_order(x, y)
        inputs, extra = _prep_pallas(x, y, in_game, perm, bm, bc, interpret)
    else:
        perm, inputs = sorted_inputs(x, y, in_game, bm, bc)
        extra = (
            jnp.pad(perm, ((0, 0), (0, mp - m)), constant_values=m),
            jnp.pad(x, ((0, 0), (0, mp - m))),
            jnp.pad(y, ((0, 0), (0, mp - m))),
        )
    kernel = functools.partial(
        _sorted_knn_kernel,
        k=k,
        m=m,
        bm=bm,
        bc=bc,
        unroll=u,
        nb=nb,
        nc=nc,
        tie_check=tie_check,
        stats=stats,
        order=order,
        ncp=_next_pow2(nc),
        key_bits=_key_bits(packed_keys, m),
        network=_check_network(PACKED_NETWORK),
    )
    # The kernel writes each list at its agent's row: no un-sorting pass afterwards.
    out_shape = [jax.ShapeDtypeStruct((n, m * k), jnp.int32)]
    out_specs = [pl.BlockSpec((None, m * k), lambda e, b: (e, 0))]
    if stats:
        out_shape.append(jax.ShapeDtypeStruct((n, mp), jnp.int32))
        out_specs.append(pl.BlockSpec((None, bm), lambda e, b: (e, b)))
    query_spec = pl.BlockSpec((None, bm), lambda e, b: (e, b))
    cand_spec = pl.BlockSpec((None, mp), lambda e, b: (e, 0))
    box_spec = pl.BlockSpec((None, nc), lambda e, b: (e, 0))
    outs = pl.pallas_call(
        kernel,
        out_shape=tuple(out_shape),
        grid=(n, nb),
        in_specs=[pl.BlockSpec((None, nb + 1), lambda e, b: (e, 0))]
        + [query_spec] * 3
        + [cand_spec] * 3
        + [box_spec] * 4
        + [query_spec]
        + [cand_spec] * 2,
        out_specs=tuple(out_specs),
        compiler_params=_compiler_params(num_warps, num_stages, bm),
        # Typical: ~15% of the pairs at ~8 + 5(k+1) simple ops.
        cost_estimate=pl.CostEstimate(
            flops=int(n * mp * mp * (13 + 5 * k) // 6),
            transcendentals=0,
            bytes_accessed=int(4 * n * (3 * mp + 3 * mp * nb // 6 + k * mp)),
        ),
        interpret=interpret,
        name="tag_nearest_k_sorted",
    )(*inputs, *extra)
    out = outs[0].reshape(n, m, k)  # agent order
    if stats:
        visits = jnp.sum(outs[1][:, ::bm], axis=1).astype(jnp.float32)  # [N]
        return out, visits * (bm * bc / (m * m))
    return out


def nearest_k_sorted_batched(
    x: jax.Array,
    y: jax.Array,
    in_game: jax.Array,
    k: int,
    *,
    block_rows: int | None = None,
    chunk_size: int | None = None,
    block_cols: int | None = None,
    tie_check: bool = True,
    num_warps: int | None = None,
    num_stages: int | None = None,
    interpret: bool | None = None,
    chunk_order: str | None = None,
    packed_keys: bool | None = None,
) -> tuple[jax.Array, jax.Array]:
    """`nearest_k_batched` by an exact, spatially pruned search (fast for large ``M``).

    Same results as the brute-force kernel and `neighbors.nearest_k`, bit for bit (given
    the same float32 ``dx*dx + dy*dy``; see the module doc on FMA contraction).

    How: per env the agents are sorted along a Hilbert curve (`spatial_order`), so runs
    of consecutive agents are compact patches of the plane. Queries are all agents in
    that order; candidates are the in-game agents in the same order, cut into chunks of
    ``BC``, each with its bounding box. A program takes ``BM`` consecutive queries (one
    per lane, as in the brute-force kernel), visits the chunks holding its own queries,
    then the others by increasing squared box-to-box distance from the block's bounding
    box (``chunk_order="best"`` or ``"keyed"``, the default: all chunks' bounds
    computed at once, the loop stops at the first one beyond the block's current worst
    ``k``-th distance, max over lanes, ``+inf`` while a list is not full) or outward
    along the curve, testing
    each (``"curve"``). A chunk is also skipped when for every lane the squared distance
    from its point to the chunk's box exceeds that lane's ``k``-th distance. A visited
    chunk is streamed into per-lane sorted lists like the brute-force kernel does; each
    list is written at its agent's row.

    Ties: candidates no longer arrive in index order, so the insertion must order by
    ``(distance, original index)``. With ``tie_check`` (default) the search first runs
    with the brute-force kernel's cheaper strict insertion and ``k + 1`` slots: that
    list is exact unless two of a lane's ``k + 1`` best distances are equal (the
    ``k + 1``-th slot is what catches a tie at the ``k``-th place); a block where some
    lane has such a tie is searched again with the ``(d, j)``-ordered insertion (on
    continuous positions a handful of blocks per million; always on lattice ones).
    Without it, every search uses the ordered insertion (about 40% more work per pair).

    Why exact: float32 rounding is monotone, so a bound computed from the boxes is never
    above the float32 distance of a query/candidate pair it covers (a slack of
    ~``2**-17`` relative covers an FMA contraction in one formula and not the other); a
    skipped candidate is strictly farther than the lane's last kept entry and could not
    have entered its list. Lists only improve, so testing against an older bound is
    conservative. The self pair is masked by candidate position, in the block's own
    chunks only (the only ones holding it).

    Cost: the preparation (sort, partition, boxes: one Pallas program per env up to
    `PREP_MAX_AGENTS`, `_prep_kernel`, else XLA's sort and gathers), ``O(M log M)`` per
    env; in the kernel,
    ``O(NC)`` scalar box tests per block (``NC = M / BC``) and ``f·M²`` pairs at about
    ``8 + 5(k+1)`` simple ops (``8 + 8k`` without ``tie_check``), where ``f`` is the
    visited fraction of (block, chunk) pairs. For uniform agents ``f`` is about the area
    of a block's patch grown by the ``k``-th neighbour radius and by a chunk's patch,
    over the whole area. Measured in interpret mode (`sorted_search_stats`, pairs
    streamed over ``M²``) at 1000 agents in a 20 x 20 square, ``k = 10``: 0.16 (``BM =
    32, BC = 16``), 0.13 (32, 8), 0.21 (32, 32), 0.21 (64, 16); 0.15 for (32, 16)
    without ``tie_check`` (``k`` slots prune a little tighter than ``k + 1``); agents
    out of the game only thin the candidates. At a fixed block size ``f`` falls like
    ``1/M``. Clustered agents cost the same (the curve adapts to the bounding square);
    fewer than ``k + 1`` candidates make ``f = 1``. Memory: ``O(M·k)`` per env (nothing
    ``[M, M]`` nor ``[blocks, chunks]``).

    Args:
      x, y: ``[N, M]`` float32 positions (finite).
      in_game: ``[N, M]`` bool; only agents with ``in_game[n, j]`` are candidates.
      k: neighbours per agent (static), ``k >= 1``.
      block_rows: query rows per program ``BM``, one per lane (power of two; default
        ``min(SORTED_BLOCK_ROWS, next_pow2(M))``).
      chunk_size: candidates per chunk ``BC`` (power of two; default
        ``min(CHUNK_SIZE, next_pow2(M))``).
      block_cols: candidates per unrolled loop step ``U`` inside a chunk (power of two,
        at most ``BC``; default ``min(SORTED_UNROLL, BC)`` compiled, 1 in interpret mode).
      tie_check: strict insertion with a tie check and an ordered re-search (see
        above); ``False``: ordered insertion throughout. Same results.
      num_warps, num_stages, interpret: as `nearest_k_brute_batched`.
      chunk_order: after the query block's own chunks, visit the others ``"curve"``
        (outward along the curve, each tested against the block's current bound) or
        ``"best"`` (nearest box first, stopping at the first too far for every lane)
        or ``"keyed"`` (the same order, bound and index in one key: one reduction per
        visit);
        ``None``: `CHUNK_ORDER`. Same results.
      packed_keys: as `nearest_k_brute_batched` (the packed keys hold original indices;
        an ambiguous block is searched again with the ordered insertion, and
        ``tie_check`` then does not apply). Same results.

    Returns:
      ``idx [N, M, k]`` int32 and ``valid [N, M, k]`` bool, as `nearest_k` per env.
    """
    out = _sorted_search(
        x, y, in_game, k,
        block_rows=block_rows, chunk_size=chunk_size, block_cols=block_cols,
        tie_check=tie_check, num_warps=num_warps, num_stages=num_stages,
        interpret=interpret, stats=False, chunk_order=chunk_order, packed_keys=packed_keys,
    )  # fmt: skip
    return _finish(out)


def sorted_search_stats(
    x: jax.Array,
    y: jax.Array,
    in_game: jax.Array,
    k: int,
    **options: Any,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`nearest_k_sorted_batched` plus how much work it did.

    Args:
      x, y, in_game, k: as `nearest_k_sorted_batched`; options: its keyword options.

    Returns:
      ``idx [N, M, k]``, ``valid [N, M, k]`` as `nearest_k_sorted_batched`, and
      ``pairs [N]`` float32: query/candidate pairs streamed over ``M²`` (the
      brute-force kernel's figure is about 1; re-searches after a tie count again).
    """
    out, pairs = _sorted_search(x, y, in_game, k, stats=True, **options)
    idx, valid = _finish(out)
    return idx, valid, pairs


def _finish(out: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``out [N, M, k]`` (-1 = none) -> ``(idx, valid)`` with ``idx = i`` padding."""
    valid = out >= 0
    self_idx = jnp.arange(out.shape[1], dtype=jnp.int32)[None, :, None]
    return jnp.where(valid, out, self_idx), valid


def _sorted_search(
    x, y, in_game, k, *, block_rows=None, chunk_size=None, block_cols=None,
    tie_check=True, num_warps=None, num_stages=None, interpret=None, stats=False,
    chunk_order=None, packed_keys=None,
):  # fmt: skip
    k, x, y, in_game = _check_batched_inputs(x, y, in_game, k)
    order = CHUNK_ORDER if chunk_order is None else chunk_order
    if order not in CHUNK_ORDERS:
        raise ValueError(f"chunk_order must be one of {CHUNK_ORDERS}, got {order!r}")
    m = x.shape[1]
    interpret = _resolve_interpret(interpret)
    bm = _check_block(
        "block_rows", min(SORTED_BLOCK_ROWS, _next_pow2(m)) if block_rows is None else block_rows
    )
    bc = _check_block(
        "chunk_size", min(CHUNK_SIZE, _next_pow2(m)) if chunk_size is None else chunk_size
    )
    default_u = 1 if interpret else min(SORTED_UNROLL, bc)
    u = _check_block("block_cols", default_u if block_cols is None else block_cols)
    if u > bc:
        raise ValueError(f"block_cols ({u}) must be at most chunk_size ({bc})")
    return _sorted_knn_call(
        x, y, in_game, k, bm=bm, bc=bc, u=u, tie_check=bool(tie_check), num_warps=num_warps,
        num_stages=num_stages, interpret=interpret, stats=stats, order=order,
        packed_keys=packed_keys,
    )  # fmt: skip


# ------------------------------------------------------------------------- nearest_tagger
def _nearest_tagger_kernel(xr_ref, yr_ref, xt_ref, yt_ref, idx_ref, d2_ref, *, br, unroll, tp):
    """One env, ``BR`` runners (one per lane); writes ``idx [BR]`` int32, ``d2 [BR]`` f32.

    Taggers are streamed in increasing index order; the strict ``<`` keeps the earlier
    (lower-index) tagger on ties. Padded taggers sit at ``+inf``.
    """
    xr = xr_ref[...]  # [BR]
    yr = yr_ref[...]  # [BR]

    def step(c, carry):
        best_d, best_j = carry
        for u in range(unroll):
            j = c * unroll + u
            dx = xr - xt_ref[j]
            dy = yr - yt_ref[j]
            d = dx * dx + dy * dy  # [BR]
            better = d < best_d
            best_d = jnp.where(better, d, best_d)
            best_j = jnp.where(better, j, best_j)
        return best_d, best_j

    init = (jnp.full((br,), _INF, jnp.float32), jnp.zeros((br,), jnp.int32))
    best_d, best_j = lax.fori_loop(0, tp // unroll, step, init)
    idx_ref[...] = best_j
    d2_ref[...] = best_d


def nearest_tagger_batched(
    x_r: jax.Array,
    y_r: jax.Array,
    x_t: jax.Array,
    y_t: jax.Array,
    *,
    block_rows: int | None = None,
    block_cols: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    interpret: bool | None = None,
) -> tuple[jax.Array, jax.Array]:
    """`nearest_tagger` for ``N`` envs at once, the env axis in the kernel's grid.

    Args:
      x_r, y_r: ``[N, R]`` float32 runner positions (finite).
      x_t, y_t: ``[N, T]`` float32 tagger positions (finite), ``T >= 1``.
      block_rows: runners per program ``BR``, one per lane (power of two; default
        ``min(128, next_pow2(R))``).
      block_cols: taggers per loop step, unrolled (power of two; default
        ``min(8, next_pow2(T))``).
      num_warps, num_stages, interpret: as `nearest_k_batched`.

    Returns:
      ``idx [N, R]`` int32 (index into the tagger arrays) and ``dist2 [N, R]`` float32.
    """
    x_r = jnp.asarray(x_r, jnp.float32)
    y_r = jnp.asarray(y_r, jnp.float32)
    x_t = jnp.asarray(x_t, jnp.float32)
    y_t = jnp.asarray(y_t, jnp.float32)
    if x_r.ndim != 2 or y_r.shape != x_r.shape:
        raise ValueError(
            f"nearest_tagger_batched needs x_r, y_r of one shape [N, R], got "
            f"{x_r.shape}, {y_r.shape}"
        )
    if x_t.ndim != 2 or y_t.shape != x_t.shape or x_t.shape[0] != x_r.shape[0]:
        raise ValueError(
            f"nearest_tagger_batched needs x_t, y_t of one shape [N, T] with the runners' N, "
            f"got {x_t.shape}, {y_t.shape} for runners {x_r.shape}"
        )
    n, r = x_r.shape
    t = x_t.shape[1]
    if t < 1:
        raise ValueError("nearest_tagger needs at least one tagger")
    if r < 1:
        raise ValueError("nearest_tagger needs at least one runner")
    br = _check_block("block_rows", min(128, _next_pow2(r)) if block_rows is None else block_rows)
    bt = _check_block("block_cols", min(8, _next_pow2(t)) if block_cols is None else block_cols)
    rp, tp = _round_up(r, br), _round_up(t, bt)
    xr = jnp.pad(x_r, ((0, 0), (0, rp - r)))
    yr = jnp.pad(y_r, ((0, 0), (0, rp - r)))
    xt = jnp.pad(x_t, ((0, 0), (0, tp - t)), constant_values=_INF)
    yt = jnp.pad(y_t, ((0, 0), (0, tp - t)), constant_values=_INF)

    kernel = functools.partial(_nearest_tagger_kernel, br=br, unroll=bt, tp=tp)
    idx, d2 = pl.pallas_call(
        kernel,
        out_shape=(
            jax.ShapeDtypeStruct((n, rp), jnp.int32),
            jax.ShapeDtypeStruct((n, rp), jnp.float32),
        ),
        grid=(n, rp // br),
        in_specs=[
            pl.BlockSpec((None, br), lambda e, b: (e, b)),
            pl.BlockSpec((None, br), lambda e, b: (e, b)),
            pl.BlockSpec((None, tp), lambda e, b: (e, 0)),
            pl.BlockSpec((None, tp), lambda e, b: (e, 0)),
        ],
        out_specs=(
            pl.BlockSpec((None, br), lambda e, b: (e, b)),
            pl.BlockSpec((None, br), lambda e, b: (e, b)),
        ),
        compiler_params=_compiler_params(num_warps, num_stages, br),
        cost_estimate=pl.CostEstimate(
            flops=int(n * rp * tp * 7),
            transcendentals=0,
            bytes_accessed=int(4 * n * (4 * rp + 2 * tp * (rp // br))),
        ),
        interpret=_resolve_interpret(interpret),
        name="tag_nearest_tagger",
    )(xr, yr, xt, yt)
    return idx[:, :r], d2[:, :r]


def nearest_tagger(
    x_r: jax.Array,
    y_r: jax.Array,
    x_t: jax.Array,
    y_t: jax.Array,
    *,
    block_rows: int | None = None,
    block_cols: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    interpret: bool | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The nearest tagger of every runner of one env.

    Args:
      x_r, y_r: ``[R]`` float32 runner positions (finite).
      x_t, y_t: ``[T]`` float32 tagger positions (finite), ``T >= 1``.
      block_rows, block_cols, num_warps, num_stages, interpret: as
        `nearest_tagger_batched`.

    Returns:
      ``idx [R]`` int32, the index (into the tagger arrays) of the tagger at the least
      ``dx*dx + dy*dy`` (float32), lowest index on ties; ``dist2 [R]`` float32, that
      squared distance. Works under `jax.vmap` (Pallas adds a grid axis).
    """
    x_r = jnp.asarray(x_r, jnp.float32)
    y_r = jnp.asarray(y_r, jnp.float32)
    x_t = jnp.asarray(x_t, jnp.float32)
    y_t = jnp.asarray(y_t, jnp.float32)
    if x_r.ndim != 1 or y_r.shape != x_r.shape or x_t.ndim != 1 or y_t.shape != x_t.shape:
        raise ValueError(
            "nearest_tagger needs x_r, y_r of one shape [R] and x_t, y_t of one shape [T], "
            f"got {x_r.shape}, {y_r.shape}, {x_t.shape}, {y_t.shape}"
        )
    idx, d2 = nearest_tagger_batched(
        x_r[None],
        y_r[None],
        x_t[None],
        y_t[None],
        block_rows=block_rows,
        block_cols=block_cols,
        num_warps=num_warps,
        num_stages=num_stages,
        interpret=interpret,
    )
    return idx[0], d2[0]
