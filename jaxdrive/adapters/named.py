"""Adapted envs by prefixed name: what `jaxdrive.make` calls for ``"<library>:<name>"``.

- ``"jaxmarl:<id>"``: ``jaxmarl.make(id, **overrides)`` (e.g. ``MPE_simple_spread_v3``);
  ``"jaxmarl:smax:<map>"``: JaxMARL's ``HeuristicEnemySMAX`` on the SMAX map scenario
  ``<map>`` (e.g. ``3s5z``), overrides going to its constructor. ``episode_length``
  and ``team_episodes`` go to `from_jaxmarl`.
- ``"gymnax:<id>"``: ``gymnax.make(id)``; overrides naming fields of gymnax's
  ``EnvParams`` set those, the others go to the env's constructor.
- ``"jumanji:<id>"``: ``jumanji.make(id, **overrides)``; ``obs_fields`` goes to
  `from_jumanji`.

A library that is not installed raises one ``ImportError`` naming it and the extra
that installs it.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

from jaxdrive.env import Env

__all__ = ["ADAPTER_PREFIXES", "is_adapted_name", "make_adapted"]

ADAPTER_PREFIXES = ("jaxmarl", "gymnax", "jumanji")
_EXTRA = "pip install 'jaxdrive[interop]'"


def is_adapted_name(name: Any) -> bool:
    """Whether ``name`` is ``"<library>:<id>"`` for a library in `ADAPTER_PREFIXES`."""
    return isinstance(name, str) and name.partition(":")[0] in ADAPTER_PREFIXES


def _import(package: str, name: str) -> Any:
    try:
        return importlib.import_module(package)
    except ImportError as e:
        raise ImportError(
            f"jaxdrive.make({name!r}) needs the package {package!r}, which is not installed: "
            f"{_EXTRA}"
        ) from e


def _build(name: str, ctor: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """``ctor(**kwargs)``, an unknown keyword raised as ``ValueError`` naming ``name``."""
    try:
        return ctor(**kwargs)
    except TypeError as e:
        if "argument" not in str(e):
            raise
        raise ValueError(f"jaxdrive.make({name!r}): bad override(s) {sorted(kwargs)}: {e}") from e


def _jaxmarl(name: str, env_id: str, overrides: dict[str, Any]) -> Env:
    from jaxdrive.adapters.jaxmarl_env import from_jaxmarl

    jaxmarl = _import("jaxmarl", name)
    episode_length = overrides.pop("episode_length", None)
    team_episodes = overrides.pop("team_episodes", False)
    if env_id.startswith("smax:"):
        from jaxmarl.environments.smax import HeuristicEnemySMAX
        from jaxmarl.environments.smax.smax_env import MAP_NAME_TO_SCENARIO

        map_name = env_id.partition(":")[2]
        if map_name not in MAP_NAME_TO_SCENARIO:
            raise ValueError(
                f"jaxdrive.make({name!r}): unknown SMAX map {map_name!r}; maps: "
                f"{', '.join(sorted(MAP_NAME_TO_SCENARIO))}"
            )
        scenario = MAP_NAME_TO_SCENARIO[map_name]
        inner = _build(name, HeuristicEnemySMAX, {"scenario": scenario, **overrides})
    else:
        if env_id not in jaxmarl.registered_envs:
            raise ValueError(
                f"jaxdrive.make({name!r}): {env_id!r} is not a JaxMARL env; JaxMARL's envs: "
                f"{', '.join(jaxmarl.registered_envs)}, or 'jaxmarl:smax:<map>'"
            )
        inner = _build(name, lambda **kw: jaxmarl.make(env_id, **kw), overrides)
    return from_jaxmarl(inner, episode_length, team_episodes)


def _gymnax(name: str, env_id: str, overrides: dict[str, Any]) -> tuple[Env, Any]:
    from jaxdrive.adapters.gymnax_env import from_gymnax

    gymnax = _import("gymnax", name)
    if env_id not in gymnax.registered_envs:
        raise ValueError(
            f"jaxdrive.make({name!r}): {env_id!r} is not a gymnax env; gymnax's envs: "
            f"{', '.join(gymnax.registered_envs)}"
        )
    env, params = gymnax.make(env_id)
    fields = {f.name for f in dataclasses.fields(params)}
    ctor = {k: v for k, v in overrides.items() if k not in fields}
    if ctor:
        env, params = _build(name, lambda **kw: gymnax.make(env_id, **kw), ctor)
    # the overridden params are the adapted env's defaults (they fix `episode_length`)
    checked = from_gymnax(env, params).make_params(
        **{k: v for k, v in overrides.items() if k in fields}
    )
    adapted = from_gymnax(env, checked)
    return adapted, checked


def _jumanji(name: str, env_id: str, overrides: dict[str, Any]) -> Env:
    from jaxdrive.adapters.jumanji_env import from_jumanji

    jumanji = _import("jumanji", name)
    known = jumanji.registered_environments()
    if env_id not in known:
        raise ValueError(
            f"jaxdrive.make({name!r}): {env_id!r} is not a Jumanji env; Jumanji's envs: "
            f"{', '.join(sorted(known))}"
        )
    obs_fields = overrides.pop("obs_fields", None)
    return from_jumanji(
        _build(name, lambda **kw: jumanji.make(env_id, **kw), overrides), obs_fields
    )


def make_adapted(name: str, **overrides: Any) -> tuple[Env, Any]:
    """``(env, params)`` for a prefixed ``name`` (module docstring); ``overrides`` go to
    the library's constructor (gymnax: or its params)."""
    prefix, _, env_id = name.partition(":")
    if prefix not in ADAPTER_PREFIXES:
        raise ValueError(f"{name!r} has no adapter prefix; prefixes: {ADAPTER_PREFIXES}")
    if not env_id:
        raise ValueError(f"jaxdrive.make({name!r}): name the {prefix} env after the colon")
    overrides = dict(overrides)
    if prefix == "gymnax":
        return _gymnax(name, env_id, overrides)
    env = (_jaxmarl if prefix == "jaxmarl" else _jumanji)(name, env_id, overrides)
    return env, env.default_params
