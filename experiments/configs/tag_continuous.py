"""Tag (continuous) as WarpDrive's ``tag_continuous.yaml`` sets it up, trained with PPO.

Environment (mirrors the yaml): 10 taggers, 100 runners, ``grid_length`` 20,
``episode_length`` 500, acceleration ±0.1 and turn ±2.356 (3π/4) with 20 levels each
(``MultiDiscrete([21, 21])``, index 0 the no-op), partial observation of the ``k = 10``
nearest agents, tag reward 10, tag penalty −10, tagging distance 0.02 (× L), runners
leave the game when tagged, end-of-game reward 1.

Training: 100 envs × 250 steps per iteration (WarpDrive's ``train_batch_size`` 25000),
two policies ``tagger`` and ``runner`` with WarpDrive's numbers (fc 256×256, gamma 0.98,
entropy coef 0.05, vf coef 1, max grad norm 0.5, no advantage normalisation, Adam lr
0.001 for taggers and 0.005 for runners). WarpDrive trains them with A2C; **the default
here is PPO** (4 epochs × 4 minibatches, clip 0.2, GAE λ 0.95) with the same numbers;
the ``a2c`` preset gives WarpDrive's algorithm (one step per batch, λ = 1) and its
network layout (policy heads and value head on one shared 256×256 torso).
WarpDrive's yaml runs 500 episodes × 500 steps = 250k env steps (10 iterations);
the default here runs 10M env steps (400 iterations).

Presets (``--config=experiments/configs/tag_continuous.py:tiny``, comma-separated):
``tiny`` (2 taggers + 3 runners, short episodes, small nets: tests),
``cpu`` (3 taggers + 12 runners on WarpDrive's 20×20 square, 100-step episodes, 64×64 nets: the
README's main command, a few minutes on a CPU),
``a2c`` (WarpDrive's A2C), ``mappo`` (a centralised critic on the global state),
``full_obs`` (full instead of partial observation), ``advnorm`` (normalised advantages
and entropy coefficient 0.01, which learns faster than WarpDrive's numbers), ``gru``
(recurrent policies: one torso and a GRU of 128 that actor and critic share, PureJaxRL's
layout, twice the speed of a core each at the same learning; with ``mappo`` a torso and
core each; see ``docs/recurrent.md``).
"""

from __future__ import annotations

import ml_collections

from algorithms.common.config import base_config, drop_ppo_only_keys, parse_presets

PRESETS = ("tiny", "cpu", "a2c", "mappo", "full_obs", "advnorm", "gru")


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The TagContinuous run config, with the comma-separated ``preset``s applied."""
    presets = parse_presets(preset, PRESETS)
    c = base_config("ppo", "tag_continuous", policies={"tagger": ["tagger"], "runner": ["runner"]})
    # WarpDrive's tag_continuous.yaml, every value spelled out
    c.env_kwargs = ml_collections.ConfigDict(
        dict(
            # static (shapes)
            num_taggers=10,
            num_runners=100,
            episode_length=500,
            use_full_observation=False,
            num_other_agents_observed=10,
            num_acceleration_levels=20,
            num_turn_levels=20,
            runner_exits_game_after_tagged=True,
            # numeric (EnvParams)
            grid_length=20.0,
            max_speed=1.0,
            skill_level_tagger=1.0,
            skill_level_runner=1.0,
            min_acceleration=-0.1,
            max_acceleration=0.1,
            min_turn=-2.356,
            max_turn=2.356,
            edge_hit_penalty=0.0,
            tagging_distance=0.02,
            tag_reward_for_tagger=10.0,
            tag_penalty_for_runner=-10.0,
            step_penalty_for_tagger=0.0,
            step_reward_for_runner=0.0,
            end_of_game_reward_for_runner=1.0,
        )
    )
    c.seed = 274880
    c.num_envs = 100
    c.num_steps = 250
    c.total_env_steps = 10_000_000
    c.algo.update(gamma=0.98, vf_coef=1.0, ent_coef=0.05, normalize_advantages=False)
    for p, lr in (("tagger", 0.001), ("runner", 0.005)):
        c.policies[p].update(lr=lr, hidden_sizes=(256, 256), activation="relu")
    c.run.animate = True
    if "tiny" in presets:
        c.env_kwargs.update(
            num_taggers=2, num_runners=3, episode_length=20, num_other_agents_observed=2
        )
        c.env_kwargs.update(num_acceleration_levels=4, num_turn_levels=4, tagging_distance=0.1)
        c.env_kwargs.grid_length = 4.0
        c.num_envs = 4
        c.num_steps = 8
        c.total_env_steps = 4 * 8 * 4
        c.algo.num_minibatches = 2
        c.algo.num_epochs = 2
        for p in ("tagger", "runner"):
            c.policies[p].hidden_sizes = (16,)
        c.run.iterations_per_chunk = 2
        c.run.animate = False
    if "cpu" in presets:
        c.env_kwargs.update(
            num_taggers=3,
            num_runners=12,
            episode_length=100,
            num_other_agents_observed=4,
            num_acceleration_levels=10,
            num_turn_levels=10,
            grid_length=20.0,
            tagging_distance=0.025,
        )
        c.num_envs = 64
        c.num_steps = 50
        c.total_env_steps = 64 * 50 * 300
        for p in ("tagger", "runner"):
            c.policies[p].hidden_sizes = (64, 64)
        c.run.iterations_per_chunk = 10
        c.run.animation_steps = 100
    if "full_obs" in presets:
        c.env_kwargs.use_full_observation = True
    if "mappo" in presets:
        c.algo.centralized_critic = True
    if "advnorm" in presets:
        # normalised advantages and a smaller entropy bonus: learns Tag faster than
        # WarpDrive's numbers (see the README's training section)
        c.algo.normalize_advantages = True
        c.algo.ent_coef = 0.01
    if "gru" in presets:
        for p in ("tagger", "runner"):  # one torso and one GRU for actor and critic
            # (a centralised critic reads the global state: then a torso and core each)
            c.policies[p].update(
                core="gru",
                core_size=8 if "tiny" in presets else 128,
                shared_torso="mappo" not in presets,
            )
    if "a2c" in presets:
        drop_ppo_only_keys(c)
        for p in ("tagger", "runner"):  # WarpDrive's FullyConnected: heads on one torso
            c.policies[p].shared_torso = "mappo" not in presets  # (MAPPO: a critic torso)
        c.algo.gae_lambda = 1.0
    return c
