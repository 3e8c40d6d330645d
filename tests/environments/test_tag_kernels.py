"""The k-nearest Pallas searches (`environments.tag_continuous.kernels`) against references.

Every search runs in Pallas interpret mode on the CPU and must equal the plain-JAX
reference `neighbors.nearest_k` bit for bit (indices, validity, padding), which is itself
checked against a brute-force NumPy search. One batch of states serves every check:
uniform and clustered positions, exact ties (coarse lattices, duplicated positions,
everyone at one point), near-ties one float32 ulp apart, agents piled on walls, agents
out of the game (random, all but three: fewer than ``k`` candidates, none left), with
``M`` not a multiple of any block size. Each search configuration is compiled once
(interpret mode compiles slowly, runs fast) and covers both the interpret-mode default
and the compiled path's loop structure (unrolled steps through the merge network, the
split self range, exact lists instead of packed keys). The Triton lowering of every
search is checked without a GPU (`jax.stages.Traced.lower` for ``cuda``).
"""

from __future__ import annotations

import doctest
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from environments.tag_continuous import neighbors
from environments.tag_continuous.kernels import brute, grid, search
from environments.tag_continuous.kernels import sorted as sorted_search

# The searches' lists equal the module's compiled reference's exactly: both compiled as
# XLA does by default (unoptimised forms can round a distance differently).
pytestmark = pytest.mark.xla_optimized
M, K = 90, 6
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
    "ulp_line",
    "walls",
)
#: Kinds whose distances are exact in float32 (NumPy agrees bit for bit).
EXACT_KINDS = ("lattice", "lattice_out", "one_point", "out_all")


def make_states(m: int, kinds=KINDS, seed: int = 0, length: float = 20.0):
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
        elif kind == "ulp_line":  # neighbours' distances one or two ulps apart
            base = np.sort(rng.uniform(1.0, 2.0, m - m // 2)).astype(np.float32)
            nudged = np.nextafter(base, np.float32(3.0))[: m // 2]
            x = np.concatenate([base, nudged])[rng.permutation(m)]
            y = np.zeros(m)
        elif kind == "walls":  # agents clipped onto the square's edges
            x = np.clip(rng.uniform(-8, length + 8, m), 0, length)
            y = np.clip(rng.uniform(-8, length + 8, m), 0, length)
        xs.append(np.asarray(x, np.float32))
        ys.append(np.asarray(y, np.float32))
        gs.append(g)
    return np.stack(xs), np.stack(ys), np.stack(gs)


def np_nearest_k(x, y, in_game, k):
    """Brute force for one env in NumPy: ``idx [M, k]`` (pad: ``i``), ``valid [M, k]``."""
    m = x.shape[0]
    idx = np.repeat(np.arange(m, dtype=np.int32)[:, None], k, axis=1)
    valid = np.zeros((m, k), bool)
    for i in range(m):
        cand = np.array([j for j in range(m) if j != i and in_game[j]], np.int64)
        d = (x[i] - x[cand]) ** 2 + (y[i] - y[cand]) ** 2  # float32
        order = sorted(range(len(cand)), key=lambda t: (d[t], cand[t]))[:k]
        idx[i, : len(order)] = cand[order]
        valid[i, : len(order)] = True
    return idx, valid


@functools.cache
def reference(k: int):
    """`neighbors.nearest_k` vmapped and jitted: ``(x, y, g) -> (idx, valid)``."""
    return jax.jit(jax.vmap(functools.partial(neighbors.nearest_k, k=k)))


def ref_lists(x, y, g, k: int) -> np.ndarray:
    """The reference's lists ``[N, M, k]``, ``-1`` where not valid."""
    idx, valid = reference(k)(x, y, g)
    return np.where(np.asarray(valid), np.asarray(idx), -1)


def assert_lists(got, want, kinds=KINDS, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == np.int32, (got.shape, got.dtype)
    for e, kind in enumerate(kinds):
        np.testing.assert_array_equal(got[e], want[e], err_msg=f"{what}: {kind} (env {e})")


@pytest.fixture(scope="module")
def states():
    x, y, g = make_states(M)
    return x, y, g, ref_lists(x, y, g, K)


def test_reference_matches_numpy_brute_force(states):
    """The plain-JAX reference, rows in one block or several, against NumPy: equal where
    distances are exact, and a differing index elsewhere only at a near-tie (a compiler
    may contract ``dx*dx + dy*dy`` into an FMA, moving a distance by an ulp)."""
    x, y, g, want = states
    blocked = jax.jit(jax.vmap(functools.partial(neighbors.nearest_k, k=K, block_rows=16)))
    idx, valid = blocked(x, y, g)  # rows in blocks (lax.map), as for large M
    np.testing.assert_array_equal(np.where(np.asarray(valid), np.asarray(idx), -1), want)
    for e, kind in enumerate(KINDS):
        idx, valid = np_nearest_k(x[e], y[e], g[e], K)
        np.testing.assert_array_equal(want[e] >= 0, valid, err_msg=kind)
        diff = valid & (want[e] != idx)
        if kind in EXACT_KINDS:
            assert not diff.any(), kind
        rows = np.nonzero(diff)[0]
        d = lambda j: (
            (x[e][rows].astype(np.float64) - x[e][j]) ** 2
            + (y[e][rows].astype(np.float64) - y[e][j]) ** 2
        )
        np.testing.assert_allclose(d(want[e][diff]), d(idx[diff]), rtol=1e-5, err_msg=kind)


def _brute_padded(x, y, g):
    """The brute-force search from inputs padded as `brute_padding` says (queries anything
    past ``M``, candidates ``+inf`` out of the game and past ``M``), as the batched env
    step hands them over."""
    mq, mc = search.brute_padding(M)
    pad = lambda a, n, v: jnp.pad(a, ((0, 0), (0, n - M)), constant_values=v)
    xc, yc = jnp.where(g, x, jnp.inf), jnp.where(g, y, jnp.inf)
    return search.brute_lists_padded(
        pad(x, mq, 7.0), pad(y, mq, -3.0), pad(xc, mc, jnp.inf), pad(yc, mc, jnp.inf), M, K
    )


# One compiled function per configuration: (name, fn(x, y, g) -> lists [N, M, K]).
CONFIGS = {
    "brute_padded": _brute_padded,
    # the compiled path's structure: unrolled steps merged at once, split self range
    "brute_unrolled": lambda x, y, g: brute.brute_lists(
        x, y, g, K, unroll=4, split_self_range=True
    ),
    "brute_exact": lambda x, y, g: brute.brute_lists(x, y, g, K, packed_keys=False),
    # the env's sorted path (M > 1024: exact lists with the tie check), unrolled
    "sorted_exact": lambda x, y, g: sorted_search.sorted_lists(
        x, y, g, K, packed_keys=False, unroll=2
    ),
    "grid_unrolled": lambda x, y, g: grid.grid_lists(x, y, g, K, unroll=2),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_search_matches_reference(states, name):
    x, y, g, want = states
    assert_lists(jax.jit(CONFIGS[name])(x, y, g), want, what=name)


@pytest.mark.parametrize("method", ["brute", "sorted"])
def test_nearest_k_under_vmap_matches_reference(states, method):
    """The one-env entry point, vmapped over envs as the env step does (the interpret
    defaults: one candidate per step, packed keys)."""
    x, y, g, want = states
    fn = jax.jit(jax.vmap(functools.partial(search.nearest_k, k=K, method=method)))
    idx, valid = fn(x, y, g)
    r_idx, r_valid = reference(K)(x, y, g)
    np.testing.assert_array_equal(np.asarray(valid), np.asarray(r_valid), err_msg=method)
    np.testing.assert_array_equal(np.asarray(idx), np.asarray(r_idx), err_msg=method)


def test_grid_in_game_lists_under_vmap(states):
    """`search.nearest_k_lists` as the env calls it (grid search, ``queries="in_game"``):
    the reference's rows for agents in the game, ``-1`` for the others."""
    x, y, g, want = states
    fn = jax.jit(
        jax.vmap(functools.partial(search.nearest_k_lists, k=K, method="grid", queries="in_game"))
    )
    assert_lists(fn(x, y, g), np.where(g[:, :, None], want, -1), what="grid in_game")
    assert search.lists_in_game_only("grid", "in_game")
    assert not search.lists_in_game_only("grid", "all")
    assert not search.lists_in_game_only("brute", "in_game")


def test_brute_padding():
    x = np.zeros((2, M), np.float32)
    assert search.brute_padding(M, interpret=True) == (96, 90)  # rows to 32, U = 1
    assert search.brute_padding(M, interpret=False) == (96, 96)  # U = 16
    with pytest.raises(ValueError, match="brute_lists_padded needs"):
        search.brute_lists_padded(x, x, x, x, M, K)


def test_select_method_by_size():
    assert search.select_method(1) == "brute"
    assert search.select_method(255) == "brute"
    assert search.select_method(256) == "grid"
    assert search.select_method(1024) == "grid"
    assert search.select_method(1025) == "sorted"
    assert search.select_method(300, brute_below=512) == "brute"
    assert search.select_method(600, grid_up_to=512) == "sorted"
    assert search.select_method(2000, grid_up_to=4096) == "sorted"  # the grid's limit
    assert search.select_method(100, brute_below=0, grid_up_to=0) == "sorted"


def test_bad_inputs_raise_value_errors():
    x = np.zeros(7, np.float32)
    g = np.ones(7, bool)
    with pytest.raises(ValueError, match="k >= 1"):
        search.nearest_k(x, x, g, 0)
    with pytest.raises(ValueError, match="one shape"):
        search.nearest_k(x, x[:5], g, 2)
    with pytest.raises(ValueError, match="one shape"):
        search.nearest_k(x[None], x[None], g[None], 2)
    with pytest.raises(ValueError, match="one shape"):
        search.nearest_k_batched(x, x, g, 2)
    with pytest.raises(ValueError, match="in_game must be bool"):
        search.nearest_k(x, x, g.astype(np.int32), 2)
    with pytest.raises(ValueError, match="method must be one of"):
        search.nearest_k(x, x, g, 2, method="grids")
    with pytest.raises(ValueError, match="queries must be one of"):
        search.nearest_k_lists(x, x, g, 2, queries="some")
    with pytest.raises(ValueError, match="unroll must be a power of two"):
        brute.brute_lists(x[None], x[None], g[None], 2, unroll=3)
    with pytest.raises(ValueError, match="at most the chunk size"):
        sorted_search.sorted_lists(x[None], x[None], g[None], 2, unroll=16)
    big = np.zeros((1, 1025), np.float32)
    with pytest.raises(ValueError, match="at most 1024 agents"):
        grid.grid_lists(big, big, np.ones((1, 1025), bool), 3)


def test_docstring_examples():
    result = doctest.testmod(search, verbose=False)
    assert result.attempted >= 2 and result.failed == 0


# ------------------------------------------------------------------ Triton lowering


def _triton_calls(fn, *args) -> int:
    """Lowers ``jax.jit(fn)(*args)`` for CUDA (the Pallas kernels to Triton IR, carried
    in Triton custom calls); returns the number of Triton calls. What this cannot check
    is Triton's own compilation to PTX and the run."""
    text = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    return text.count("__gpu$xla.gpu.triton")


def _positions(n: int, m: int):
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    return (
        jax.random.uniform(k1, (n, m)) * 10,
        jax.random.uniform(k2, (n, m)) * 10,
        jax.random.uniform(k3, (n, m)) < 0.9,
    )


@pytest.mark.parametrize(
    ("method", "m", "queries", "calls"),
    [
        ("brute", 44, "all", 1),
        ("grid", 44, "in_game", 2),  # preparation + search
        ("sorted", 44, "all", 2),  # packed keys (M <= 1024)
        ("sorted", 1100, "all", 2),  # exact lists with the tie check
        ("sorted", 4100, "all", 1),  # the XLA preparation (beyond the Pallas one's size)
    ],
)
def test_searches_lower_to_triton(method, m, queries, calls):
    """Each search's compiled path (``interpret=False``: the compiled unroll, the split
    self range), vmapped over envs as the env uses it."""
    x, y, g = _positions(1 if m > 1000 else 3, m)
    one = functools.partial(
        search.nearest_k_lists, k=K, method=method, queries=queries, interpret=False
    )
    assert _triton_calls(jax.vmap(one), x, y, g) == calls


def test_lowering_check_sees_interpret_mode():
    """The check is not vacuous: the same search in interpret mode has no Triton call."""
    x, y, g = _positions(3, 44)
    fn = lambda x, y, g: search.nearest_k_batched(x, y, g, K, method="brute", interpret=True)
    assert _triton_calls(fn, x, y, g) == 0
