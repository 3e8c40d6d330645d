"""Hyper-parameter ranges of a population: sampling, perturbation and resampling.

A range is ``(low, high)`` or ``(low, high, scale)`` with ``scale`` ``"linear"`` (uniform
on ``[low, high]``) or ``"log"`` (log-uniform: uniform in ``log x``, ``0 < low``). A
*slot* is one hyper-parameter of one policy: the population config names a range either
for every trained policy (``"lr"``) or for one (``"runner/lr"``); `resolve_slots` turns
that into the ordered tuple of `Slot` s that every ``[P, H]`` array of hyper-parameter
values follows (``P`` members, ``H`` slots).

Perturbation multiplies a value by one of the perturbation factors and clips it to its
range; resampling draws a fresh value from the range.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["SCALES", "HparamRange", "Slot", "clip_to_ranges", "from_unit", "resolve_slots"]

SCALES = ("linear", "log")


@dataclasses.dataclass(frozen=True)
class HparamRange:
    """``[low, high]`` on a ``"linear"`` or ``"log"`` scale."""

    low: float
    high: float
    scale: str = "linear"

    @classmethod
    def parse(cls, value: Any, where: str) -> HparamRange:
        """A range from ``(low, high[, scale])``; ``ValueError`` naming ``where``."""
        if isinstance(value, HparamRange):
            return value
        if isinstance(value, str) or not isinstance(value, Sequence) or len(value) not in (2, 3):
            raise ValueError(f"{where} must be (low, high) or (low, high, scale), got {value!r}")
        low, high = value[0], value[1]
        scale = value[2] if len(value) == 3 else "linear"
        try:
            low, high = float(low), float(high)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: low and high must be numbers, got {value!r}") from None
        if scale not in SCALES:
            raise ValueError(f"{where}: scale must be one of {list(SCALES)}, got {scale!r}")
        if not low <= high:
            raise ValueError(f"{where}: low={low} exceeds high={high}")
        if scale == "log" and low <= 0:
            raise ValueError(f"{where}: a log scale needs low > 0, got low={low}")
        return cls(low, high, scale)


@dataclasses.dataclass(frozen=True)
class Slot:
    """One varied hyper-parameter: ``policy``'s ``name`` within ``range``."""

    policy: str
    name: str
    range: HparamRange

    @property
    def label(self) -> str:
        return f"{self.policy}/{self.name}"


def from_unit(u: jax.Array, slots: Sequence[Slot]) -> jax.Array:
    """``u [..., H]`` uniform on ``[0, 1)`` mapped into every slot's range: ``low +
    u·(high − low)``, or ``exp`` of that in ``log`` space for log ranges. float32."""
    lo = jnp.asarray([s.range.low for s in slots], jnp.float32)
    hi = jnp.asarray([s.range.high for s in slots], jnp.float32)
    log = jnp.asarray([s.range.scale == "log" for s in slots])
    llo, lhi = jnp.log(jnp.where(log, lo, 1.0)), jnp.log(jnp.where(log, hi, 1.0))
    lin = lo + u * (hi - lo)
    lg = jnp.exp(llo + u * (lhi - llo))
    return jnp.clip(jnp.where(log, lg, lin), lo, hi).astype(jnp.float32)


def clip_to_ranges(x: jax.Array, slots: Sequence[Slot]) -> jax.Array:
    """``x [..., H]`` clipped to every slot's ``[low, high]``."""
    lo = jnp.asarray([s.range.low for s in slots], jnp.float32)
    hi = jnp.asarray([s.range.high for s in slots], jnp.float32)
    return jnp.clip(x, lo, hi)


def resolve_slots(
    ranges: Mapping[str, Any], hparam_names: Mapping[str, Sequence[str]], where: str
) -> tuple[Slot, ...]:
    """The slots of ``ranges`` (``{"lr": range, "runner/ent_coef": range}``) given the
    varied hyper-parameters of every trained policy (``hparam_names``), in policy order
    then key order. A bare name applies to every trained policy that has it; unknown
    policies or hyper-parameters raise ``ValueError`` naming the key."""
    slots: list[Slot] = []
    for key in ranges:
        rng = HparamRange.parse(ranges[key], f"{where}.{key}")
        if "/" in key:
            pol, name = key.split("/", 1)
            if pol not in hparam_names:
                raise ValueError(
                    f"{where}.{key}: {pol!r} is not a trained policy; known: {list(hparam_names)}"
                )
            targets = [pol]
        else:
            name = key
            targets = [p for p, names in hparam_names.items() if name in names]
        for p in targets:
            if name not in hparam_names[p]:
                raise ValueError(
                    f"{where}.{key}: policy {p!r} has no hyper-parameter {name!r} that may "
                    f"vary; those are {list(hparam_names[p])}"
                )
        if not targets:
            known = sorted({n for names in hparam_names.values() for n in names})
            raise ValueError(f"{where}.{key}: no trained policy has {name!r}; known: {known}")
        slots.extend(Slot(p, name, rng) for p in targets)
    order = {p: i for i, p in enumerate(hparam_names)}
    slots.sort(key=lambda s: order[s.policy])
    labels = [s.label for s in slots]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise ValueError(f"{where}: {dup} given twice (once by policy, once for all)")
    return tuple(slots)
