"""The Tag env the benchmarks time: WarpDrive's ``tag_continuous.yaml`` settings.

Kept apart from `experiments.benchmarks.run` (whose absl flags are defined when it is
imported) so that the other scripts can build the same env.
"""

from __future__ import annotations

from typing import Any

__all__ = ["WARPDRIVE_TAG_ENV", "make_tag"]

#: The env section of WarpDrive's tag_continuous.yaml (counts and observation set per
#: row).
WARPDRIVE_TAG_ENV = dict(
    grid_length=20.0,
    episode_length=500,
    max_acceleration=0.1,
    min_acceleration=-0.1,
    max_turn=2.356,
    min_turn=-2.356,
    num_acceleration_levels=20,
    num_turn_levels=20,
    skill_level_runner=1.0,
    skill_level_tagger=1.0,
    max_speed=1.0,
    runner_exits_game_after_tagged=True,
    tag_reward_for_tagger=10.0,
    tag_penalty_for_runner=-10.0,
    step_penalty_for_tagger=0.0,
    step_reward_for_runner=0.0,
    edge_hit_penalty=0.0,
    end_of_game_reward_for_runner=1.0,
    tagging_distance=0.02,
)


def make_tag(
    taggers: int, runners: int, full: bool, k: int, backend: str = "auto"
) -> tuple[Any, Any]:
    """The WarpDrive-config TagContinuous with the given counts, observation set and
    `TagContinuous` ``backend`` (``"auto"``, ``"xla"`` or ``"pallas"``), via the
    registry: ``(env, params)``."""
    import jaxdrive

    kw = dict(WARPDRIVE_TAG_ENV)
    kw.update(
        num_taggers=taggers,
        num_runners=runners,
        use_full_observation=full,
        num_other_agents_observed=k,
        backend=backend,
    )
    return jaxdrive.make("tag_continuous", **kw)
