"""DDPG on Pendulum-v1 (one agent, torque in [-2, 2], 200-step episodes).

Target: mean episode return >= -200 within 1e5 env steps. Each iteration runs 16 envs
x 4 steps (64 env steps), then 32 gradient steps (one per two env steps) on batches of
256 from a 100k-transition buffer; Gaussian noise 0.1 in normalised action units
(0.2 N·m); the first 2,000 env steps act uniformly at random. On CPU this reached
-186 by 12.8k env steps and stayed within [-186, -146] to 96k. Presets: ``tiny``.

    python -m experiments.train --config=experiments/configs/pendulum.py
"""

from __future__ import annotations

import ml_collections

from algorithms.common.config import default_run_config, parse_presets

PRESETS = ("tiny",)


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The Pendulum-v1 DDPG config, with the comma-separated ``preset``s applied."""
    presets = parse_presets(preset, PRESETS)
    c = ml_collections.ConfigDict()
    c.env_name = "Pendulum-v1"
    c.env_kwargs = ml_collections.ConfigDict()
    c.algorithm = "ddpg"
    c.seed = 0
    c.num_envs = 16
    c.num_steps = 4
    c.total_env_steps = 100_000
    c.algo = ml_collections.ConfigDict(
        dict(
            gamma=0.99,
            tau=0.005,
            buffer_size=100_000,
            batch_size=256,
            learning_starts=2_000,
            updates_per_iteration=32,
            noise="gaussian",
            noise_scale=0.1,
            ou_theta=0.15,
            ou_sigma=0.2,
            max_grad_norm=0.0,
        )
    )
    c.policies = ml_collections.ConfigDict(
        {
            "agent": dict(
                groups=["agent"],
                actor_lr=1e-3,
                critic_lr=1e-3,
                hidden_sizes=(256, 256),
                activation="relu",
                frozen=False,
            )
        }
    )
    c.run = default_run_config()
    c.run.iterations_per_chunk = 100
    if "tiny" in presets:
        c.num_envs, c.num_steps, c.total_env_steps = 2, 4, 2 * 4 * 4
        c.algo.buffer_size, c.algo.batch_size = 1_000, 16
        c.algo.learning_starts, c.algo.updates_per_iteration = 16, 2
        c.policies.agent.hidden_sizes = (16, 16)
        c.run.iterations_per_chunk = 2
    return c
