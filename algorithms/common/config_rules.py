"""Value rules of run-config hyper-parameters: ``(value, name) -> plain value``.

A rule checks one value and returns it as plain Python (``float``, ``int``, ``bool``, a
tuple), or raises ``ValueError`` naming the key (``name``, e.g. ``config.algo.lr``). The
constructors (`number`, `integer`, `flag`, `choice`, `sizes`) build the rule tables of
the algorithms (`ON_POLICY_RULES`, `DDPG_RULES`; other algorithms build theirs from the
same constructors in their own package); `check_values` applies a table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "COMMON_RULES",
    "COMPUTE_DTYPES",
    "DDPG_RULES",
    "ON_POLICY_RULES",
    "Rule",
    "check_values",
    "choice",
    "flag",
    "integer",
    "max_grad_norm_or_off",
    "number",
    "sizes",
]

#: Values of a policy's ``compute_dtype``.
COMPUTE_DTYPES = ("float32", "bfloat16")

Rule = Callable[[Any, str], Any]


def number(lo: float = -math.inf, hi: float = math.inf, lo_open: bool = False) -> Rule:
    """A real number in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``), returned as float."""
    if hi == math.inf:
        what = f"be {'>' if lo_open else '>='} {lo:g}" if lo > -math.inf else "be finite"
    else:
        what = f"lie in {'(' if lo_open else '['}{lo:g}, {hi:g}]"

    def check(v: Any, name: str) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
            raise ValueError(f"{name} must be a number, got {v!r}")
        f = float(v)
        if not math.isfinite(f) or not (lo < f if lo_open else lo <= f) or not f <= hi:
            raise ValueError(f"{name} must {what}, got {v!r}")
        return f

    return check


def integer(minimum: int | None) -> Rule:
    """An integer ``>= minimum`` (any integer for ``None``), returned as int."""
    what = {None: "an integer", 0: "a non-negative integer", 1: "a positive integer"}.get(
        minimum, f"an integer >= {minimum}"
    )

    def check(v: Any, name: str) -> int:
        bad = isinstance(v, bool) or not isinstance(v, int | np.integer)
        if bad or (minimum is not None and int(v) < minimum):
            raise ValueError(f"{name} must be {what}, got {v!r}")
        return int(v)

    return check


def flag(v: Any, name: str) -> bool:
    if not isinstance(v, bool | np.bool_):
        raise ValueError(f"{name} must be True or False, got {v!r}")
    return bool(v)


def choice(options: Callable[[], Sequence[str]]) -> Rule:
    """One of ``options()`` (a callable: the lists live in modules imported on use)."""

    def check(v: Any, name: str) -> Any:
        known = tuple(options())
        if v not in known:
            raise ValueError(f"{name} must be one of {list(known)}, got {v!r}")
        return v

    return check


def sizes(v: Any, name: str) -> tuple[int, ...]:
    """A non-empty sequence of positive layer sizes."""
    if isinstance(v, str) or not isinstance(v, Sequence | np.ndarray) or len(v) == 0:
        raise ValueError(f"{name} must list at least one layer size, got {v!r}")
    return sizes_or_none(v, name)


def sizes_or_none(v: Any, name: str) -> tuple[int, ...]:
    """A (possibly empty) sequence of positive layer sizes."""
    if isinstance(v, str) or not isinstance(v, Sequence | np.ndarray):
        raise ValueError(f"{name} must be a list of layer sizes (may be empty), got {v!r}")
    return tuple(integer(1)(h, f"{name} entries") for h in v)


def max_grad_norm_or_off(v: Any, name: str) -> float:
    return 0.0 if v is None else number(0.0)(v, name)


def _activations() -> Sequence[str]:
    from algorithms.common.layers import ACTIVATIONS

    return sorted(ACTIVATIONS)


def _schedules() -> Sequence[str]:
    from algorithms.common.schedules import SCHEDULES

    return SCHEDULES


def _head_kinds() -> Sequence[str]:
    from algorithms.common.networks import HEAD_KINDS

    return HEAD_KINDS


COMMON_RULES: dict[str, Rule] = {
    "gamma": number(0.0, 1.0),
    "hidden_sizes": sizes,
    "activation": choice(_activations),
    "frozen": flag,
}

#: Value rules of the PPO and A2C hyper-parameters (policy keys and ``algo`` keys).
ON_POLICY_RULES: dict[str, Rule] = {
    **COMMON_RULES,
    "gae_lambda": number(0.0, 1.0),
    "num_epochs": integer(1),
    "num_minibatches": integer(1),
    "clip_eps": number(0.0),
    "clip_value": flag,
    "value_clip_eps": number(0.0),
    "vf_coef": number(0.0),
    "ent_coef": number(0.0),
    "ent_schedule": choice(_schedules),
    "ent_coef_final": number(0.0),
    "lr": number(0.0, lo_open=True),
    "lr_schedule": choice(_schedules),
    "max_grad_norm": max_grad_norm_or_off,  # 0 or None: no clipping
    "adam_eps": number(0.0, lo_open=True),
    "normalize_advantages": flag,
    "normalize_obs": flag,
    "normalize_rewards": flag,
    "reward_scale": number(0.0, lo_open=True),
    "centralized_critic": flag,
    "shared_torso": flag,
    "action_head": choice(_head_kinds),
    "log_std_init": number(),
    "input_pad_multiple": integer(1),
    "compute_dtype": choice(lambda: COMPUTE_DTYPES),
}

#: Value rules of the DDPG hyper-parameters (policy keys and ``algo`` keys).
DDPG_RULES: dict[str, Rule] = {
    **COMMON_RULES,
    "tau": number(0.0, 1.0, lo_open=True),
    "buffer_size": integer(1),
    "batch_size": integer(1),
    "learning_starts": integer(0),
    "updates_per_iteration": integer(1),
    "noise": choice(lambda: ("gaussian", "ou")),
    "noise_scale": number(0.0),
    "ou_theta": number(0.0, 1.0, lo_open=True),
    "ou_sigma": number(0.0),
    "max_grad_norm": max_grad_norm_or_off,  # 0 or None: no clipping
    "actor_lr": number(0.0, lo_open=True),
    "critic_lr": number(0.0, lo_open=True),
}


def check_values(
    values: Mapping[str, Any], rules: Mapping[str, Rule], names: Mapping[str, str]
) -> dict[str, Any]:
    """``values`` with every key that has a rule checked and converted to plain Python;
    ``names[key]`` is how a message names it (e.g. ``"config.algo.clip_eps"``)."""
    out = dict(values)
    for k, rule in rules.items():
        if k in out:
            out[k] = rule(out[k], names.get(k, k))
    return out
