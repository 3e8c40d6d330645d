"""Data types shared by every environment: `TimeStep` and the `EnvParams` base."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

__all__ = ["EnvParams", "EnvState", "TimeStep", "stack_groups"]

PRNGKey = jax.Array
Array = jax.Array


@struct.dataclass
class EnvParams:
    """Base class for an environment's numeric parameters (a pytree; vmappable).

    Subclasses add fields; each env exposes its defaults as ``env.default_params``.
    """


@struct.dataclass
class EnvState:
    """Base class for environment state (a pytree). Subclasses list fields with shapes."""


@struct.dataclass
class TimeStep:
    """What `reset` and `step` return for one environment.

    Dimension letters: ``G`` groups; ``A_g`` agents in group ``g``; ``O_g`` the
    observation shape of group ``g``. Each dict is keyed by group name.

    Attributes:
      obs: ``{g: [A_g, *O_g]}`` observations to act on.
      reward: ``{g: [A_g]}`` float32 reward of the transition that led here (0 at reset).
      terminated: ``{g: [A_g]}`` bool; the agent reached a terminal state (no bootstrap).
      truncated: ``{g: [A_g]}`` bool; the episode was cut (bootstrap from ``obs``).
      active: ``{g: [A_g]}`` bool; the agent is in the game and acts on ``obs``.
      done: ``[]`` bool; the episode of this environment ended at this step.
      extras: env-specific values; the same tree structure after reset and step.
      action_mask: ``None`` (every action allowed) or ``{g: [A_g, K_g]}`` bool, True
        where agent ``i`` of group ``g`` may take that action, for groups with
        `Discrete` or `MultiDiscrete` actions: ``K_g = n`` for ``Discrete(n)``;
        ``K_g = sum(nvec)`` for ``MultiDiscrete(nvec)``, the dimensions' masks
        concatenated (dimension ``d`` in columns ``[sum(nvec[:d]), sum(nvec[:d+1]))``).
        Every agent has at least one allowed action in every dimension. An env that
        gives masks gives them for every group, after reset and after every step (so
        the timestep keeps one tree structure); the mask describes the actions to take
        on ``obs``. Policies never sample a masked action; an env still accepts any
        action of its space (treating a masked one as it documents, e.g. a no-op).
    """

    obs: dict[str, Array]
    reward: dict[str, Array]
    terminated: dict[str, Array]
    truncated: dict[str, Array]
    active: dict[str, Array]
    done: Array
    extras: dict[str, Any] = struct.field(default_factory=dict)
    action_mask: dict[str, Array] | None = None

    @classmethod
    def restart(
        cls,
        obs: dict[str, Array],
        active: dict[str, Array] | None = None,
        extras: dict[str, Any] | None = None,
        action_mask: dict[str, Array] | None = None,
    ) -> TimeStep:
        """The first `TimeStep` of an episode: zero reward, nothing done, all active
        unless ``active`` says otherwise, ``action_mask`` as given (``None``: no masks)."""
        zeros = {g: jnp.zeros(o.shape[:1], jnp.float32) for g, o in obs.items()}
        false = {g: jnp.zeros(o.shape[:1], bool) for g, o in obs.items()}
        if active is None:
            active = {g: jnp.ones(o.shape[:1], bool) for g, o in obs.items()}
        return cls(
            obs=obs,
            reward=zeros,
            terminated=false,
            truncated=dict(false),
            active=active,
            done=jnp.asarray(False),
            extras={} if extras is None else extras,
            action_mask=action_mask,
        )


def stack_groups(tree: dict[str, Array]) -> Array:
    """Concatenates per-group arrays along the agent axis: ``{g: [A_g, ...]} -> [A, ...]``."""
    return jnp.concatenate([tree[g] for g in tree], axis=0)
