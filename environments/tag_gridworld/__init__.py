"""TagGridWorld: taggers chase one runner on an integer grid (plain JAX)."""

from environments.tag_gridworld.env import TagGridWorld, TagGridWorldParams, TagGridWorldState
from environments.tag_gridworld.render import render

__all__ = ["TagGridWorld", "TagGridWorldParams", "TagGridWorldState", "render"]
