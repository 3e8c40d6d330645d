"""Space conversions between jaxdrive and the libraries the adapters connect.

Foreign spaces (JaxMARL, gymnax, Jumanji specs) are read by duck typing, so this
module imports none of those libraries; Gymnasium is imported only by `to_gym_space`.
Observations always become a float32 `Box` (integer and boolean observations are cast),
so one network input type serves every adapted env.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxdrive.spaces import Box, Discrete, MultiDiscrete, Space

__all__ = ["action_space_from", "observation_box_from", "to_gym_space"]


def _kind(space: Any) -> str:
    """``"discrete"``, ``"multidiscrete"`` or ``"box"`` for a foreign space or spec."""
    name = type(space).__name__
    if name in ("Discrete", "DiscreteArray"):
        return "discrete"
    if name in ("MultiDiscrete", "MultiDiscreteArray"):
        return "multidiscrete"
    if name in ("Box", "BoundedArray", "Array"):
        return "box"
    raise ValueError(
        f"cannot convert a {name} space: the adapters take Discrete, MultiDiscrete and Box "
        "spaces (Jumanji: DiscreteArray, MultiDiscreteArray, BoundedArray, Array)"
    )


def _nvec(space: Any) -> np.ndarray:
    for attr in ("num_categories", "num_values", "nvec"):
        if hasattr(space, attr):
            return np.asarray(getattr(space, attr)).reshape(-1)
    raise ValueError(f"cannot read the category counts of {space!r}")


def _n(space: Any) -> int:
    return int(space.n) if hasattr(space, "n") else int(space.num_values)


def _bounds(space: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(low, high)`` float64 broadcast to the space's shape (±inf where unbounded)."""
    shape = tuple(int(s) for s in space.shape)
    low = getattr(space, "low", getattr(space, "minimum", -np.inf))
    high = getattr(space, "high", getattr(space, "maximum", np.inf))
    low = np.broadcast_to(np.asarray(low, np.float64), shape)
    high = np.broadcast_to(np.asarray(high, np.float64), shape)
    return low, high


def action_space_from(space: Any) -> Space:
    """The jaxdrive action space of one agent for a foreign space or spec:
    ``Discrete(n)``, ``MultiDiscrete(nvec)`` or a float32 ``Box``."""
    kind = _kind(space)
    if kind == "discrete":
        return Discrete(_n(space))
    if kind == "multidiscrete":
        return MultiDiscrete(_nvec(space))
    if not np.issubdtype(np.dtype(space.dtype), np.floating):
        raise ValueError(f"a Box action space must hold floats, got dtype {space.dtype}")
    low, high = _bounds(space)
    return Box(low, high, low.shape)


def observation_box_from(space: Any) -> Box:
    """The float32 ``Box`` observation space for a foreign space or spec: a ``Box`` keeps
    its bounds, ``Discrete(n)`` becomes ``[0, n-1]`` of shape ``()``, ``MultiDiscrete``
    ``[0, nvec-1]``."""
    kind = _kind(space)
    if kind == "discrete":
        return Box(0.0, _n(space) - 1.0, ())
    if kind == "multidiscrete":
        nvec = _nvec(space)
        return Box(np.zeros(nvec.shape), nvec - 1.0, nvec.shape)
    low, high = _bounds(space)
    return Box(low, high, low.shape)


def to_gym_space(space: Space) -> Any:
    """The Gymnasium space of a jaxdrive space (``Box`` as float32)."""
    import gymnasium

    if isinstance(space, Discrete):
        return gymnasium.spaces.Discrete(space.n)
    if isinstance(space, MultiDiscrete):
        return gymnasium.spaces.MultiDiscrete(np.asarray(space.nvec, np.int64))
    if isinstance(space, Box):
        return gymnasium.spaces.Box(space.low, space.high, space.shape, np.float32)
    raise ValueError(f"cannot convert {space!r} to a Gymnasium space")
