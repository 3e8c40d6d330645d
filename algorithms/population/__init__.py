"""Populations: ``P`` members with their own hyper-parameters in one compiled program,
with PBT, a tournament leaderboard and member sharding over devices; self-play leagues
of two opposed policies (`algorithms.population.league`).

``from algorithms.population import make_population_train``; see
`algorithms.population.train`.
"""

from algorithms.population.config import MODES, POPULATION_DEFAULTS, PopulationSpec
from algorithms.population.hparams import HparamRange, Slot
from algorithms.population.leaderboard import (
    Leaderboard,
    empty_leaderboard,
    update_leaderboard,
)
from algorithms.population.league import League, LeagueState, make_league
from algorithms.population.train import (
    MEMBER_AXIS,
    Population,
    PopulationState,
    make_population_train,
)

__all__ = [
    "MEMBER_AXIS",
    "MODES",
    "POPULATION_DEFAULTS",
    "HparamRange",
    "Leaderboard",
    "League",
    "LeagueState",
    "Population",
    "PopulationSpec",
    "PopulationState",
    "Slot",
    "empty_leaderboard",
    "make_league",
    "make_population_train",
    "update_leaderboard",
]
