"""The host training loop: compiled chunks, logging, progress, checkpoints, resume.

`train_loop` runs a `jaxdrive.training.Trainer` as a sequence of compiled chunks of
``iterations_per_chunk`` iterations each (one compiled loop per chunk, no host transfer
inside). Between chunks, on the host, it fetches the chunk's stacked metrics ``[K]``
(one ``device_get``), checks for divergence, writes ``metrics.jsonl`` and TensorBoard
scalars, updates a progress bar and saves a checkpoint every
``checkpoint_every_chunks`` chunks and at the end.

Chunk boundaries sit at multiples of the chunk size from iteration 0 (`chunk_size`: the
nearest divisor of the iterations down to half of ``iterations_per_chunk``; logged
once). One compiled program runs every call, its iteration count an argument
(`jaxdrive.loop_programs`): the first call runs a single iteration, so the first
progress line (marked as such, with the time since the start) comes right after
compilation; the next call runs the rest of that chunk, then whole chunks. The same
executable for every call makes a resumed run compute the same numbers on the same
states as an uninterrupted one: bitwise equal. The init and chunk programs are
compiled ahead of time and side by side (`jaxdrive.aot`; the state is donated to each
call), with the run's other programs (``compile_ahead``, e.g. evaluation); no chunk runs
while a compilation does. The log says how long the chunk took and whether the
persistent compilation cache supplied it.

Run folder written under ``workdir`` (every part optional when ``workdir`` is None)::

    workdir/metrics.jsonl      one JSON record per iteration (see jaxdrive.logging)
    workdir/tb/                TensorBoard event files
    workdir/checkpoints/<n>/   orbax checkpoint after n iterations (state + metadata)
    workdir/run.lock           the advisory lock of the process writing the folder

Resuming (`jaxdrive.runfolder`): from the newest checkpoint that restores and verifies
(damaged newer ones move to ``checkpoints.discarded/``), metrics and TensorBoard cut back.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jaxdrive.aot import wait_pending
from jaxdrive.checkpoint import Checkpointer, config_hash
from jaxdrive.logging import MetricsLogger, episode_metric
from jaxdrive.loop_programs import float_leaves, programs_for
from jaxdrive.program_store import ProgramStore
from jaxdrive.runfolder import CHECKPOINT_DIR, plain_config, restore_run, resume_point
from jaxdrive.runlock import RunLock
from jaxdrive.training import Trainer

__all__ = [
    "ChunkInfo",
    "History",
    "TrainingDivergedError",
    "chunk_size",
    "is_checked_metric",
    "program_material",
    "train_loop",
]

log = logging.getLogger(__name__)


class TrainingDivergedError(RuntimeError):
    """A loss, a gradient norm or the runner state became NaN or Inf.

    Attributes: ``iteration`` (1-based, the update that produced it) and ``quantity``
    (the metric name or the runner-state leaf path).
    """

    def __init__(self, message: str, iteration: int, quantity: str):
        super().__init__(message)
        self.iteration = iteration
        self.quantity = quantity


@dataclasses.dataclass
class ChunkInfo:
    """What ``on_chunk`` receives after each chunk (after logging and divergence checks);
    arrays are on the host."""

    start_iteration: int  # iterations done before the chunk
    end_iteration: int  # iterations done after it
    iterations: np.ndarray  # [K] int64, 1-based
    env_steps: np.ndarray  # [K] int64
    metrics: dict[str, np.ndarray]  # {name: [K]}
    runner_state: Any
    seconds: float  # wall time of the chunk (compile excluded)


@dataclasses.dataclass
class History:
    """The iterations this call ran (a resumed call holds only the new ones)."""

    iteration: np.ndarray  # [n] int64, 1-based
    env_steps: np.ndarray  # [n] int64
    metrics: dict[str, np.ndarray]  # {name: [n]}
    start_iteration: int  # iterations done when this call began (restored or 0)
    num_iterations: int  # the trainer's total
    start_env_steps: int  # env steps done when this call began
    resumed_from: int | None  # checkpoint step resumed from, if any
    compile_seconds: float  # ahead-of-time compilation of the chunk executables
    train_seconds: float  # running chunks, compile excluded
    total_seconds: float  # the whole call: init, restore, compile, run, checkpoints

    @property
    def env_steps_done(self) -> int:
        """Env steps run by this call."""
        return int(self.env_steps[-1]) - self.start_env_steps if len(self.env_steps) else 0

    def env_steps_per_second(self, *, include_compile: bool = False) -> float:
        """Throughput of this call: env steps / (train [+ compile] seconds)."""
        secs = self.train_seconds + (self.compile_seconds if include_compile else 0.0)
        return self.env_steps_done / secs if secs > 0 else float("nan")

    def latest(self, prefix: str = "episode_return") -> dict[str, float]:
        """The last finite value of every metric whose name starts with ``prefix``
        (episode metrics: of the last iteration in which an episode ended)."""
        return _latest_values(self.metrics, prefix)


def is_checked_metric(name: str) -> bool:
    """Whether a non-finite value of metric ``name`` stops training: losses
    (a ``/``-part starting with ``loss``) and gradient norms (``grad_norm`` in the name)."""
    parts = name.split("/")
    return any(p.startswith("loss") for p in parts) or "grad_norm" in name or "gradnorm" in name


# ----------------------------------------------------------------------------------------
def _as_key(key_or_seed: Any) -> jax.Array:
    if isinstance(key_or_seed, bool):
        raise ValueError(f"key_or_seed must be an int seed or a PRNG key, got {key_or_seed!r}")
    if isinstance(key_or_seed, int | np.integer):
        return jax.random.PRNGKey(int(key_or_seed))  # raw uint32[2], as runner states hold
    if hasattr(key_or_seed, "dtype"):
        return key_or_seed
    raise ValueError(f"key_or_seed must be an int seed or a PRNG key, got {key_or_seed!r}")


def _check_count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_metrics(metrics: dict[str, np.ndarray], iterations: np.ndarray) -> None:
    """Raises `TrainingDivergedError` at the first iteration with a non-finite checked metric."""
    found = []  # (first bad index, losses before grad norms, name)
    for name in metrics:
        if is_checked_metric(name):
            bad = ~np.isfinite(np.asarray(metrics[name], np.float64))
            if bad.any():
                found.append((int(np.argmax(bad)), "grad" in name, name))
    if found:
        i, _, name = min(found)
        it = int(iterations[i])
        kind = "NaN" if np.isnan(np.asarray(metrics[name][i], np.float64)).any() else "Inf"
        others = sorted(
            n
            for n in metrics
            if is_checked_metric(n)
            and n != name
            and not np.isfinite(np.asarray(metrics[n][i], np.float64))
        )
        extra = f" (also non-finite there: {', '.join(others)})" if others else ""
        raise TrainingDivergedError(f"{kind} in {name} at iteration {it}{extra}", it, name)


def _rate(x: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.2f}{unit}"
    return f"{x:.0f}"


def _returns_text(latest: dict[str, float]) -> str:
    items = [f"{k.split('/', 1)[-1]}={v:.3g}" for k, v in sorted(latest.items())]
    return "return " + " ".join(items) if items else ""


def _latest_values(metrics: dict[str, Any], prefix: str) -> dict[str, float]:
    """The last finite value of each metric named ``prefix…``, skipping, for episode
    metrics, iterations in which no episode ended (on-policy trainers report 0 there)."""
    done = metrics.get("episodes_done")
    ended = None if done is None else np.asarray(done, np.float64).reshape(-1) > 0
    out = {}
    for k, v in metrics.items():
        if not k.startswith(prefix):
            continue
        v = np.asarray(v, np.float64).reshape(-1)
        keep = np.isfinite(v)
        if ended is not None and episode_metric(k) and ended.shape == v.shape:
            keep &= ended
        if keep.any():
            out[k] = float(v[keep][-1])
    return out


class _Progress:
    """A rich progress bar (iterations, env steps, steps/s, returns, ETA) or nothing."""

    def __init__(self, enabled: bool, total: int, completed: int):
        self._bar = None
        if not enabled:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._bar = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("it"),
            TextColumn("{task.fields[steps]} steps"),
            TextColumn("{task.fields[rate]}/s"),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
        )
        self._task = self._bar.add_task(
            "train", total=total, completed=completed, steps="0", rate="-", info="compiling"
        )
        self._bar.start()

    def update(self, completed: int, env_steps: int, rate: float, info: str) -> None:
        if self._bar is not None:
            r = _rate(rate) if math.isfinite(rate) else "-"
            self._bar.update(
                self._task, completed=completed, steps=_rate(env_steps), rate=r, info=info
            )

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def chunk_size(num_iterations: int, iterations_per_chunk: int) -> int:
    """The chunk size used for ``num_iterations``: ``iterations_per_chunk`` when it
    divides them, else the largest divisor of ``num_iterations`` in
    ``[ceil(iterations_per_chunk / 2), iterations_per_chunk]`` (chunks of one length:
    no remainder chunk, which a program of static length, as a population's chunk,
    would compile a second time), else ``iterations_per_chunk``."""
    ipc = max(1, min(int(iterations_per_chunk), max(int(num_iterations), 1)))
    if num_iterations % ipc == 0:
        return ipc
    for d in range(ipc, (ipc + 1) // 2 - 1, -1):
        if d >= 1 and num_iterations % d == 0:
            return d
    return ipc


def _close_all(closers: list[Callable[[], Any]], failing: bool) -> None:
    """Runs every closer; while an exception propagates, their own errors are dropped
    (the first error is the one to report), else the first one is raised."""
    first = None
    for close in closers:
        try:
            close()
        except Exception as e:
            first = first or e
    if first is not None and not failing:
        raise first


# ----------------------------------------------------------------------------------------
def train_loop(
    trainer: Trainer,
    key_or_seed: int | jax.Array,
    workdir: str | os.PathLike | None,
    *,
    iterations_per_chunk: int,
    checkpoint_every_chunks: int = 1,
    keep_checkpoints: int = 3,
    resume: bool = True,
    progress: bool = True,
    logger: MetricsLogger | None = None,
    on_chunk: Callable[[ChunkInfo], Any] | None = None,
    check_config: bool = True,
    metadata: dict[str, Any] | None = None,
    compile_ahead: Callable[[Any], Any] | None = None,
    program_store: ProgramStore | None = None,
) -> tuple[Any, History]:
    """Trains ``trainer`` for its ``num_iterations`` in compiled chunks; see the module doc.

    Args:
      trainer: the `Trainer` (``init``, ``update``, ``chunk``, ``num_iterations``).
      key_or_seed: a PRNG key, or an int seed (made into a raw ``uint32[2]`` key).
      workdir: the run folder, or ``None`` for no logs and no checkpoints.
      iterations_per_chunk: iterations per compiled chunk (``K``; host work between);
        see `chunk_size` for a ``K`` that does not divide the iterations.
      checkpoint_every_chunks: save every this many chunks (counted from iteration 0);
        the final state is always saved.
      keep_checkpoints: how many checkpoints to keep.
      resume: continue from the newest checkpoint in ``workdir/checkpoints`` that
        restores and verifies. With ``resume=False`` an existing checkpoint is an error.
      progress: show a rich progress bar.
      logger: a `MetricsLogger`; default one on ``workdir`` (process 0 only).
      on_chunk: called with a `ChunkInfo` after each chunk; a truthy return stops
        training after that chunk (its state is checkpointed).
      check_config: on resume, require the checkpoint's config hash (of
        ``trainer.config`` without its ``run`` section) to match.
      metadata: extra JSON-able entries for every checkpoint's metadata.
      compile_ahead: called once with the runner state's abstract value
        (`jax.ShapeDtypeStruct` leaves) right after the chunk program's compilation has
        started: lower the run's other programs there (`jaxdrive.aot.compile_async`,
        e.g. evaluation) and they compile beside it. Every chunk waits for the
        compilations started so far (`jaxdrive.aot.wait_pending`), so that none runs
        beside a chunk (XLA's autotuner allocates device memory).
      program_store: load the init and chunk programs from this
        `jaxdrive.program_store.ProgramStore` where it has them for this config (its
        hash with the device count, without the seed), and store them where it has not. Only for
        a trainer made from ``trainer.config`` alone (as the experiment scripts make it).

    Process 0 holds ``workdir``'s `jaxdrive.runlock.RunLock` throughout. Nothing in
    ``workdir`` changes before the checkpoint checks pass; then ``metrics.jsonl`` and
    TensorBoard are reconciled with the restored iteration
    (`jaxdrive.logging.MetricsLogger.reconcile`, which logs what it moved).

    Returns:
      ``(runner_state, history)``: the final runner state and a `History`.

    Raises:
      TrainingDivergedError: a checked metric (losses, grad norms) or a float leaf of the
        runner state is NaN/Inf after a chunk; nothing of that chunk is checkpointed.
      ValueError: bad arguments, or a checkpoint from another config / past the end
        (`jaxdrive.checkpoint.CheckpointError` when no checkpoint restores).
      jaxdrive.runlock.RunLockedError: another process holds ``workdir``.
      OSError: a file of the run folder cannot be written (named in the message).
    """
    if not isinstance(trainer, Trainer):
        raise ValueError(f"trainer must be a jaxdrive.training.Trainer, got {type(trainer)}")
    ipc = _check_count("iterations_per_chunk", iterations_per_chunk, 1)
    every = _check_count("checkpoint_every_chunks", checkpoint_every_chunks, 1)
    keep = _check_count("keep_checkpoints", keep_checkpoints, 1)
    total = _check_count("trainer.num_iterations", trainer.num_iterations, 0)
    key = _as_key(key_or_seed)
    t_start = time.perf_counter()
    primary = jax.process_index() == 0
    chash = config_hash(plain_config(trainer.config))
    if total and chunk_size(total, ipc) != ipc:
        log.info(
            "chunks of %d iterations instead of %d: %d divides the %d iterations "
            "(one compiled program, no remainder chunk)",
            chunk_size(total, ipc), ipc, chunk_size(total, ipc), total,
        )  # fmt: skip
        ipc = chunk_size(total, ipc)

    closers: list[Callable[[], Any]] = []
    ckpt = None
    if workdir is not None:
        workdir = os.fspath(workdir)
        if os.path.exists(workdir) and not os.path.isdir(workdir):
            raise ValueError(f"{workdir}: the run folder is a file, not a folder")
        if primary:
            os.makedirs(workdir, exist_ok=True)
            lock = RunLock(workdir).acquire()
            closers.append(lock.release)
    failing = True
    point = None
    try:
        if workdir is not None:
            point = resume_point(workdir, chash, total, resume=resume, check_config=check_config)
            ckpt = Checkpointer(os.path.join(workdir, CHECKPOINT_DIR), max_to_keep=keep)
            closers.insert(0, ckpt.close)
            if logger is None:
                logger = MetricsLogger(workdir, enabled=primary)
                closers.insert(0, logger.close)
        elif logger is not None:
            closers.insert(0, logger.flush)
        material = program_material(trainer) if program_store is not None else None
        programs = programs_for(trainer, ipc, program_store, material)
        finished = point is not None and int(point.get("iteration", -1)) >= total
        if total > 0 and not finished and not programs.chunk_ready:
            log.info("compiling the init and chunk programs…")
        abstract = programs.start(key, chunk=total > 0 and not finished)
        if compile_ahead is not None and total > 0 and not finished:
            compile_ahead(abstract)  # lowered here while XLA compiles the chunk
        state = programs.init(key)
        start, start_steps, elapsed_before, resumed_from = 0, 0, 0.0, None
        if ckpt is not None and ckpt.all_steps():
            state, meta, resumed_from = restore_run(
                state, ckpt, chash, total, check_config, primary
            )
            start = int(meta["iteration"])
            elapsed_before = float(meta.get("elapsed") or 0.0)
            start_steps = int(meta.get("env_steps", 0))
            log.info("resumed from %s at iteration %d", ckpt.directory, start)
        if logger is not None and workdir is not None:
            note = logger.reconcile(start, start_steps).message(logger.path)
            if note:
                log.warning("%s", note)
        state, hist, times = _run_chunks(
            trainer, programs, state, start, start_steps, elapsed_before, t_start, total, ipc,
            every, ckpt, logger, on_chunk, progress and primary, closers,
            {"num_iterations": total, "config_hash": chash, **(metadata or {})},
        )  # fmt: skip
        failing = False
    finally:
        _close_all(closers, failing)

    def cat(i):
        return np.concatenate([h[i] for h in hist]) if hist else np.zeros((0,), np.int64)

    names = sorted({n for h in hist for n in h[2]})
    history = History(
        iteration=cat(0),
        env_steps=cat(1),
        metrics={n: np.concatenate([h[2][n] for h in hist]) for n in names},
        start_iteration=start,
        num_iterations=total,
        start_env_steps=start_steps,
        resumed_from=resumed_from,
        compile_seconds=times[0],
        train_seconds=times[1],
        total_seconds=time.perf_counter() - t_start,
    )
    return state, history


def program_material(trainer: Trainer) -> dict[str, Any]:
    """What identifies ``trainer``'s programs in a `ProgramStore` besides each program's
    name and settings: the hash of its config without ``run`` and ``seed`` (the seed only
    makes the init's key argument, so seeds share their programs) and the process."""
    return {
        "config": config_hash(plain_config(trainer.config), ignore=("run", "seed")),
        "process": jax.process_index(),
    }


def _run_chunks(
    trainer, programs, state, start, start_steps, elapsed_before, t_start, total, ipc, every,
    ckpt, logger, on_chunk, progress, closers, ckpt_meta,
):  # fmt: skip
    """The chunk loop of `train_loop`: ``(state, [(iterations, env_steps, metrics)],
    (compile_seconds, train_seconds))``. The first call runs one iteration (its line
    comes as soon as the program is compiled), the next one the rest of that chunk."""
    leaf_names, _ = float_leaves(jax.eval_shape(lambda s: s, state))
    compile_seconds = train_seconds = 0.0
    hist: list[tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]] = []
    bar = _Progress(progress, total, start)
    closers.insert(0, bar.stop)
    it, prev_steps = start, start_steps
    while it < total:
        end = it + 1 if it == start else min((it // ipc + 1) * ipc, total)
        executable, built = programs.chunk(state)
        if built is not None:
            compile_seconds += built.lower_seconds + built.compile_seconds
            log.info("chunk program %s", built.text())
            bar.update(it, prev_steps, float("nan"), "compiled; first iteration…")
        wait_pending()  # no compilation (its autotuner) overlaps the chunk's run
        tc = time.perf_counter()
        state, metrics, flags = executable(state, np.int32(end - it))
        metrics, flags = jax.device_get((metrics, flags))  # one transfer
        secs = time.perf_counter() - tc
        train_seconds += secs

        metrics = {name: np.asarray(v)[: end - it] for name, v in metrics.items()}
        iterations = np.arange(it + 1, end + 1, dtype=np.int64)
        if trainer.env_steps_per_iteration:  # exact ints (the metric is float32)
            env_steps = iterations * int(trainer.env_steps_per_iteration)
        elif "env_steps" in metrics:
            env_steps = np.asarray(metrics["env_steps"], np.float64).astype(np.int64)
        else:
            env_steps = np.zeros_like(iterations)
        elapsed = elapsed_before + time.perf_counter() - t_start
        if logger is not None:
            logger.log_chunk(iterations, env_steps, metrics, elapsed=elapsed)
        hist.append((iterations, env_steps, metrics))

        _check_metrics(metrics, iterations)
        bad = [n for n, ok in zip(leaf_names, np.asarray(flags), strict=True) if not ok]
        if bad:
            raise TrainingDivergedError(
                f"non-finite values (NaN/Inf) in the runner state at {bad[0]} after "
                f"iteration {end} (chunk of iterations {it + 1}-{end})"
                + (f"; also in {len(bad) - 1} other leaves" if len(bad) > 1 else ""),
                end,
                bad[0],
            )

        latest_ret = _latest_values(metrics, "episode_return")
        rate = (int(env_steps[-1]) - prev_steps) / secs if secs > 0 else float("nan")
        prev_steps = int(env_steps[-1])
        text = _returns_text(latest_ret)
        if it == start:  # the first line: how long a user waited for it
            first = f"first iteration {time.perf_counter() - t_start:.1f} s after the start"
            text = " ".join(filter(None, (text, f"({first}, compilation included)")))
        bar.update(end, prev_steps, rate, text)
        log.info("iteration %d/%d  env steps %s  %s", end, total, _rate(prev_steps), text)
        stop = False
        if on_chunk is not None:
            info = ChunkInfo(it, end, iterations, env_steps, metrics, state, secs)
            stop = bool(on_chunk(info))
        boundary = end % ipc == 0 and (end // ipc) % every == 0
        if ckpt is not None and (boundary or end == total or stop):
            meta = {
                "iteration": end,
                "env_steps": int(env_steps[-1]),
                "elapsed": elapsed_before + time.perf_counter() - t_start,
                "wall_time": time.time(),
                **ckpt_meta,
            }
            ckpt.save(end, state, meta)
        it = end
        if stop:
            log.info("stopped by on_chunk after iteration %d", end)
            break
    return state, hist, (compile_seconds, train_seconds)
