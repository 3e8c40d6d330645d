"""The ``config.population`` section: its defaults, checks and resolved form.

Keys (`POPULATION_DEFAULTS`):

``size`` (``P`` members), ``hparams`` (``{name: (low, high[, scale])}``: every member's
value of that hyper-parameter is drawn from the range at the start; ``"lr"`` varies it in
every trained policy, ``"runner/lr"`` in one; see `algorithms.population.hparams`),
``mode`` (``"pbt"``: the worst members copy the best ones; ``"tournament"``: the worst
restart from leaderboard snapshots picked by rank; ``"none"``: independent members),
``score`` (the metric members are ranked by; ``""``: ``episode_return/<first group>``;
``"win_rate"`` where the trainer reports it and ``eval_episodes`` is 0),
``eval_episodes`` (0: scores are the running episode returns of training; ``E > 0``:
the mean return of ``E`` deterministic evaluation episodes per member),
``num_devices`` (devices the member axis is split over; ``P`` divisible by it),
``pbt`` (``interval_chunks``: chunks between selection rounds; ``truncation``: the
fraction ``q`` that is replaced and copied from; ``perturb_factors``; ``resample_prob``)
and ``tournament`` (``leaderboard_size``: ``K`` best snapshots kept; 0 keeps none, which
only ``"pbt"`` and ``"none"`` allow).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from algorithms.common.config import as_dict, merge_defaults
from algorithms.common.config_rules import choice, integer, number
from algorithms.population.hparams import Slot, resolve_slots

__all__ = ["MODES", "POPULATION_DEFAULTS", "PopulationSpec", "resolve_population"]

MODES = ("pbt", "tournament", "none")

POPULATION_DEFAULTS: dict[str, Any] = {
    "size": 4,
    "hparams": {},
    "mode": "pbt",
    "score": "",
    "eval_episodes": 0,
    "num_devices": 1,
    "pbt": {
        "interval_chunks": 1,
        "truncation": 0.25,
        "perturb_factors": (0.8, 1.2),
        "resample_prob": 0.25,
    },
    "tournament": {"leaderboard_size": 8},
}


@dataclasses.dataclass(frozen=True)
class PopulationSpec:
    """A checked ``config.population`` (see the module docstring)."""

    size: int
    slots: tuple[Slot, ...]
    mode: str
    score: str
    eval_episodes: int
    num_devices: int
    interval_chunks: int
    truncation: float
    perturb_factors: tuple[float, ...]
    resample_prob: float
    leaderboard_size: int


def _factors(v: Any, where: str) -> tuple[float, ...]:
    if isinstance(v, str) or not isinstance(v, Sequence) or not v:
        raise ValueError(f"{where} must list at least one positive factor, got {v!r}")
    return tuple(number(0.0, lo_open=True)(f, f"{where} entries") for f in v)


def resolve_population(
    section: Any,
    hparam_names: Mapping[str, Sequence[str]],
    groups: Sequence[str],
    metric_names: Callable[[], Sequence[str]] = tuple,
) -> PopulationSpec:
    """Checks ``section`` (``config.population``; ``None`` for the defaults) given the
    varied hyper-parameters of every trained policy, the env's groups and (called only
    for a score other than an episode return) the names of the trainer's metrics;
    ``ValueError`` naming the key."""
    where = "config.population"
    d = merge_defaults(section, POPULATION_DEFAULTS, where)
    pbt = merge_defaults(d["pbt"], POPULATION_DEFAULTS["pbt"], f"{where}.pbt")
    tour = merge_defaults(d["tournament"], POPULATION_DEFAULTS["tournament"], f"{where}.tournament")
    size = integer(1)(d["size"], f"{where}.size")
    mode = choice(lambda: MODES)(d["mode"], f"{where}.mode")
    n_dev = integer(1)(d["num_devices"], f"{where}.num_devices")
    if size % n_dev:
        raise ValueError(
            f"{where}.size={size} is not divisible by {where}.num_devices={n_dev}: every "
            "device trains the same number of members"
        )
    trunc = number(0.0, 0.5, lo_open=True)(pbt["truncation"], f"{where}.pbt.truncation")
    if mode != "none" and size < 2:
        raise ValueError(f"{where}.mode={mode!r} needs size >= 2 members, got {size}")
    k = integer(0)(tour["leaderboard_size"], f"{where}.tournament.leaderboard_size")
    if mode == "tournament" and k < 1:
        raise ValueError(f"{where}.mode='tournament' needs tournament.leaderboard_size >= 1")
    score = d["score"] or f"episode_return/{groups[0]}"
    eval_episodes = integer(0)(d["eval_episodes"], f"{where}.eval_episodes")
    known = [f"episode_return/{g}" for g in groups]
    if score not in known and not eval_episodes and "win_rate" in metric_names():
        known.append("win_rate")  # envs that say whether an episode was won (SMAX)
    if score not in known:
        raise ValueError(f"{where}.score must be one of {known} (or ''), got {score!r}")
    return PopulationSpec(
        size=size,
        slots=resolve_slots(
            as_dict(d["hparams"], f"{where}.hparams"), hparam_names, f"{where}.hparams"
        ),
        mode=mode,
        score=score,
        eval_episodes=eval_episodes,
        num_devices=n_dev,
        interval_chunks=integer(1)(pbt["interval_chunks"], f"{where}.pbt.interval_chunks"),
        truncation=trunc,
        perturb_factors=_factors(pbt["perturb_factors"], f"{where}.pbt.perturb_factors"),
        resample_prob=number(0.0, 1.0)(pbt["resample_prob"], f"{where}.pbt.resample_prob"),
        leaderboard_size=k,
    )
