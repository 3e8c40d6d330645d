"""MuJoCo locomotion on MJX (Gymnasium v5 semantics): PPO modelled on Brax's, SAC, TD3.

One env preset picks the env and its PPO hyper-parameters, from Brax's training
notebook (``brax/training/agents/ppo`` trainer): ``humanoid`` (the default),
``ant``, ``half_cheetah``, ``hopper``, ``walker2d``. ``sac`` or ``td3`` switch to that
algorithm with its off-policy settings; ``two_gpus`` shards PPO over two GPUs with
twice the envs and half the steps per iteration (the same samples per update; XLA
partitions the program, ``config.partitioner = "auto"``); ``tiny`` shrinks any of them
for a CPU.

Brax's batch layout maps onto ours: each update Brax collects ``batch_size ×
num_minibatches`` unrolls of ``unroll_length`` steps from ``num_envs`` envs, i.e.
``unroll_length · batch_size · num_minibatches / num_envs`` consecutive steps per env,
then runs ``num_updates_per_batch`` passes over ``num_minibatches`` minibatches: here
``num_steps`` (that product), ``num_minibatches`` and ``num_epochs``. GAE then runs over
the whole ``num_steps`` of an env instead of each unroll, bootstrapping at time limits
(``truncated``) from the episode's final observation. Brax's ``reward_scaling`` is
``reward_scale``, ``discounting`` is ``gamma``, ``entropy_cost`` is ``ent_coef``; its
policy head (tanh-squashed Gaussian, ``σ = softplus(·) + 0.001`` from the network) is
``action_head="tanh_gaussian_state_std"``; observations are normalised with running
statistics (``normalize_obs``); PPO's clip is Brax's 0.3, without value clipping.
Brax's ``action_repeat`` is ``env_kwargs.action_repeat``
(`jaxdrive.wrappers.ActionRepeat`: rewards summed over the repeats); every preset keeps 1.
Walker2d's preset is Hopper's batch layout with ``gamma`` 0.997 and reward scale 5:
Brax's notebook settings (50-step unrolls, action repeat 3) stalled near a return of 500.
Actor and critic share one ``hidden_sizes`` (Brax: a 4×32 policy and a 5×256 value MLP).

    python -m experiments.train --config=experiments/configs/locomotion.py:ant
    python -m experiments.train --config=experiments/configs/locomotion.py:hopper,sac
    python -m experiments.train --config=experiments/configs/locomotion.py:humanoid,two_gpus
"""

from __future__ import annotations

from typing import Any

import ml_collections

from algorithms.common.config import base_config, parse_presets

ENVS = ("humanoid", "ant", "half_cheetah", "hopper", "walker2d")
PRESETS = (*ENVS, "sac", "td3", "two_gpus", "tiny")

#: Per env: registry name and PPO settings after Brax's notebook (unroll_length, batch_size,
#: num_minibatches, num_updates_per_batch, discounting, learning_rate, entropy_cost,
#: reward_scaling) with ``num_envs`` 2048; 50M env steps (Ant: 100M, as it still
#: improves at 50M). Walker2d's are Hopper's layout with its own discount and scale.
#: Humanoid steps 10,240 envs for 32 steps instead of 2,048 for 160: the same samples
#: per update, and MJX's step is launch-bound at 2,048 envs (docs/continuous_control.md).
BRAX_PPO: dict[str, dict[str, Any]] = {
    "humanoid": dict(env="Humanoid-v5", unroll=10, batch=1024, mb=32, epochs=8, gamma=0.97,
                     lr=3e-4, ent=1e-3, scale=0.1, envs=10_240),
    "ant": dict(env="Ant-v5", unroll=5, batch=1024, mb=32, epochs=4, gamma=0.97, lr=3e-4,
                ent=1e-2, scale=10.0, steps=100_000_000),
    "half_cheetah": dict(env="HalfCheetah-v5", unroll=20, batch=512, mb=32, epochs=8,
                         gamma=0.95, lr=3e-4, ent=1e-3, scale=1.0),
    "hopper": dict(env="Hopper-v5", unroll=20, batch=256, mb=32, epochs=8, gamma=0.999,
                   lr=6e-4, ent=1e-2, scale=5.0),
    "walker2d": dict(env="Walker2d-v5", unroll=20, batch=256, mb=32, epochs=8, gamma=0.997,
                     lr=6e-4, ent=1e-2, scale=5.0),
}  # fmt: skip
NUM_ENVS = 2048


def _ppo(env: str) -> ml_collections.ConfigDict:
    b = BRAX_PPO[env]
    c = base_config("ppo", b["env"])
    c.num_envs = b.get("envs", NUM_ENVS)
    c.num_steps = b["unroll"] * b["batch"] * b["mb"] // c.num_envs
    c.total_env_steps = b.get("steps", 50_000_000)
    c.algo.update(
        gamma=b["gamma"],
        num_epochs=b["epochs"],
        num_minibatches=b["mb"],
        clip_eps=0.3,
        clip_value=False,
        ent_coef=b["ent"],
        max_grad_norm=1.0,
        normalize_obs=True,
        reward_scale=b["scale"],
    )
    c.policies.agent.update(
        lr=b["lr"],
        hidden_sizes=(128, 128, 128, 128),
        activation="swish",
        action_head="tanh_gaussian_state_std",
    )
    # several GPUs: XLA partitions the one-device program (its GPU compiler crashes on
    # MJX's step inside shard_map, docs/continuous_control.md)
    c.partitioner = "auto"
    c.run.iterations_per_chunk = 5
    c.run.eval_every_chunks = 2
    c.run.eval_num_envs = 32
    return c


def _off_policy(algorithm: str, env: str) -> ml_collections.ConfigDict:
    """SAC/TD3 after Brax's SAC settings: 128 envs, one step each per iteration, 64
    gradient steps of 512 transitions per iteration, a 1M-transition buffer filled with
    8,192 random steps first."""
    b = BRAX_PPO[env]
    c = base_config(algorithm, b["env"])
    c.num_envs, c.num_steps, c.total_env_steps = 128, 1, 5_000_000
    c.algo.update(
        gamma=0.99,
        buffer_size=1_000_000,
        batch_size=512,
        learning_starts=8_192,
        updates_per_iteration=64,
        reward_scale=b["scale"],
    )
    c.policies.agent.update(actor_lr=6e-4, critic_lr=6e-4)
    if algorithm == "sac":
        c.policies.agent.alpha_lr = 6e-4
    c.run.iterations_per_chunk = 1000
    return c


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The locomotion config of the comma-separated ``preset`` (an env, optionally an
    algorithm and ``tiny``)."""
    presets = parse_presets(preset, PRESETS)
    envs = [p for p in presets if p in ENVS]
    if len(envs) > 1:
        raise ValueError(f"locomotion presets name one env, got {envs}")
    algos = [p for p in presets if p in ("sac", "td3")]
    if len(algos) > 1:
        raise ValueError(f"locomotion presets name one of sac/td3, got {algos}")
    env = envs[0] if envs else "humanoid"
    c = _off_policy(algos[0], env) if algos else _ppo(env)
    if "two_gpus" in presets:
        if algos:
            raise ValueError("the two_gpus preset is for PPO (SAC and TD3 run on one device)")
        # twice the envs, half the steps: each update learns from the same samples, and
        # each GPU steps as many envs as one GPU does in the one-GPU preset
        c.num_devices, c.num_envs, c.num_steps = 2, 2 * c.num_envs, c.num_steps // 2
    if "tiny" in presets:
        c.num_envs, c.total_env_steps = 4, 4 * c.num_steps * 2
        c.run.iterations_per_chunk = 1
        c.run.eval_every_chunks = 0
        if algos:
            c.num_steps, c.total_env_steps = 4, 4 * 4 * 2
            c.algo.update(buffer_size=1_000, batch_size=16, learning_starts=16)
            c.algo.updates_per_iteration = 2
        else:
            c.num_steps, c.total_env_steps = 8, 4 * 8 * 2
            c.algo.num_minibatches, c.algo.num_epochs = 2, 2
        c.policies.agent.hidden_sizes = (16, 16)
    return c
