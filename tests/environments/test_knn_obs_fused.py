"""Search kernels that write the k-nearest observation rows (``knn_obs_impl="fused"``).

`kernels.nearest_k_obs` (and `kernels.brute_obs_padded`, the batched Tag step's form)
must give, bit for bit, what the Pallas writer gives from the same search's lists
(`knn_obs.knn_obs_pallas` fed `kernels.nearest_k_lists`), for both searches, any agent
ranges, agents out of the game, fewer in-game others than ``k``, the scale divided or
multiplied by its reciprocal, under `jax.vmap`; and the env with ``knn_obs_impl="fused"``
must step exactly as with the Pallas writer, by every step path. Interpret mode.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from environments.tag_continuous import TagContinuous, kernels
from environments.tag_continuous import env as tag_env
from environments.tag_continuous import knn_obs as ko
from tests.environments.tag_helpers import assert_bitwise


def _inputs(seed: int, m: int, frac_in: float, side: float = 20.0):
    """Positions, in-game flags, the 7 features and the agent-major table of one env."""
    k1, k2, k3, k4, k5 = jax.random.split(jax.random.key(seed), 5)
    x = jax.random.uniform(k1, (m,)) * side
    y = jax.random.uniform(k2, (m,)) * side
    g = jax.random.uniform(k3, (m,)) < frac_in
    speed = jax.random.uniform(k4, (m,))
    acc = jax.random.normal(k5, (m,))  # negative values: signed zeros in masked slots
    direction = jax.random.uniform(k5, (m,)) * 6.28
    types = (jnp.arange(m) < 2).astype(jnp.float32)
    feats = jnp.stack([x, y, speed, acc, direction, types, g.astype(jnp.float32)])
    return x, y, g, feats, ko._agent_major(feats, g)


_SCALE = jnp.array([28.28, 28.28, 1.2, 1.2, 6.283185, 1.0, 1.0], jnp.float32)


def _writer(feats, lists, groups, g, time, reciprocal):
    return [
        ko.knn_obs_pallas(
            feats, lists, None, range(lo, lo + n), _SCALE, g, time, reciprocal=reciprocal
        )
        for lo, n in groups
    ]


@settings(max_examples=10, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    m=st.integers(2, 40),
    k=st.integers(1, 12),
    frac_in=st.sampled_from([1.0, 0.7, 0.15]),
    method=st.sampled_from(["brute", "sorted"]),
    reciprocal=st.booleans(),
    cut=st.floats(0.0, 1.0),
)
def test_search_writes_the_writers_rows(seed, m, k, frac_in, method, reciprocal, cut) -> None:
    """Random envs (``k`` may exceed the in-game others: padded slots), two groups
    splitting the agents at a random point, or one range: the rows equal the writer's."""
    x, y, g, feats, table = _inputs(seed, m, frac_in)
    time = jnp.float32(0.25)
    lo = int(cut * (m - 1))
    groups = [(0, lo), (lo, m - lo)] if lo > 0 else [(0, m)]
    lists = kernels.nearest_k_lists(x, y, g, k, method=method)
    ref = _writer(feats, lists, groups, g, time, reciprocal)
    got = kernels.nearest_k_obs(
        x, y, g, k, table, _SCALE, time, groups, reciprocal=reciprocal, method=method
    )
    assert len(got) == len(groups)
    for a, b, (_, n) in zip(got, ref, groups, strict=True):
        assert a.shape == (n, ko.obs_size(k))
        assert_bitwise(a, b, f"{method} m={m} k={k} groups={groups}")


@pytest.mark.parametrize("method", ["brute", "sorted"])
def test_vmapped_with_a_partial_range(method: str) -> None:
    """Under `jax.vmap` (per-env time and table), a range that leaves agents out on both
    sides."""
    envs = [_inputs(s, 30, 0.8) for s in range(3)]
    x, y, g, feats, table = (jnp.stack(v) for v in zip(*envs, strict=True))
    time = jnp.array([0.0, 0.5, 1.0], jnp.float32)
    groups = [(4, 17)]

    def one(x, y, g, table, t):
        return kernels.nearest_k_obs(
            x, y, g, 5, table, _SCALE, t, groups, reciprocal=True, method=method
        )[0]

    got = jax.jit(jax.vmap(one))(x, y, g, table, time)
    for e in range(3):
        lists = kernels.nearest_k_lists(x[e], y[e], g[e], 5, method=method)
        (ref,) = _writer(feats[e], lists, groups, g[e], time[e], True)
        assert_bitwise(got[e], ref, f"{method} env {e}")


def test_brute_obs_padded_equals_lists_then_writer() -> None:
    m, k, n = 21, 4, 2
    envs = [_inputs(s, m, 0.7) for s in range(n)]
    x, y, g, feats, table = (jnp.stack(v) for v in zip(*envs, strict=True))
    mq, mc = kernels.brute_padding(m)
    xq = jnp.pad(x, ((0, 0), (0, mq - m)))
    yq = jnp.pad(y, ((0, 0), (0, mq - m)))
    xc = jnp.pad(jnp.where(g, x, jnp.inf), ((0, 0), (0, mc - m)), constant_values=jnp.inf)
    yc = jnp.pad(jnp.where(g, y, jnp.inf), ((0, 0), (0, mc - m)), constant_values=jnp.inf)
    time = jnp.array([0.1, 0.9], jnp.float32)
    groups = [(0, 3), (3, m - 3)]
    got = kernels.brute_obs_padded(
        xq, yq, xc, yc, m, k, table, _SCALE, time, groups, reciprocal=False
    )
    lists = kernels.brute_lists_padded(xq, yq, xc, yc, m, k)
    for e in range(n):
        ref = _writer(feats[e], lists[e], groups, g[e], time[e], False)
        for a, b in zip(got, ref, strict=True):
            assert_bitwise(a[e], b, f"env {e}")


def test_bad_inputs_name_the_problem() -> None:
    x, y, g, _, table = _inputs(0, 10, 1.0)
    t = jnp.float32(0.0)
    call = lambda **kw: kernels.nearest_k_obs(
        **{
            "x": x, "y": y, "in_game": g, "k": 3, "table": table, "scale": _SCALE,
            "time": t, "groups": [(0, 10)], "reciprocal": True, **kw,
        }
    )  # fmt: skip
    with pytest.raises(ValueError, match="at least one"):
        call(groups=[])
    with pytest.raises(ValueError, match=r"group \(lo=8, n=5\)"):
        call(groups=[(8, 5)])
    with pytest.raises(ValueError, match="table must be"):
        call(table=table[:-1])
    with pytest.raises(ValueError, match="scale must be"):
        call(scale=_SCALE[:6])
    with pytest.raises(ValueError, match="time must have shape"):
        call(time=jnp.zeros(2))
    with pytest.raises(ValueError, match="k >= 1"):
        call(k=0)


ENV_KW = {
    "contiguous": dict(
        num_taggers=3, num_runners=17, episode_length=5, num_other_agents_observed=4
    ),
    "ids": dict(
        num_taggers=2,
        num_runners=6,
        tagger_ids=(5, 1),
        episode_length=4,
        num_other_agents_observed=3,
    ),
}


@pytest.mark.parametrize("step_impl", ["xla", "vector"])
@pytest.mark.parametrize("name", ["contiguous", "ids"])
def test_env_fused_steps_as_the_writer(name: str, step_impl: str) -> None:
    """Reset, steps through the end of an episode (auto-reset in the batched step) and
    `observe` of a row range: the same bits with ``knn_obs_impl`` ``"fused"`` and
    ``"pallas"`` (non-contiguous groups take the writer's path: still the same)."""
    kw = dict(**ENV_KW[name], impl="pallas", step_impl=step_impl)
    a = TagContinuous(**kw, knn_obs_impl="pallas")
    b = TagContinuous(**kw, knn_obs_impl="fused")
    p, n = a.default_params, 2
    keys = jax.random.split(jax.random.key(0), n)
    reset = lambda env: jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, p)
    (sa, ta), (sb, tb) = reset(a), reset(b)
    assert_bitwise(tb, ta, f"{name} reset")

    def stepper(env):
        if step_impl == "vector":
            return jax.jit(lambda k, rk, s, ac: env.vector_step(rk, s, ac, p, step_key=k))
        return jax.jit(lambda k, rk, s, ac: jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            rk, s, ac, p
        ))  # fmt: skip

    fa, fb = stepper(a), stepper(b)
    for t in range(6):  # episode_length 4-5: the batched step auto-resets
        key = jax.random.key(10 + t)
        acts = jax.vmap(a.sample_actions)(jax.random.split(key, n))
        rk = jax.random.split(jax.random.fold_in(key, 1), n)
        sa, ta = fa(key, rk, sa, acts)
        sb, tb = fb(key, rk, sb, acts)
        assert_bitwise((sb, tb), (sa, ta), f"{name} {step_impl} step {t}")
    one = jax.tree.map(lambda v: v[0], sa)
    got = jax.jit(lambda s: b.observe(s, p, (1, 5)))(one)
    assert_bitwise(got, jax.jit(lambda s: a.observe(s, p, (1, 5)))(one), f"{name} observe")


def _pallas_names(fn, *args) -> list[str]:
    jaxpr = jax.make_jaxpr(fn)(*args)
    return [
        str(e.params.get("name_and_src_info", e.params.get("name", "")))
        for e in jaxpr.jaxpr.eqns
        if e.primitive.name == "pallas_call"
    ]


def test_fused_runs_one_kernel_for_both_groups() -> None:
    """`observations` and the batched step: one search kernel writes both groups; no
    writer kernel runs."""
    env = TagContinuous(**ENV_KW["contiguous"], impl="pallas", knn_obs_impl="fused")
    s, _ = jax.jit(env.reset)(jax.random.key(0))
    names = _pallas_names(env.observations, s, env.default_params)
    assert sum("tag_nearest_k" in n for n in names) == 1, names
    assert not [n for n in names if "tag_knn_obs" in n], names
    vec = TagContinuous(
        **ENV_KW["contiguous"], impl="pallas", knn_obs_impl="fused", step_impl="vector"
    )
    states = jax.tree.map(lambda v: v[None], s)
    acts = jax.tree.map(lambda v: v[None], vec.sample_actions(jax.random.key(1)))
    names = _pallas_names(
        lambda st, ac: vec.vector_step(None, st, ac, vec.default_params), states, acts
    )
    assert sum("tag_nearest_k" in n for n in names) == 1, names
    assert not [n for n in names if "tag_knn_obs" in n], names


def test_config() -> None:
    assert tag_env.KNN_OBS_IMPLS == ("xla", "pallas", "fused")
    assert TagContinuous(knn_obs_impl="fused")._resolved_knn_obs_impl() == "fused"
    with pytest.raises(ValueError, match="knn_obs_impl='fused'.*impl='jax'"):
        TagContinuous(knn_obs_impl="fused", impl="jax")
    with pytest.raises(ValueError, match=r"knn_obs_impl must be one of \('auto', 'xla', "):
        TagContinuous(knn_obs_impl="fuse")
    # Full observation ignores the option.
    kw = dict(num_taggers=2, num_runners=3, use_full_observation=True, impl="pallas")
    a, b = TagContinuous(**kw, knn_obs_impl="fused"), TagContinuous(**kw, knn_obs_impl="pallas")
    key = jax.random.key(0)
    assert_bitwise(jax.jit(a.reset)(key), jax.jit(b.reset)(key), "full observation")
    assert np.array_equal(ko.obs_size(4), 29)
