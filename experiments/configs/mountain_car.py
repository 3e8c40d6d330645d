"""PPO on MountainCar-v0 (RL-Zoo's settings: 16 envs × 16 steps, normalised observations).

MountainCar's reward is −1 per step until the goal, so PPO needs exploration luck; RL-Zoo
reports it solves within 1M steps with these settings. Presets: ``tiny``, ``a2c``.
"""

from __future__ import annotations

import ml_collections

from algorithms.common.config import base_config, drop_ppo_only_keys, parse_presets

PRESETS = ("tiny", "a2c")


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The MountainCar run config, with the comma-separated ``preset``s applied."""
    presets = parse_presets(preset, PRESETS)
    c = base_config("ppo", "MountainCar-v0")
    c.num_envs = 16
    c.num_steps = 16
    c.total_env_steps = 1_000_000
    c.algo.update(
        gae_lambda=0.98,
        clip_value=False,
        ent_coef=0.0,
        normalize_obs=True,
        normalize_rewards=True,
    )
    if "tiny" in presets:
        c.num_envs = 4
        c.total_env_steps = 4 * 16 * 4
        c.policies.agent.hidden_sizes = (16, 16)
        c.run.iterations_per_chunk = 2
    if "a2c" in presets:
        drop_ppo_only_keys(c)
        c.algo.gae_lambda = 1.0
    return c
