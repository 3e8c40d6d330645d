"""Population runs (`algorithms.population`): a task config plus a ``population`` section.

``--config=experiments/configs/population.py:<task>[,<modifier>...]``. Tasks:
``cartpole`` (PPO, 16 members, learning rate / entropy / clip ε varied),
``pendulum`` (DDPG, 8 members, actor and critic learning rates, τ and noise varied),
``tag`` (Tag continuous with PPO, 4 members, each policy's learning rate and entropy
coefficient varied). Modifiers: ``tiny`` (a few iterations of a small population, for
tests and quick CPU runs), ``tournament`` (tournament selection from the leaderboard
instead of PBT), ``fixed`` (no selection: a fixed-hyper-parameter population, the
baseline PBT is compared with).
"""

from __future__ import annotations

import ml_collections

from algorithms.common.config import parse_presets
from algorithms.population import POPULATION_DEFAULTS

TASKS = ("cartpole", "pendulum", "tag")
PRESETS = (*TASKS, "tiny", "tournament", "fixed")


def _task(name: str, tiny: bool) -> ml_collections.ConfigDict:
    if name == "cartpole":
        from experiments.configs import cartpole

        c = cartpole.get_config("tiny" if tiny else "")
        hparams = {"lr": (1e-4, 3e-3, "log"), "ent_coef": (0.0, 0.03), "clip_eps": (0.1, 0.3)}
        size = 16
    elif name == "pendulum":
        from algorithms.ddpg import default_config

        c = default_config()
        c.total_env_steps = 200_000
        hparams = {
            "actor_lr": (1e-4, 3e-3, "log"),
            "critic_lr": (1e-4, 3e-3, "log"),
            "tau": (0.001, 0.02, "log"),
            "noise_scale": (0.05, 0.3),
        }
        size = 8
        if tiny:
            c.num_envs, c.num_steps, c.total_env_steps = 2, 8, 2 * 8 * 8
            c.algo.batch_size, c.algo.learning_starts = 16, 16
            c.policies.agent.hidden_sizes = (16,)
            c.run.iterations_per_chunk = 4
    else:
        from experiments.configs import tag_continuous

        c = tag_continuous.get_config("tiny" if tiny else "")
        hparams = {"lr": (1e-4, 3e-3, "log"), "ent_coef": (0.0, 0.05)}
        size = 4
    c.population = ml_collections.ConfigDict(
        {**POPULATION_DEFAULTS, "size": size, "hparams": hparams}
    )
    if tiny:
        c.population.size = 4
    return c


def get_config(preset: str = "cartpole") -> ml_collections.ConfigDict:
    """The population config of one task, with the modifiers applied."""
    presets = parse_presets(preset, PRESETS)
    tasks = [p for p in presets if p in TASKS]
    if len(tasks) != 1:
        raise ValueError(
            f"name exactly one task of {list(TASKS)} in the preset, got {preset!r} "
            "(e.g. --config=experiments/configs/population.py:cartpole,tiny)"
        )
    c = _task(tasks[0], "tiny" in presets)
    if "tournament" in presets:
        c.population.mode = "tournament"
    if "fixed" in presets:
        c.population.mode = "none"
    return c
