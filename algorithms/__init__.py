"""Algorithms: PPO (with a MAPPO option), A2C, DDPG, TD3, SAC, IQL/VDN/QMIX and PQN, each with
``make_train(config, env, env_params) -> jaxdrive.training.Trainer``.

`make_train` here dispatches on ``config.algorithm``; modules load lazily.
`make_population_train` trains a population of any of them in one program
(`algorithms.population`).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ALGORITHMS", "make_population_train", "make_train"]

ALGORITHMS = {
    "ppo": "algorithms.ppo",
    "a2c": "algorithms.a2c",
    "ddpg": "algorithms.ddpg",
    "iql": "algorithms.qlearning",
    "vdn": "algorithms.qlearning",
    "qmix": "algorithms.qlearning",
    "pqn": "algorithms.pqn",
    "td3": "algorithms.td3",
    "sac": "algorithms.sac",
}


def make_train(config: Any, env: Any, env_params: Any = None) -> Any:
    """Builds the `Trainer` of ``config.algorithm`` for ``env``."""
    name = config["algorithm"]
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; known: {sorted(ALGORITHMS)}")
    module = importlib.import_module(ALGORITHMS[name])
    return module.make_train(config, env, env_params)


def make_population_train(config: Any, env: Any = None, env_params: Any = None) -> Any:
    """The `algorithms.population.Population` of ``config`` (``config.population``)."""
    from algorithms.population import make_population_train as make

    return make(config, env, env_params)
