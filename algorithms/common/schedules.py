"""Learning-rate and coefficient schedules (optax schedules of a step count).

``kind``: ``"constant"`` or ``"linear"`` (from ``init`` to ``final`` over ``num_steps``,
then held). Learning rates decay to 0 by default; an entropy coefficient decays to
``ent_coef_final``.
"""

from __future__ import annotations

import optax

__all__ = ["SCHEDULES", "make_schedule"]

SCHEDULES = ("constant", "linear")


def make_schedule(kind: str, init: float, final: float, num_steps: int) -> optax.Schedule:
    """An optax schedule ``step -> value`` of ``kind`` (``ValueError`` if unknown)."""
    if kind == "constant":
        return optax.constant_schedule(float(init))
    if kind == "linear":
        return optax.linear_schedule(float(init), float(final), max(int(num_steps), 1))
    raise ValueError(f"unknown schedule {kind!r}; known: {SCHEDULES}")
