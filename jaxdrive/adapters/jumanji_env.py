"""`from_jumanji`: a single-agent Jumanji environment on the jaxdrive contract.

One group ``"agent"`` of one agent. Jumanji observations are structures (named tuples
or dataclasses, described by ``env.observation_spec``); the adapter keeps the fields
named in ``obs_fields`` (default: every field but ``action_mask``): one field keeps its
shape, several are flattened and concatenated, in the spec's order, into one float32
vector. An ``action_mask`` field becomes `TimeStep.action_mask` (True where allowed; a
mask that allows nothing, as Snake's when it is boxed in, becomes all True so the agent
can still act). Bounds: a bounded float field keeps its spec's bounds, other fields are
unbounded (Jumanji's counters reach one past their spec's maximum at the time limit).

Jumanji's ``step(state, action)`` takes no key (its state carries one) and does not
reset. A ``LAST`` timestep is ``done``: ``terminated`` where its discount is 0,
``truncated`` otherwise. After the episode ends the env holds still
(`jaxdrive.adapters._single`). The params are an empty `EnvParams`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdrive.adapters._single import GROUP, SingleAgentAdapter, SingleAgentState
from jaxdrive.adapters._spaces import action_space_from, observation_box_from
from jaxdrive.adapters.jaxmarl_env import strong_types
from jaxdrive.spaces import Box, Discrete, MultiDiscrete
from jaxdrive.types import EnvParams, TimeStep

__all__ = ["JumanjiEnv", "from_jumanji"]

_MASK = "action_mask"


def _children(spec: Any) -> dict[str, Any]:
    """The named child specs of a nested Jumanji spec (empty for an array spec)."""
    from jumanji import specs

    return {k: v for k, v in vars(spec).items() if isinstance(v, specs.Spec)}


class JumanjiEnv(SingleAgentAdapter):
    """A Jumanji ``Environment`` as a jaxdrive `Env` (see the module docstring).

    Args:
      env: the Jumanji environment.
      obs_fields: the observation fields that make up ``obs`` (``None``: all but
        ``action_mask``); ignored for an array observation.
    """

    def __init__(self, env: Any, obs_fields: Sequence[str] | None = None):
        self.env = env
        spec = env.observation_spec
        children = _children(spec)
        self._has_mask = _MASK in children
        if not children:
            self._fields: tuple[str, ...] | None = None
            self._obs_space = _float_box(spec)
        else:
            names = [k for k in children if k != _MASK] if obs_fields is None else obs_fields
            unknown = [k for k in names if k not in children or k == _MASK]
            if unknown or not names:
                raise ValueError(
                    f"from_jumanji: obs_fields {list(names)} must name observation fields "
                    f"other than {_MASK!r}; {type(env).__name__} has {list(children)}"
                )
            self._fields = tuple(names)
            boxes = [_float_box(children[k]) for k in names]
            if len(boxes) == 1:
                self._obs_space = boxes[0]
            else:
                low = np.concatenate([b.low.reshape(-1) for b in boxes])
                high = np.concatenate([b.high.reshape(-1) for b in boxes])
                self._obs_space = Box(low, high, low.shape)
        self._act_space = action_space_from(env.action_spec)
        if self._has_mask and not isinstance(self._act_space, Discrete | MultiDiscrete):
            raise ValueError(
                f"from_jumanji: an action mask needs discrete actions, got {self._act_space}"
            )
        limit = getattr(env, "time_limit", None)
        self._episode_length = int(limit) if isinstance(limit, int) else None

    @property
    def default_params(self) -> EnvParams:
        return EnvParams()

    @property
    def episode_length(self) -> int | None:
        """The env's ``time_limit`` where it has one."""
        return self._episode_length

    @property
    def name(self) -> str:
        return f"jumanji<{type(self.env).__name__}>"

    def _obs(self, observation: Any) -> jax.Array:
        """The kept fields of one observation as ``[*O]`` float32."""
        if self._fields is None:
            return jnp.asarray(observation, jnp.float32)
        parts = [jnp.asarray(getattr(observation, k), jnp.float32) for k in self._fields]
        if len(parts) == 1:
            return parts[0]
        return jnp.concatenate([jnp.ravel(p) for p in parts])

    def _mask(self, observation: Any) -> jax.Array | None:
        """``[K]`` bool from the observation's ``action_mask`` (all True if it allows
        nothing in a dimension); ``[D, max(nvec)]`` masks of `MultiDiscrete` actions
        are concatenated row by row."""
        if not self._has_mask:
            return None
        m = jnp.asarray(getattr(observation, _MASK), bool)
        sizes = (
            (self._act_space.n,) if isinstance(self._act_space, Discrete) else self._act_space.nvec
        )
        if m.ndim == 2:
            m = jnp.concatenate([m[d, :n] for d, n in enumerate(sizes)])
        parts, start = [], 0
        for n in sizes:
            part = m[start : start + n]
            parts.append(part | ~jnp.any(part))
            start += n
        return jnp.concatenate(parts)

    def reset_env(self, key: jax.Array, params: EnvParams) -> tuple[SingleAgentState, TimeStep]:
        """Jumanji's ``reset(key)``."""
        del params
        inner, ts = self.env.reset(key)
        return self._first(
            strong_types(inner), self._obs(ts.observation), self._mask(ts.observation)
        )

    def step_env(
        self,
        key: jax.Array,
        state: SingleAgentState,
        actions: dict[str, jax.Array],
        params: EnvParams,
    ) -> tuple[SingleAgentState, TimeStep]:
        """Jumanji's ``step(state, actions["agent"][0])`` (``key`` unused)."""
        del key, params
        inner, ts = self.env.step(state.inner, actions[GROUP][0])
        inner = strong_types(inner)
        last = ts.last()
        stop = jnp.asarray(ts.discount) == 0
        return self._next(
            state,
            inner,
            self._obs(ts.observation),
            self._mask(ts.observation),
            ts.reward,
            last & stop,
            last & ~stop,
        )


def _float_box(spec: Any) -> Box:
    """A float32 `Box` for an array spec: bounded float specs keep their bounds."""
    box = observation_box_from(spec)
    if type(spec).__name__ == "BoundedArray" and np.issubdtype(np.dtype(spec.dtype), np.floating):
        return box
    return Box(-np.inf, np.inf, box.shape)


def from_jumanji(env: Any, obs_fields: Sequence[str] | None = None) -> JumanjiEnv:
    """Wraps a single-agent Jumanji environment (``jumanji.make("Snake-v1")``) as a
    jaxdrive `Env`; ``obs_fields`` as in `JumanjiEnv`."""
    for attr in ("reset", "step", "observation_spec", "action_spec"):
        if not hasattr(env, attr):
            raise TypeError(
                f"from_jumanji needs a Jumanji Environment (with .{attr}), got {type(env).__name__}"
            )
    return JumanjiEnv(env, None if obs_fields is None else tuple(obs_fields))
