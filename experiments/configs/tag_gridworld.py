"""Tag (grid world) as WarpDrive's ``tag_gridworld.yaml`` sets it up, trained with PPO.

Environment (mirrors the yaml): 4 taggers and one runner on ``{0..100}²``, episodes of
100 steps, wall-hit penalty 0.1, tag reward 10, tag penalty 5, step cost 0.01, full
observations. Training: 2000 envs × 100 steps per iteration (``train_batch_size``
200000), one ``shared`` policy for both groups (WarpDrive's ``shared``: fc 32×32, lr
0.001, gamma 0.98, entropy coef 0.05, vf coef 1, max grad norm 3). WarpDrive uses A2C;
the default here is PPO with the same numbers (``a2c`` preset: WarpDrive's algorithm).
WarpDrive's yaml runs 20000 episodes × 100 steps = 2M env steps (10 iterations); the
default here runs 20M (100 iterations).

Presets: ``tiny`` (2 taggers, a 5×5 grid, short episodes), ``a2c``, ``mappo``,
``two_policies`` (separate ``tagger`` and ``runner`` policies).
"""

from __future__ import annotations

import ml_collections

from algorithms.common.config import base_config, drop_ppo_only_keys, parse_presets

PRESETS = ("tiny", "a2c", "mappo", "two_policies")


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The TagGridWorld run config, with the comma-separated ``preset``s applied."""
    presets = parse_presets(preset, PRESETS)
    groups = {"shared": ["tagger", "runner"]}
    if "two_policies" in presets:
        groups = {"tagger": ["tagger"], "runner": ["runner"]}
    c = base_config("ppo", "tag_gridworld", policies=groups)
    c.env_kwargs = ml_collections.ConfigDict(
        dict(
            num_taggers=4,
            grid_length=100,
            episode_length=100,
            use_full_observation=True,
            wall_hit_penalty=0.1,
            tag_reward_for_tagger=10.0,
            tag_penalty_for_runner=5.0,
            step_cost_for_tagger=0.01,
        )
    )
    c.seed = 20
    c.num_envs = 2000
    c.num_steps = 100
    c.total_env_steps = 20_000_000
    c.algo.update(
        gamma=0.98, vf_coef=1.0, ent_coef=0.05, max_grad_norm=3.0, normalize_advantages=False
    )
    for p in c.policies.keys():
        c.policies[p].update(lr=0.001, hidden_sizes=(32, 32), activation="relu")
    c.run.animate = True
    if "tiny" in presets:
        c.env_kwargs.update(num_taggers=2, grid_length=5, episode_length=12)
        c.num_envs = 4
        c.num_steps = 8
        c.total_env_steps = 4 * 8 * 4
        c.algo.num_minibatches = 2
        c.algo.num_epochs = 2
        for p in c.policies.keys():
            c.policies[p].hidden_sizes = (16,)
        c.run.iterations_per_chunk = 2
        c.run.animate = False
    if "mappo" in presets:
        c.algo.centralized_critic = True
    if "a2c" in presets:
        drop_ppo_only_keys(c)
        c.algo.gae_lambda = 1.0
    return c
