"""Evaluation episodes and their animation from one rollout program
(`experiments.policy_runs`), compiled ahead of time or on first use."""

from __future__ import annotations

import types

import jax
import numpy as np
from PIL import Image

import jaxdrive
from experiments import policy_runs


def _random_walkers():
    """A trainer-like object whose ``act`` samples uniform moves (parameters unused)."""

    def act(params, key, obs, deterministic=True):
        keys = jax.random.split(key, len(obs))
        return {
            g: jax.random.randint(k, o.shape[:-1], 0, 5)
            for k, (g, o) in zip(keys, sorted(obs.items()), strict=True)
        }

    return types.SimpleNamespace(act=act)


def test_evaluation_and_animation_share_one_rollout(tmp_path):
    env, params = jaxdrive.make("tag_gridworld", num_taggers=2, grid_length=4, episode_length=6)
    trainer = _random_walkers()
    key = jax.random.PRNGKey(3)
    kw = dict(episodes=3, animation_steps=4)
    policy_runs.compile_evaluation(env, params, trainer, None, **kw)  # started ahead
    gif = str(tmp_path / "a.gif")
    res = policy_runs.evaluate_policy(env, params, trainer, None, key, animation=gif, **kw)
    assert res["animation"] == gif and Image.open(gif).format == "GIF"
    # the same episodes as an evaluation that records nothing (another program)
    plain = policy_runs.evaluate_policy(env, params, trainer, None, key, episodes=3)
    assert "animation" not in plain
    assert plain["returns"] == res["returns"]
    assert plain["episode_length"] == res["episode_length"]
    # the first episode's recorded states are the first env's, cut after its first done
    program = policy_runs._eval_program(env, trainer, 3, True, 6, 4)
    _, length, _, won, states, dones = program(None, params, key)
    assert won is None  # this env says nothing of wins
    assert program.jitted._cache_size() == 0  # only the ahead-of-time executable ran
    assert jax.tree.leaves(states)[0].shape[0] == 5 and dones.shape == (4,)
    first_done = int(np.argmax(dones)) if np.any(dones) else None
    assert first_done is None or first_done + 1 == int(length[0])
    frames = policy_runs.animate_states(env, params, states, np.zeros(4, bool), tmp_path / "b.gif")
    assert frames == str(tmp_path / "b.gif")


def test_render_rollout_is_one_recorded_episode(tmp_path):
    env, params = jaxdrive.make("tag_gridworld", num_taggers=2, grid_length=4, episode_length=6)
    out = policy_runs.render_rollout(
        env, params, _random_walkers(), None, jax.random.PRNGKey(0), tmp_path / "r.gif",
        num_steps=3,
    )  # fmt: skip
    assert out == str(tmp_path / "r.gif") and Image.open(out).format == "GIF"
    cartpole, cp_params = jaxdrive.make("CartPole-v1")  # no renderer: no animation
    assert not policy_runs.has_renderer(cartpole)
    none = policy_runs.render_rollout(
        cartpole, cp_params, types.SimpleNamespace(act=lambda *a, **k: None), None,
        jax.random.PRNGKey(0), tmp_path / "c.gif",
    )  # fmt: skip
    assert none is None and not (tmp_path / "c.gif").exists()
