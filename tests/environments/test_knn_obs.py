"""TagContinuous's k-nearest observation: the plain-JAX form (`obs_xla.knn_obs_xla`) and
the Pallas writer (`kernels.obs_writer`, interpret mode on the CPU).

Both must give the original partial ``observe()`` output bit for bit (``-0.0``
included): both groups (contiguous or not), agents out of the game, fewer in-game others
than ``k`` (padding), several ``k``, params traced or compile-time constants, under
`jax.vmap` (shared or per-env params), and from the neighbour lists of every search or
arbitrary ones.
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdrive
from environments.tag_continuous import TagContinuous, TagKernelConfig, TagState, neighbors, obs_xla
from environments.tag_continuous.kernels import obs_writer, search
from environments.tag_continuous.observations import features
from tests.environments.tag_helpers import (
    assert_bitwise,
    original_obs_parts,
    random_obs_params,
    random_tag_state,
)

ENVS = {
    "3+5_k2": dict(num_taggers=3, num_runners=5, episode_length=9, num_other_agents_observed=2),
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
BACKENDS = ("xla", "pallas")


@functools.cache
def _env(name: str, backend: str = "xla") -> TagContinuous:
    return TagContinuous(**ENVS[name], backend=backend)


def _observe_original(env: TagContinuous, state: TagState, params, lo: int, hi: int):
    """The partial observation exactly as `TagContinuous.observe` computed it before the
    observation modules existed (a frozen copy: the reference of both forms)."""
    feats, relative, scale, own, g_own, time = original_obs_parts(env, state, params, lo, hi)
    g = state.in_game
    k = env.num_other_agents_observed
    idx, valid = neighbors.nearest_k(state.x, state.y, g, k)
    mask = (valid[lo:hi] & g[lo:hi, None]).astype(jnp.float32)[:, None, :]
    other = jnp.transpose(feats[:, idx[lo:hi]], (1, 0, 2))
    out = (other - own * relative) / scale * mask
    return jnp.concatenate([out.reshape(hi - lo, -1), (time * g_own[:, 0])], axis=1)


def _original_observations(env: TagContinuous, state: TagState, params):
    """``{group: [A_g, D]}`` as the original `TagContinuous.observations` built them: each
    group's rows alone when the groups' ids are contiguous, else all rows then split
    (it matters for one row with ``k = 1``, see `observations.observe_knn`)."""
    ids, contiguous = env.group_rows()
    if contiguous:
        return {
            g: _observe_original(env, state, params, i[0], i[0] + len(i)) for g, i in ids.items()
        }
    full = _observe_original(env, state, params, 0, env.num_agents_total)
    return {g: full[np.asarray(i)] for g, i in ids.items()}


def _random_state(rng: np.random.Generator, env: TagContinuous, L: float, frac: float):
    """`random_tag_state` with about ``frac`` in the game and a duplicated position."""
    return random_tag_state(rng, env, L, frac, "xy")


@pytest.mark.parametrize("name", sorted(ENVS))
def test_forms_equal_original(name: str) -> None:
    """Both groups, params traced, on random states: some agents out of the game, most of
    them out (fewer in-game others than ``k``: padding), all in; and `observe`'s rows."""
    base = _env(name)
    original = jax.jit(lambda s, p: _original_observations(base, s, p))
    forms = {b: jax.jit(_env(name, b).observations) for b in BACKENDS}
    rng = np.random.default_rng(sum(map(ord, name)))
    for frac in (0.6, 0.15, 1.0):
        p = random_obs_params(rng)
        s = _random_state(rng, base, p.grid_length, frac)
        ref = original(s, p)
        for backend, fn in forms.items():
            assert_bitwise(fn(s, p), ref, f"{name} {backend} in-game {frac}")
    if name == "ids_2+6_k4":  # the public observe(): a row range (one search)
        m = base.num_agents_total
        ref = jax.jit(lambda s, p: _observe_original(base, s, p, 1, m - 1))(s, p)
        for backend in BACKENDS:
            env = _env(name, backend)
            got = jax.jit(lambda s, p, e=env: e.observe(s, p, (1, m - 1)))(s, p)
            assert_bitwise(got, ref, f"{name} {backend} observe rows")


def test_writer_with_constant_and_batched_params() -> None:
    """Params closed over (compile-time constants), and `jax.vmap` over envs with shared
    (traced) and per-env params."""
    rng = np.random.default_rng(13)
    name = "ids_2+6_k4"
    base, env = _env(name), _env(name, "pallas")
    p = random_obs_params(rng)
    s = _random_state(rng, env, p.grid_length, 0.5)
    ref = jax.jit(lambda s: _original_observations(base, s, p))(s)
    assert_bitwise(jax.jit(lambda s: env.observations(s, p))(s), ref, "constant params")
    params = [random_obs_params(rng) for _ in range(3)]
    states = [_random_state(rng, base, q.grid_length, 0.5) for q in params]
    s = jax.tree.map(lambda *x: jnp.stack(x), *states)
    pb = jax.tree.map(lambda *x: jnp.asarray(x, jnp.float32), *params)
    orig = functools.partial(_original_observations, base)
    ref = jax.jit(jax.vmap(orig, in_axes=(0, None)))(s, params[0])
    got = jax.jit(jax.vmap(env.observations, in_axes=(0, None)))(s, params[0])
    assert_bitwise(got, ref, "vmap shared params")
    ref = jax.jit(jax.vmap(orig))(s, pb)
    got = jax.jit(jax.vmap(env.observations))(s, pb)
    assert_bitwise(got, ref, "vmap batched params")


def _inputs(env: TagContinuous, s: TagState, p):
    """``(feats, scale, in_game, time)`` as the env builds them (call under jit)."""
    pf = jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), p)
    diag = pf.grid_length * np.float32(np.sqrt(2.0))
    ms = pf.max_speed + np.float32(1e-10)
    one = jnp.float32(1.0)
    scale = jnp.stack([diag, diag, ms, ms, jnp.float32(np.float32(2 * np.pi)), one, one])
    time = s.t.astype(jnp.float32) / jnp.float32(env.episode_length)
    return features(env, s), scale, s.in_game, time


def test_writer_on_any_neighbour_lists() -> None:
    """The writer equals the plain-JAX form given the reference search's lists and
    arbitrary lists (any ``idx``, any ``valid``), for all rows and for non-contiguous
    rows, with true division (``reciprocal=False``: within one ulp of the reference), and
    from the kernels' own lists (``-1`` in empty slots, ``valid=None``), the grid search's
    in-game-only lists with the writer's in-game shortcut included."""
    env = TagContinuous(num_taggers=4, num_runners=20, num_other_agents_observed=6)
    m, k = env.num_agents_total, env.num_other_agents_observed
    rng = np.random.default_rng(11)
    p = random_obs_params(rng)
    s = _random_state(rng, env, p.grid_length, 0.6)
    ref_lists = neighbors.nearest_k(s.x, s.y, s.in_game, k)
    arbitrary = (
        jnp.asarray(rng.integers(0, m, (m, k)), jnp.int32),
        jnp.asarray(rng.uniform(size=(m, k)) < 0.7),
    )

    @functools.partial(jax.jit, static_argnames=("rows", "kernel", "opts"))
    def obs(s, p, idx, valid, rows, kernel, opts=()):
        feats, scale, in_game, time = _inputs(env, s, p)
        if not kernel:
            return obs_xla.knn_obs_xla(feats, idx, valid, rows, scale, in_game, time)
        return obs_writer.knn_obs_pallas(
            feats, idx, valid, rows, scale, in_game, time, interpret=True, **dict(opts)
        )

    rows, some = tuple(range(m)), (7, 3, 23, 0)
    for what, (idx, valid) in {"jax": ref_lists, "arbitrary": arbitrary}.items():
        ref = np.asarray(obs(s, p, idx, valid, rows, False))
        assert_bitwise(obs(s, p, idx, valid, rows, True), ref, what)
        assert_bitwise(obs(s, p, idx, valid, some, True), ref[list(some)], f"{what} rows")
    ref = np.asarray(obs(s, p, *ref_lists, rows, False))
    got = obs(s, p, *ref_lists, rows, True, (("reciprocal", False),))
    np.testing.assert_allclose(np.asarray(got), ref, rtol=2.4e-7, atol=0)
    raw = search.nearest_k_lists(s.x, s.y, s.in_game, k, method="brute", interpret=True)
    assert_bitwise(obs_xla.with_valid(raw), ref_lists, "brute lists")
    for kernel in (False, True):
        assert_bitwise(obs(s, p, raw, None, rows, kernel), ref, f"own lists, kernel {kernel}")
    # in-game queries: the rows out of the game are empty; the shortcut keeps the values
    raw = search.nearest_k_lists(
        s.x, s.y, s.in_game, k, method="grid", queries="in_game", interpret=True
    )
    assert search.lists_in_game_only("grid", "in_game")
    assert np.all(np.asarray(raw)[~np.asarray(s.in_game)] == -1)
    got = obs(s, p, raw, None, rows, True, (("lists_in_game", True),))
    np.testing.assert_array_equal(np.asarray(got), ref)  # as numbers: +0.0 for -0.0
    assert_bitwise(got, obs(s, p, raw, None, rows, True), "in-game shortcut")


def _kernel_names(fn, *args) -> list[str]:
    """The names of the Pallas kernels in ``fn``'s jaxpr (nested jaxprs included)."""
    return sorted(set(re.findall(r"\btag_[a-z_]+", str(jax.make_jaxpr(fn)(*args)))))


def test_choices_compile_their_own_programs() -> None:
    """Envs that differ only in an implementation choice (``backend``, or a
    `TagKernelConfig` that picks another search) are different static jit arguments:
    each compiles its own program, which runs its own choice's kernels, in one process,
    and all give the plain-JAX observations."""
    kw = dict(num_taggers=2, num_runners=5, num_other_agents_observed=3)
    envs = {
        "xla": TagContinuous(**kw, backend="xla"),
        "brute": TagContinuous(**kw, backend="pallas"),
        "grid": TagContinuous(**kw, backend="pallas", kernel_config=TagKernelConfig(brute_below=0)),
        "sorted": TagContinuous(
            **kw, backend="pallas", kernel_config=TagKernelConfig(brute_below=0, grid_up_to=0)
        ),
    }
    assert len(set(envs.values())) == 4 and len({hash(e) for e in envs.values()}) == 4
    assert TagContinuous(**kw, kernel_config=TagKernelConfig()) == TagContinuous(**kw)
    traces = []

    @functools.partial(jax.jit, static_argnums=0)
    def observe(env, s, p):
        traces.append(env)
        return env.observations(s, p)

    p = envs["xla"].make_params(grid_length=2.0)
    s = _random_state(np.random.default_rng(3), envs["xla"], 2.0, 0.6)
    ref = observe(envs["xla"], s, p)
    for name, env in envs.items():
        got = observe(env, s, p)
        np.testing.assert_array_equal(np.asarray(got["runner"]), np.asarray(ref["runner"]), name)
        names = _kernel_names(env.observations, s, p)
        want = {"xla": [], "brute": ["tag_knn_obs", "tag_nearest_k"]}.get(name)
        assert names == want if want is not None else f"tag_nearest_k_{name}" in names, names
    assert traces == list(envs.values())  # one trace (one program) per choice
    observe(envs["grid"], s, p)
    assert len(traces) == 4  # cached: no retrace


def test_one_search_per_step() -> None:
    """`observations` runs the neighbour search once for both groups and one writer
    kernel per group."""
    env = TagContinuous(num_taggers=2, num_runners=5, backend="pallas")
    s, _ = jax.jit(TagContinuous(num_taggers=2, num_runners=5).reset)(jax.random.key(0))
    jaxpr = jax.make_jaxpr(env.observations)(s, env.default_params)
    names = [
        str(e.params.get("name_and_src_info", e.params.get("name", "")))
        for e in jaxpr.jaxpr.eqns
        if e.primitive.name == "pallas_call"
    ]
    assert sum("tag_nearest_k" in n for n in names) == 1, names
    assert sum("tag_knn_obs" in n for n in names) == 2, names


def test_argument_checks_and_registry() -> None:
    env, _ = jaxdrive.make("tag_continuous", backend="pallas")
    assert env.backend == "pallas" and env.uses_kernels
    with pytest.raises(ValueError, match="backend"):
        jaxdrive.make("tag_continuous", backend="XLA")
    args = (jnp.zeros((7, 3)), jnp.zeros((3, 1), jnp.int32), jnp.ones((3, 1), bool), (0,))
    rest = (jnp.ones(7), jnp.ones(3, bool), jnp.float32(0))
    with pytest.raises(ValueError, match="valid must be bool"):
        obs_xla.knn_obs_xla(*args[:2], jnp.ones((3, 1), jnp.int32), (0,), *rest)
    with pytest.raises(ValueError, match="lists_in_game"):
        obs_writer.knn_obs_pallas(*args, *rest, lists_in_game=True)
    with pytest.raises(ValueError, match="rows"):
        obs_writer.knn_obs_pallas(*args[:3], (3,), *rest)
    with pytest.raises(ValueError, match="table"):
        obs_writer.knn_obs_pallas(*args, *rest, table=jnp.zeros(5))
    assert obs_xla.knn_obs_size(10) == 71
