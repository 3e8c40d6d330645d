"""PPO on CartPole-v1 (purejaxrl's settings).

Presets (``--config=experiments/configs/cartpole.py:tiny,a2c``): ``tiny`` (a few
iterations, for tests and quick CPU runs), ``a2c`` (A2C instead of PPO).
"""

from __future__ import annotations

import ml_collections

from algorithms.common.config import default_run_config, drop_ppo_only_keys, parse_presets

PRESETS = ("tiny", "a2c")


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The CartPole run config, with the comma-separated ``preset``s applied."""
    presets = parse_presets(preset, PRESETS)
    c = ml_collections.ConfigDict()
    c.env_name = "CartPole-v1"
    c.env_kwargs = ml_collections.ConfigDict()
    c.algorithm = "ppo"
    c.seed = 0
    c.num_envs = 4
    c.num_steps = 128
    c.total_env_steps = 500_000
    c.algo = ml_collections.ConfigDict(
        dict(
            gamma=0.99,
            gae_lambda=0.95,
            num_epochs=4,
            num_minibatches=4,
            clip_eps=0.2,
            clip_value=True,
            value_clip_eps=0.2,
            vf_coef=0.5,
            ent_coef=0.01,
            ent_schedule="constant",
            ent_coef_final=0.0,
            lr_schedule="linear",
            max_grad_norm=0.5,
            adam_eps=1e-5,
            normalize_advantages=True,
            normalize_obs=False,
            normalize_rewards=False,
            centralized_critic=False,
        )
    )
    c.policies = ml_collections.ConfigDict(
        {
            "agent": dict(
                groups=["agent"], lr=2.5e-4, hidden_sizes=(64, 64), activation="tanh", frozen=False
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
        c.num_steps = 5 if "tiny" not in presets else c.num_steps
        c.policies.agent.lr = 7e-4
    return c
