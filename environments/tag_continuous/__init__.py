"""TagContinuous: taggers chase runners on a continuous square (WarpDrive's game, in JAX).

`TagContinuous` is the env, `TagContinuousParams` its numeric parameters and `TagState`
its state; `neighbors` holds the plain-JAX neighbour searches (the kernels' reference).
"""

from environments.tag_continuous.env import (
    TagContinuous,
    TagContinuousParams,
    TagState,
    action_values,
    validate_params,
)

__all__ = [
    "TagContinuous",
    "TagContinuousParams",
    "TagState",
    "action_values",
    "validate_params",
]
