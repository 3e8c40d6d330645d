"""DDPG on MountainCarContinuous-v0 (one agent, push in [-1, 1], 999-step episodes).

The goal pays +100 once; every step costs 0.1·a², so a timid policy learns to stand
still (return ~0). Exploration is what matters: temporally correlated
Ornstein–Uhlenbeck noise (θ = 0.15, σ = 0.5: stationary std ≈ 0.95 in normalised
action units) rocks the car far enough to find the goal, and learning starts early
so that this noise, rather than i.i.d. uniform actions, does the exploring. Target: a
training return (noise included) near +90, the goal reached in almost every episode,
within the run's 150k env steps. Presets: ``tiny``.

    python -m experiments.train --config=experiments/configs/mountain_car_continuous.py
"""

from __future__ import annotations

import ml_collections

from algorithms.common.config import base_config, parse_presets

PRESETS = ("tiny",)


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The MountainCarContinuous-v0 DDPG config, with the ``preset``s applied."""
    presets = parse_presets(preset, PRESETS)
    c = base_config("ddpg", "MountainCarContinuous-v0")
    c.num_envs = 16
    c.num_steps = 8
    c.total_env_steps = 150_000
    c.algo.update(
        buffer_size=150_000,
        updates_per_iteration=32,
        noise="ou",
        noise_scale=1.0,
        ou_sigma=0.5,
    )
    c.policies.agent.actor_lr = 1e-4
    if "tiny" in presets:
        c.num_envs, c.num_steps, c.total_env_steps = 2, 4, 2 * 4 * 4
        c.algo.buffer_size, c.algo.batch_size = 1_000, 16
        c.algo.learning_starts, c.algo.updates_per_iteration = 16, 2
        c.policies.agent.hidden_sizes = (16, 16)
        c.run.iterations_per_chunk = 2
    return c
