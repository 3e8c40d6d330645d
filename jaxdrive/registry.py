"""Environment registry: `make(name, **overrides)` and `register(name, entry)`.

Built-in environments are registered lazily by import path, so importing jaxdrive
imports no environment module.

Example:
    >>> import jaxdrive
    >>> env, params = jaxdrive.make("CartPole-v1")
    >>> env.groups
    ('agent',)
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable
from typing import Any

from jaxdrive.env import Env
from jaxdrive.types import EnvParams

__all__ = ["make", "register", "registered_envs", "split_overrides"]

EnvFactory = Callable[..., Env]

_REGISTRY: dict[str, str | EnvFactory] = {
    "CartPole-v1": "environments.classic_control.cartpole:CartPole",
    "Acrobot-v1": "environments.classic_control.acrobot:Acrobot",
    "MountainCar-v0": "environments.classic_control.mountain_car:MountainCar",
    "MountainCarContinuous-v0": (
        "environments.classic_control.continuous_mountain_car:MountainCarContinuous"
    ),
    "Pendulum-v1": "environments.classic_control.pendulum:Pendulum",
    "tag_continuous": "environments.tag_continuous.env:TagContinuous",
    "tag_gridworld": "environments.tag_gridworld.env:TagGridWorld",
    # The Multi-Particle Environments, named (and versioned) as JaxMARL and mpe2 name them.
    "MPE_simple_v3": "environments.mpe.simple:Simple",
    "MPE_simple_spread_v3": "environments.mpe.simple_spread:SimpleSpread",
    "MPE_simple_tag_v3": "environments.mpe.simple_tag:SimpleTag",
    "MPE_simple_adversary_v3": "environments.mpe.simple_adversary:SimpleAdversary",
    "MPE_simple_push_v3": "environments.mpe.simple_push:SimplePush",
    "MPE_simple_reference_v3": "environments.mpe.simple_reference:SimpleReference",
    "MPE_simple_speaker_listener_v4": (
        "environments.mpe.simple_speaker_listener:SimpleSpeakerListener"
    ),
    "MPE_simple_world_comm_v3": "environments.mpe.simple_world_comm:SimpleWorldComm",
    "MPE_simple_crypto_v3": "environments.mpe.simple_crypto:SimpleCrypto",
    # MuJoCo MJX locomotion (Gymnasium v5 semantics) and MaMuJoCo partitions.
    "Humanoid-v5": "environments.mujoco.locomotion:Humanoid",
    "Ant-v5": "environments.mujoco.locomotion:Ant",
    "HalfCheetah-v5": "environments.mujoco.locomotion:HalfCheetah",
    "Hopper-v5": "environments.mujoco.locomotion:Hopper",
    "Walker2d-v5": "environments.mujoco.locomotion:Walker2d",
    "MaMuJoCo-Ant-2x4": "environments.mujoco.mamujoco:ant_2x4",
    "MaMuJoCo-Ant-4x2": "environments.mujoco.mamujoco:ant_4x2",
    "MaMuJoCo-HalfCheetah-6x1": "environments.mujoco.mamujoco:half_cheetah_6x1",
    "MaMuJoCo-Humanoid-9|8": "environments.mujoco.mamujoco:humanoid_9_8",
    "MaMuJoCo-Walker2d-2x3": "environments.mujoco.mamujoco:walker2d_2x3",
}


def register(name: str, entry: str | EnvFactory, *, overwrite: bool = False) -> None:
    """Registers ``entry`` (an `Env` class, a factory, or ``"module:attr"``) as ``name``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"env name must be a non-empty string, got {name!r}")
    if name in _REGISTRY and not overwrite:
        raise ValueError(f"an env named {name!r} is registered already (pass overwrite=True)")
    if not (isinstance(entry, str) or callable(entry)):
        raise TypeError(f"entry must be callable or 'module:attr', got {type(entry).__name__}")
    _REGISTRY[name] = entry


def registered_envs() -> list[str]:
    """Names of every registered environment, sorted."""
    return sorted(_REGISTRY)


def _is_adapted(name: str) -> bool:
    """Whether ``name`` is an adapter's prefixed name (``"jaxmarl:…"``, ``"gymnax:…"``,
    ``"jumanji:…"``): those are built by `jaxdrive.adapters.make_adapted`."""
    from jaxdrive.adapters.named import is_adapted_name

    return is_adapted_name(name)


def _load(name: str) -> EnvFactory:
    if name not in _REGISTRY:
        raise ValueError(
            f"unknown env {name!r}; registered envs: {', '.join(registered_envs())}; or an "
            "adapted env 'jaxmarl:<id>', 'jaxmarl:smax:<map>', 'gymnax:<id>', 'jumanji:<id>'"
        )
    entry = _REGISTRY[name]
    if isinstance(entry, str):
        module, attr = entry.split(":")
        entry = getattr(importlib.import_module(module), attr)
    return entry


def _static_keys(factory: EnvFactory) -> list[str]:
    sig = inspect.signature(factory)
    return [
        p.name
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"
    ]


def split_overrides(
    factory: EnvFactory, overrides: dict[str, Any], default_params: EnvParams | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Splits ``overrides`` into constructor arguments and `EnvParams` fields.

    Raises ``ValueError`` naming every key that is neither.
    """
    static = _static_keys(factory)
    param_fields = (
        [f.name for f in dataclasses.fields(default_params)] if default_params is not None else []
    )
    unknown = [k for k in overrides if k not in static and k not in param_fields]
    if unknown:
        raise ValueError(
            f"unknown override(s) {unknown} for {getattr(factory, '__name__', factory)}; "
            f"constructor options: {static}; EnvParams fields: {param_fields}"
        )
    return (
        {k: v for k, v in overrides.items() if k in static},
        {k: v for k, v in overrides.items() if k not in static},
    )


def make(name: str, **overrides: Any) -> tuple[Env, EnvParams]:
    """Builds the env registered as ``name``; returns ``(env, params)``.

    A prefixed ``name`` builds another library's env through its adapter
    (`jaxdrive.adapters.make_adapted`): ``"jaxmarl:MPE_simple_spread_v3"``,
    ``"jaxmarl:smax:3s5z"``, ``"gymnax:CartPole-v1"``, ``"jumanji:Snake-v1"``.

    ``overrides`` may name constructor options (static: shapes, counts) or fields of
    the env's `EnvParams` (numbers). Unknown names raise ``ValueError``. The params are
    built by ``env.make_params`` (`Env.make_params`), so they pass the env's own
    validation: an invalid value (NaN, out of range) raises ``ValueError`` naming the
    field. ``action_repeat=k`` (any env) wraps it in `jaxdrive.wrappers.ActionRepeat`:
    each action applied ``k`` times, rewards summed.
    """
    repeat = overrides.pop("action_repeat", None)
    if _is_adapted(name):
        from jaxdrive.adapters.named import make_adapted

        env, params = make_adapted(name, **overrides)
    else:
        factory = _load(name)
        static_keys = _static_keys(factory)
        static = {k: v for k, v in overrides.items() if k in static_keys}
        env = factory(**static)
        _, param_over = split_overrides(factory, overrides, env.default_params)
        params = env.make_params(**param_over)
    if repeat is not None:
        from jaxdrive.wrappers import ActionRepeat

        wrapped = ActionRepeat(env, repeat)  # checks the value
        env = wrapped if wrapped.repeat > 1 else env
    return env, params
