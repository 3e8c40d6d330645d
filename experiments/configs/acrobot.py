"""PPO on Acrobot-v1 (RL-Zoo's settings: 16 envs, 256 steps, normalised observations).

Presets: ``tiny`` (a few iterations, for tests), ``a2c`` (A2C instead of PPO).
"""

from __future__ import annotations

import ml_collections

from algorithms.common.config import default_run_config, drop_ppo_only_keys, parse_presets

PRESETS = ("tiny", "a2c")


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The Acrobot run config, with the comma-separated ``preset``s applied."""
    presets = parse_presets(preset, PRESETS)
    c = ml_collections.ConfigDict()
    c.env_name = "Acrobot-v1"
    c.env_kwargs = ml_collections.ConfigDict()
    c.algorithm = "ppo"
    c.seed = 0
    c.num_envs = 16
    c.num_steps = 256
    c.total_env_steps = 1_000_000
    c.algo = ml_collections.ConfigDict(
        dict(
            gamma=0.99,
            gae_lambda=0.94,
            num_epochs=4,
            num_minibatches=16,
            clip_eps=0.2,
            clip_value=False,
            value_clip_eps=0.2,
            vf_coef=0.5,
            ent_coef=0.0,
            ent_schedule="constant",
            ent_coef_final=0.0,
            lr_schedule="linear",
            max_grad_norm=0.5,
            adam_eps=1e-5,
            normalize_advantages=True,
            normalize_obs=True,
            normalize_rewards=False,
            centralized_critic=False,
        )
    )
    c.policies = ml_collections.ConfigDict(
        {
            "agent": dict(
                groups=["agent"], lr=1e-3, hidden_sizes=(64, 64), activation="tanh", frozen=False
            )
        }
    )
    c.run = default_run_config()
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
