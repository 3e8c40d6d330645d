"""PPO on MountainCar-v0 (RL-Zoo's settings: 16 envs × 16 steps, normalised observations).

MountainCar's reward is −1 per step until the goal, so PPO needs exploration luck; RL-Zoo
reports it solves within 1M steps with these settings. Presets: ``tiny``, ``a2c``.
"""

from __future__ import annotations

import ml_collections

from algorithms.common.config import default_run_config, drop_ppo_only_keys, parse_presets

PRESETS = ("tiny", "a2c")


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The MountainCar run config, with the comma-separated ``preset``s applied."""
    presets = parse_presets(preset, PRESETS)
    c = ml_collections.ConfigDict()
    c.env_name = "MountainCar-v0"
    c.env_kwargs = ml_collections.ConfigDict()
    c.algorithm = "ppo"
    c.seed = 0
    c.num_envs = 16
    c.num_steps = 16
    c.total_env_steps = 1_000_000
    c.algo = ml_collections.ConfigDict(
        dict(
            gamma=0.99,
            gae_lambda=0.98,
            num_epochs=4,
            num_minibatches=4,
            clip_eps=0.2,
            clip_value=False,
            value_clip_eps=0.2,
            vf_coef=0.5,
            ent_coef=0.0,
            ent_schedule="constant",
            ent_coef_final=0.0,
            lr_schedule="constant",
            max_grad_norm=0.5,
            adam_eps=1e-5,
            normalize_advantages=True,
            normalize_obs=True,
            normalize_rewards=True,
            centralized_critic=False,
        )
    )
    c.policies = ml_collections.ConfigDict(
        {
            "agent": dict(
                groups=["agent"], lr=3e-4, hidden_sizes=(64, 64), activation="tanh", frozen=False
            )
        }
    )
    c.run = default_run_config()
    if "tiny" in presets:
        c.num_envs = 4
        c.num_steps = 16
        c.total_env_steps = 4 * 16 * 4
        c.policies.agent.hidden_sizes = (16, 16)
        c.run.iterations_per_chunk = 2
    if "a2c" in presets:
        drop_ppo_only_keys(c)
        c.algo.gae_lambda = 1.0
    return c
