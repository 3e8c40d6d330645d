"""Every Pallas kernel of TagContinuous lowers to Triton for CUDA, checked without a GPU.

The other tests run the kernels in Pallas interpret mode, which never exercises the
Pallas-to-Triton lowering: a construct that Pallas' Triton backend does not support would
only show up on a GPU. Here each kernel is traced with ``interpret=False`` (as on a GPU,
under `jax.vmap` where the env uses it that way) and lowered for the ``cuda`` platform on
this machine (`jax.stages.Traced.lower(lowering_platforms=...)`): the Pallas kernel is
lowered to Triton IR, which the StableHLO module carries in a Triton custom call. What
this cannot check is Triton's own compilation to PTX and the run (the benchmark probes
on the GPU do).
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import pytest

from environments.tag_continuous import (
    full_obs,
    grid_knn,
    kernels,
    knn_obs,
    step_kernel,
    vector_step,
)
from environments.tag_continuous.env import action_values

N, T, R = 3, 4, 40
M = T + R
K = 5


def _lowered_triton_calls(fn, *args) -> int:
    """Lowers ``jax.jit(fn)(*args)`` for CUDA; returns the number of Triton calls."""
    text = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    return text.count("__gpu$xla.gpu.triton")


#: Triton calls of one sorted search: the preparation kernel (`kernels.PREP_IMPL`) and
#: the search.
SORTED_CALLS = 2


def _positions(seed: int = 0) -> tuple[jax.Array, jax.Array, jax.Array]:
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.uniform(k1, (N, M)) * 10
    y = jax.random.uniform(k2, (N, M)) * 10
    g = jax.random.uniform(k3, (N, M)) < 0.9
    return x, y, g


@pytest.mark.parametrize("method", ["brute", "sorted"])
def test_nearest_k_lowers_to_triton(method: str) -> None:
    x, y, g = _positions()
    fn = lambda x, y, g: kernels.nearest_k_batched(x, y, g, K, method=method, interpret=False)
    assert _lowered_triton_calls(fn, x, y, g) == (SORTED_CALLS if method == "sorted" else 1)


@pytest.mark.parametrize("queries", grid_knn.GRID_QUERIES)
@pytest.mark.parametrize("u", [1, 2])
def test_grid_search_lowers_to_triton(queries: str, u: int) -> None:
    """The grid search: its preparation and its search kernel (both unroll forms)."""
    x, y, g = _positions()
    fn = lambda x, y, g: grid_knn.nearest_k_grid_batched(
        x, y, g, K, queries=queries, block_cols=u, interpret=False
    )
    assert _lowered_triton_calls(fn, x, y, g) == 2
    stats = lambda x, y, g: grid_knn.grid_search_stats(x, y, g, K, block_cols=u, interpret=False)
    assert _lowered_triton_calls(stats, x, y, g) == 2


@pytest.mark.parametrize("method", ["brute", "sorted", "grid"])
def test_lane_list_stores_lower_to_triton(monkeypatch, method: str) -> None:
    """`kernels.LIST_STORE` ``"lanes"`` (the default's tile store lowers in the tests
    above): each search's lists as one store per slot."""
    monkeypatch.setattr(kernels, "LIST_STORE", "lanes")
    x, y, g = _positions()
    if method == "grid":
        fn = lambda x, y, g: grid_knn.nearest_k_grid_batched(x, y, g, K, interpret=False)
        calls = 2
    else:
        fn = lambda x, y, g: kernels.nearest_k_batched(x, y, g, K, method=method, interpret=False)
        calls = SORTED_CALLS if method == "sorted" else 1
    assert _lowered_triton_calls(fn, x, y, g) == calls


def test_grid_row_segments_lower_to_triton(monkeypatch) -> None:
    """The grid search with `grid_knn.GRID_LANE_ROWS` off (phase 1 row by row), the
    preparation's cell starts from the runs of equal keys (`GRID_PREP_CELL_STARTS`) and
    the interleaved positions (`GRID_XY_INTERLEAVED`)."""
    monkeypatch.setattr(grid_knn, "GRID_LANE_ROWS", False)
    monkeypatch.setattr(grid_knn, "GRID_PREP_CELL_STARTS", "runs")
    monkeypatch.setattr(grid_knn, "GRID_XY_INTERLEAVED", True)
    x, y, g = _positions()
    fn = lambda x, y, g: grid_knn.nearest_k_grid_batched(x, y, g, K, interpret=False)
    assert _lowered_triton_calls(fn, x, y, g) == 2


@pytest.mark.parametrize("order", ["curve", "best", "keyed"])
def test_sorted_chunk_orders_lower_to_triton(order: str) -> None:
    x, y, g = _positions()
    fn = lambda x, y, g: kernels.nearest_k_sorted_batched(
        x, y, g, K, chunk_order=order, interpret=False
    )
    assert _lowered_triton_calls(fn, x, y, g) == SORTED_CALLS


def test_nearest_tagger_lowers_to_triton() -> None:
    x, y, _ = _positions()
    fn = lambda x, y: kernels.nearest_tagger_batched(
        x[:, T:], y[:, T:], x[:, :T], y[:, :T], interpret=False
    )
    assert _lowered_triton_calls(fn, x, y) == 1


def _feats(x, y, g) -> jax.Array:
    z = jnp.zeros_like(x)
    gf = g.astype(jnp.float32)
    return jnp.stack([x, y, z, z, z, gf, gf], axis=1)  # [N, 7, M]


@pytest.mark.parametrize("reciprocal", [False, True])
def test_full_obs_lowers_to_triton(reciprocal: bool) -> None:
    x, y, g = _positions()
    feats = _feats(x, y, g)
    scale = jnp.arange(1.0, 8.0)

    def fn(feats, g):
        one = lambda f, gg: full_obs.full_obs_pallas(
            f, range(T, M), scale, gg.astype(jnp.float32), jnp.float32(0.5),
            reciprocal=reciprocal, interpret=False,
        )  # fmt: skip
        return jax.vmap(one)(feats, g)

    assert _lowered_triton_calls(fn, feats, g) == 1


@pytest.mark.parametrize("rows", [range(T, M), (0, 7, 3)])
@pytest.mark.parametrize("reciprocal", [False, True])
def test_knn_obs_lowers_to_triton(rows, reciprocal: bool) -> None:
    x, y, g = _positions()
    feats = _feats(x, y, g)
    idx = jnp.broadcast_to(jnp.arange(K, dtype=jnp.int32), (N, M, K))
    valid = jnp.ones((N, M, K), bool)
    scale = jnp.arange(1.0, 8.0)

    def fn(feats, idx, valid, g):
        one = lambda f, i, v, gg: knn_obs.knn_obs_pallas(
            f, i, v, rows, scale, gg, jnp.float32(0.5), reciprocal=reciprocal, interpret=False
        )
        return jax.vmap(one)(feats, idx, valid, g)

    assert _lowered_triton_calls(fn, feats, idx, valid, g) == 1


def test_knn_obs_in_a_row_order_lowers_to_triton() -> None:
    """The column-tile writer taking its rows in a given order (`knn_obs.SORTED_ROWS`)."""
    x, y, g = _positions()
    feats = _feats(x, y, g)
    lists = jnp.broadcast_to(jnp.arange(K, dtype=jnp.int32), (N, M, K))
    order = jnp.broadcast_to(jnp.arange(M, dtype=jnp.int32)[::-1], (N, M))

    def fn(feats, lists, g, order):
        one = lambda f, i, gg, o: knn_obs.knn_obs_pallas(
            f, i, None, range(T, M), jnp.arange(1.0, 8.0), gg, jnp.float32(0.5),
            reciprocal=True, interpret=False, lists_in_game=True, row_order=o,
        )  # fmt: skip
        return jax.vmap(one)(feats, lists, g, order)

    assert _lowered_triton_calls(fn, feats, lists, g, order) == 1


@pytest.mark.parametrize("fence", [False, True])
@pytest.mark.parametrize("tagger_ids", [tuple(range(T)), (1, 5, 9, 30)])
def test_step_kernel_lowers_to_triton(fence: bool, tagger_ids) -> None:
    x, y, g = _positions()
    la = lt = 6
    scalars = jnp.ones((len(step_kernel.PARAMS),), jnp.float32)
    pvec = jnp.concatenate([scalars, action_values(-0.1, 0.1, la), action_values(-1.0, 1.0, lt)])
    assert pvec.shape == (step_kernel.num_params(la, lt),)
    z = jnp.zeros_like(x)
    t = jnp.zeros((N,), jnp.int32)
    act_t = jnp.zeros((N, T, 2), jnp.int32)
    act_r = jnp.ones((N, R, 2), jnp.int32)

    def fn(x, y, z, g, t, act_t, act_r):
        one = lambda *a: step_kernel.tag_step(
            pvec, *a, tagger_ids=tagger_ids, num_acceleration_levels=la,
            num_turn_levels=lt, episode_length=50, runner_exits_game_after_tagged=True,
            fence_products=fence, interpret=False,
        )  # fmt: skip
        return jax.vmap(one)(x, y, z, z, z, g, t, act_t, act_r)

    assert _lowered_triton_calls(fn, x, y, z, g, t, act_t, act_r) == 1


@pytest.mark.parametrize(
    ("tagger_ids", "reset", "extras"),
    [
        (tuple(range(T)), "uniforms", True),  # unrolled tagger loops, all outputs
        (tuple(range(T)), "keys", False),  # the reset's uniforms drawn in the kernel
        (tuple(range(T)), "step_key", True),  # ... from keys derived in the kernel
        (tuple(range(0, 2 * (vector_step.UNROLL_TAGGERS + 1), 2)), None, False),  # fori loops
    ],
)
def test_vector_step_lowers_to_triton(tagger_ids, reset: str | None, extras: bool) -> None:
    _lower_vector_step(tagger_ids, reset, extras)


@pytest.mark.parametrize("unrolled", [True, False])
def test_vector_step_scratch_positions_lower_to_triton(monkeypatch, unrolled: bool) -> None:
    """`vector_step.TAGGER_POSITIONS` ``"scratch"``: the store, barrier and loads."""
    monkeypatch.setattr(vector_step, "TAGGER_POSITIONS", "scratch")
    ids = tuple(range(T)) if unrolled else tuple(range(0, 2 * (vector_step.UNROLL_TAGGERS + 1), 2))
    _lower_vector_step(ids, "step_key", True)


def _lower_vector_step(tagger_ids, reset: str | None, extras: bool) -> None:
    x, y, g = _positions()
    nt = len(tagger_ids)
    vals = [jnp.float32(1.0)] * len(vector_step.RAW_PARAMS)
    z = jnp.zeros_like(x)
    t = jnp.zeros((N,), jnp.int32)
    act_t = jnp.zeros((N, nt, 2), jnp.int32)
    act_r = jnp.ones((N, M - nt, 2), jnp.int32)
    u = jnp.zeros((N, 3, M), jnp.float32)
    padding = kernels.brute_padding(M, interpret=False) if extras else None

    def fn(x, y, g):
        return vector_step.tag_vector_step(
            vals, x, y, z, z, z, g, t, act_t, act_r, u if reset == "uniforms" else None,
            reset_key_data=jnp.ones((N, 2), jnp.uint32) if reset == "keys" else None,
            step_key_data=jnp.ones((2,), jnp.uint32) if reset == "step_key" else None,
            tagger_ids=tagger_ids, num_acceleration_levels=6, num_turn_levels=6,
            episode_length=50, runner_exits_game_after_tagged=True, search_padding=padding,
            feature_table=extras, interpret=False,
        )  # fmt: skip

    assert _lowered_triton_calls(fn, x, y, g) == 1


def test_lowering_check_sees_interpret_mode() -> None:
    """The check is not vacuous: the same kernel in interpret mode lowers to no Triton call."""
    x, y, g = _positions()
    fn = lambda x, y, g: kernels.nearest_k_batched(x, y, g, K, method="brute", interpret=True)
    assert _lowered_triton_calls(fn, x, y, g) == 0


@pytest.mark.parametrize(("prepick", "lane_test"), [(True, False), (False, False)])
def test_sorted_visit_loop_options_lower_to_triton(monkeypatch, prepick, lane_test) -> None:
    monkeypatch.setattr(kernels, "SORTED_PREPICK", prepick)
    monkeypatch.setattr(kernels, "SORTED_LANE_TEST", lane_test)
    x, y, g = _positions()
    fn = lambda x, y, g: kernels.nearest_k_sorted_batched(x, y, g, K, interpret=False)
    assert _lowered_triton_calls(fn, x, y, g) == SORTED_CALLS


def test_sorted_search_with_xla_sort_lowers_to_triton(monkeypatch) -> None:
    monkeypatch.setattr(kernels, "PREP_SORT", "xla")
    x, y, g = _positions()
    fn = lambda x, y, g: kernels.nearest_k_sorted_batched(x, y, g, K, interpret=False)
    assert _lowered_triton_calls(fn, x, y, g) == SORTED_CALLS


def test_sorted_search_with_xla_preparation_lowers_to_triton(monkeypatch) -> None:
    monkeypatch.setattr(kernels, "PREP_IMPL", "xla")
    x, y, g = _positions()
    fn = lambda x, y, g: kernels.nearest_k_sorted_batched(x, y, g, K, interpret=False)
    assert _lowered_triton_calls(fn, x, y, g) == 1


@pytest.mark.parametrize("lean", [False, True])
@pytest.mark.parametrize("opaque", [False, True])
def test_knn_obs_opaque_store_lowers_to_triton(monkeypatch, opaque: bool, lean: bool) -> None:
    """Also the in-game lists' lean block (``lean``) and the shortcut alone (not)."""
    monkeypatch.setattr(knn_obs, "LAYOUT", "flat")
    monkeypatch.setattr(knn_obs, "TIME_PASS", not opaque)
    monkeypatch.setattr(knn_obs, "OPAQUE_STORE", opaque)
    monkeypatch.setattr(knn_obs, "LEAN_INDEX", lean)
    x, y, g = _positions()
    feats = _feats(x, y, g)
    lists = jnp.zeros((N, M, K), jnp.int32)

    def fn(feats, lists, g):
        one = lambda f, li, gg: knn_obs.knn_obs_pallas(
            f, li, None, range(T, M), jnp.arange(1.0, 8.0), gg, jnp.float32(0.5),
            reciprocal=True, interpret=False, num_warps=8, lists_in_game=lean,
        )  # fmt: skip
        return jax.vmap(one)(feats, lists, g)

    assert _lowered_triton_calls(fn, feats, lists, g) == 1


@pytest.mark.parametrize("in_game_lists", [False, True])
@pytest.mark.parametrize("rows", [range(T, M), (0, 7, 3)])
def test_knn_obs_cols_layout_lowers_to_triton(monkeypatch, rows, in_game_lists: bool) -> None:
    """The column-tile writer (`knn_obs.LAYOUT` ``"cols"``, the default), true division
    and not."""
    monkeypatch.setattr(knn_obs, "LAYOUT", "cols")
    x, y, g = _positions()
    feats = _feats(x, y, g)
    lists = jnp.zeros((N, M, K), jnp.int32)

    def fn(feats, lists, g):
        one = lambda f, li, gg: knn_obs.knn_obs_pallas(
            f, li, None, rows, jnp.arange(1.0, 8.0), gg, jnp.float32(0.5),
            reciprocal=in_game_lists, interpret=False, lists_in_game=in_game_lists,
        )  # fmt: skip
        return jax.vmap(one)(feats, lists, g)

    assert _lowered_triton_calls(fn, feats, lists, g) == 1


def test_hash_draws_lower_to_triton() -> None:
    """`jaxdrive.hash_draws.multi_discrete`'s kernels (Threefry: one and two hashes per
    sample; Philox, with its inline PTX multiplies: fixed and varying column sizes),
    alone and vmapped over keys; two groups' Philox draws in one kernel."""
    from jaxdrive import hash_draws

    for nvec, method in itertools.product(((21, 21), (3, 5, 7)), hash_draws.METHODS):
        fn = lambda key, nv=nvec, m=method: hash_draws.multi_discrete(
            key, (N, R), nv, use_pallas=True, interpret=False, method=m
        )
        assert _lowered_triton_calls(fn, jax.random.key(0)) == 1
        assert _lowered_triton_calls(jax.vmap(fn), jax.random.split(jax.random.key(0), 3)) == 1
    groups = lambda keys: hash_draws.multi_discrete_groups(
        keys, [(N, T), (N, R)], [(3, 5, 7), (21, 21)], [jnp.int32] * 2, use_pallas=True,
        interpret=False,
    )  # fmt: skip
    assert _lowered_triton_calls(groups, jax.random.split(jax.random.key(0))) == 1
