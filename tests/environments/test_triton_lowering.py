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

import jax
import jax.numpy as jnp
import pytest

from environments.tag_continuous.kernels import (
    batched_step,
    batched_step_kernel,
    full_obs,
    obs_writer,
    search,
)

N, T, R = 3, 4, 40
M = T + R
K = 5


def _lowered_triton_calls(fn, *args) -> int:
    """Lowers ``jax.jit(fn)(*args)`` for CUDA; returns the number of Triton calls."""
    text = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    return text.count("__gpu$xla.gpu.triton")


def _positions(seed: int = 0) -> tuple[jax.Array, jax.Array, jax.Array]:
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.uniform(k1, (N, M)) * 10
    y = jax.random.uniform(k2, (N, M)) * 10
    g = jax.random.uniform(k3, (N, M)) < 0.9
    return x, y, g


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


@pytest.mark.parametrize("in_game_lists", [False, True])
@pytest.mark.parametrize("rows", [range(T, M), (0, 7, 3)])
@pytest.mark.parametrize("reciprocal", [False, True])
def test_knn_obs_lowers_to_triton(rows, reciprocal: bool, in_game_lists: bool) -> None:
    """The observation writer: contiguous rows or not, true division or not, with
    ``(idx, valid)`` lists or the searches' own (with the in-game shortcut or not)."""
    x, y, g = _positions()
    feats = _feats(x, y, g)
    idx = jnp.broadcast_to(jnp.arange(K, dtype=jnp.int32), (N, M, K))
    valid = None if in_game_lists else jnp.ones((N, M, K), bool)

    def fn(feats, idx, g):
        one = lambda f, i, gg: obs_writer.knn_obs_pallas(
            f, i, valid if valid is None else valid[0], rows, jnp.arange(1.0, 8.0), gg,
            jnp.float32(0.5), reciprocal=reciprocal, interpret=False,
            lists_in_game=in_game_lists,
        )  # fmt: skip
        return jax.vmap(one)(feats, idx, g)

    assert _lowered_triton_calls(fn, feats, idx, g) == 1


@pytest.mark.parametrize(
    ("tagger_ids", "reset", "extras"),
    [
        (tuple(range(T)), "uniforms", True),  # unrolled tagger loops, all outputs
        (tuple(range(T)), "keys", False),  # the reset's uniforms drawn in the kernel
        (tuple(range(T)), "step_key", True),  # ... from keys derived in the kernel
        (
            tuple(range(0, 2 * (batched_step_kernel.UNROLL_TAGGERS + 1), 2)),
            None,
            False,
        ),  # fori loops
    ],
)
def test_vector_step_lowers_to_triton(tagger_ids, reset: str | None, extras: bool) -> None:
    _lower_vector_step(tagger_ids, reset, extras)


def _lower_vector_step(tagger_ids, reset: str | None, extras: bool) -> None:
    x, y, g = _positions()
    nt = len(tagger_ids)
    vals = [jnp.float32(1.0)] * len(batched_step.RAW_PARAMS)
    z = jnp.zeros_like(x)
    t = jnp.zeros((N,), jnp.int32)
    act_t = jnp.zeros((N, nt, 2), jnp.int32)
    act_r = jnp.ones((N, M - nt, 2), jnp.int32)
    u = jnp.zeros((N, 3, M), jnp.float32)
    padding = search.brute_padding(M, interpret=False) if extras else None

    def fn(x, y, g):
        return batched_step.tag_vector_step(
            vals, x, y, z, z, z, g, t, act_t, act_r, u if reset == "uniforms" else None,
            reset_key_data=jnp.ones((N, 2), jnp.uint32) if reset == "keys" else None,
            step_key_data=jnp.ones((2,), jnp.uint32) if reset == "step_key" else None,
            tagger_ids=tagger_ids, num_acceleration_levels=6, num_turn_levels=6,
            episode_length=50, runner_exits_game_after_tagged=True, search_padding=padding,
            feature_table=extras, interpret=False,
        )  # fmt: skip

    assert _lowered_triton_calls(fn, x, y, g) == 1
