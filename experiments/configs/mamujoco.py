"""Multi-agent MuJoCo on MJX: ``MaMuJoCo-Ant-4x2`` (four agents, two joints each) with
MAPPO (the default) or IPPO.

Every agent has the same observation and action sizes, so the env puts them in one
group ``"agents"`` and one policy serves them (parameter sharing), with each agent's
one-hot index appended to its observation (``agent_ids``: the four legs' local
observations alone do not say which leg the policy moves). MAPPO's critic reads
the env's ``global_state`` (the single-agent Ant observation) with the agent's own
observation; ``ippo`` turns that off (each agent's critic sees its local observation).
The PPO settings are those of `experiments.configs.locomotion`'s ``ant`` preset (Brax's
Ant), which trains the same robot, with two changes measured on this env: no gradient
clipping, and 300M env steps instead of 100M (it passed 5,000 after 93M and 106M).
Presets: ``ippo``, ``tiny``.

    python -m experiments.train --config=experiments/configs/mamujoco.py
"""

from __future__ import annotations

import ml_collections

from algorithms.common.config import parse_presets
from experiments.configs import locomotion

PRESETS = ("ippo", "tiny")


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The MaMuJoCo Ant 4x2 config, with the comma-separated ``preset``s applied."""
    presets = parse_presets(preset, PRESETS)
    c = locomotion.get_config(",".join(["ant", *(["tiny"] if "tiny" in presets else [])]))
    c.env_name = "MaMuJoCo-Ant-4x2"
    agent = c.policies.agent
    del c.policies["agent"]
    agent.groups = ["agents"]
    agent.agent_ids = True
    c.policies.agents = agent
    c.algo.centralized_critic = "ippo" not in presets
    c.algo.max_grad_norm = 0.0  # no clipping: it reached 5,000 where clipping stalled below
    if "tiny" not in presets:
        c.total_env_steps = 300_000_000
    return c
