"""DDPG for continuous (`Box`) actions, fused into one jitted program.

``make_train(config, env, env_params) -> jaxdrive.training.Trainer``; the pieces
(replay buffer, exploration noise, losses, networks) are separate pure modules.
"""

from algorithms.ddpg.train import (
    ALGO_DEFAULTS,
    POLICY_DEFAULTS,
    RUN_DEFAULTS,
    PolicyState,
    RunnerState,
    default_config,
    make_train,
)

__all__ = [
    "ALGO_DEFAULTS",
    "POLICY_DEFAULTS",
    "RUN_DEFAULTS",
    "PolicyState",
    "RunnerState",
    "default_config",
    "make_train",
]
