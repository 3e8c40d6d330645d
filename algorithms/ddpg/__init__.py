"""DDPG for continuous (`Box`) actions, fused into one jitted program.

``make_train(config, env, env_params) -> jaxdrive.training.Trainer``; the pieces
(replay buffer, exploration noise, losses, networks) are separate pure modules. The
buffer and the noise serve TD3 and SAC too (`algorithms.common.off_policy`), so this
package loads its trainer on first use: importing ``algorithms.ddpg.buffer`` does not
import the trainer.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "ALGO_DEFAULTS",
    "POLICY_DEFAULTS",
    "RUN_DEFAULTS",
    "PolicyState",
    "RunnerState",
    "default_config",
    "make_train",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("algorithms.ddpg.train"), name)
    raise AttributeError(f"module 'algorithms.ddpg' has no attribute {name!r}")
