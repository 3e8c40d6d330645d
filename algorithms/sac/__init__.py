"""SAC for continuous (`Box`) actions: twin critics, a tanh-squashed Gaussian actor and a
learned temperature, fused into one jitted program with the device replay buffer.

``from algorithms.sac import make_train``; losses in `algorithms.sac.losses`, the actor
in `algorithms.sac.networks`.
"""

from algorithms.sac.train import (
    ALGO_DEFAULTS,
    POLICY_DEFAULTS,
    RUN_DEFAULTS,
    SAC_RULES,
    PolicyState,
    default_config,
    make_train,
)

__all__ = [
    "ALGO_DEFAULTS",
    "POLICY_DEFAULTS",
    "RUN_DEFAULTS",
    "SAC_RULES",
    "PolicyState",
    "default_config",
    "make_train",
]
