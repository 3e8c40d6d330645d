"""Algorithms: PPO (with a MAPPO option), A2C, DDPG, TD3, SAC, IQL/VDN/QMIX and PQN, each with
``make_train(config, env, env_params) -> jaxdrive.training.Trainer``.

`make_train` here dispatches on ``config.algorithm``; modules load lazily.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ALGORITHMS", "make_train"]

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
