"""Learning-rate and coefficient schedules (optax schedules of a step count).

``kind``: ``"constant"`` or ``"linear"`` (from ``init`` to ``final`` over ``num_steps``,
then held). Learning rates decay to 0 by default; an entropy coefficient decays to
``ent_coef_final``.
"""

from __future__ import annotations

import jax
import optax

__all__ = ["SCHEDULES", "make_schedule"]

SCHEDULES = ("constant", "linear")


def make_schedule(
    kind: str, init: float | jax.Array, final: float, num_steps: int
) -> optax.Schedule:
    """An optax schedule ``step -> value`` of ``kind`` (``ValueError`` if unknown);
    ``init`` may be a traced scalar (a population member's hyper-parameter)."""
    init = init if isinstance(init, jax.Array) else float(init)
    if kind == "constant":
        return optax.constant_schedule(init)
    if kind == "linear":
        return optax.linear_schedule(init, float(final), max(int(num_steps), 1))
    raise ValueError(f"unknown schedule {kind!r}; known: {SCHEDULES}")
