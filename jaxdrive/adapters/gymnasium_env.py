"""`to_gymnasium`: a single-agent jaxdrive env for Gymnasium code.

``to_gymnasium(env, params, num_envs=N)`` is a ``gymnasium.vector.VectorEnv`` of ``N``
copies stepped on the device in one jitted call (`jaxdrive.adapters._device`), with
Gymnasium's *same-step* auto-reset (``metadata["autoreset_mode"]``): the step on which
an episode ends returns the next episode's first observation, and
``info["final_obs"]`` (``[N, *O]``, valid where ``info["_final_obs"]``) the one it ended
on. ``to_gymnasium(env, params)`` (``num_envs=None``) is one ``gymnasium.Env`` without
auto-reset, the form Gymnasium's ``env_checker`` checks.

Observations are float32 arrays ``[N, *O]`` (``[*O]`` for the single env), rewards
float32, ``terminated``/``truncated`` bool (an episode end flagged by neither counts
as truncated). Envs with action masks put them in ``info["action_mask"]`` (int8
``[N, K]``, the form ``gymnasium.spaces.Discrete.sample(mask=...)`` takes). Only
envs with one agent in all are accepted; multi-agent envs go to `to_pettingzoo`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxdrive.adapters._device import DeviceBatch
from jaxdrive.adapters._spaces import to_gym_space
from jaxdrive.env import Env

__all__ = ["to_gymnasium"]

_SEED_HIGH = 2**31 - 1


def _single_group(env: Env) -> str:
    if env.total_agents != 1:
        raise ValueError(
            f"to_gymnasium takes single-agent envs (one group of one agent); {env.name} has "
            f"{env.agent_counts}: use jaxdrive.adapters.to_pettingzoo"
        )
    return env.groups[0]


def _flags(out: dict[str, Any], g: str) -> tuple[np.ndarray, np.ndarray]:
    """``(terminated [N], truncated [N])``; a ``done`` without either is a truncation."""
    term = out["terminated"][g][:, 0]
    trunc = out["truncated"][g][:, 0] | (out["done"] & ~term)
    return term, trunc


def _mask_info(out: dict[str, Any], g: str) -> dict[str, Any]:
    if "action_mask" not in out:
        return {}
    mask = out["action_mask"][g][:, 0].astype(np.int8)
    return {"action_mask": mask, "_action_mask": np.ones(mask.shape[0], bool)}


def to_gymnasium(env: Env, params: Any = None, num_envs: int | None = None, seed: int = 0) -> Any:
    """A Gymnasium ``VectorEnv`` of ``num_envs`` copies of the single-agent ``env`` (or
    one ``gymnasium.Env`` for ``num_envs=None``); ``seed`` seeds resets that give none.
    See the module docstring for the conventions."""
    import gymnasium
    from gymnasium.vector import AutoresetMode, VectorEnv
    from gymnasium.vector.utils import batch_space

    g = _single_group(env)
    obs_space = to_gym_space(env.observation_space(g))
    act_space = to_gym_space(env.action_space(g))
    act_shape = env.action_space(g).shape

    class JaxdriveVectorEnv(VectorEnv):
        metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

        def __init__(self) -> None:
            self.num_envs = int(num_envs)
            self.single_observation_space = obs_space
            self.single_action_space = act_space
            self.observation_space = batch_space(obs_space, self.num_envs)
            self.action_space = batch_space(act_space, self.num_envs)
            self.batch = DeviceBatch(env, params, self.num_envs, auto_reset=True)
            self._rng = np.random.default_rng(seed)

        def reset(self, *, seed: int | None = None, options: dict | None = None):
            if seed is not None:
                self._rng = np.random.default_rng(seed)
            out = self.batch.reset(int(self._rng.integers(_SEED_HIGH)))
            return out["obs"][g][:, 0], _mask_info(out, g)

        def step(self, actions: Any):
            a = np.asarray(actions).reshape(self.num_envs, 1, *act_shape)
            out = self.batch.step({g: a})
            term, trunc = _flags(out, g)
            info = _mask_info(out, g)
            if out["done"].any():
                info["final_obs"] = out["final_obs"][g][:, 0]
                info["_final_obs"] = out["done"]
            return out["obs"][g][:, 0], out["reward"][g][:, 0], term, trunc, info

    class JaxdriveEnv(gymnasium.Env):
        metadata = {"render_modes": []}

        def __init__(self) -> None:
            self.observation_space = obs_space
            self.action_space = act_space
            self.batch = DeviceBatch(env, params, 1, auto_reset=False)
            self._np_random, _ = gymnasium.utils.seeding.np_random(seed)

        def reset(self, *, seed: int | None = None, options: dict | None = None):
            super().reset(seed=seed)
            out = self.batch.reset(int(self.np_random.integers(_SEED_HIGH)))
            info = _mask_info(out, g)
            return out["obs"][g][0, 0], {k: v[0] for k, v in info.items()}

        def step(self, action: Any):
            out = self.batch.step({g: np.asarray(action).reshape(1, 1, *act_shape)})
            term, trunc = _flags(out, g)
            info = {k: v[0] for k, v in _mask_info(out, g).items()}
            reward = float(out["reward"][g][0, 0])
            return out["obs"][g][0, 0], reward, bool(term[0]), bool(trunc[0]), info

    return JaxdriveEnv() if num_envs is None else JaxdriveVectorEnv()
