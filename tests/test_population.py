"""Populations (algorithms.population): vmapped members equal separate runs, PBT and
tournament selection against NumPy references, leaderboard invariants, config errors."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import algorithms
from algorithms.common.config import base_config
from algorithms.population import empty_leaderboard, update_leaderboard
from algorithms.population.hparams import HparamRange, Slot, from_unit
from algorithms.population.resize import resize
from algorithms.population.selection import draws, explore, rank_pick, truncation_plan

P = 4
RANGES = {"lr": (1e-4, 1e-2, "log"), "ent_coef": (0.0, 0.05), "clip_eps": (0.1, 0.3)}


def tiny_config(**population):
    c = base_config("ppo", "CartPole-v1")
    c.num_envs, c.num_steps = 2, 8
    c.total_env_steps = 2 * 8 * 8
    c.algo.num_epochs, c.algo.num_minibatches = 1, 1
    c.algo.gamma = 0.97
    c.policies.agent.hidden_sizes = (8,)
    c.population = {
        "size": P,
        "hparams": RANGES,
        "mode": "tournament",
        "tournament": {"leaderboard_size": 3},
    }
    c.population.update(population)
    return c


@pytest.fixture(scope="module")
def run():
    pop = algorithms.make_population_train(tiny_config())
    init = jax.jit(pop.init)
    chunk = jax.jit(lambda s: pop.chunk(s, 2))
    state0 = init(jax.random.key(3))
    state1, metrics = chunk(state0)
    return {"pop": pop, "state0": state0, "state1": state1, "metrics": metrics, "chunk": chunk}


def test_members_get_their_hyperparameters(run):
    pop, st0 = run["pop"], run["state0"]
    hp = np.asarray(pop.hparams(st0.members))
    assert [s.label for s in pop.slots] == ["agent/clip_eps", "agent/ent_coef", "agent/lr"]
    assert hp.shape == (P, 3) and len(np.unique(hp[:, 2])) == P
    for h, s in enumerate(pop.slots):
        assert np.all((hp[:, h] >= s.range.low) & (hp[:, h] <= s.range.high))
    ps = st0.members.policies["agent"]
    np.testing.assert_array_equal(ps.hparams["gamma"], np.full(P, 0.97, np.float32))
    assert st0.leaderboard.score.shape == (3,) and not np.any(st0.leaderboard.valid)


def test_members_equal_separate_single_member_runs(run):
    """Each member of the one program computes what a single-member run with its
    hyper-parameters computes (its config values, its key)."""
    pop, st0, st1 = run["pop"], run["state0"], run["state1"]
    trainer = pop.trainer
    hp = np.asarray(pop.hparams(st0.members))
    k_mem = jax.random.split(jax.random.key(3), 3)[0]
    keys = jax.random.split(k_mem, P)
    single = jax.jit(lambda rs: trainer.chunk(rs, 2))
    init = jax.jit(trainer.init)
    for i in (0, P - 1):
        own = init(keys[i])  # the member's key, the config's hyper-parameters
        hps = dict(own.policies["agent"].hparams)
        for h, s in enumerate(pop.slots):
            hps[s.name] = jnp.float32(hp[i, h])  # as a config holding its values gives
        own = own.replace(policies={"agent": own.policies["agent"].replace(hparams=hps)})
        for a, b in zip(jax.tree.leaves(own), jax.tree.leaves(pop.member(st0, i)), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        rs, m = single(own)
        for a, b in zip(jax.tree.leaves(rs), jax.tree.leaves(pop.member(st1, i)), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-6)
        for k, v in m.items():
            np.testing.assert_allclose(v, run["metrics"][k][i], rtol=2e-5, atol=1e-6)


def _np_truncation(scores, pick, q):
    P_ = len(scores)
    n = max(1, int(q * P_))
    s = np.where(np.isnan(scores), -np.inf, scores)
    order = sorted(range(P_), key=lambda i: (s[i], i))
    src = np.arange(P_)
    for b in order[:n]:
        top = order[P_ - n + min(int(pick[b] * n), n - 1)]
        if not np.isnan(scores[top]):  # no score yet: nothing to copy
            src[b] = top
    return src


@settings(max_examples=15, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 1.0, 2.5, -3.0, np.nan]), min_size=8, max_size=8),
    st.integers(0, 2**31 - 1),
    st.sampled_from([0.1, 0.25, 0.5]),
)
def test_truncation_selection_matches_numpy(scores, seed, q):
    scores = np.asarray(scores, np.float32)
    d = draws(jax.random.key(seed), len(scores), 2, 2)
    src, copied = truncation_plan(jnp.asarray(scores), d["pick"], q)
    want = _np_truncation(scores, np.asarray(d["pick"]), q)
    np.testing.assert_array_equal(np.asarray(src), want)
    c = np.asarray(copied)
    np.testing.assert_array_equal(c, want != np.arange(len(scores)))
    assert int(np.sum(c)) <= max(1, int(q * len(scores)))


def test_explore_matches_numpy():
    slots = (Slot("a", "lr", HparamRange(1e-4, 1e-2, "log")), Slot("a", "g", HparamRange(0.9, 1.0)))
    values = jnp.asarray([[1e-3, 0.95], [5e-3, 0.99], [9e-3, 0.9], [2e-4, 0.97]], jnp.float32)
    changed = jnp.asarray([True, False, True, True])
    d = draws(jax.random.key(7), 4, 2, 2)
    got = np.asarray(explore(values, changed, d, slots, (0.8, 1.2), 0.3))
    v, f = np.asarray(values), np.asarray([0.8, 1.2])[np.asarray(d["factor"])]
    lo, hi = np.asarray([1e-4, 0.9]), np.asarray([1e-2, 1.0])
    u = np.asarray(d["fresh"], np.float64)
    fresh = np.stack([np.exp(np.log(1e-4) + u[:, 0] * np.log(100.0)), 0.9 + u[:, 1] * 0.1], 1)
    want = np.where(np.asarray(d["resample"]) < 0.3, fresh, np.clip(v * f, lo, hi))
    want = np.where(np.asarray(changed)[:, None], want, v)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_exploit_explore_copies_learner_state(run):
    pop, st1 = run["pop"], run["state1"]
    scores = jnp.asarray([3.0, -1.0, 7.0, 2.0])
    key = jax.random.key(11)
    out = jax.jit(pop.exploit_explore)(st1, scores, key)
    d = draws(key, P, len(pop.slots), 2)
    src = _np_truncation(np.asarray(scores), np.asarray(d["pick"]), pop.spec.truncation)
    assert src[1] == 2 and np.array_equal(np.asarray(out.parent), [-1, 2, -1, -1])
    a, b = out.members.policies["agent"], st1.members.policies["agent"]
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params), strict=True):
        np.testing.assert_array_equal(np.asarray(x)[1], np.asarray(y)[2])
        np.testing.assert_array_equal(np.asarray(x)[0], np.asarray(y)[0])
    for x, y in zip(jax.tree.leaves(a.opt_state), jax.tree.leaves(b.opt_state), strict=True):
        np.testing.assert_array_equal(np.asarray(x)[1], np.asarray(y)[2])
    np.testing.assert_array_equal(a.ret_acc, b.ret_acc)  # the envs stay the member's own
    before, after = np.asarray(pop.hparams(st1.members)), np.asarray(pop.hparams(out.members))
    np.testing.assert_array_equal(after[[0, 2, 3]], before[[0, 2, 3]])
    lo = np.asarray([s.range.low for s in pop.slots])
    hi = np.asarray([s.range.high for s in pop.slots])
    for h in range(len(pop.slots)):
        options = np.clip(before[2, h] * np.asarray([0.8, 1.2]), lo[h], hi[h])
        assert np.any(np.isclose(after[1, h], options, rtol=1e-6)) or (
            np.asarray(d["resample"])[1, h] < pop.spec.resample_prob
        )


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.lists(st.sampled_from([0.0, 1.0, 2.0, 5.0, -1.0, np.nan]), min_size=3, max_size=3),
        min_size=1,
        max_size=4,
    ),
)
def test_leaderboard_keeps_top_k_of_everything_entered(rounds):
    k = 4
    lb = empty_leaderboard({"w": jnp.zeros((2,))}, k)
    entered = []
    upd = jax.jit(update_leaderboard)
    for g, scores in enumerate(rounds):
        s = np.asarray(scores, np.float32)
        snaps = {"w": jnp.stack([jnp.full((2,), v) for v in s])}  # a snapshot carries its score
        lb = upd(lb, snaps, jnp.asarray(s), jnp.full(len(s), 10.0 * g), jnp.int32(g))
        entered += [float(v) for v in s if not np.isnan(v)]
        sc, valid = np.asarray(lb.score), np.asarray(lb.valid)
        n = min(k, len(entered))
        assert valid.tolist() == [True] * n + [False] * (k - n)
        np.testing.assert_array_equal(sc[:n], sorted(entered, reverse=True)[:n])
        assert np.all(np.isneginf(sc[n:]))
        np.testing.assert_array_equal(np.asarray(lb.snapshots["w"])[:n, 0], sc[:n])
        assert np.all(np.asarray(lb.generation)[:n] <= g) and np.all(np.asarray(lb.member)[:n] >= 0)


def test_rank_pick_weights():
    valid = jnp.asarray([True, True, True, False])
    u = jax.random.uniform(jax.random.key(0), (20000,))
    counts = np.bincount(np.asarray(rank_pick(valid, u)), minlength=4) / 20000
    w = np.asarray([1, 1 / 2, 1 / 3, 0])
    np.testing.assert_allclose(counts, w / w.sum(), atol=0.015)
    assert np.all(np.asarray(rank_pick(jnp.zeros(3, bool), u[:5])) == 0)


def test_select_round(run):
    """Scores from metrics, the leaderboard update and a tournament restart in one
    jitted call: the worst member restarts from a leaderboard snapshot."""
    pop, st1, m = run["pop"], run["state1"], run["metrics"]
    out = jax.jit(lambda s, mm: pop.select(pop.score(s, mm)))(st1, m)
    ended = np.asarray(m["episodes_done"]) > 0
    ret = np.asarray(m["episode_return/agent"])
    want = np.where(ended.any(1), (ret * ended).sum(1) / np.maximum(ended.sum(1), 1), np.nan)
    np.testing.assert_allclose(np.asarray(out.scores), want, rtol=1e-6)
    assert np.isfinite(want).sum() >= 2  # episodes ended: a real ranking
    lb = out.leaderboard
    assert int(out.generation) == 1 and np.asarray(lb.valid).sum() == min(
        3, np.isfinite(want).sum()
    )
    np.testing.assert_array_equal(
        np.asarray(lb.score)[:2], np.sort(want[np.isfinite(want)])[::-1][:2]
    )
    restarted = np.flatnonzero(np.asarray(out.parent) >= 0)
    assert restarted.tolist() == [int(np.argmin(np.where(np.isnan(want), -np.inf, want)))]
    i, e = restarted[0], int(np.asarray(out.parent)[restarted[0]])
    w_lb = np.asarray(jax.tree.leaves(lb.snapshots["agent"].params)[0])[e]
    w_i = np.asarray(jax.tree.leaves(out.members.policies["agent"].params)[0])[i]
    np.testing.assert_array_equal(w_i, w_lb)


@pytest.mark.parametrize(
    ("population", "match"),
    [
        ({"size": 3, "num_devices": 2}, "not divisible by config.population.num_devices"),
        ({"hparams": {"lr": (1.0, 0.1)}}, r"config.population.hparams.lr: low=1.0 exceeds"),
        ({"hparams": {"num_epochs": (1, 4)}}, "no trained policy has 'num_epochs'"),
        ({"hparams": {"runner/lr": (0.1, 0.2)}}, "'runner' is not a trained policy"),
        ({"score": "episode_return/x"}, "config.population.score must be one of"),
        ({"pbt": {"truncation": 0.7}}, r"config.population.pbt.truncation must lie in"),
        ({"pbt": {"speed": 1}}, r"unknown config key\(s\) \['speed'\] in config.population.pbt"),
        ({"mode": "tournament", "tournament": {"leaderboard_size": 0}}, "leaderboard_size >= 1"),
    ],
)
def test_population_config_errors(population, match):
    with pytest.raises(ValueError, match=match):
        algorithms.make_population_train(tiny_config(**population))


def test_win_rate_score_only_where_the_trainer_reports_it():
    """``score="win_rate"`` is accepted where the trainer's metrics have it and members are
    scored by training episodes; the metric names are asked for only then."""
    from algorithms.population.config import resolve_population

    def never() -> tuple[str, ...]:
        raise AssertionError("metric names asked for an episode-return score")

    assert resolve_population({}, {}, ["ally"], never).score == "episode_return/ally"
    spec = resolve_population({"score": "win_rate"}, {}, ["ally"], lambda: ("win_rate",))
    assert spec.score == "win_rate"
    with pytest.raises(ValueError, match=r"score must be one of \['episode_return/ally'\]"):
        resolve_population({"score": "win_rate"}, {}, ["ally"], lambda: ("episodes_done",))
    with pytest.raises(ValueError, match="score must be one of"):
        resolve_population(
            {"score": "win_rate", "eval_episodes": 4}, {}, ["ally"], lambda: ("win_rate",)
        )


def test_from_unit_ranges():
    slots = (Slot("a", "x", HparamRange(1e-3, 1e-1, "log")), Slot("a", "y", HparamRange(-1.0, 1.0)))
    out = np.asarray(from_unit(jnp.asarray([[0.0, 0.0], [0.5, 0.5], [0.999999, 1.0]]), slots))
    np.testing.assert_allclose(out, [[1e-3, -1.0], [1e-2, 0.0], [1e-1, 1.0]], rtol=1e-4)


def test_resize_rule(run):
    """Growing 4 -> 6 keeps the members and adds copies of the two best (new keys,
    explored hyper-parameters); shrinking 4 -> 2 keeps the two best in order."""
    pop, st = run["pop"], run["state1"]
    st = st.replace(scores=jax.numpy.asarray([1.0, 5.0, np.nan, 3.0]))
    for size, want in ((6, [0, 1, 2, 3, 1, 3]), (2, [1, 3])):
        big = algorithms.make_population_train(tiny_config(size=size))
        out = resize(big, st, jax.eval_shape(big.init, jax.random.key(0)))
        w_old = np.asarray(jax.tree.leaves(st.members.policies["agent"].params)[0])
        w_new = np.asarray(jax.tree.leaves(out.members.policies["agent"].params)[0])
        np.testing.assert_array_equal(w_new, w_old[want])
        keys = np.asarray(out.members.key)
        assert len({tuple(k) for k in keys}) == size  # every member its own key
        hp_old, hp_new = np.asarray(pop.hparams(st.members)), np.asarray(big.hparams(out.members))
        kept = min(size, 4)
        np.testing.assert_array_equal(hp_new[:kept], hp_old[want[:kept]])
        assert not np.array_equal(hp_new[kept:], hp_old[want[kept:]]) or size <= 4


def test_evaluation_episode_scores(run):
    """``eval_episodes``: deterministic episodes per member; a population of copies of
    one member scores that member's score everywhere; CartPole returns lie in [1, 500]."""
    pop = dataclasses.replace(
        run["pop"], spec=dataclasses.replace(run["pop"].spec, eval_episodes=3)
    )
    st = run["state1"]
    ev = jax.jit(pop.evaluate)
    key = jax.random.key_data(jax.random.key(4))
    scores = np.asarray(ev(st, key))
    assert scores.shape == (P,) and np.all((scores >= 1.0) & (scores <= 500.0))
    same = st.replace(members=jax.tree.map(lambda x: jnp.stack([x[2]] * P), st.members))
    np.testing.assert_allclose(np.asarray(ev(same, key)), np.full(P, scores[2]), rtol=1e-6)
