"""Agent-ID inputs: one-hot agent (and group) indices appended to observations.

With parameter sharing, one policy acts for every agent of its groups from each agent's
own observation; agents whose observations look alike then cannot act differently.
Appending a one-hot agent index (and, when a policy serves several groups, a one-hot
group index) lets the shared network tell them apart, as JaxMARL's and Mava's MAPPO
baselines do.

* `agent_id_features`: the ``[A, F]`` features of agents of groups with given counts.
* `AgentIDs`: a wrapper appending them to every group's flat `Box` observations.

The on-policy trainers offer the same features per policy (policy config key
``agent_ids``), computed over that policy's groups, without wrapping the env.

Example:
    >>> agent_id_features((2, 1), group_ids=True).tolist()
    [[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxdrive.env import Env
from jaxdrive.spaces import Box
from jaxdrive.wrappers import Wrapper

__all__ = ["AgentIDs", "agent_id_features"]


def agent_id_features(counts: Sequence[int], group_ids: bool = False) -> np.ndarray:
    """``[sum(counts), F]`` float32 features of the agents of groups with ``counts``
    agents (groups in order, agents in order within each): row ``i`` is the one-hot
    index of agent ``i`` within its group (``max(counts)`` columns, the same for every
    group), then, with ``group_ids``, the one-hot index of its group (``len(counts)``
    columns)."""
    counts = [int(n) for n in counts]
    if not counts or min(counts) < 1:
        raise ValueError(f"agent_id_features: counts must be positive, got {counts}")
    a_max, k = max(counts), len(counts)
    rows = []
    for g, n in enumerate(counts):
        f = np.zeros((n, a_max + (k if group_ids else 0)), np.float32)
        f[np.arange(n), np.arange(n)] = 1.0
        if group_ids:
            f[:, a_max + g] = 1.0
        rows.append(f)
    return np.concatenate(rows, axis=0)


class AgentIDs(Wrapper):
    """Appends `agent_id_features` over all the env's groups to each group's
    observations: ``obs[g] [A_g, O_g] -> [A_g, O_g + F]`` with ``F = max_g A_g`` (``+``
    the number of groups with ``group_ids``). Every group's observations must be 1-D
    `Box`es; groups whose spaces were equal stay equal (so one policy may still serve
    them). Also applied to `observations` where the env has it.
    """

    def __init__(self, env: Env, group_ids: bool = False):
        super().__init__(env)
        self.group_ids = bool(group_ids)
        for g in env.groups:
            space = env.observation_space(g)
            if not isinstance(space, Box) or len(space.shape) != 1:
                raise ValueError(
                    f"AgentIDs: group {g!r}'s observations must be a 1-D Box, got {space!r}"
                )
        feats = agent_id_features([env.num_agents(g) for g in env.groups], self.group_ids)
        self._features: dict[str, np.ndarray] = {}
        start = 0
        for g in env.groups:
            n = env.num_agents(g)
            self._features[g] = feats[start : start + n]
            start += n

    @property
    def num_features(self) -> int:
        """``F``: the features appended to each observation."""
        return int(next(iter(self._features.values())).shape[1])

    def observation_space(self, group: str) -> Box:
        space = self._env.observation_space(group)
        f = self.num_features
        low = np.concatenate([space.low, np.zeros(f, np.float32)])
        high = np.concatenate([space.high, np.ones(f, np.float32)])
        return Box(low, high, (space.shape[0] + f,), space.dtype)

    def _append(self, obs: dict[str, Any]) -> dict[str, Any]:
        return {
            g: jnp.concatenate([o, jnp.asarray(self._features[g], o.dtype)], axis=-1)
            for g, o in obs.items()
        }

    def observations(self, state: Any, params: Any) -> dict[str, Any]:
        return self._append(self._env.observations(state, params))

    def reset_env(self, key: Any, params: Any) -> tuple[Any, Any]:
        state, ts = self._env.reset(key, params)
        return state, ts.replace(obs=self._append(ts.obs))

    def step_env(self, key: Any, state: Any, actions: Any, params: Any) -> tuple[Any, Any]:
        state, ts = self._env.step(key, state, actions, params)
        return state, ts.replace(obs=self._append(ts.obs))
