"""MuJoCo locomotion on MJX with Gymnasium v5 semantics, and multi-agent MuJoCo.

Single-agent envs (one group ``"agent"`` of one agent; registry names in brackets):
`Humanoid` (``Humanoid-v5``), `Ant` (``Ant-v5``), `HalfCheetah` (``HalfCheetah-v5``),
`Hopper` (``Hopper-v5``), `Walker2d` (``Walker2d-v5``). Multi-agent: `MaMuJoCo`
(``MaMuJoCo-Ant-2x4``, ``MaMuJoCo-Ant-4x2``, ``MaMuJoCo-HalfCheetah-6x1``,
``MaMuJoCo-Humanoid-9|8``, ``MaMuJoCo-Walker2d-2x3``). Needs the ``mujoco`` extra
(``mujoco``, ``mujoco-mjx``) and Gymnasium (its model files). See
``docs/environments/mujoco.md``.

Example (not run as a doctest: MJX compiles slowly on a CPU)::

    import jax, jaxdrive
    env, params = jaxdrive.make("Hopper-v5")
    state, ts = env.reset(jax.random.key(0), params)
    ts.obs["agent"].shape  # (1, 11)

The classes are imported lazily (on first attribute access), so importing this
package imports neither MuJoCo nor MJX.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "Ant",
    "HalfCheetah",
    "Hopper",
    "Humanoid",
    "MaMuJoCo",
    "MjxModelConfig",
    "Walker2d",
]

_MODULES = {
    "environments.mujoco.locomotion": ("Ant", "HalfCheetah", "Hopper", "Humanoid", "Walker2d"),
    "environments.mujoco.mamujoco": ("MaMuJoCo",),
    "environments.mujoco.model": ("MjxModelConfig",),
}
_LAZY = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str) -> Any:
    """Imports the module defining ``name`` on first access."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
