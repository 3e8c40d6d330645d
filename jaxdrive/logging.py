"""Metrics writers of a run folder: ``metrics.jsonl``, TensorBoard events, PNG curves.

``metrics.jsonl`` holds one JSON object per training iteration::

    {"iteration": 12, "env_steps": 49152, "wall_time": 1718000000.5, "elapsed": 8.25,
     "metrics": {"episode_return/tagger": 1.5, "loss/tagger/value": 0.02, ...}}

``iteration`` counts updates done (the first update is iteration 1), ``elapsed`` is the
training wall time in seconds so far (summed over resumed sessions). TensorBoard
scalars go to ``<workdir>/tb`` with the env step count as their step.

**What a value means** (one rule for JSONL, TensorBoard and the plots):

* A non-finite value is written as ``null`` in JSONL and left out of TensorBoard.
* Episode metrics (names whose first ``/``-part starts with ``episode_``:
  ``episode_return/<group>``, ``episode_length``) describe the episodes that ended in
  the iteration. An iteration in which no episode ended (``episodes_done == 0``) has
  **no** episode metrics: they are absent from its JSONL record and from TensorBoard
  (trainers report ``0`` there, which means nothing), and `plot_curves` draws only the
  iterations that have them.

**The files agree with the checkpoint.** When a run starts or resumes, `reconcile`
makes ``metrics.jsonl`` hold exactly one record for each iteration ``1..n`` of the
restored checkpoint (``n = 0`` without one): records past ``n``, second copies of an
iteration and lines cut by a crash are moved to ``metrics.jsonl.discarded-<k>`` and the
file is rewritten atomically; iterations missing below ``n`` (a file cut by hand) cannot
be recovered and are reported. TensorBoard event records with a step (env steps) past
the checkpoint's are removed the same way: every event file holding some is moved to
``tb.discarded-<k>/`` and replaced by a copy without them, so a resumed run never shows
a doubled curve. Each session writes a new event file.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import struct
import sys
import time
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["MetricsLogger", "Reconciled", "episode_metric", "plot_curves", "read_metrics"]

METRICS_FILE = "metrics.jsonl"
TB_DIR = "tb"


def episode_metric(name: str) -> bool:
    """Whether metric ``name`` describes finished episodes (``episode_return*``,
    ``episode_length``): it means something only where ``episodes_done > 0``."""
    return name.split("/")[0].startswith("episode_")


def _to_float(v: Any) -> float | None:
    f = float(np.asarray(v))
    return f if math.isfinite(f) else None


def _located(e: OSError, path: str) -> OSError:
    """``e`` with ``path`` as its file name (writes on a full disk name none)."""
    if getattr(e, "filename", None):
        return e
    return OSError(e.errno, e.strerror or str(e), path)


def _ranges(values: list[int]) -> str:
    out, i = [], 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        out.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ", ".join(out)


def _aside(path: str) -> str:
    """``<path>.discarded-<k>`` with the first ``k >= 1`` not taken."""
    k = 1
    while os.path.exists(f"{path}.discarded-{k}"):
        k += 1
    return f"{path}.discarded-{k}"


def _write_atomic(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        raise _located(e, tmp) from None


@dataclasses.dataclass
class Reconciled:
    """What `MetricsLogger.reconcile` did. ``kept``: records left in ``metrics.jsonl``;
    ``discarded``: records moved to ``aside`` (its path, ``None`` if nothing moved), of
    which ``torn`` were unreadable lines; ``missing``: iterations ``<= n`` with no
    record; ``tb_moved``: TensorBoard event files rewritten without steps past the
    checkpoint (originals under ``tb.discarded-<k>/``)."""

    kept: int
    discarded: int
    torn: int
    missing: list[int]
    aside: str | None
    tb_moved: int

    def message(self, path: str) -> str | None:
        """One line for the log, or ``None`` when the files already agreed."""
        parts = []
        if self.discarded:
            torn = f" ({self.torn} unreadable)" if self.torn else ""
            parts.append(
                f"moved {self.discarded} record(s){torn} past the checkpoint or repeated "
                f"to {self.aside}"
            )
        if self.tb_moved:
            parts.append(f"rewrote {self.tb_moved} TensorBoard event file(s)")
        if self.missing:
            parts.append(f"iterations {_ranges(self.missing)} have no record (lost)")
        return f"{path}: " + "; ".join(parts) if parts else None


def _parse(line: bytes) -> int | None:
    """The iteration of one JSONL line, or ``None`` when it is not a whole record."""
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("metrics"), dict):
        return None
    it = rec.get("iteration")
    return it if isinstance(it, int) and not isinstance(it, bool) else None


def _tensorboardx() -> Any:
    """The ``tensorboardX`` package, imported with PyTorch hidden unless PyTorch is
    loaded already: its package import also imports PyTorch where that is installed
    (seconds before the first progress line) only to recognise PyTorch tensors, which
    this logger never writes."""
    hide = "torch" not in sys.modules
    if hide:
        sys.modules["torch"] = None  # `import torch` raises ImportError meanwhile
    try:
        import tensorboardX
        import tensorboardX.proto.event_pb2
    finally:
        if hide and "torch" in sys.modules and sys.modules["torch"] is None:
            del sys.modules["torch"]
    return tensorboardX


def _tb_records(data: bytes) -> list[tuple[int | None, bytes]]:
    """TFRecord framing (length, its crc, payload, its crc): ``[(step or None for
    events without scalars, raw record)]``; a record cut by a crash ends the list."""
    event_pb2 = _tensorboardx().proto.event_pb2

    out, pos = [], 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack("<Q", data[pos : pos + 8])
        end = pos + 12 + length + 4
        if end > len(data):
            break
        try:
            event = event_pb2.Event.FromString(data[pos + 12 : pos + 12 + length])
        except Exception:  # a damaged record: drop it and what follows
            break
        out.append((event.step if event.summary.value else None, data[pos:end]))
        pos = end
    return out


def _reconcile_tb(tb_dir: str, max_step: int) -> int:
    """Removes scalar events with ``step > max_step`` from every event file of
    ``tb_dir`` (originals moved to ``tb.discarded-<k>/``); returns the files changed."""
    if not os.path.isdir(tb_dir):
        return 0
    aside, moved = None, 0
    for name in sorted(os.listdir(tb_dir)):
        path = os.path.join(tb_dir, name)
        if "tfevents" not in name or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        records = _tb_records(data)
        kept = [raw for step, raw in records if step is None or step <= max_step]
        if len(kept) == len(records) and sum(map(len, kept)) == len(data):
            continue
        if aside is None:
            aside = _aside(tb_dir)
            os.makedirs(aside)
        os.replace(path, os.path.join(aside, name))
        if any(step is not None and step <= max_step for step, _ in records):
            _write_atomic(path, b"".join(kept))
        moved += 1
    return moved


class MetricsLogger:
    """Appends per-iteration metrics to ``<workdir>/metrics.jsonl`` and TensorBoard.

    Args:
      workdir: the run folder (created when missing, at the first record).
      tensorboard: also write TensorBoard event files to ``<workdir>/tb``.
      enabled: ``False`` makes every call a no-op (e.g. on processes other than 0).

    Write failures raise ``OSError`` naming the file.
    """

    def __init__(self, workdir: str | os.PathLike, *, tensorboard: bool = True, enabled=True):
        self.workdir = os.fspath(workdir)
        self.path = os.path.join(self.workdir, METRICS_FILE)
        self.enabled = bool(enabled)
        self._tensorboard = bool(tensorboard)
        self._file = None
        self._tb = None

    # ----- resuming --------------------------------------------------------------------
    def reconcile(self, iteration: int, env_steps: int | None = None) -> Reconciled:
        """Makes the files agree with a checkpoint after ``iteration`` iterations and
        ``env_steps`` env steps (``0, 0`` without a checkpoint); see the module doc."""
        if not self.enabled:
            return Reconciled(0, 0, 0, [], None, 0)
        self.close()
        iteration = int(iteration)
        lines: list[bytes] = []
        whole = True  # every line ends with a newline (else an append would join two)
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                raw = f.read()
            lines = [ln for ln in raw.split(b"\n") if ln.strip()]
            whole = not raw or raw.endswith(b"\n")
        keep: dict[int, bytes] = {}
        discarded: list[bytes] = []
        torn = 0
        for line in lines:
            it = _parse(line)
            if it is None:
                torn += 1
                discarded.append(line)
            elif it < 1 or it > iteration:
                discarded.append(line)
            else:
                if it in keep:
                    discarded.append(keep[it])
                keep[it] = line
        kept = [keep[i] for i in sorted(keep)]
        aside = None
        if discarded or kept != lines or not whole:
            aside = _aside(self.path) if discarded else None
            if aside is not None:
                _write_atomic(aside, b"\n".join(discarded) + b"\n")
            _write_atomic(self.path, b"".join(line + b"\n" for line in kept))
        missing = sorted(set(range(1, iteration + 1)) - set(keep))
        tb_moved = 0
        if self._tensorboard:
            tb_moved = _reconcile_tb(os.path.join(self.workdir, TB_DIR), int(env_steps or 0))
        return Reconciled(len(kept), len(discarded), torn, missing, aside, tb_moved)

    # ----- writing ---------------------------------------------------------------------
    def _open(self) -> None:
        if self._file is None:
            try:
                os.makedirs(self.workdir, exist_ok=True)
                self._file = open(self.path, "a")  # kept open across calls
            except OSError as e:
                raise _located(e, self.path) from None
        if self._tensorboard and self._tb is None:
            # a unique suffix: tensorboardX names files by the second and overwrites
            self._tb = _tensorboardx().SummaryWriter(
                os.path.join(self.workdir, TB_DIR),
                flush_secs=30,
                filename_suffix=f".{uuid.uuid4().hex[:8]}",
            )

    def _record(
        self, iteration: int, env_steps: int, metrics: Mapping[str, Any], elapsed, wall_time
    ) -> tuple[dict[str, Any], str]:
        values = {k: _to_float(v) for k, v in metrics.items()}
        done = values.get("episodes_done", 1.0)
        if done is not None and done <= 0:  # no episode ended: episode metrics mean nothing
            values = {k: v for k, v in values.items() if not episode_metric(k)}
        rec = {
            "iteration": int(iteration),
            "env_steps": int(env_steps),
            "wall_time": time.time() if wall_time is None else float(wall_time),
            "elapsed": None if elapsed is None else float(elapsed),
            "metrics": values,
        }
        return rec, json.dumps(rec) + "\n"

    def _write(self, records: list[tuple[dict[str, Any], str]]) -> None:
        self._open()
        try:
            self._file.write("".join(text for _, text in records))
            self._file.flush()
        except OSError as e:
            raise _located(e, self.path) from None
        if self._tb is not None:
            for rec, _ in records:
                for k, v in rec["metrics"].items():
                    if v is not None:  # non-finite values are left out (gaps in the curves)
                        self._tb.add_scalar(k, v, rec["env_steps"], rec["wall_time"])

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
        if self.enabled:
            self._write([self._record(iteration, env_steps, metrics, elapsed, wall_time)])

    def log_chunk(
        self,
        iterations: np.ndarray,
        env_steps: np.ndarray,
        metrics: Mapping[str, np.ndarray],
        *,
        elapsed: float | None = None,
    ) -> None:
        """Writes a chunk: ``iterations``, ``env_steps`` ``[K]``; ``metrics`` ``{name: [K]}``
        (one write of whole lines, then a flush)."""
        if not self.enabled:
            return
        now = time.time()
        rows = [{k: v[i] for k, v in metrics.items()} for i in range(len(iterations))]
        its, steps = [int(i) for i in iterations], [int(e) for e in env_steps]
        self._write(
            [self._record(i, e, m, elapsed, now) for i, e, m in zip(its, steps, rows, strict=True)]
        )
        self.flush()

    def flush(self) -> None:
        """Pushes buffered records to disk."""
        if self._file is not None:
            try:
                self._file.flush()
            except OSError as e:
                raise _located(e, self.path) from None
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        """Flushes and closes the files (a later `log` reopens them)."""
        file, self._file = self._file, None
        tb, self._tb = self._tb, None
        try:
            if tb is not None:
                tb.close()
        finally:
            if file is not None:
                try:
                    file.close()
                except OSError as e:
                    raise _located(e, self.path) from None

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_metrics(workdir: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of ``<workdir>/metrics.jsonl`` in order (``[]`` when absent).

    A last line cut by a crash (or still being written) is skipped; any other
    unreadable line raises ``ValueError`` naming the file and line.
    """
    path = os.path.join(os.fspath(workdir), METRICS_FILE)
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError as e:
            if all(not rest.strip() for rest in lines[i + 1 :]):
                break  # the torn last line of an interrupted write
            raise ValueError(f"{path}:{i + 1}: not a JSON record ({e})") from None
    return out


def _ended(metrics: dict[str, Any]) -> bool:
    done = metrics.get("episodes_done", 1)
    return done is None or done > 0


def _series(records: list[dict[str, Any]], name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(env_steps, values)`` of metric ``name``; episode metrics (``episode_*``) keep
    only the iterations that have them and in which an episode ended (files written
    before the rule hold ``0`` where ``episodes_done == 0``)."""
    if episode_metric(name):
        records = [r for r in records if name in r["metrics"] and _ended(r["metrics"])]
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
