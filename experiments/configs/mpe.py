"""IPPO and MAPPO on the MPE scenarios, with JaxMARL's published MPE hyper-parameters.

IPPO (the default): PPO with one policy per group (parameter sharing within a group),
JaxMARL's ``baselines/IPPO/config/ippo_ff_mpe.yaml``: 16 envs × 128 steps, 10M env
steps, Adam lr 2.5e-4 annealed linearly to 0, 4 epochs × 4 minibatches, γ 0.99, GAE λ
0.95, clip 0.2 (value clip 0.2), entropy 0.01, value coefficient 0.5, grad norm 0.5,
separate 64×64 tanh actor and critic, advantages normalised per minibatch.

MAPPO (``mappo`` preset): the same PPO with a centralised critic on the env's
``global_state`` (every agent's observation, concatenated), with JaxMARL's
``baselines/MAPPO/config/mappo_homogenous_rnn_mpe.yaml`` numbers: 128 envs × 128 steps,
2M env steps, lr 2e-3 annealed, and its recurrent networks: one 128-unit ReLU layer, a
GRU of 128, then the heads. ``ff`` makes the MAPPO networks feed-forward 128×128 ReLU
and the budget IPPO's 10M env steps (without the GRU's serial scans an iteration costs
a fraction of a recurrent one).

Scenario presets (one of them; default ``spread``): ``spread`` (``MPE_simple_spread_v3``,
3 agents), ``tag`` (``MPE_simple_tag_v3`` with one adversary and one good agent, as
JaxMARL's ``ippo_ff_tag.yaml``; policies ``adversary`` and ``agent``), ``reference``
(``MPE_simple_reference_v3``), ``speaker_listener`` (``MPE_simple_speaker_listener_v4``;
policies ``speaker`` and ``listener``). ``tiny``: a few iterations of small networks (tests).

Example: ``python -m experiments.train --config=experiments/configs/mpe.py:tag,mappo``.
"""

from __future__ import annotations

import ml_collections

from algorithms.common.config import base_config, parse_presets

SCENARIOS = ("spread", "tag", "reference", "speaker_listener")
PRESETS = (*SCENARIOS, "mappo", "ff", "tiny")

# scenario preset -> (registry name, groups (one policy each), constructor options)
_ENVS = {
    "spread": ("MPE_simple_spread_v3", ("agent",), {}),
    "tag": ("MPE_simple_tag_v3", ("adversary", "agent"), {"num_good": 1, "num_adversaries": 1}),
    "reference": ("MPE_simple_reference_v3", ("agent",), {}),
    "speaker_listener": ("MPE_simple_speaker_listener_v4", ("speaker", "listener"), {}),
}


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The MPE run config, with the comma-separated ``preset``s applied."""
    presets = parse_presets(preset, PRESETS)
    chosen = [p for p in presets if p in SCENARIOS] or ["spread"]
    if len(chosen) > 1:
        raise ValueError(f"choose one MPE scenario preset of {list(SCENARIOS)}, got {chosen}")
    env_name, groups, kwargs = _ENVS[chosen[0]]
    c = base_config("ppo", env_name, policies={g: [g] for g in groups})
    c.env_kwargs = ml_collections.ConfigDict(kwargs)
    c.algo.lr_schedule = "linear"
    mappo = "mappo" in presets
    c.num_envs, c.num_steps = (128, 128) if mappo else (16, 128)
    c.total_env_steps = 2_000_000 if mappo and "ff" not in presets else 10_000_000
    c.algo.centralized_critic = mappo
    for g in groups:
        if mappo:
            recurrent = "ff" not in presets
            c.policies[g].update(
                lr=2e-3,
                activation="relu",
                hidden_sizes=(128,) if recurrent else (128, 128),
                core="gru" if recurrent else "mlp",
                core_size=128,
            )
        else:
            c.policies[g].update(lr=2.5e-4, hidden_sizes=(64, 64))
    c.run.iterations_per_chunk = 50
    if "tiny" in presets:
        c.num_envs, c.num_steps = 4, 8
        c.total_env_steps = 4 * 8 * 4
        for g in groups:
            c.policies[g].update(hidden_sizes=(16,), core_size=16)
        c.run.iterations_per_chunk = 2
        c.run.animate = False
    return c
