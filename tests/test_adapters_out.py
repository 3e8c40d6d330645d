"""The outward adapters: `jaxdrive.adapters.to_pettingzoo` passes PettingZoo's own
``parallel_api_test`` (Tag, CartPole, a masked env), `to_gymnasium` passes Gymnasium's
``env_checker`` (one env) and keeps the vector API's same-step auto-reset conventions."""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest

import jaxdrive
from jaxdrive.adapters import to_gymnasium, to_pettingzoo
from tests.toy_envs import MaskedChoice


@pytest.fixture(scope="module")
def tag():
    return jaxdrive.make("tag_continuous", num_taggers=2, num_runners=3, episode_length=12)


@pytest.fixture(scope="module")
def cartpole():
    return jaxdrive.make("CartPole-v1", max_episode_steps=30)


def _api_test(par_env, cycles):
    from pettingzoo.test import parallel_api_test

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the test's warnings (e.g. a live agent without obs)
        parallel_api_test(par_env, num_cycles=cycles)


def test_pettingzoo_api_test_passes_on_tag(tag):
    env, params = tag
    pz = to_pettingzoo(env, params)
    assert pz.possible_agents == ["tagger_0", "tagger_1", "runner_0", "runner_1", "runner_2"]
    _api_test(pz, cycles=20)
    obs, _ = pz.reset(seed=3)
    assert obs["runner_2"].shape == env.observation_space("runner").shape
    assert obs["runner_2"].dtype == np.float32
    steps, rewards = 0, 0.0
    while pz.agents:  # an episode to its end: every agent leaves
        actions = {a: pz.action_space(a).sample() for a in pz.agents}
        obs, rew, term, trunc, infos = pz.step(actions)
        assert set(obs) == set(rew) == set(term) == set(infos) >= set(pz.agents)
        rewards += sum(rew.values())
        steps += 1
    assert steps <= env.episode_length and rewards != 0.0


def test_pettingzoo_reset_seeds_and_cartpole(cartpole):
    env, params = cartpole
    pz = to_pettingzoo(env, params)
    _api_test(pz, cycles=40)
    first = pz.reset(seed=7)[0]["agent_0"]
    np.testing.assert_array_equal(pz.reset(seed=7)[0]["agent_0"], first)
    assert not np.array_equal(pz.reset(seed=8)[0]["agent_0"], first)


def test_pettingzoo_masks_in_the_observation_dict():
    env = MaskedChoice(multi=True, length=3)
    pz = to_pettingzoo(env)
    space = pz.observation_space("agent_1")
    assert set(space.spaces) == {"observation", "action_mask"}
    _api_test(pz, cycles=10)  # samples with the masks the observations carry
    obs, _ = pz.reset(seed=0)
    mask = obs["agent_0"]["action_mask"]  # MultiDiscrete([4, 3]): one mask per dimension
    assert [m.shape for m in mask] == [(4,), (3,)] and mask[0].dtype == np.int8
    phase = int(np.argmax(obs["agent_0"]["observation"]))
    assert mask[0][phase] == 0 and mask[1][phase % 3] == 0 and mask[0].sum() == 3


def test_pettingzoo_vector_form_auto_resets(cartpole):
    env, params = cartpole
    pz = to_pettingzoo(env, params, num_envs=3)
    assert pz.possible_agents == ["agent_0", "agent_1", "agent_2"]
    pz.reset(seed=0)
    ends = 0
    for _ in range(40):
        obs, _, term, trunc, infos = pz.step({a: 1 for a in pz.agents})  # always push right
        assert pz.agents == pz.possible_agents  # nobody leaves: copies auto-reset
        for a in pz.agents:
            if term[a] or trunc[a]:
                ends += 1
                assert abs(infos[a]["final_obs"][0]) > 2.4 or abs(infos[a]["final_obs"][2]) > 0.2
                assert np.all(np.abs(obs[a]) <= 0.05)  # the next episode's first obs
    assert ends >= 3


def test_gymnasium_env_checker_on_cartpole(cartpole):
    from gymnasium.utils.env_checker import check_env

    env, params = cartpole
    single = to_gymnasium(env, params)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*render")  # no render modes
        check_env(single, skip_render_check=True)
    obs, _ = single.reset(seed=0)
    done, steps = False, 0
    while not done:
        obs, r, term, trunc, _ = single.step(0)
        done, steps = term or trunc, steps + 1
        assert isinstance(r, float) and obs in single.observation_space
    assert term and steps < env.episode_length  # pushing left topples the pole


def test_gymnasium_vector_env_same_step_autoreset(cartpole):
    from gymnasium.vector import AutoresetMode

    env, params = cartpole
    venv = to_gymnasium(env, params, num_envs=4)
    assert venv.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert venv.single_action_space.n == 2 and venv.action_space.shape == (4,)
    obs, info = venv.reset(seed=1)
    assert obs.shape == (4, 4) and obs.dtype == np.float32 and obs in venv.observation_space
    np.testing.assert_array_equal(venv.reset(seed=1)[0], obs)
    ended = np.zeros(4, int)
    for _ in range(env.episode_length + 1):
        obs, rew, term, trunc, info = venv.step(np.ones(4, np.int64))
        assert rew.shape == term.shape == trunc.shape == (4,)
        done = term | trunc
        if done.any():
            np.testing.assert_array_equal(info["_final_obs"], done)
            final = info["final_obs"][done]  # the pole fell or the cart left the track
            assert np.all((np.abs(final[:, 0]) > 2.4) | (np.abs(final[:, 2]) > 0.2))
            assert np.all(np.abs(obs[done]) <= 0.05)  # reset in the same step
        ended += done
    assert np.all(ended >= 1)


def test_gymnasium_refuses_multi_agent_envs(tag):
    env, params = tag
    with pytest.raises(
        ValueError, match="single-agent envs .* use jaxdrive.adapters.to_pettingzoo"
    ):
        to_gymnasium(env, params, num_envs=2)


def test_one_device_call_per_step(cartpole, monkeypatch):
    """A step is one call of one compiled function whose outputs come back as one
    buffer, by one `jax.device_get`."""
    env, params = cartpole
    venv = to_gymnasium(env, params, num_envs=8)
    venv.reset(seed=0)
    venv.step(np.zeros(8, np.int64))
    calls = {"get": 0}
    real_get = jax.device_get

    def counting_get(x):
        calls["get"] += 1
        return real_get(x)

    monkeypatch.setattr(jax, "device_get", counting_get)
    traces = venv.batch._step._cache_size()
    for _ in range(5):
        venv.step(np.zeros(8, np.int64))
    assert calls["get"] == 5 and venv.batch._step._cache_size() == traces == 1
    key, state = venv.batch._key, venv.batch._state
    out = jax.eval_shape(venv.batch._step, key, state, {"agent": np.zeros((8, 1), np.int32)}, None)
    assert isinstance(out[2], jax.ShapeDtypeStruct) and out[2].dtype == np.uint8
