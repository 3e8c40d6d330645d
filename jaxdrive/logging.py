"""Metrics writers of a run folder: ``metrics.jsonl``, TensorBoard events, PNG curves.

``metrics.jsonl`` holds one JSON object per training iteration::

    {"iteration": 12, "env_steps": 49152, "wall_time": 1718000000.5, "elapsed": 8.25,
     "metrics": {"episode_return/tagger": 1.5, "loss/tagger/value": 0.02, ...}}

``iteration`` counts updates done (the first update is iteration 1), ``elapsed`` is the
training wall time in seconds so far (summed over resumed sessions), non-finite metric
values are written as ``null`` (and left out of TensorBoard). TensorBoard scalars go
to ``<workdir>/tb`` with the env step count as their step; a resumed run purges the
events past its checkpoint (``purge_step``) and writes a new event file.
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["MetricsLogger", "plot_curves", "read_metrics"]

METRICS_FILE = "metrics.jsonl"
TB_DIR = "tb"


def _to_float(v: Any) -> float | None:
    f = float(np.asarray(v))
    return f if math.isfinite(f) else None


class MetricsLogger:
    """Appends per-iteration metrics to ``<workdir>/metrics.jsonl`` and TensorBoard.

    Args:
      workdir: the run folder (created when missing).
      tensorboard: also write TensorBoard event files to ``<workdir>/tb``.
      enabled: ``False`` makes every call a no-op (e.g. on processes other than 0).
    """

    def __init__(self, workdir: str | os.PathLike, *, tensorboard: bool = True, enabled=True):
        self.workdir = os.fspath(workdir)
        self.path = os.path.join(self.workdir, METRICS_FILE)
        self.enabled = bool(enabled)
        self._tensorboard = bool(tensorboard)
        self._file = None
        self._tb = None
        self._purge_step: int | None = None

    # ----- resuming --------------------------------------------------------------------
    def truncate(self, after_iteration: int, env_steps: int | None = None) -> int:
        """Drops records with ``iteration > after_iteration`` (written after the
        checkpoint a run resumes from); TensorBoard events from ``env_steps`` on are
        purged too. Returns how many JSONL records were dropped."""
        if not self.enabled:
            return 0
        self.close()
        dropped = 0
        if os.path.exists(self.path):
            kept = []
            with open(self.path) as f:
                for line in f:
                    if not line.strip():
                        continue
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError:  # a line cut by a crash
                        dropped += 1
                        continue
                    if int(rec.get("iteration", 0)) <= after_iteration:
                        kept.append(line if line.endswith("\n") else line + "\n")
                    else:
                        dropped += 1
            if dropped:
                tmp = self.path + ".tmp"
                with open(tmp, "w") as f:
                    f.writelines(kept)
                os.replace(tmp, self.path)
        if env_steps is not None:
            self._purge_step = int(env_steps) + 1
        return dropped

    # ----- writing ---------------------------------------------------------------------
    def _open(self) -> None:
        if self._file is None:
            os.makedirs(self.workdir, exist_ok=True)
            self._file = open(self.path, "a")  # kept open across calls
        if self._tensorboard and self._tb is None:
            from tensorboardX import SummaryWriter

            # a unique suffix: tensorboardX names files by the second and overwrites
            self._tb = SummaryWriter(
                os.path.join(self.workdir, TB_DIR),
                purge_step=self._purge_step,
                flush_secs=30,
                filename_suffix=f".{uuid.uuid4().hex[:8]}",
            )
            self._purge_step = None

    def log(
        self,
        iteration: int,
        env_steps: int,
        metrics: Mapping[str, Any],
        *,
        elapsed: float | None = None,
        wall_time: float | None = None,
    ) -> None:
        """Writes one iteration's scalar ``metrics`` (``{name: float}``)."""
        if not self.enabled:
            return
        self._open()
        values = {k: _to_float(v) for k, v in metrics.items()}
        rec = {
            "iteration": int(iteration),
            "env_steps": int(env_steps),
            "wall_time": time.time() if wall_time is None else float(wall_time),
            "elapsed": None if elapsed is None else float(elapsed),
            "metrics": values,
        }
        self._file.write(json.dumps(rec) + "\n")
        if self._tb is not None:
            for k, v in values.items():
                if v is not None:  # non-finite values are left out (gaps in the curves)
                    self._tb.add_scalar(k, v, int(env_steps), rec["wall_time"])

    def log_chunk(
        self,
        iterations: np.ndarray,
        env_steps: np.ndarray,
        metrics: Mapping[str, np.ndarray],
        *,
        elapsed: float | None = None,
    ) -> None:
        """Writes a chunk: ``iterations``, ``env_steps`` ``[K]``; ``metrics`` ``{name: [K]}``."""
        if not self.enabled:
            return
        now = time.time()
        for i in range(len(iterations)):
            self.log(
                int(iterations[i]),
                int(env_steps[i]),
                {k: v[i] for k, v in metrics.items()},
                elapsed=elapsed,
                wall_time=now,
            )
        self.flush()

    def flush(self) -> None:
        """Pushes buffered records to disk."""
        if self._file is not None:
            self._file.flush()
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        """Flushes and closes the files (a later `log` reopens them)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_metrics(workdir: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of ``<workdir>/metrics.jsonl`` in order (``[]`` when absent)."""
    path = os.path.join(os.fspath(workdir), METRICS_FILE)
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            if line.strip():
                out.append(json.loads(line))
    return out


def _series(records: list[dict[str, Any]], name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(env_steps, values)`` of metric ``name``; episode metrics (``episode_*``) keep
    only the iterations in which an episode ended (``episodes_done > 0``)."""
    if name.split("/")[0].startswith("episode_"):
        records = [r for r in records if r["metrics"].get("episodes_done", 1) > 0]
    x = np.array([r["env_steps"] for r in records], np.float64)
    y = np.array(
        [np.nan if r["metrics"].get(name) is None else r["metrics"][name] for r in records],
        np.float64,
    )
    return x, y


def plot_curves(workdir: str | os.PathLike, out_dir: str | os.PathLike | None = None) -> list[str]:
    """Draws learning curves from ``<workdir>/metrics.jsonl`` (matplotlib, Agg).

    Writes ``returns.png`` (every ``episode_return*`` metric vs env steps, one line per
    group) and ``losses.png`` (one panel per ``loss*`` metric) into ``out_dir``
    (default ``workdir``). Returns the paths written (none when there is no data).
    """
    from matplotlib.figure import Figure  # no pyplot: PNGs render with Agg, no display

    records = read_metrics(workdir)
    out_dir = os.fspath(workdir if out_dir is None else out_dir)
    if not records:
        return []
    names = sorted({k for r in records for k in r["metrics"]})
    paths = []

    returns = [n for n in names if n.split("/")[0].startswith("episode_return")]
    if returns:
        fig = Figure(figsize=(7, 4.5), dpi=100)
        ax = fig.add_subplot(1, 1, 1)
        for n in returns:
            x, y = _series(records, n)
            ax.plot(x, y, label=n.split("/", 1)[-1] if "/" in n else n)
        ax.set_xlabel("env steps")
        ax.set_ylabel("episode return (per agent)")
        ax.set_title("episode return per group")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = os.path.join(out_dir, "returns.png")
        fig.savefig(path)
        paths.append(path)

    losses = [n for n in names if n.split("/")[0].startswith("loss")]
    if losses:
        cols = min(3, len(losses))
        rows = math.ceil(len(losses) / cols)
        fig = Figure(figsize=(4.2 * cols, 3.0 * rows), dpi=100)
        for i, n in enumerate(losses):
            ax = fig.add_subplot(rows, cols, i + 1)
            x, y = _series(records, n)
            ax.plot(x, y, lw=1.0)
            ax.set_title(n, fontsize=9)
            ax.set_xlabel("env steps", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
        fig.tight_layout()
        path = os.path.join(out_dir, "losses.png")
        fig.savefig(path)
        paths.append(path)
    return paths
