"""The module settings that benchmark variants change, parsed and applied.

`env_ab_probe`'s variants (``pallas/chunk=16/sort=argsort``), ``run.py --tag_settings``
and ``profile.py --settings`` name module defaults of the Tag env's kernels, the harness
and the random actions by the short names of `SETTINGS`. This module has no flags, so
every script may import it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from environments.tag_continuous import env as tag_env
from environments.tag_continuous import grid_knn, kernels, knn_obs, vector_step
from jaxdrive import hash_draws, spaces

__all__ = ["SETTINGS", "Variant", "apply_settings", "parse_variant"]

#: ``(knn_obs_impl, ((setting, value), ...))``.
Variant = tuple[str, tuple[tuple[str, Any], ...]]

#: Settings a variant may change: ``name -> (module, attribute, kind)``; each is a module
#: default read when the env is traced (kind "pow2": a power of two >= 1; "float": a number
#: > 0; "int": an integer >= 1; "bool": 1 or 0).
SETTINGS = {
    "chunk": (kernels, "CHUNK_SIZE", "pow2"),  # sorted search: candidates per chunk
    "unroll": (kernels, "BRUTE_UNROLL", "pow2"),  # brute-force search: unroll
    "sunroll": (kernels, "SORTED_UNROLL", "pow2"),  # sorted search: unroll (<= chunk)
    "network": (kernels, "PACKED_NETWORK", kernels.PACKED_NETWORKS),  # packed search's
    "sort": (kernels, "SORT_KEYS", kernels.SORT_KEY_FORMS),  # curve sort: packed / argsort
    "block": (knn_obs, "DEFAULT_BLOCK", "pow2"),  # flat writer: elements per program
    "wwarps": (knn_obs, "DEFAULT_WARPS", "pow2"),  # observation writer: Triton warps
    "opaque": (knn_obs, "OPAQUE_STORE", "bool"),  # flat writer: unvectorised store
    "wablate": (knn_obs, "_ABLATE", ("", "self", "const")),  # flat writer ablation: wrong
    "wlean": (knn_obs, "LEAN_INDEX", "bool"),  # writer: leaner index arithmetic
    "wingame": (knn_obs, "USE_IN_GAME_LISTS", "bool"),  # writer: no in-game load
    "wtime": (knn_obs, "TIME_PASS", "bool"),  # flat writer: time-column pass
    "wlayout": (knn_obs, "LAYOUT", knn_obs.LAYOUTS),  # writer: flat blocks / column tiles
    "wrows": (knn_obs, "COLS_ROWS", "pow2"),  # writer's column tiles: rows per program
    "wsorted": (knn_obs, "SORTED_ROWS", "bool"),  # writer: rows in the grid's spatial order
    "wevict": (knn_obs, "STORE_EVICTION", ("none", "evict_first", "evict_last")),  # stores
    "tevict": (knn_obs, "TABLE_EVICTION", ("none", "evict_first", "evict_last")),  # gathers
    "prep": (kernels, "PREP_IMPL", kernels.PREP_IMPLS),  # sorted search's preparation
    "psort": (kernels, "PREP_SORT", kernels.PREP_SORTS),  # its curve order: xla / kernel
    "psbits": (kernels, "PREP_SORT_BITS", "int"),  # in-kernel sort: Hilbert bits per axis
    "sblock": (kernels, "SORTED_BLOCK_ROWS", "pow2"),  # sorted search: query rows per program
    "prepick": (kernels, "SORTED_PREPICK", "bool"),  # sorted search: next pick before visit
    "lanetest": (kernels, "SORTED_LANE_TEST", "bool"),  # sorted search: per-lane chunk test
    "order": (kernels, "CHUNK_ORDER", kernels.CHUNK_ORDERS),  # sorted search: chunk order
    "elements": (vector_step, "DEFAULT_ELEMENTS", "pow2"),  # batched step: per program
    "warps": (vector_step, "DEFAULT_WARPS", "pow2"),  # batched step: Triton warps
    "table": (vector_step, "TABLE_STORE", vector_step.TABLE_STORE_FORMS),  # its table store
    "tpos": (vector_step, "TAGGER_POSITIONS", vector_step.TAGGER_POSITION_FORMS),  # taggers'
    "tpacked": (vector_step, "PACKED_COUNTS", "bool"),  # batched step: bit-field row sums
    "draws": (tag_env, "RESET_DRAWS_IN_KERNEL", "bool"),  # batched step: reset's uniforms
    "lstore": (kernels, "LIST_STORE", kernels.LIST_STORES),  # searches' list stores
    "skip": (kernels, "PACKED_SKIP_DISTINCT", "bool"),  # packed search: re-sort's skip
    "pwarps": (kernels, "PREP_WARPS", "pow2"),  # sorted search's preparation: Triton warps
    "fallback": (kernels, "_SORTED_EXACT_FALLBACK", "bool"),  # ablation: 0 = wrong lists
    "large": (kernels, "LARGE_METHOD", kernels.LARGE_METHODS),  # search from 256 agents
    "queries": (kernels, "ENV_QUERIES", ("all", "in_game")),  # env's lists: all / in game
    "gcell": (grid_knn, "GRID_CELL_AGENTS", "float"),  # grid search: agents per cell
    "gtarget": (grid_knn, "GRID_TARGET", "float"),  # grid search: first window, x k
    "gunroll": (grid_knn, "GRID_UNROLL", "pow2"),  # grid search: unroll
    "gpos": (grid_knn, "GRID_POSITION_KEYS", "bool"),  # grid search: position keys
    "gstages": (grid_knn, "GRID_STAGES", "int"),  # grid search: Triton pipelining stages
    "gpwarps": (grid_knn, "GRID_PREP_WARPS", "pow2"),  # grid preparation: Triton warps
    "gpbool": (grid_knn, "GRID_PREP_BOOL", "bool"),  # grid preparation: bool in-game flags
    "gradix": (grid_knn, "GRID_PREP_RADIX_BITS", "int"),  # grid preparation: bits per pass
    "gstarts": (grid_knn, "GRID_PREP_CELL_STARTS", grid_knn.GRID_PREP_CELL_STARTS_FORMS),
    "gxy": (grid_knn, "GRID_XY_INTERLEAVED", "bool"),  # grid: positions as (x, y) pairs
    "glrows": (grid_knn, "GRID_LANE_ROWS", "bool"),  # grid search: per-lane row walk
    "vtable": (tag_env, "VECTOR_TABLE", "bool"),  # batched kernel: the writer's table
    "step": (None, "step_impl", ("auto", "xla", "pallas", "vector")),  # env's step_impl
    "fold": (None, "fold", ("1", "0")),  # the harness's output folds
    "akeys": (None, "action_keys", ("threefry", "rbg")),  # the harness's action PRNG
    "mdraw": (spaces, "MULTI_DISCRETE_DRAW", spaces.MULTI_DISCRETE_DRAWS),  # random actions
    "hblock": (hash_draws, "BLOCK", "pow2"),  # hash draws: samples per program, at most
    "hprog": (hash_draws, "MIN_PROGRAMS", "int"),  # hash draws: programs wanted
    "hwarps": (hash_draws, "WARPS", "pow2"),  # hash draws: Triton warps
}


def apply_settings(text: str) -> tuple[dict[str, Any], Callable[[], None]]:
    """Sets the module defaults named by ``text`` (`SETTINGS`, ``name=value``
    parts joined by ``/``; the harness-only ``step`` and ``fold`` are refused: use
    ``--tag_step_impl`` and ``--tag_fold``); returns ``(settings, restore)``."""
    _, parsed = parse_variant("pallas/" + text if text else "pallas")
    saved = []
    for name, value in parsed:
        module, attr, _ = SETTINGS[name]
        if module is None:
            raise ValueError(f"--tag_settings: {name!r} is not a module setting")
        saved.append((module, attr, getattr(module, attr)))
        setattr(module, attr, value)

    def restore() -> None:
        for module, attr, value in reversed(saved):
            setattr(module, attr, value)

    return dict(parsed), restore


def parse_variant(text: str) -> Variant:
    """``"pallas/chunk=16/sort=argsort"`` -> ``("pallas", (("chunk", 16), ("sort",
    "argsort")))``: the env's ``knn_obs_impl`` and the `SETTINGS` it changes."""
    impl, *parts = [p.strip() for p in text.split("/")]
    if impl not in ("auto", *knn_obs.IMPLS):
        raise ValueError(
            f"variant must be knn_obs_impl[/setting=value...] with knn_obs_impl in "
            f"{('auto', *knn_obs.IMPLS)}, got {text!r}"
        )
    settings = []
    for part in parts:
        name, eq, value = part.partition("=")
        if not eq or name not in SETTINGS:
            raise ValueError(f"unknown setting {part!r} in {text!r}; settings: {list(SETTINGS)}")
        kind = SETTINGS[name][2]
        if kind == "bool":
            if value not in ("1", "0"):
                raise ValueError(f"{name} must be 1 or 0, got {value!r} in {text!r}")
            settings.append((name, value == "1"))
        elif kind == "float":
            try:
                number = float(value)
            except ValueError:
                number = -1.0
            if not number > 0:
                raise ValueError(f"{name} must be a number > 0, got {value!r} in {text!r}")
            settings.append((name, number))
        elif kind == "int":
            if not re.fullmatch(r"\d+", value) or int(value) < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r} in {text!r}")
            settings.append((name, int(value)))
        elif kind == "pow2":
            if not re.fullmatch(r"\d+", value) or int(value) < 1 or int(value) & (int(value) - 1):
                raise ValueError(f"{name} must be a power of two >= 1, got {value!r} in {text!r}")
            settings.append((name, int(value)))
        else:
            if value not in kind:
                raise ValueError(f"{name} must be one of {kind}, got {value!r} in {text!r}")
            settings.append((name, None if value == "none" else value))  # "none": None
    return impl, tuple(settings)
