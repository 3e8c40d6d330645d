"""Recurrent MAPPO on SMAX (JaxMARL's StarCraft-like micromanagement), through the JaxMARL
adapter: ``jaxdrive.make("jaxmarl:smax:<map>")`` (JaxMARL's ``HeuristicEnemySMAX``, whose
agents ``ally_0 …`` form the group ``ally``; the enemies are scripted).

Default: JaxMARL's published recurrent-MAPPO settings for SMAX (``baselines/MAPPO``,
``smax_mappo_final_sweep.yaml`` and ``mappo_homogenous_rnn_smax.yaml``) on ``3s5z``: 64
envs × 128 steps, 4 epochs × 4 minibatches, Adam lr 0.002 annealed linearly to 0, clip
0.2 (policy and value), no entropy bonus, vf coef 0.5, max grad norm 0.25, γ 0.99,
λ 0.95, relu, a 128-unit dense layer then a GRU of 128 for the actor and for the
critic, the critic reading the env's world state (here with the agent's own
observation, `centralized_critic`), agent IDs on, 10M env steps; env kwargs
``see_enemy_actions``, ``walls_cause_death`` and ``attack_mode="closest"``; and
``team_episodes=True`` (Mava's episode-level dones: an agent's episode is the battle, a
dead unit stays active with the team's reward; JaxMARL's MAPPO ends it at the unit's
death, ``--config.env_kwargs.team_episodes=False``; see
`jaxdrive.adapters.jaxmarl_env`). (JaxMARL puts
one more 128-unit dense layer after the GRU; here the heads read the GRU's output.)

Presets (``--config=experiments/configs/smax.py:27m_vs_30m,mava``, comma-separated):
``3s5z`` (the default map), ``2s3z`` (2 stalkers and 3 zealots a side, the map of
JaxMARL's ``mappo_homogenous_rnn_smax.yaml``), ``27m_vs_30m`` (27 marines against 30:
20M env steps), ``ff`` (feed-forward actor and critic: two 128-unit dense layers, no GRU),
``mava`` (Mava's ``rec_mappo`` defaults instead: 32 envs (its 16 per device × an update
batch of 2), lr 2.5e-4 without decay, 2 minibatches, entropy 0.01, max grad norm 0.5, a
128-unit layer, a GRU of 128 and a 128-unit layer before each head, agent IDs on),
``tiny`` (a few small iterations of 12-step battles: tests).
"""

from __future__ import annotations

import ml_collections

from algorithms.common.config import base_config, parse_presets

PRESETS = ("3s5z", "2s3z", "27m_vs_30m", "ff", "mava", "tiny")
_MAPS = ("3s5z", "2s3z", "27m_vs_30m")

#: JaxMARL's ``ENV_KWARGS`` for SMAX.
_ENV_KWARGS = {"see_enemy_actions": True, "walls_cause_death": True, "attack_mode": "closest"}


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The SMAX run config, with the comma-separated ``preset``s applied."""
    presets = parse_presets(preset, PRESETS)
    maps = [p for p in presets if p in _MAPS]
    if len(maps) > 1:
        raise ValueError(f"presets {maps} pick different maps: give one")
    map_name = maps[0] if maps else "3s5z"
    c = base_config("ppo", f"jaxmarl:smax:{map_name}", policies={"ally": ["ally"]})
    c.env_kwargs = ml_collections.ConfigDict({**_ENV_KWARGS, "team_episodes": True})
    c.num_envs = 64
    c.num_steps = 128
    c.total_env_steps = 20_000_000 if map_name == "27m_vs_30m" else 10_000_000
    c.algo.update(
        gamma=0.99,
        gae_lambda=0.95,
        num_epochs=4,
        num_minibatches=4,
        clip_eps=0.2,
        ent_coef=0.0,
        vf_coef=0.5,
        max_grad_norm=0.25,
        lr_schedule="linear",
        centralized_critic=True,
    )
    c.policies.ally.update(
        lr=0.002,
        hidden_sizes=(128,),
        activation="relu",
        core="gru",
        core_size=128,
        agent_ids=True,
    )
    c.run.animate = False
    if "ff" in presets:
        c.policies.ally.update(hidden_sizes=(128, 128), core="mlp")
    if "mava" in presets:
        c.algo.update(num_minibatches=2, ent_coef=0.01, max_grad_norm=0.5, lr_schedule="constant")
        c.num_envs = 32
        c.policies.ally.update(lr=2.5e-4, core_size=128, post_core_sizes=(128,))
    if "tiny" in presets:
        c.num_envs = 4
        c.num_steps = 16
        c.total_env_steps = 4 * 16 * 2
        c.algo.num_minibatches = 2
        c.algo.num_epochs = 2
        c.policies.ally.update(hidden_sizes=(16,) * len(c.policies.ally.hidden_sizes))
        c.policies.ally.core_size = 16
        c.run.iterations_per_chunk = 2
        c.env_kwargs.max_steps = 12  # short battles: episodes end within a tiny run
    return c
