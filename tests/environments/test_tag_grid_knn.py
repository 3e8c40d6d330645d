"""Tests of TagContinuous's per-query grid search (`grid_knn.nearest_k_grid_batched`).

The kernel runs in Pallas interpret mode on the CPU (compiled on a GPU backend) and must
equal the plain-JAX reference `neighbors.nearest_k` bit for bit (indices and validity,
padding included) on the sorted search's stress states (uniform, clustered, lattice ties,
duplicates, agents out of the game down to none, everyone at one point, two far
clusters) and on stepped Tag states; with ``queries="in_game"`` the in-game rows must be
the same and the others empty. Also: the env's observations do not depend on which
large-``M`` search it uses, the cost statistic matches what the module doc promises
(fewer candidates per query than the sorted search's blocks), and bad input raises.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

from environments.tag_continuous import grid_knn, kernels
from tests.environments.test_tag_sorted_knn import KINDS, _reference, assert_same, make_states


@functools.cache
def _grid(k, queries="all", stats=False, **options):
    if stats:
        return jax.jit(
            lambda x, y, g: grid_knn.grid_search_stats(x, y, g, k, queries=queries, **options)
        )
    return jax.jit(
        lambda x, y, g: grid_knn.nearest_k_grid_batched(x, y, g, k, queries=queries, **options)
    )


def _in_game_rows(idx, valid, g):
    """``idx, valid`` with rows of agents out of the game as the grid's empty rows."""
    gm = np.asarray(g)[:, :, None]
    self_idx = np.arange(idx.shape[1], dtype=np.int32)[None, :, None]
    return np.where(gm, idx, self_idx), np.asarray(valid) & gm


@pytest.mark.parametrize(("m", "k"), [(37, 12), (300, 10)])
def test_grid_matches_reference(m, k):
    x, y, g = make_states(m, KINDS, seed=m + k)
    ref_idx, ref_valid = map(np.asarray, _reference(k)(x, y, g))
    idx, valid = map(np.asarray, _grid(k)(x, y, g))
    assert_same(idx, valid, ref_idx, ref_valid, f"grid m={m} k={k}")
    idx, valid = map(np.asarray, _grid(k, "in_game")(x, y, g))
    want_idx, want_valid = _in_game_rows(ref_idx, ref_valid, g)
    assert_same(idx, valid, want_idx, want_valid, f"grid in_game m={m} k={k}")


@pytest.mark.parametrize("u", [4])
def test_grid_unrolled_merge_matches_reference(u):
    """The compiled default takes ``U`` candidates per step through the merge network
    (``U = 2`` runs in the lowering test)."""
    x, y, g = make_states(100, KINDS[:6], seed=5)
    ref_idx, ref_valid = map(np.asarray, _reference(10)(x, y, g))
    idx, valid = map(np.asarray, _grid(10, block_cols=u)(x, y, g))
    assert_same(idx, valid, ref_idx, ref_valid, f"grid U={u}")


def test_grid_row_segments_match_reference(monkeypatch):
    """`grid_knn.GRID_LANE_ROWS` off (phase 1 row by row, each row's longest segment; the
    default walks each lane's own rows): the same lists for all and in-game queries with
    the unrolled merge (``U = 4``), on every stress state (the lattice ties run the exact
    re-search, one candidate per step, through it)."""
    u = 4
    monkeypatch.setattr(grid_knn, "GRID_LANE_ROWS", False)
    monkeypatch.setattr(kernels, "PACKED_SKIP_DISTINCT", False)  # always re-sort
    x, y, g = make_states(120, KINDS, seed=11)
    ref_idx, ref_valid = map(np.asarray, _reference(10)(x, y, g))
    for queries in ("all", "in_game"):
        fn = jax.jit(
            lambda a, b, c, q=queries: grid_knn.nearest_k_grid_batched(
                a, b, c, 10, queries=q, block_cols=u
            )
        )
        idx, valid = map(np.asarray, fn(x, y, g))
        want = (ref_idx, ref_valid) if queries == "all" else _in_game_rows(ref_idx, ref_valid, g)
        assert_same(idx, valid, *want, f"lane rows U={u} {queries}")


@pytest.mark.parametrize("position_keys", [True, False])
def test_grid_key_forms_match_reference(monkeypatch, position_keys):
    """Keys holding sorted positions (ids gathered at the end, ties by id in the re-sort)
    or ids: the same lists, also on lattice states where the re-sort and the exact
    re-search run."""
    monkeypatch.setattr(grid_knn, "GRID_POSITION_KEYS", position_keys)
    monkeypatch.setattr(kernels, "PACKED_SKIP_DISTINCT", False)  # always re-sort
    x, y, g = make_states(90, KINDS, seed=3)
    ref_idx, ref_valid = map(np.asarray, _reference(7)(x, y, g))
    fn = jax.jit(lambda a, b, c: grid_knn.nearest_k_grid_batched(a, b, c, 7))
    idx, valid = map(np.asarray, fn(x, y, g))
    assert_same(idx, valid, ref_idx, ref_valid, f"position keys {position_keys}")


@pytest.mark.parametrize(("cell_agents", "target"), [(0.3, 1.0), (6.0, 4.0)])
def test_grid_settings_keep_results(monkeypatch, cell_agents, target):
    """Fine cells with a small first window (phase 2 for most lanes) and coarse cells with
    a large one: the same lists."""
    monkeypatch.setattr(grid_knn, "GRID_CELL_AGENTS", cell_agents)
    monkeypatch.setattr(grid_knn, "GRID_TARGET", target)
    x, y, g = make_states(120, KINDS, seed=11)
    ref_idx, ref_valid = map(np.asarray, _reference(6)(x, y, g))
    fn = jax.jit(lambda a, b, c: grid_knn.nearest_k_grid_batched(a, b, c, 6))
    idx, valid = map(np.asarray, fn(x, y, g))
    assert_same(idx, valid, ref_idx, ref_valid, f"cells {cell_agents} target {target}")


def _radix_sort(keys: np.ndarray, radix, lo: int, nbits: int):
    """``radix`` (a radix-pass function) in a one-program interpret-mode kernel:
    ``(returned, bufs[1])``."""
    from jax.experimental import pallas as pl

    def kernel(k_ref, o_ref, b0, b1):
        o_ref[...] = radix(k_ref[...], (b0, b1), lo, nbits, interpret=True)

    sds = jax.ShapeDtypeStruct(keys.shape, np.int32)
    out, _, b1 = pl.pallas_call(kernel, out_shape=(sds, sds, sds), interpret=True)(keys)
    return np.asarray(out), np.asarray(b1)


@pytest.mark.parametrize(
    ("case", "p2"),
    [("random", 64), ("random", 1024), ("all twos", 1024), ("one key", 256), ("threes", 32)],
)
def test_two_bit_radix_passes_sort_stably(case, p2):
    """`grid_knn._radix_passes_2bit` gives the 1-bit passes' order (a stable sort by the
    10 cell bits above the ids, shuffled here), in ``bufs[1]`` too; "all twos" at 1024 lanes
    overflows the digit-2 field of the totals in every pass (harmless, see there)."""
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
    for radix in (grid_knn._radix_passes_2bit, kernels._radix_passes):
        out, b1 = _radix_sort(keys, radix, id_bits, 10)
        np.testing.assert_array_equal(out, want, err_msg=f"{radix.__name__} {case}")
        np.testing.assert_array_equal(b1, want, err_msg=f"{radix.__name__} {case} bufs[1]")


def _run_starts(packed: np.ndarray, id_bits: int) -> np.ndarray:
    """`grid_knn._cell_starts_runs` on sorted ``packed`` keys in a one-program
    interpret-mode kernel: ``cs [1024]``."""
    from jax.experimental import pallas as pl

    def kernel(k_ref, cs_ref, sat_ref, out_ref):
        out_ref[...] = grid_knn._cell_starts_runs(
            k_ref[...], k_ref, cs_ref, sat_ref, id_bits, interpret=True
        )

    t = jax.ShapeDtypeStruct((1024,), np.int32)
    *_, cs = pl.pallas_call(kernel, out_shape=(t, t, t), interpret=True)(packed)
    return np.asarray(cs)


@pytest.mark.parametrize(
    ("case", "p2"),
    [("random", 1024), ("random", 64), ("distinct", 512), ("one key", 256), ("none in", 32)],
)
def test_cell_starts_from_runs_equal_lower_bounds(case, p2):
    """`grid_knn._cell_starts_runs` (`GRID_PREP_CELL_STARTS = "runs"`) gives every cell's
    lower bound in the sorted keys, as the binary search does (NumPy's searchsorted here):
    random keys with many 1023s, every key distinct (no 1023: the last run ends at the
    last lane), one key everywhere, every agent out of the game."""
    rng = np.random.default_rng(p2 + len(case))
    id_bits = (p2 - 1).bit_length()
    cells = {
        "random": np.where(rng.random(p2) < 0.3, 1023, rng.integers(0, 1023, p2)),
        "distinct": rng.permutation(1023)[:p2],
        "one key": np.full(p2, 517),
        "none in": np.full(p2, 1023),
    }[case]
    packed = np.sort(((cells.astype(np.int64) << id_bits) | np.arange(p2)).astype(np.int32))
    want = np.searchsorted(packed >> id_bits, np.arange(1024), side="left")
    np.testing.assert_array_equal(_run_starts(packed, id_bits), want, err_msg=case)


def test_grid_prep_cell_starts_forms_agree(monkeypatch):
    """The preparation with ``GRID_PREP_CELL_STARTS = "runs"``: every output the same as
    with the binary searches, on the stress states (out of the game down to none)."""
    x, y, g = make_states(70, KINDS, seed=8)
    prep = lambda: jax.jit(lambda a, b, c: grid_knn._grid_prep(a, b, c, True))(x, y, g)
    monkeypatch.setattr(grid_knn, "GRID_PREP_CELL_STARTS", "search")
    want = [np.asarray(v) for v in prep()]
    monkeypatch.setattr(grid_knn, "GRID_PREP_CELL_STARTS", "runs")
    got = [np.asarray(v) for v in prep()]
    names = ("xc", "yc", "oc", "cs", "sat", "prm")
    for name, a, b in zip(names, got, want, strict=True):
        if name in ("xc", "yc", "oc"):  # the tails past MP are left unwritten
            a, b = a[:, : a.shape[1] // 2], b[:, : b.shape[1] // 2]
        np.testing.assert_array_equal(a, b, err_msg=name)


@pytest.mark.parametrize("queries", grid_knn.GRID_QUERIES)
def test_grid_interleaved_positions_match_reference(monkeypatch, queries):
    """`grid_knn.GRID_XY_INTERLEAVED` (the sorted positions as one ``[4·MP]`` array of
    pairs): the same lists."""
    monkeypatch.setattr(grid_knn, "GRID_XY_INTERLEAVED", True)
    x, y, g = make_states(100, KINDS, seed=6)
    ref_idx, ref_valid = map(np.asarray, _reference(7)(x, y, g))
    fn = jax.jit(lambda a, b, c: grid_knn.nearest_k_grid_batched(a, b, c, 7, queries=queries))
    idx, valid = map(np.asarray, fn(x, y, g))
    if queries == "in_game":
        ref_idx, ref_valid = _in_game_rows(ref_idx, ref_valid, g)
    assert_same(idx, valid, ref_idx, ref_valid, f"interleaved positions {queries}")


def test_grid_one_bit_radix_matches_reference(monkeypatch):
    """`grid_knn.GRID_PREP_RADIX_BITS = 1` (ten one-bit passes): the same lists."""
    monkeypatch.setattr(grid_knn, "GRID_PREP_RADIX_BITS", 1)
    x, y, g = make_states(90, KINDS, seed=4)
    ref_idx, ref_valid = map(np.asarray, _reference(5)(x, y, g))
    fn = jax.jit(lambda a, b, c: grid_knn.nearest_k_grid_batched(a, b, c, 5))
    idx, valid = map(np.asarray, fn(x, y, g))
    assert_same(idx, valid, ref_idx, ref_valid, "one-bit radix passes")


@pytest.fixture(scope="module")
def tag_states():
    """Tag states (5 taggers + 251 runners, WarpDrive's config) after 0 and 60 random
    steps: agents clipped at the edges, runners tagged out of the game."""
    from experiments.benchmarks.knn_obs_probe import check_states, make_env

    env, params = make_env(5, 251, 10, "pallas")
    reset = check_states(env, params, 2, 1)["reset"]
    stepped = check_states(env, params, 2, 60)["stepped"]
    return env, params, reset, stepped


def test_grid_on_tag_states_and_cost(tag_states):
    _, _, reset, stepped = tag_states
    for state in (reset, stepped):
        x, y, g = (np.asarray(a) for a in (state.x, state.y, state.in_game))
        ref_idx, ref_valid = map(np.asarray, _reference(10)(x, y, g))
        idx, valid, trips = _grid(10, "all", True)(x, y, g)
        assert_same(np.asarray(idx), np.asarray(valid), ref_idx, ref_valid, "tag all")
        idx, valid, trips_in = _grid(10, "in_game", True)(x, y, g)
        want = _in_game_rows(ref_idx, ref_valid, g)
        assert_same(np.asarray(idx), np.asarray(valid), *want, "tag in_game")
        trips, trips_in = np.asarray(trips), np.asarray(trips_in)
        assert trips.shape == (2, 8)
        # Each lane streams its own cells: well under the 256 candidates of a brute force,
        # and skipping the queries out of the game never costs more.
        assert 20 < trips.mean() < 150, trips
        assert trips_in.sum() <= trips.sum()


def test_env_observations_do_not_depend_on_the_large_search(tag_states, monkeypatch):
    """The env's observations with the grid search (lists of agents out of the game left
    empty), with and without the writer's in-game shortcut (`knn_obs.USE_IN_GAME_LISTS`;
    bit for bit), equal those with the sorted search (every list). Equal as values: a row out of
    the game is zeros either way, but with a listed neighbour its zeros can be ``-0.0``
    (``q · 0`` for a negative ``q``), with an empty slot ``+0.0``."""
    from environments.tag_continuous import knn_obs

    env, params, _, stepped = tag_states
    obs = {}
    # (the shortcut stays off for the sorted search's in-game lists: test_method_selection)
    variants = (("sorted", "all", True), ("grid", "in_game", False), ("grid", "in_game", True))
    for method, queries, shortcut in variants:
        monkeypatch.setattr(kernels, "LARGE_METHOD", method)
        monkeypatch.setattr(kernels, "ENV_QUERIES", queries)
        monkeypatch.setattr(knn_obs, "USE_IN_GAME_LISTS", shortcut)
        fn = jax.jit(jax.vmap(lambda s: env.observations(s, params)))
        obs[method, queries, shortcut] = jax.tree.map(np.asarray, fn(stepped))
    assert not np.all(np.asarray(stepped.in_game))  # some rows are out of the game
    ref = obs[variants[0]]
    for group in ref:
        for variant in variants[1:]:
            np.testing.assert_array_equal(obs[variant][group], ref[group])
        want = obs["grid", "in_game", False][group].view(np.uint32)
        np.testing.assert_array_equal(obs["grid", "in_game", True][group].view(np.uint32), want)


def test_method_selection(monkeypatch):
    monkeypatch.setattr(kernels, "LARGE_METHOD", "grid")
    assert kernels._resolve_method(None, 300) == "grid"
    assert kernels.lists_in_game_only(300, None, "in_game")
    assert not kernels.lists_in_game_only(300, None, "all")
    assert not kernels.lists_in_game_only(300, "sorted", "in_game")
    assert not kernels.lists_in_game_only(100, None, "in_game")  # brute force
    assert kernels._resolve_method(None, 100) == "brute"
    assert kernels._resolve_method(None, grid_knn.GRID_MAX_AGENTS + 1) == "sorted"
    monkeypatch.setattr(kernels, "LARGE_METHOD", "sorted")
    assert kernels._resolve_method(None, 300) == "sorted"
    monkeypatch.setattr(kernels, "LARGE_METHOD", "bogus")
    with pytest.raises(ValueError, match="LARGE_METHOD"):
        kernels._resolve_method(None, 300)
    with pytest.raises(ValueError, match="method must be one of"):
        kernels._resolve_method("grids", 300)


def test_grid_bad_inputs_raise():
    x = np.zeros((1, 40), np.float32)
    g = np.ones((1, 40), bool)
    with pytest.raises(ValueError, match="queries"):
        grid_knn.nearest_k_grid_batched(x, x, g, 3, queries="some")
    with pytest.raises(ValueError, match="k >= 1"):
        grid_knn.nearest_k_grid_batched(x, x, g, 0)
    with pytest.raises(ValueError, match="at most 1024 agents"):
        big = np.zeros((1, 1025), np.float32)
        grid_knn.nearest_k_grid_batched(big, big, np.ones((1, 1025), bool), 3)
    with pytest.raises(ValueError, match="power of two"):
        grid_knn.nearest_k_grid_batched(x, x, g, 3, block_cols=3)
    with pytest.raises(ValueError, match="queries"):
        kernels.nearest_k_lists(x[0], x[0], g[0], 3, queries="some", method="sorted")


@pytest.mark.slow
def test_grid_probe_tiny(tmp_path) -> None:
    """`grid_probe` at a tiny size: the preparation equals interpret mode's, the lists the
    plain-JAX reference's (both query sets), and every search is timed."""
    from experiments.benchmarks import grid_probe

    out = tmp_path / "grid.jsonl"
    recs = grid_probe.probe(
        ["2:60"], [1], k=5, steps=3, check_envs=2, repeats=1, probe_out=str(out),
        check_tag_steps=(),  # Tag states are timed (3 steps); the checks use the others
    )  # fmt: skip
    assert {r["verdict"] for r in recs if r["probe"] == "grid_prep"} == {"equal"}
    assert {r["verdict"] for r in recs if r["probe"] == "grid_check"} == {"exact"}
    times = [r for r in recs if r["probe"] == "grid_time"]
    assert [r["search"] for r in times] == ["sorted", "grid all U=1", "grid in_game U=1"]
    assert all(r["ms"] > 0 for r in times)
    assert all(r["trips"] > 0 for r in times[1:])
    assert len(out.read_text().splitlines()) == len(recs)


def test_vector_step_table_and_bool_flags_keep_results(tag_states, monkeypatch):
    """The batched step kernel with the grid search (5 + 251 agents), its own feature
    table for the writer (`env.VECTOR_TABLE`) and the preparation's bool in-game flags
    (`grid_knn.GRID_PREP_BOOL`): the same ``(state, TimeStep)`` bit for bit as the vmapped
    XLA step. (`env_ab_probe` compares the settings' other values at run time.)"""
    import jaxdrive
    from environments.tag_continuous import env as tag_env
    from experiments.benchmarks.knn_obs_probe import make_env

    _, params, _, stepped = tag_states
    ref_env, _ = make_env(5, 251, 10, "pallas", step_impl="xla")
    env, _ = make_env(5, 251, 10, "pallas", step_impl="vector")
    assert env._vector_search_padding() is None and env._vector_table()
    keys = jax.random.split(jax.random.key(5), 2)
    actions = jax.vmap(env.sample_actions)(keys)

    def step(e):
        venv = jaxdrive.vectorize(e, 2)
        return jax.tree.map(
            np.asarray, jax.jit(venv.step)(jax.random.key(6), stepped, actions, params)
        )

    ref = step(ref_env)
    monkeypatch.setattr(tag_env, "VECTOR_TABLE", True)
    monkeypatch.setattr(grid_knn, "GRID_PREP_BOOL", True)
    got = step(env)
    for i, (a, b) in enumerate(zip(jax.tree.leaves(got), jax.tree.leaves(ref), strict=True)):
        np.testing.assert_array_equal(
            a.view(np.uint32) if a.dtype == np.float32 else a,
            b.view(np.uint32) if b.dtype == np.float32 else b,
            err_msg=f"leaf {i}",
        )


def test_sorted_writer_rows_keep_the_env_results(tag_states, monkeypatch):
    """`knn_obs.SORTED_ROWS`: the runners' writer taking its rows in the grid search's
    spatial order (`kernels.nearest_k_lists_ordered`), in the batched step: the same
    ``(state, TimeStep)`` bit for bit as without it. (The XLA step's observations take
    the same `_observe_nearest`.)"""
    import jaxdrive
    from environments.tag_continuous import knn_obs
    from experiments.benchmarks.knn_obs_probe import make_env
    from tests.environments.tag_helpers import assert_bitwise

    _, params, _, stepped = tag_states
    env, _ = make_env(5, 251, 10, "pallas", step_impl="vector")
    actions = jax.vmap(env.sample_actions)(jax.random.split(jax.random.key(7), 2))

    def step():
        venv = jaxdrive.vectorize(env, 2)
        return jax.jit(venv.step)(jax.random.key(8), stepped, actions, params)

    monkeypatch.setattr(knn_obs, "SORTED_ROWS", False)
    assert not env._sorted_rows()
    ref = step()
    monkeypatch.setattr(knn_obs, "SORTED_ROWS", True)
    assert env._sorted_rows()
    assert_bitwise(step(), ref, "sorted writer rows")


def test_lists_with_the_spatial_order():
    """`kernels.nearest_k_lists_ordered`: the grid search's lists and a permutation of the
    agents, the in-game ones first by cell (ids rising within a cell) then the others by
    id; other searches are refused."""
    x, y, g = make_states(300, KINDS[:4], seed=2)
    fn = jax.jit(jax.vmap(lambda a, b, c: kernels.nearest_k_lists_ordered(a, b, c, 6)))
    lists, order = map(np.asarray, fn(x, y, g))
    want = np.asarray(jax.vmap(lambda a, b, c: kernels.nearest_k_lists(a, b, c, 6))(x, y, g))
    np.testing.assert_array_equal(lists, want)
    for n in range(order.shape[0]):
        np.testing.assert_array_equal(np.sort(order[n]), np.arange(300))
        gin = np.asarray(g[n])[order[n]]
        n_in = int(gin.sum())
        assert gin[:n_in].all() and not gin[n_in:].any()
        assert (np.diff(order[n][n_in:]) > 0).all()
    with pytest.raises(ValueError, match="needs the grid search"):
        kernels.nearest_k_lists_ordered(x[0, :50], y[0, :50], g[0, :50], 6)


@pytest.mark.parametrize("form", kernels.LIST_STORES)
@pytest.mark.parametrize("method", ["brute", "sorted", "grid"])
def test_list_store_forms_match_reference(monkeypatch, method, form):
    """Both `kernels.LIST_STORE` forms (one store per slot, or each program's lists as
    one ``[BM, 8]`` tile store, ``k = 7`` of 8 columns, padding lanes masked): every
    search gives the reference's lists."""
    monkeypatch.setattr(kernels, "LIST_STORE", form)
    x, y, g = make_states(100, KINDS[:6], seed=8)
    ref_idx, ref_valid = map(np.asarray, _reference(7)(x, y, g))
    if method == "grid":
        fn = jax.jit(lambda a, b, c: grid_knn.nearest_k_grid_batched(a, b, c, 7, queries="in_game"))
        ref_idx, ref_valid = _in_game_rows(ref_idx, ref_valid, g)
    else:
        fn = jax.jit(lambda a, b, c: kernels.nearest_k_batched(a, b, c, 7, method=method))
    idx, valid = map(np.asarray, fn(x, y, g))
    assert_same(idx, valid, ref_idx, ref_valid, f"{form} list store, {method}")


def test_unknown_list_store_raises(monkeypatch):
    monkeypatch.setattr(kernels, "LIST_STORE", "rows")
    x, y, g = make_states(40, KINDS[:1], seed=1)
    with pytest.raises(ValueError, match="LIST_STORE"):
        grid_knn.nearest_k_grid_batched(x, y, g, 3)
