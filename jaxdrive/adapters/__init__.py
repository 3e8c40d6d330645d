"""Adapters between jaxdrive and other environment libraries.

In (other libraries' JAX envs on the jaxdrive contract):

- `from_jaxmarl(env)`: a JaxMARL ``MultiAgentEnv``; agents grouped by name prefix and
  space, ``get_avail_actions`` as action masks, ``world_state`` as ``global_state``.
- `from_gymnax(env, env_params)`: a gymnax environment, one group ``agent`` of one agent.
- `from_jumanji(env)`: a single-agent Jumanji environment, its observation's
  ``action_mask`` as the action mask.

Out (jaxdrive envs for host-side code, stepped on the device in one jitted call):

- `to_pettingzoo(env, params)`: a PettingZoo ``ParallelEnv``.
- `to_gymnasium(env, params, num_envs)`: a Gymnasium ``VectorEnv`` (or, with
  ``num_envs=None``, a ``gymnasium.Env``) for single-agent envs.

`jaxdrive.make` builds adapted envs by prefixed names (`make_adapted`):
``"jaxmarl:MPE_simple_spread_v3"``, ``"jaxmarl:smax:3s5z"``, ``"gymnax:CartPole-v1"``,
``"jumanji:Snake-v1"``. Nothing here imports those libraries until an adapter is
called. See ``docs/adapters.md``.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "from_gymnax",
    "from_jaxmarl",
    "from_jumanji",
    "make_adapted",
    "to_gymnasium",
    "to_pettingzoo",
]

_LAZY = {
    "from_jaxmarl": "jaxdrive.adapters.jaxmarl_env",
    "from_gymnax": "jaxdrive.adapters.gymnax_env",
    "from_jumanji": "jaxdrive.adapters.jumanji_env",
    "make_adapted": "jaxdrive.adapters.named",
    "to_pettingzoo": "jaxdrive.adapters.pettingzoo_env",
    "to_gymnasium": "jaxdrive.adapters.gymnasium_env",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
