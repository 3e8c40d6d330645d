"""TD3 for continuous (`Box`) actions: twin critics, target policy smoothing and delayed
actor updates, fused into one jitted program with the device replay buffer.

``from algorithms.td3 import make_train``; losses in `algorithms.td3.losses`.
"""

from algorithms.td3.train import (
    ALGO_DEFAULTS,
    POLICY_DEFAULTS,
    RUN_DEFAULTS,
    TD3_RULES,
    PolicyState,
    default_config,
    make_train,
)

__all__ = [
    "ALGO_DEFAULTS",
    "POLICY_DEFAULTS",
    "RUN_DEFAULTS",
    "TD3_RULES",
    "PolicyState",
    "default_config",
    "make_train",
]
