"""The run folder's resume rules: which checkpoint a run continues from, and checks.

`resume_point` reads (and only reads) a run folder's newest checkpoint metadata and
refuses to resume a checkpoint of another config or past the trainer's end, so that
callers can validate before they write anything. `restore_run` restores the newest
checkpoint that restores and verifies (`jaxdrive.checkpoint.Checkpointer.restore_newest`),
names the ones it skipped and why in a warning, and moves those to
``checkpoints.discarded/`` so that the resumed run can write its own steps again.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

from jaxdrive.checkpoint import Checkpointer, CheckpointError, read_metadata, step_folders

__all__ = ["CHECKPOINT_DIR", "plain_config", "restore_run", "resume_point"]

log = logging.getLogger("jaxdrive.loop")

CHECKPOINT_DIR = "checkpoints"


def plain_config(config: Any) -> Any:
    """``config`` as plain data for `jaxdrive.checkpoint.config_hash` (a ConfigDict's
    ``to_dict()``; anything else as it is)."""
    return config.to_dict() if hasattr(config, "to_dict") else config


def _state_iteration(state: Any) -> int | None:
    it = getattr(state, "iteration", None)
    if it is None and isinstance(state, dict):
        it = state.get("iteration")
    try:
        return None if it is None else int(np.asarray(it))
    except (TypeError, ValueError):
        return None


def resume_point(
    workdir: str | os.PathLike,
    chash: str | None,
    num_iterations: int,
    *,
    resume: bool = True,
    check_config: bool = True,
) -> dict[str, Any] | None:
    """The metadata of the newest checkpoint of ``workdir`` whose metadata reads, after
    checking it may be resumed; ``None`` when there is no checkpoint. Reads only.

    Raises ``ValueError`` when the folder holds checkpoints and ``resume`` is false,
    when that checkpoint's config hash differs from ``chash`` (with ``check_config``)
    or when it lies past ``num_iterations``.
    """
    directory = os.path.join(os.fspath(workdir), CHECKPOINT_DIR)
    steps = step_folders(directory)
    if not steps:
        return None
    if not resume:
        raise ValueError(
            f"{directory} already holds checkpoints (latest: iteration {steps[-1]}); "
            "resume that run, or use a fresh workdir"
        )
    for step in reversed(steps):
        try:
            meta = read_metadata(directory, step)
        except (OSError, ValueError):
            continue  # a damaged checkpoint: restore falls back past it and says so
        _check_meta(directory, meta, chash, num_iterations, check_config)
        return meta
    return None


def _check_meta(directory, meta, chash, total, check_config) -> None:
    if check_config and chash and meta.get("config_hash") not in (None, chash):
        raise ValueError(
            f"the checkpoint in {directory} was written with another config "
            f"(hash {meta.get('config_hash')} != {chash}); use a fresh workdir or "
            "allow the change explicitly (check_config=False)"
        )
    if int(meta.get("iteration", 0)) > total:
        raise ValueError(
            f"the checkpoint in {directory} is at iteration {meta['iteration']}, "
            f"past this trainer's num_iterations={total}"
        )


def _discard_steps(directory: str, steps: list[int]) -> None:
    """Moves the step folders ``steps`` to ``<directory>.discarded/`` (kept for
    inspection, out of the way of the steps the resumed run will write)."""
    aside = directory + ".discarded"
    os.makedirs(aside, exist_ok=True)
    for step in steps:
        dest, k = os.path.join(aside, str(step)), 1
        while os.path.exists(dest):
            dest, k = os.path.join(aside, f"{step}-{k}"), k + 1
        os.replace(os.path.join(directory, str(step)), dest)


def restore_run(
    state: Any,
    ckpt: Checkpointer,
    chash: str | None,
    total: int,
    check_config: bool = True,
    primary: bool = True,
) -> tuple[Any, dict[str, Any], int]:
    """``(state, metadata, step)`` of the newest checkpoint that restores and verifies;
    newer ones that do not are named in a warning and moved aside."""
    steps = ckpt.all_steps()
    restored = ckpt.restore_newest(state, steps)
    meta = restored.metadata
    _check_meta(ckpt.directory, meta, chash, total, check_config)
    got = _state_iteration(restored.state)
    if got is not None and got != int(meta["iteration"]):
        raise CheckpointError(
            f"checkpoint {restored.step} in {ckpt.directory}: metadata says iteration "
            f"{meta['iteration']} but the runner state's iteration is {got}"
        )
    if restored.skipped:
        why = "; ".join(f"checkpoint {s}: {r}" for s, r in restored.skipped)
        log.warning(
            "resuming from checkpoint %d in %s, the newest that restores and verifies "
            "(skipped %s; moved to %s.discarded)",
            restored.step, ckpt.directory, why, ckpt.directory,
        )  # fmt: skip
        if primary:
            _discard_steps(ckpt.directory, [s for s, _ in restored.skipped])
    return restored.state, meta, restored.step
