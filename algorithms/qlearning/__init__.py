"""IQL, VDN and QMIX with recurrent (GRU) agents and a device sequence replay.

``make_train(config, env, env_params) -> jaxdrive.training.Trainer`` for
``config.algorithm`` in ``("iql", "vdn", "qmix")``; the pieces (targets, networks and
mixers, replay) are separate pure modules that PQN (`algorithms.pqn`) shares.
"""

from algorithms.qlearning.train import (
    ALGO_DEFAULTS,
    ALGORITHMS,
    POLICY_DEFAULTS,
    RUN_DEFAULTS,
    PolicyState,
    RunnerState,
    default_config,
    make_train,
)

__all__ = [
    "ALGORITHMS",
    "ALGO_DEFAULTS",
    "POLICY_DEFAULTS",
    "RUN_DEFAULTS",
    "PolicyState",
    "RunnerState",
    "default_config",
    "make_train",
]
