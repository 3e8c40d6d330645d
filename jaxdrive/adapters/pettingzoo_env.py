"""`to_pettingzoo`: a jaxdrive env as a PettingZoo ``ParallelEnv``.

Agents are named ``f"{group}_{i}"``, ``i`` counting the group's agents (with
``num_envs = N > 1``: all ``N · A_g`` of them, env-major: agent ``a`` of copy ``e`` is
``i = e · A_g + a``). Spaces are Gymnasium's (`jaxdrive.adapters._spaces.to_gym_space`);
``observation_space(agent)`` and ``action_space(agent)`` return one object per agent.
Every step is one jitted call for the whole batch on the device and one copy back
(`jaxdrive.adapters._device`).

``num_envs=1`` (default) is PettingZoo's parallel API: ``reset`` starts an episode
with the agents that are active; an agent leaves ``agents`` after the step that
terminates or truncates it (the last step of an episode ends every agent: one the env
flags by neither counts as truncated), and the episode is over when ``agents`` is
empty; actions of agents not in ``agents`` are ignored. ``num_envs > 1`` is a vector
of games in one ``ParallelEnv`` (SuperSuit's form): copies auto-reset on the device, so
agents never leave; ``terminations``/``truncations`` flag an agent's episode end, its
``infos[agent]["final_obs"]`` holds the observation it ended on, and the observation
returned is the next episode's. ``infos[agent]["active"]`` says whether the agent is in
the game (jaxdrive's ``active``).

Action masks (envs that give `jaxdrive.types.TimeStep.action_mask`) follow
PettingZoo's convention for masks: the observation of such an env is a dict
``{"observation": obs, "action_mask": mask}`` (int8, 1 where allowed; for
``MultiDiscrete`` actions a tuple of one mask per dimension), the form that
``gymnasium.spaces.Discrete.sample(mask=...)`` and PettingZoo's API test read. Missing
actions (agents that left) are filled with 0 (a ``Box``: 0 clipped into it).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from jaxdrive.adapters._device import DeviceBatch
from jaxdrive.adapters._spaces import to_gym_space
from jaxdrive.env import Env
from jaxdrive.spaces import MultiDiscrete

__all__ = ["to_pettingzoo"]

_SEED_HIGH = 2**31 - 1


def _check_num_envs(num_envs: Any) -> int:
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"to_pettingzoo: num_envs must be an integer >= 1, got {num_envs!r}")
    return num_envs


def to_pettingzoo(env: Env, params: Any = None, num_envs: int = 1, seed: int = 0) -> Any:
    """A PettingZoo ``ParallelEnv`` of ``num_envs`` copies of ``env`` with ``params``
    (default: ``env.default_params``); ``seed`` seeds resets that give none. See the
    module docstring for names, spaces, masks and the ``num_envs > 1`` form."""
    import gymnasium
    from pettingzoo import ParallelEnv

    n = _check_num_envs(num_envs)
    batch = DeviceBatch(env, params, n, auto_reset=n > 1)

    def agent_spaces(g: str) -> tuple[Any, Any]:
        obs = to_gym_space(env.observation_space(g))
        act = to_gym_space(env.action_space(g))
        if batch.has_masks:
            space = env.action_space(g)
            sizes = space.nvec if isinstance(space, MultiDiscrete) else (space.n,)
            masks = [gymnasium.spaces.Box(0, 1, (k,), np.int8) for k in sizes]
            mask = gymnasium.spaces.Tuple(masks) if isinstance(space, MultiDiscrete) else masks[0]
            obs = gymnasium.spaces.Dict({"observation": obs, "action_mask": mask})
        return obs, act

    class JaxdriveParallelEnv(ParallelEnv):
        metadata = {"render_modes": [], "name": env.name, "is_parallelizable": True}

        def __init__(self) -> None:
            self.batch = batch
            self.num_envs = n
            self.possible_agents = [
                f"{g}_{i}" for g in env.groups for i in range(n * env.num_agents(g))
            ]
            # agent -> (group, env index, agent index in group)
            self._where = {
                f"{g}_{i}": (g, i // env.num_agents(g), i % env.num_agents(g))
                for g in env.groups
                for i in range(n * env.num_agents(g))
            }
            per_group = {g: agent_spaces(g) for g in env.groups}
            self._obs_spaces, self._act_spaces = {}, {}
            for agent, (g, _, _) in self._where.items():  # one object per agent
                self._obs_spaces[agent] = per_group[g][0]
                self._act_spaces[agent] = copy.deepcopy(per_group[g][1])  # own sampler
            self.agents: list[str] = []
            self._rng = np.random.default_rng(seed)

        def observation_space(self, agent: str) -> Any:
            return self._obs_spaces[agent]

        def action_space(self, agent: str) -> Any:
            return self._act_spaces[agent]

        def _obs(self, out: dict[str, Any], agent: str, key: str = "obs") -> Any:
            g, e, i = self._where[agent]
            obs = out[key][g][e, i]
            if not batch.has_masks:
                return obs
            mask = out["action_mask"][g][e, i].astype(np.int8)
            space = env.action_space(g)
            if isinstance(space, MultiDiscrete):
                mask = tuple(np.split(mask, np.cumsum(space.nvec)[:-1]))
            return {"observation": obs, "action_mask": mask}

        def _flag(self, out: dict[str, Any], field: str, agent: str) -> bool:
            g, e, i = self._where[agent]
            return bool(out[field][g][e, i])

        def reset(self, seed: int | None = None, options: dict | None = None):
            if seed is not None:
                self._rng = np.random.default_rng(seed)
            out = batch.reset(int(self._rng.integers(_SEED_HIGH)))
            self.agents = [a for a in self.possible_agents if n > 1 or self._flag(out, "active", a)]
            obs = {a: self._obs(out, a) for a in self.agents}
            return obs, {a: {"active": self._flag(out, "active", a)} for a in self.agents}

        def step(self, actions: dict[str, Any]):
            arrays = {g: np.array(a) for g, a in batch.default_actions().items()}
            for agent, action in actions.items():
                if agent in self._where and agent in self.agents:
                    g, e, i = self._where[agent]
                    arrays[g][e, i] = action
            out = batch.step(arrays)
            live = list(self.agents)
            obs, rew, term, trunc, infos = {}, {}, {}, {}, {}
            for a in live:
                g, e, _ = self._where[a]
                obs[a] = self._obs(out, a)
                rew[a] = float(out["reward"][g][self._where[a][1:]])
                term[a] = self._flag(out, "terminated", a)
                trunc[a] = self._flag(out, "truncated", a) or (bool(out["done"][e]) and not term[a])
                infos[a] = {"active": self._flag(out, "active", a)}
                if n > 1 and bool(out["done"][e]):
                    infos[a]["final_obs"] = self._obs(out, a, "final_obs")
            if n == 1:
                self.agents = [a for a in live if not (term[a] or trunc[a])]
            return obs, rew, term, trunc, infos

        def close(self) -> None:
            pass

    return JaxdriveParallelEnv()
