"""Self-play leagues (algorithms.population.league) on a toy env of two groups (the
policies named as Tag's): turns, pools, the frozen side playing the drawn snapshot,
opponent sampling, held-out opponents."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from algorithms.common.config import base_config
from algorithms.population.league import Pool, make_league
from experiments.configs import tag_continuous
from tests.toy_envs import Counter


def _leaves_equal(a, b) -> bool:
    return all(
        np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


@pytest.fixture(scope="module")
def league_run():
    c = base_config("ppo", "counter", policies={"tagger": ["red"], "runner": ["blue"]})
    c.num_envs, c.num_steps = 2, 8
    c.total_env_steps = 2 * 8 * 8
    c.algo.num_epochs, c.algo.num_minibatches = 1, 1
    for p in ("tagger", "runner"):
        c.policies[p].hidden_sizes = (8,)
    env = Counter(length=4)  # two opposed groups; episodes end in every chunk
    league = make_league(c, env, env.default_params, pool_size=2, sampling="prioritized")
    state = jax.jit(league.init)(jax.random.key(0))
    chunks = {s: jax.jit(lambda st, s=s: league.chunk(st, 1, s)) for s in league.sides}
    states = [state]
    for _ in range(3):
        state, _ = chunks[league.side_of(state)](state)
        states.append(state)
    return league, states


def test_turns_and_pools(league_run):
    league, states = league_run
    assert [league.side_of(s) for s in states] == ["tagger", "runner", "tagger", "runner"]
    s0, s1, s2, s3 = states
    # turn 1: taggers learnt, runners stayed at their (only) snapshot
    assert not _leaves_equal(s0.live["tagger"].params, s1.live["tagger"].params)
    assert _leaves_equal(s0.live["runner"].params, s1.live["runner"].params)
    np.testing.assert_array_equal(s1.pools["tagger"].valid, [True, True])
    np.testing.assert_array_equal(s1.pools["tagger"].added, [0, 1])
    assert np.isfinite(np.asarray(s1.pools["runner"].score)[0])  # taggers played entry 0
    # the ring: the tagger snapshot of turn 3 overwrote the oldest (turn 0)
    np.testing.assert_array_equal(s3.pools["tagger"].added, [3, 1])
    np.testing.assert_array_equal(s3.pools["runner"].added, [0, 2])
    snap = jax.tree.map(lambda x: x[0], s3.pools["tagger"].snapshots.params)
    assert _leaves_equal(snap, s3.live["tagger"].params)
    assert _leaves_equal(s3.live["runner"].params, s2.live["runner"].params)


def test_frozen_side_plays_the_drawn_snapshot(league_run):
    league, states = league_run
    s1, s2 = states[1], states[2]  # runners learnt in turn 2 against tagger entry s1.opponent
    drawn = jax.tree.map(lambda x: x[int(s1.opponent)], s1.pools["tagger"].snapshots.params)
    assert _leaves_equal(s2.runner.policies["tagger"].params, drawn)
    assert _leaves_equal(s2.live["tagger"].params, s1.live["tagger"].params)  # its own kept


def test_prioritized_draws_hardest_unplayed_first(league_run):
    league = league_run[0]
    pool = Pool(
        snapshots={"w": jnp.zeros((4, 1))},
        valid=jnp.asarray([True, True, True, False]),
        added=jnp.asarray([0, 1, 2, -1]),
        score=jnp.asarray([1.0, -2.0, jnp.nan, jnp.nan]),
        next=jnp.int32(3),
    )
    keys = jax.random.split(jax.random.key(1), 600)
    draws = np.asarray(jax.vmap(lambda k: league._draw(pool, k))(keys))
    counts = np.bincount(draws, minlength=4) / 600
    # rank order: entry 2 (unplayed), entry 1 (score -2), entry 0; weights 1, 1/2, 1/3
    np.testing.assert_allclose(counts, np.asarray([2, 3, 6, 0]) / 11, atol=0.08)


def test_held_out_evaluation(league_run):
    league, states = league_run
    held = jax.jit(league.held_out)(states[-1], jax.random.key(5))
    assert set(held) == {"tagger", "runner"} and set(held["tagger"]) == {
        "oldest",
        "random",
        "latest",
    }
    oldest = held["tagger"]["oldest"]["runner"]["params"]
    assert _leaves_equal(
        oldest, jax.tree.map(lambda x: x[0], states[-1].pools["runner"].snapshots.params)
    )
    live = states[-1].live["tagger"].params
    for name in ("oldest", "random", "latest"):
        pair = held["tagger"][name]
        assert _leaves_equal(pair["tagger"]["params"], live)
        shapes = jax.tree.map(np.shape, pair["runner"]["params"])
        assert shapes == jax.tree.map(np.shape, states[-1].live["runner"].params)
    assert _leaves_equal(
        held["tagger"]["latest"]["runner"]["params"], states[-1].live["runner"].params
    )


def test_league_errors():
    c = tag_continuous.get_config("tiny")
    with pytest.raises(ValueError, match="sides must name two policies"):
        make_league(c, sides=("tagger", "chaser"))
    with pytest.raises(ValueError, match="sampling must be one of"):
        make_league(c, sampling="best")
