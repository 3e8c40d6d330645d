"""PQN (Gallici et al. 2024): Q(λ) on many parallel envs, no replay, no target network.

``make_train(config, env, env_params) -> jaxdrive.training.Trainer``; it shares the
networks, targets and ε-greedy acting of `algorithms.qlearning`.
"""

from algorithms.pqn.train import (
    ALGO_DEFAULTS,
    POLICY_DEFAULTS,
    PolicyState,
    RunnerState,
    default_config,
    make_train,
)

__all__ = [
    "ALGO_DEFAULTS",
    "POLICY_DEFAULTS",
    "PolicyState",
    "RunnerState",
    "default_config",
    "make_train",
]
