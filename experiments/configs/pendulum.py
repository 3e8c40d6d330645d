"""DDPG on Pendulum-v1 (one agent, torque in [-2, 2], 200-step episodes).

Target: mean episode return >= -200 within 1e5 env steps. Each iteration runs 16 envs
x 4 steps (64 env steps), then 32 gradient steps (one per two env steps) on batches of
256 from a 100k-transition buffer; Gaussian noise 0.1 in normalised action units
(0.2 N·m); the first 2,000 env steps act uniformly at random. Presets: ``tiny``.

    python -m experiments.train --config=experiments/configs/pendulum.py
"""

from __future__ import annotations

import ml_collections

from algorithms.common.config import base_config, parse_presets

PRESETS = ("tiny",)


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The Pendulum-v1 DDPG config, with the comma-separated ``preset``s applied."""
    presets = parse_presets(preset, PRESETS)
    c = base_config("ddpg", "Pendulum-v1")
    c.num_envs = 16
    c.num_steps = 4
    c.algo.learning_starts = 2_000
    c.algo.updates_per_iteration = 32
    if "tiny" in presets:
        c.num_envs, c.num_steps, c.total_env_steps = 2, 4, 2 * 4 * 4
        c.algo.buffer_size, c.algo.batch_size = 1_000, 16
        c.algo.learning_starts, c.algo.updates_per_iteration = 16, 2
        c.policies.agent.hidden_sizes = (16, 16)
        c.run.iterations_per_chunk = 2
    return c
