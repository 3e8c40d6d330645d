"""`jaxdrive.wrappers.ActionRepeat` against stepping the wrapped env by hand: the same
state and timestep as the last inner step taken, rewards summed up to the step that ends
the episode, episode lengths ``ceil(L / k)``; and `jaxdrive.make`'s ``action_repeat``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxdrive
from jaxdrive.testing import assert_trees_equal, check_env
from jaxdrive.wrappers import ActionRepeat
from tests.toy_envs import Counter

ENV = Counter(length=7, goal=4)
PARAMS = ENV.default_params.replace(step_reward=0.5)


def _by_hand(key, state, actions, k):
    """Up to ``k`` inner steps with ``actions``, stopping after the one that ends."""
    keys = jax.random.split(key, k)
    total = None
    for i in range(k):
        state, ts = ENV.step(keys[i], state, actions, PARAMS)
        total = ts.reward if total is None else {g: total[g] + ts.reward[g] for g in total}
        if bool(ts.done):
            break
    return state, ts.replace(reward=total)


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_steps_equal_the_inner_steps_by_hand(k: int, seed: int) -> None:
    env = ActionRepeat(ENV, k)
    step = jax.jit(env.step)
    key = jax.random.key(seed)
    state, _ = env.reset(key, PARAMS)
    rng = np.random.default_rng(seed)
    for t in range(env.episode_length):
        actions = {g: jnp.asarray(rng.integers(0, 3, ENV.num_agents(g))) for g in ENV.groups}
        key, k_step = jax.random.split(key)
        want_state, want = _by_hand(k_step, state, actions, k)
        state, ts = step(k_step, state, actions, PARAMS)
        assert_trees_equal(state, want_state, f"state after step {t}")
        assert_trees_equal(ts, want, f"timestep of step {t}")
        if bool(ts.done):
            break
    assert bool(ts.done), "an episode ends within ceil(length / k) steps"


def test_episode_length_name_and_check_env() -> None:
    assert [ActionRepeat(ENV, k).episode_length for k in (1, 2, 3, 7, 8)] == [7, 4, 3, 1, 1]
    assert ActionRepeat(ENV, 3).name == f"ActionRepeat3<{ENV.name}>"
    check_env(ActionRepeat(ENV, 3), num_steps=6, num_envs=2)


def test_make_applies_action_repeat_and_checks_it() -> None:
    env, params = jaxdrive.make("CartPole-v1", action_repeat=2, max_episode_steps=100)
    assert isinstance(env, ActionRepeat) and env.repeat == 2 and env.episode_length == 50
    plain, _ = jaxdrive.make("CartPole-v1", action_repeat=1)
    assert not isinstance(plain, ActionRepeat)
    for bad in (0, 2.5, True, "2", float("nan")):
        with pytest.raises(ValueError, match="action_repeat must be an integer >= 1"):
            jaxdrive.make("CartPole-v1", action_repeat=bad)
