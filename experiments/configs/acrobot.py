"""PPO on Acrobot-v1 (RL-Zoo's settings: 16 envs, 256 steps, normalised observations).

Presets: ``tiny`` (a few iterations, for tests), ``a2c`` (A2C instead of PPO).
"""

from __future__ import annotations

import ml_collections

from algorithms.common.config import base_config, drop_ppo_only_keys, parse_presets

PRESETS = ("tiny", "a2c")


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The Acrobot run config, with the comma-separated ``preset``s applied."""
    presets = parse_presets(preset, PRESETS)
    c = base_config("ppo", "Acrobot-v1")
    c.num_envs = 16
    c.num_steps = 256
    c.total_env_steps = 1_000_000
    c.algo.update(
        gae_lambda=0.94,
        num_minibatches=16,
        clip_value=False,
        ent_coef=0.0,
        lr_schedule="linear",
        normalize_obs=True,
    )
    c.policies.agent.lr = 1e-3
    if "tiny" in presets:
        c.num_envs = 4
        c.num_steps = 16
        c.total_env_steps = 4 * 16 * 4
        c.algo.num_minibatches = 4
        c.policies.agent.hidden_sizes = (16, 16)
        c.run.iterations_per_chunk = 2
    if "a2c" in presets:
        drop_ppo_only_keys(c)
        c.algo.gae_lambda = 1.0
    return c
