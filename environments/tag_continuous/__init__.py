"""TagContinuous: taggers chase runners on a continuous square (WarpDrive's game, in JAX).

`TagContinuous` is the env, `TagContinuousParams` its numeric parameters, `TagState` its
state and `TagKernelConfig` the size thresholds of its kernel path. `neighbors` holds the
plain-JAX neighbour searches and `obs_xla` the plain-JAX observations (the references of
the kernels in `kernels`).
"""

from environments.tag_continuous.env import TagContinuous
from environments.tag_continuous.params import (
    TagContinuousParams,
    TagKernelConfig,
    TagState,
    action_values,
    validate_params,
)

__all__ = [
    "TagContinuous",
    "TagContinuousParams",
    "TagKernelConfig",
    "TagState",
    "action_values",
    "validate_params",
]
