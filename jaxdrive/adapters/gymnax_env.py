"""`from_gymnax`: a gymnax environment on the jaxdrive contract.

One group ``"agent"`` of one agent: ``obs["agent"]: [1, *O]`` float32 (MinAtar's
boolean grids are cast), ``actions["agent"]: [1, *act_shape]``. The params are
gymnax's own ``EnvParams`` (vmappable as they are). ``step`` calls gymnax's
``step_env`` (no auto-reset) with the key gymnax's ``step`` gives it (the first half of
``split(key)``), so a transition equals gymnax's ``step`` with the same key wherever
that one does not reset; ``terminated`` is gymnax's ``terminated``, ``truncated`` its
``is_truncated`` (the time limit ``max_steps_in_episode``) where not terminated.
``info`` is dropped. After the episode ends the env holds still
(`jaxdrive.adapters._single`).
"""

from __future__ import annotations

from typing import Any

import jax

from jaxdrive.adapters._single import GROUP, SingleAgentAdapter, SingleAgentState
from jaxdrive.adapters._spaces import action_space_from, observation_box_from
from jaxdrive.adapters.jaxmarl_env import strong_types
from jaxdrive.types import TimeStep

__all__ = ["GymnaxEnv", "from_gymnax"]


class GymnaxEnv(SingleAgentAdapter):
    """A gymnax ``Environment`` as a jaxdrive `Env` (see the module docstring).

    Args:
      env: the gymnax environment.
      env_params: its default params (they fix the spaces and `episode_length`).
    """

    def __init__(self, env: Any, env_params: Any):
        self.env = env
        self._params = env_params
        self._obs_space = observation_box_from(env.observation_space(env_params))
        self._act_space = action_space_from(env.action_space(env_params))
        steps = getattr(env_params, "max_steps_in_episode", None)
        self._episode_length = None if steps is None else int(steps)

    @property
    def default_params(self) -> Any:
        return self._params

    @property
    def episode_length(self) -> int | None:
        """``max_steps_in_episode`` of the params given to the constructor."""
        return self._episode_length

    @property
    def name(self) -> str:
        return f"gymnax<{self.env.name}>"

    def reset_env(self, key: jax.Array, params: Any) -> tuple[SingleAgentState, TimeStep]:
        """gymnax's ``reset_env(key, params)``."""
        obs, inner = self.env.reset_env(key, params)
        return self._first(strong_types(inner), obs, None)

    def step_env(
        self, key: jax.Array, state: SingleAgentState, actions: dict[str, jax.Array], params: Any
    ) -> tuple[SingleAgentState, TimeStep]:
        """gymnax's ``step_env`` on ``split(key)[0]`` with ``actions["agent"][0]``."""
        step_key, _ = jax.random.split(key)
        obs, inner, reward, terminated, _ = self.env.step_env(
            step_key, state.inner, actions[GROUP][0], params
        )
        inner = strong_types(inner)
        truncated = self.env.is_truncated(inner, params)
        return self._next(state, inner, obs, None, reward, terminated, truncated)


def from_gymnax(env: Any, env_params: Any = None) -> GymnaxEnv:
    """Wraps a gymnax environment (``env, env_params = gymnax.make("CartPole-v1")``) as a
    jaxdrive `Env` whose params are gymnax's; ``env_params`` default to
    ``env.default_params``."""
    for attr in ("reset_env", "step_env", "observation_space", "action_space"):
        if not hasattr(env, attr):
            raise TypeError(
                f"from_gymnax needs a gymnax Environment (with .{attr}), got {type(env).__name__}"
            )
    return GymnaxEnv(env, env.default_params if env_params is None else env_params)
