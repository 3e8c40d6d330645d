"""jaxdrive: end-to-end multi-agent reinforcement learning on accelerators, in JAX.

The public surface: the `Env` contract and `TimeStep`, spaces, wrappers, `vectorize`
and `rollout`, the registry (`make`, `register`), and `jaxdrive.testing`.
"""

from jaxdrive import spaces, testing, wrappers
from jaxdrive.env import Env, check_actions
from jaxdrive.registry import make, register, registered_envs
from jaxdrive.spaces import Box, Discrete, MultiDiscrete, Space
from jaxdrive.types import EnvParams, EnvState, TimeStep
from jaxdrive.vector import RolloutResult, VecEnv, random_policy, rollout, vectorize
from jaxdrive.wrappers import (
    AutoReset,
    EpisodeStats,
    NormalizeObservation,
    ResetPool,
    TimeLimit,
    make_reset_pool,
)

__version__ = "0.1.0"

__all__ = [
    "AutoReset",
    "Box",
    "Discrete",
    "Env",
    "EnvParams",
    "EnvState",
    "EpisodeStats",
    "MultiDiscrete",
    "NormalizeObservation",
    "ResetPool",
    "RolloutResult",
    "Space",
    "TimeLimit",
    "TimeStep",
    "VecEnv",
    "check_actions",
    "make",
    "make_reset_pool",
    "random_policy",
    "register",
    "registered_envs",
    "rollout",
    "spaces",
    "testing",
    "vectorize",
    "wrappers",
]
