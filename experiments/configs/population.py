"""Population runs (`algorithms.population`): a task config plus a ``population`` section.

``--config=experiments/configs/population.py:<task>[,<modifier>...]``. Tasks:
``cartpole`` (PPO, 16 members, learning rate / entropy / clip ε varied),
``pendulum`` (DDPG with `experiments.configs.pendulum`'s settings, 8 members, actor
and critic learning rates, τ and noise varied over wide ranges, members scored by 16
deterministic evaluation episodes after every 50 iterations, a selection round every
150 iterations: about 10,000 env steps, so that members have learnt before they are
compared),
``tag`` (Tag continuous with PPO, 4 members, each policy's learning rate and entropy
coefficient varied), ``smax`` (`experiments.configs.smax`'s recurrent MAPPO, 3
independent members with the same settings, scored by their win rate: three seeds in one
program, in a run folder that checkpoints and resumes, for runs longer than one sitting).
Modifiers: ``tiny`` (a few iterations of a small population, for tests and quick CPU
runs), ``tournament`` (tournament selection from the leaderboard instead of PBT),
``fixed`` (no selection: a fixed-hyper-parameter population, the baseline PBT is
compared with); for ``smax``, its presets ``27m_vs_30m``, ``2s3z`` and ``mava``.
"""

from __future__ import annotations

import ml_collections

from algorithms.common.config import parse_presets
from algorithms.population import POPULATION_DEFAULTS

TASKS = ("cartpole", "pendulum", "tag", "smax")
_SMAX_PRESETS = ("27m_vs_30m", "2s3z", "mava")
PRESETS = (*TASKS, "tiny", "tournament", "fixed", *_SMAX_PRESETS)


def _smax(presets: list[str]) -> ml_collections.ConfigDict:
    from experiments.configs import smax

    c = smax.get_config(",".join(p for p in presets if p in (*_SMAX_PRESETS, "tiny")))
    # seeds trained side by side: no leaderboard (its K snapshots with their optimiser
    # states would be most of a checkpoint: 8 of 27m_vs_30m's GRU learners ≈ 100 MB)
    c.population = ml_collections.ConfigDict(
        {
            **POPULATION_DEFAULTS,
            "size": 3,
            "hparams": {},
            "mode": "none",
            "score": "win_rate",
            "tournament": {"leaderboard_size": 0},
        }
    )
    return c


def _task(name: str, tiny: bool) -> ml_collections.ConfigDict:
    if name == "cartpole":
        from experiments.configs import cartpole

        c = cartpole.get_config("tiny" if tiny else "")
        hparams = {"lr": (1e-4, 3e-3, "log"), "ent_coef": (0.0, 0.03), "clip_eps": (0.1, 0.3)}
        size = 16
    elif name == "pendulum":
        from experiments.configs import pendulum

        c = pendulum.get_config("tiny" if tiny else "")
        hparams = {
            "actor_lr": (1e-5, 1e-2, "log"),
            "critic_lr": (1e-5, 1e-2, "log"),
            "tau": (1e-3, 0.1, "log"),
            "noise_scale": (0.0, 0.5),
        }
        size = 8
        if not tiny:
            c.total_env_steps = 100_000
            c.run.iterations_per_chunk = 50
    else:
        from experiments.configs import tag_continuous

        c = tag_continuous.get_config("tiny" if tiny else "")
        hparams = {"lr": (1e-4, 3e-3, "log"), "ent_coef": (0.0, 0.05)}
        size = 4
    c.population = ml_collections.ConfigDict(
        {**POPULATION_DEFAULTS, "size": size, "hparams": hparams}
    )
    if name == "pendulum":  # scored by noise-free episodes: noise_scale varies
        c.population.eval_episodes = 2 if tiny else 16
        c.population.pbt.interval_chunks = 1 if tiny else 3
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
    if tasks[0] != "smax" and any(p in _SMAX_PRESETS for p in presets):
        raise ValueError(
            f"presets {list(_SMAX_PRESETS)} apply to the smax task only, got {preset!r}"
        )
    c = _smax(presets) if tasks[0] == "smax" else _task(tasks[0], "tiny" in presets)
    if "tournament" in presets:
        c.population.mode = "tournament"
        c.population.tournament.leaderboard_size = POPULATION_DEFAULTS["tournament"][
            "leaderboard_size"
        ]
    if "fixed" in presets:
        c.population.mode = "none"
    return c
