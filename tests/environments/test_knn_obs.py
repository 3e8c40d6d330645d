"""TagContinuous's k-nearest observation forms (`environments.tag_continuous.knn_obs`).

The Pallas kernel (interpret mode on the CPU) and the XLA form must give the original
partial ``observe()`` output bit for bit (``-0.0`` included): both groups (contiguous or
not), agents out of the game, fewer in-game others than ``k`` (padding), several ``k``,
params traced or compile-time constants, under `jax.vmap` (shared or per-env params),
inside env steps and rollouts, and from the neighbour lists of every search (plain JAX,
the brute-force and the sorted Pallas kernels) or arbitrary ones.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdrive
from environments.tag_continuous import (
    TagContinuous,
    TagContinuousParams,
    TagState,
    kernels,
    neighbors,
)
from environments.tag_continuous import knn_obs as ko
from tests.environments.tag_helpers import (
    assert_bitwise,
    original_obs_parts,
    random_obs_params,
    random_tag_state,
)

ENVS = {
    "3+5_k2": dict(num_taggers=3, num_runners=5, episode_length=9, num_other_agents_observed=2),
    "4+20_k10": dict(
        num_taggers=4, num_runners=20, episode_length=30, num_other_agents_observed=10
    ),
    "ids_2+6_k4": dict(
        num_taggers=2,
        num_runners=6,
        episode_length=7,
        tagger_ids=(5, 1),
        num_other_agents_observed=4,
    ),
    "one_1+2_k1": dict(num_taggers=1, num_runners=2, episode_length=5, num_other_agents_observed=1),
    "stay_1+3_k1": dict(
        num_taggers=1,
        num_runners=3,
        episode_length=6,
        tagger_ids=(2,),
        runner_exits_game_after_tagged=False,
        num_other_agents_observed=1,
    ),
}


def _env(name: str, form: str = "xla") -> TagContinuous:
    return TagContinuous(**ENVS[name], impl="jax", knn_obs_impl=form)


def _observe_original(env: TagContinuous, state: TagState, params, lo: int, hi: int):
    """The partial observation exactly as `TagContinuous.observe` computed it before the
    `knn_obs` module existed (a frozen copy: the reference of both forms)."""
    feats, relative, scale, own, g_own, time = original_obs_parts(env, state, params, lo, hi)
    g = state.in_game
    k = env.num_other_agents_observed
    idx, valid = neighbors.nearest_k(state.x, state.y, g, k)
    mask = (valid[lo:hi] & g[lo:hi, None]).astype(jnp.float32)[:, None, :]
    other = jnp.transpose(feats[:, idx[lo:hi]], (1, 0, 2))
    out = (other - own * relative) / scale * mask
    return jnp.concatenate([out.reshape(hi - lo, -1), (time * g_own[:, 0])], axis=1)


def _random_state(rng: np.random.Generator, env: TagContinuous, L: float, frac: float):
    """`random_tag_state` with about ``frac`` in the game and a duplicated position."""
    return random_tag_state(rng, env, L, frac, "xy")


_params = random_obs_params


def _original_observations(env: TagContinuous, state: TagState, params):
    """``{group: [A_g, D]}`` as the original `TagContinuous.observations` built them: each
    group's rows alone when the groups' ids are contiguous, else all rows then split
    (it matters for one row with ``k = 1``, see `TagContinuous._observe_knn`)."""
    ids = {g: env.group_ids(g) for g in env.groups}
    if all(i == tuple(range(i[0], i[0] + len(i))) for i in ids.values()):
        return {
            g: _observe_original(env, state, params, i[0], i[0] + len(i)) for g, i in ids.items()
        }
    full = _observe_original(env, state, params, 0, env.num_agents_total)
    return {g: full[np.asarray(i)] for g, i in ids.items()}


@functools.cache
def _original_jit(name: str, lo: int = 0, hi: int | None = None):
    """The original's observations (``lo, hi`` None) or rows ``lo:hi``, jitted."""
    env = _env(name)
    if hi is None:
        return jax.jit(lambda s, p: _original_observations(env, s, p))
    return jax.jit(lambda s, p: _observe_original(env, s, p, lo, hi))


@functools.cache
def _observations_jit(name: str, form: str):
    return jax.jit(_env(name, form).observations)


@pytest.mark.parametrize("form", ko.IMPLS)
@pytest.mark.parametrize("name", sorted(ENVS))
def test_forms_equal_original(name: str, form: str) -> None:
    """Both groups, params traced, on random states: some agents out of the game, most of
    them out (fewer in-game others than ``k``: padding), all in."""
    env = _env(name, form)
    rng = np.random.default_rng(abs(hash((name, form))) % 2**32)
    for frac in (0.6, 0.15, 1.0):
        p = _params(rng)
        s = _random_state(rng, env, p.grid_length, frac)
        ref = _original_jit(name)(s, p)
        got = _observations_jit(name, form)(s, p)
        assert_bitwise(got, ref, f"{name} {form} in-game {frac}")
    # The public observe(): all rows, and a row range (one search each).
    m = env.num_agents_total
    ref = _original_jit(name, 0, m)(s, p)
    assert_bitwise(jax.jit(env.observe)(s, p), ref, f"{name} {form} observe")
    got = jax.jit(lambda s, p: env.observe(s, p, (1, m - 1)))(s, p)
    ref = _original_jit(name, 1, m - 1)(s, p)
    assert_bitwise(got, ref, f"{name} {form} observe rows")


@pytest.mark.parametrize("form", ko.IMPLS)
def test_forms_with_constant_params(form: str) -> None:
    """Params closed over (compile-time constants, as in the benchmarks)."""
    name = "4+20_k10"
    env = _env(name, form)
    rng = np.random.default_rng(7)
    p = _params(rng)
    s = _random_state(rng, env, p.grid_length, 0.5)
    ref = jax.jit(lambda s: _original_observations(env, s, p))(s)
    got = jax.jit(lambda s: env.observations(s, p))(s)
    assert_bitwise(got, ref, f"{form} constant params")


def test_vmapped_shared_and_batched_params() -> None:
    """`jax.vmap` over envs with shared (traced) params and with per-env params."""
    rng = np.random.default_rng(13)
    for name in ("3+5_k2", "ids_2+6_k4", "stay_1+3_k1", "one_1+2_k1"):
        base, env = _env(name), _env(name, "pallas")
        params = [_params(rng) for _ in range(3)]
        states = [_random_state(rng, base, p.grid_length, 0.5) for p in params]
        s = jax.tree.map(lambda *x: jnp.stack(x), *states)
        pb = jax.tree.map(lambda *x: jnp.asarray(x, jnp.float32), *params)
        orig = functools.partial(_original_observations, base)
        ref = jax.jit(jax.vmap(orig, in_axes=(0, None)))(s, params[0])
        got = jax.jit(jax.vmap(env.observations, in_axes=(0, None)))(s, params[0])
        assert_bitwise(got, ref, f"{name} vmap shared params")
        ref = jax.jit(jax.vmap(orig))(s, pb)
        got = jax.jit(jax.vmap(env.observations))(s, pb)
        assert_bitwise(got, ref, f"{name} vmap batched params")


def test_env_step_and_rollout_identical() -> None:
    """reset/step TimeSteps, and a vectorized rollout with auto-reset, equal the XLA form's."""
    name = "ids_2+6_k4"
    base, env = _env(name), _env(name, "pallas")
    rng = np.random.default_rng(3)
    p = _params(rng)
    s = _random_state(rng, env, p.grid_length, 0.7)
    a = env.sample_actions(jax.random.key(1))
    key = jax.random.key(2)
    assert_bitwise(jax.jit(env.step)(key, s, a, p), jax.jit(base.step)(key, s, a, p), "step")
    assert_bitwise(jax.jit(env.reset)(key, p), jax.jit(base.reset)(key, p), "reset")
    name = "stay_1+3_k1"
    base, env = _env(name), _env(name, "pallas")
    p = base.make_params(grid_length=2.0, tagging_distance=0.3)
    key = jax.random.key(5)
    ref = jaxdrive.rollout(base, jaxdrive.random_policy(base), key, p, num_envs=3, num_steps=8)
    got = jaxdrive.rollout(env, jaxdrive.random_policy(env), key, p, num_envs=3, num_steps=8)
    assert np.asarray(ref.timesteps.done).any()
    assert_bitwise(got, ref, "rollout")


def _inputs(env: TagContinuous, s: TagState, p: TagContinuousParams):
    """``(feats, scale, in_game, time)`` as the env builds them (call under jit)."""
    pf = jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), p)
    diag = pf.grid_length * np.float32(np.sqrt(2.0))
    ms = pf.max_speed + np.float32(1e-10)
    one = jnp.float32(1.0)
    scale = jnp.stack([diag, diag, ms, ms, jnp.float32(np.float32(2 * np.pi)), one, one])
    time = s.t.astype(jnp.float32) / jnp.float32(env.episode_length)
    return env._features(s), scale, s.in_game, time


def test_kernel_on_any_neighbour_lists() -> None:
    """The kernel equals the XLA form given the lists of every search (plain JAX, the
    brute-force and sorted Pallas kernels), and arbitrary lists (any ``idx``, any
    ``valid``), with small blocks (many programs, a masked tail), non-contiguous rows
    and true division (``reciprocal=False``: within one ulp of the reference)."""
    env = _env("4+20_k10")
    m, k = env.num_agents_total, env.num_other_agents_observed
    rng = np.random.default_rng(11)
    p = _params(rng)
    s = _random_state(rng, env, p.grid_length, 0.6)
    lists = {
        "jax": neighbors.nearest_k(s.x, s.y, s.in_game, k),
        "brute": kernels.nearest_k(s.x, s.y, s.in_game, k, method="brute"),
        "sorted": kernels.nearest_k(s.x, s.y, s.in_game, k, method="sorted"),
        "arbitrary": (
            jnp.asarray(rng.integers(0, m, (m, k)), jnp.int32),
            jnp.asarray(rng.uniform(size=(m, k)) < 0.7),
        ),
    }
    assert_bitwise(lists["brute"], lists["jax"], "brute search")
    assert_bitwise(lists["sorted"], lists["jax"], "sorted search")
    rows_all = range(m)

    @functools.partial(jax.jit, static_argnames=("rows", "form", "opts"))
    def obs(s, p, idx, valid, rows, form, opts=()):
        feats, scale, in_game, time = _inputs(env, s, p)
        return ko.knn_obs(form, feats, idx, valid, rows, scale, in_game, time, **dict(opts))

    for what, (idx, valid) in lists.items():
        ref = np.asarray(obs(s, p, idx, valid, rows_all, "xla"))
        for opts in ((), (("block_size", 32),), (("block_size", 4096), ("num_warps", 8))):
            got = obs(s, p, idx, valid, rows_all, "pallas", opts)
            assert_bitwise(got, ref, f"{what} {opts}")
        rows = (7, 3, 23, 0)
        got = obs(s, p, idx, valid, rows, "pallas", (("block_size", 64),))
        assert_bitwise(got, ref[list(rows)], f"{what} rows {rows}")
        assert_bitwise(obs(s, p, idx, valid, rows, "xla"), ref[list(rows)], f"{what} xla rows")
    got = obs(s, p, *lists["jax"], rows_all, "pallas", (("reciprocal", False),))
    ref = np.asarray(obs(s, p, *lists["jax"], rows_all, "xla"))
    np.testing.assert_allclose(np.asarray(got), ref, rtol=2.4e-7, atol=0)
    # The kernels' own lists (-1 in empty slots, valid=None), as the env passes them.
    for method in ("brute", "sorted"):
        raw = kernels.nearest_k_lists(s.x, s.y, s.in_game, k, method=method)
        idx, valid = lists["jax"]
        assert_bitwise(raw, jnp.where(valid, idx, -1), f"{method} lists")
        assert_bitwise(ko.with_valid(raw), lists["jax"], f"{method} with_valid")
        for form in ko.IMPLS:
            got = obs(s, p, raw, None, rows_all, form, (("block_size", 64),) * (form != "xla"))
            assert_bitwise(got, ref, f"{method} lists, {form}")
            got = obs(s, p, raw, None, (7, 3, 23, 0), form)
            assert_bitwise(got, ref[[7, 3, 23, 0]], f"{method} lists, {form}, rows")


def test_pallas_search_and_writer_env_equal_original() -> None:
    """The env with both Pallas paths (search lists handed to the writer with no
    ``valid`` array) equals the original observations, stepped and reset."""
    rng = np.random.default_rng(21)
    for name in ("4+20_k10", "ids_2+6_k4"):
        env = TagContinuous(**ENVS[name], impl="pallas", knn_obs_impl="pallas")
        for frac in (0.6, 0.1):
            p = _params(rng)
            s = _random_state(rng, env, p.grid_length, frac)
            ref = _original_jit(name)(s, p)
            assert_bitwise(jax.jit(env.observations)(s, p), ref, f"{name} {frac}")
        key = jax.random.key(4)
        a = env.sample_actions(jax.random.key(1))
        base = _env(name)
        got, ref = jax.jit(env.step)(key, s, a, p), jax.jit(base.step)(key, s, a, p)
        assert_bitwise(got, ref, f"{name} step")


def test_one_search_per_step() -> None:
    """`observations` runs the neighbour search once for both groups and (Pallas form)
    one assembly kernel per group."""
    env = TagContinuous(num_taggers=2, num_runners=5, impl="pallas", knn_obs_impl="pallas")
    s, _ = jax.jit(env.reset)(jax.random.key(0))
    jaxpr = jax.make_jaxpr(env.observations)(s, env.default_params)
    names = [
        str(e.params.get("name_and_src_info", e.params.get("name", "")))
        for e in jaxpr.jaxpr.eqns
        if e.primitive.name == "pallas_call"
    ]
    assert sum("tag_nearest_k" in n for n in names) == 1, names
    assert sum("tag_knn_obs" in n for n in names) == 2, names


def test_config_and_registry() -> None:
    with pytest.raises(ValueError, match=r"knn_obs_impl must be one of \('auto', 'xla'"):
        TagContinuous(knn_obs_impl="triton")
    assert TagContinuous().knn_obs_impl == "auto"
    # "auto": the Pallas writer on GPU with the Pallas searches, else the XLA form.
    gpu = jax.default_backend() == "gpu"
    assert TagContinuous()._resolved_knn_obs_impl() == ("pallas" if gpu else "xla")
    assert TagContinuous(impl="jax")._resolved_knn_obs_impl() == "xla"
    assert TagContinuous(knn_obs_impl="pallas")._resolved_knn_obs_impl() == "pallas"
    env, _ = jaxdrive.make("tag_continuous", knn_obs_impl="pallas")
    assert env.knn_obs_impl == "pallas"
    with pytest.raises(ValueError, match="knn_obs_impl"):
        jaxdrive.make("tag_continuous", knn_obs_impl="XLA")
    args = (jnp.zeros((7, 3)), jnp.zeros((3, 1), jnp.int32), jnp.ones((3, 1), bool), (0,))
    rest = (jnp.ones(7), jnp.ones(3, bool), jnp.float32(0))
    with pytest.raises(ValueError, match="impl"):
        ko.knn_obs("gather", *args, *rest)
    with pytest.raises(ValueError, match="power of two"):
        ko.knn_obs_pallas(*args, *rest, block_size=24)
    with pytest.raises(ValueError, match="valid must be bool"):
        ko.knn_obs_xla(*args[:2], jnp.ones((3, 1), jnp.int32), (0,), *rest)
    # Full observation ignores the option.
    kw = dict(num_taggers=2, num_runners=3, use_full_observation=True, impl="jax")
    a, b = TagContinuous(**kw, knn_obs_impl="pallas"), TagContinuous(**kw)
    key = jax.random.key(0)
    assert_bitwise(jax.jit(a.reset)(key), jax.jit(b.reset)(key), "full observation")
    assert ko.obs_size(10) == 71


@pytest.mark.slow
def test_probe_smoke() -> None:
    """The benchmark probe runs at a tiny size and finds the forms equal."""
    from experiments.benchmarks import knn_obs_probe

    records = knn_obs_probe.probe(
        [(3, 2, 4)], 3, ["xla", "pallas"], steps=2, repeats=1, blocks=[64], warps=[4],
        check_steps=2, rounds=2,
    )  # fmt: skip
    assert not [r for r in records if "error" in r], records
    checks = [r for r in records if r["kind"] == "check"]
    assert len(checks) == 4
    assert all(r["const"]["differ"] == 0 and r["traced"]["differ"] == 0 for r in checks)
    times = [r for r in records if r["kind"] in ("time", "asm")]
    assert [(r["form"], r["variant"]) for r in times] == [
        ("xla", "env"),
        ("pallas", "env"),
        ("pallas", "B64/w4"),
        ("xla", "env#2"),
        ("pallas", "env#2"),
    ]
    assert all(r["asm_us"] > 0 for r in times[:3])
    assert all(r["asm_check"]["differ"] == 0 for r in times[1:3])
    assert all(r["step_ms"] > 0 for r in times if r["variant"].startswith("env"))


def test_writer_store_and_warp_options_keep_the_values(monkeypatch) -> None:
    """`knn_obs.OPAQUE_STORE`, `knn_obs.DEFAULT_WARPS`, `knn_obs.LEAN_INDEX` and
    `knn_obs.LAYOUT` change how the kernel computes and stores, never what: the same bits
    as the default writer (interpret mode)."""
    monkeypatch.setattr(ko, "LAYOUT", "flat")  # the flat writer's own settings first
    env = _env("4+20_k10", "pallas")
    rng = np.random.default_rng(5)
    p = _params(rng)
    s = _random_state(rng, env, p.grid_length, 0.6)
    lists = kernels.nearest_k_lists(s.x, s.y, s.in_game, env.num_other_agents_observed)
    feats = env._features(s)
    scale = jnp.arange(1.0, 8.0)
    call = lambda: ko.knn_obs_pallas(
        feats, lists, None, range(4, 24), scale, s.in_game, jnp.float32(0.3), reciprocal=True
    )
    ref = call()
    monkeypatch.setattr(ko, "OPAQUE_STORE", True)
    monkeypatch.setattr(ko, "DEFAULT_WARPS", 8)
    assert_bitwise(call(), ref, "opaque store, 8 warps")
    monkeypatch.setattr(ko, "LEAN_INDEX", not ko.LEAN_INDEX)
    assert_bitwise(call(), ref, "the other index arithmetic")
    # In-game lists (rows of agents out of the game all -1): the shortcut's values.
    # With `TIME_PASS` the lean block and the time-column pass: contiguous and
    # scattered rows, blocks of many rows and of less than one (rows straddling blocks).
    gl = jnp.where(s.in_game[:, None], lists, -1)
    assert not np.all(np.asarray(s.in_game))
    for lean, time_pass, rows, block in (
        (True, True, range(4, 24), None), (True, True, (7, 3, 23, 0, 12), 32),
        (True, True, range(24), 16), (False, True, range(1, 24), 64),
        (True, False, range(4, 24), None), (True, False, (7, 3, 23, 0), 32),
    ):  # fmt: skip
        monkeypatch.setattr(ko, "LEAN_INDEX", lean)
        monkeypatch.setattr(ko, "TIME_PASS", time_pass)
        args = (feats, gl, None, rows, scale, s.in_game, jnp.float32(0.3))
        for recip in (True, False) if block == 32 else (True,):
            want = ko.knn_obs_pallas(*args, reciprocal=recip, block_size=block)
            got = ko.knn_obs_pallas(*args, reciprocal=recip, block_size=block, lists_in_game=True)
            assert_bitwise(got, want, f"in-game lists {lean} {time_pass} {rows} {block} {recip}")
    # The column-tile layout: the flat writer's bits for every list form, rows
    # contiguous or not, several rows per program, true division and not.
    idx, valid = ko.with_valid(lists)
    monkeypatch.setattr(ko, "LEAN_INDEX", True)
    for li, v, igl, rows, block, recip in (
        (gl, None, True, range(4, 24), None, True), (gl, None, True, (7, 3, 23, 0, 12), 32, False),
        (lists, None, False, range(24), 256, True), (idx, valid, False, range(1, 24), 512, False),
        (lists, None, False, (5, 2, 9), None, True),
    ):  # fmt: skip
        args = (feats, li, v, rows, scale, s.in_game, jnp.float32(0.3))
        kw = dict(reciprocal=recip, block_size=block, lists_in_game=igl)
        monkeypatch.setattr(ko, "LAYOUT", "flat")
        want = ko.knn_obs_pallas(*args, **kw)
        monkeypatch.setattr(ko, "LAYOUT", "cols")
        assert_bitwise(ko.knn_obs_pallas(*args, **kw), want, f"cols {igl} {rows} {block} {recip}")
    monkeypatch.setattr(ko, "_ABLATE", "self")
    with pytest.raises(ValueError, match="ablates the flat layout"):
        ko.knn_obs_pallas(*args, **kw)
    monkeypatch.setattr(ko, "_ABLATE", "")
    monkeypatch.setattr(ko, "LAYOUT", "tiles")
    with pytest.raises(ValueError, match="LAYOUT must be one of"):
        ko.knn_obs_pallas(*args, **kw)
    monkeypatch.setattr(ko, "LAYOUT", "cols")
    monkeypatch.setattr(ko, "TABLE_EVICTION", "evict_never")
    with pytest.raises(ValueError, match="TABLE_EVICTION must be one of"):
        ko.knn_obs_pallas(*args, **kw)
    monkeypatch.setattr(ko, "TABLE_EVICTION", None)
    monkeypatch.setattr(ko, "LAYOUT", "flat")
    args = (feats, gl, None, range(4, 24), scale, s.in_game, jnp.float32(0.3))
    with pytest.raises(ValueError, match="lists_in_game needs"):
        ko.knn_obs_pallas(*args[:2], jnp.ones(gl.shape, bool), *args[3:], lists_in_game=True)


def test_writer_rows_in_a_given_order_keep_the_values() -> None:
    """`knn_obs_pallas(row_order=...)`: the column-tile writer taking its rows in any
    permutation of the agents (programs of one and of several rows, the in-game lists'
    shortcut or not, true division or not) writes the same bits; bad orders raise."""
    env = _env("4+20_k10", "pallas")
    rng = np.random.default_rng(9)
    p = _params(rng)
    s = _random_state(rng, env, p.grid_length, 0.6)
    m = env.num_agents_total
    lists = kernels.nearest_k_lists(s.x, s.y, s.in_game, env.num_other_agents_observed)
    gl = jnp.where(s.in_game[:, None], lists, -1)
    feats = env._features(s)
    scale = jnp.arange(1.0, 8.0)
    order = jnp.asarray(rng.permutation(m), jnp.int32)
    for li, igl, rows, block, recip in (
        (gl, True, range(4, 24), None, True), (lists, False, range(24), 32, False),
        (gl, True, range(0, 4), 256, False), (lists, False, range(3, 17), None, True),
    ):  # fmt: skip
        args = (feats, li, None, rows, scale, s.in_game, jnp.float32(0.3))
        kw = dict(reciprocal=recip, block_size=block, lists_in_game=igl)
        want = ko.knn_obs_pallas(*args, **kw)
        got = ko.knn_obs_pallas(*args, **kw, row_order=order)
        assert_bitwise(got, want, f"ordered rows {rows} {block} {recip}")
    args = (feats, lists, None, range(4, 24), scale, s.in_game, jnp.float32(0.3))
    with pytest.raises(ValueError, match="row_order must be integer"):
        ko.knn_obs_pallas(*args, row_order=order[:5])
    with pytest.raises(ValueError, match="contiguous rows"):
        ko.knn_obs_pallas(*args[:3], (5, 2, 9), *args[4:], row_order=order)
