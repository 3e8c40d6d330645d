"""Shared plumbing of the single-agent adapters (gymnax, Jumanji): one group
``"agent"`` of one agent, and a state that holds the episode still once it ended.

Neither library defines a step past the end of an episode (both auto-reset in their
own wrappers), and their states may leave the observation space there. A jaxdrive env
must stay valid when stepped on without a reset, so after ``done`` the adapted env
keeps the last state, observation and mask, pays 0 and keeps ``done`` True (with
``terminated`` and ``truncated`` False: the episode ended on an earlier step).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxdrive.env import Env
from jaxdrive.spaces import Space
from jaxdrive.types import TimeStep
from jaxdrive.wrappers import select_tree

__all__ = ["GROUP", "SingleAgentAdapter", "SingleAgentState"]

GROUP = "agent"


@struct.dataclass
class SingleAgentState:
    """Dimension letters: ``O`` the observation shape, ``K`` the mask's columns."""

    inner: Any  # the wrapped env's state
    obs: jax.Array  # [1, *O] float32, the last observation
    mask: jax.Array | None  # [1, K] bool, the last action mask (None: no masks)
    done: jax.Array  # [] bool, the episode has ended


class SingleAgentAdapter(Env[SingleAgentState, Any]):
    """Base of `GymnaxEnv` and `JumanjiEnv`: spaces, and the two timestep builders."""

    _obs_space: Space
    _act_space: Space

    @property
    def groups(self) -> tuple[str, ...]:
        return (GROUP,)

    def _check_group(self, group: str) -> None:
        if group != GROUP:
            raise ValueError(f"{self.name} has only the group {GROUP!r}, got {group!r}")

    def num_agents(self, group: str) -> int:
        self._check_group(group)
        return 1

    def observation_space(self, group: str) -> Space:
        self._check_group(group)
        return self._obs_space

    def action_space(self, group: str) -> Space:
        self._check_group(group)
        return self._act_space

    @property
    def reset_by_select(self) -> bool:
        return False

    @staticmethod
    def _first(
        inner: Any, obs: jax.Array, mask: jax.Array | None
    ) -> tuple[SingleAgentState, TimeStep]:
        """The state and `TimeStep` after a reset; ``obs [*O]``, ``mask [K]`` or None."""
        obs = obs.astype(jnp.float32)[None]
        mask = None if mask is None else mask[None]
        state = SingleAgentState(inner=inner, obs=obs, mask=mask, done=jnp.asarray(False))
        masks = None if mask is None else {GROUP: mask}
        return state, TimeStep.restart({GROUP: obs}, action_mask=masks)

    @staticmethod
    def _next(
        state: SingleAgentState,
        inner: Any,
        obs: jax.Array,
        mask: jax.Array | None,
        reward: jax.Array,
        terminated: jax.Array,
        truncated: jax.Array,
    ) -> tuple[SingleAgentState, TimeStep]:
        """The state and `TimeStep` after a step from ``state`` to the wrapped env's
        ``inner`` with ``obs [*O]``, ``mask [K]`` or None, scalar ``reward``,
        ``terminated`` and ``truncated`` (truncation yields to termination); held
        still where ``state`` had ended (module docstring)."""
        was = state.done
        terminated = jnp.asarray(terminated, bool) & ~was
        truncated = jnp.asarray(truncated, bool) & ~terminated & ~was
        done = was | terminated | truncated
        obs = jnp.where(was, state.obs, obs.astype(jnp.float32)[None])
        mask = None if mask is None else jnp.where(was, state.mask, mask[None])
        new = SingleAgentState(
            inner=select_tree(was, state.inner, inner), obs=obs, mask=mask, done=done
        )
        ts = TimeStep(
            obs={GROUP: obs},
            reward={GROUP: jnp.where(was, 0.0, reward).astype(jnp.float32).reshape(1)},
            terminated={GROUP: terminated.reshape(1)},
            truncated={GROUP: truncated.reshape(1)},
            active={GROUP: jnp.ones((1,), bool)},
            done=done,
            action_mask=None if mask is None else {GROUP: mask},
        )
        return new, ts
