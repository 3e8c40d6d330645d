"""`StopRequest`: a training script stops at a chunk boundary, with a checkpoint, on
SIGINT or SIGTERM (the experiment scripts use it)."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

import jax

__all__ = ["StopRequest", "run_stoppable"]


class StopRequest:
    """Stops a training script at its next chunk boundary on SIGINT (Ctrl-C) or SIGTERM
    (a scheduler's preemption), with a checkpoint there, instead of losing the
    iterations since the last one.

    Used as a context manager around the training loop: the first signal sets
    `signum` and prints one line; the loop checkpoints after the chunk it is running
    and returns (`jaxdrive.loop.train_loop`: ``on_chunk=lambda info: stop.requested``);
    the script then exits with status ``128 + signum`` (`report`). A second signal
    acts as it would without the handler (SIGINT raises ``KeyboardInterrupt``, SIGTERM
    ends the process). Handlers are installed only in the main thread of a
    single-process run (the processes of a multi-host run would have to agree on the
    chunk to stop after); elsewhere `requested` stays False.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        """Whether a stop was asked for."""
        return self.signum is not None

    @property
    def name(self) -> str | None:
        """``"SIGINT"`` or ``"SIGTERM"`` once requested."""
        return None if self.signum is None else signal.Signals(self.signum).name

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread() and jax.process_count() == 1:
            for s in self.SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:  # the second one: as without this handler
            previous = self._previous.get(signum, signal.SIG_DFL)
            signal.signal(signum, previous)
            if callable(previous):
                previous(signum, frame)
            else:
                signal.raise_signal(signum)
            return
        self.signum = signum
        print(
            f"\n{self.name}: stopping after the running chunk, with a checkpoint "
            "(send it again to stop at once)",
            file=sys.stderr,
            flush=True,
        )

    def report(self, done: int, workdir: str, unit: str = "iteration") -> None:
        """Prints where the run stopped (after ``unit`` ``done``) and exits with
        ``128 + signum``."""
        print(
            f"{self.name}: stopped after {unit} {done}, checkpointed in {workdir}; "
            "run the same command to resume",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(128 + int(self.signum or 0))


def run_stoppable(
    run: Callable[..., dict[str, Any]], *args: Any, unit: str = "iteration", **kwargs: Any
) -> dict[str, Any]:
    """``run(*args, stop=<StopRequest>, **kwargs)`` under a `StopRequest`; returns its
    summary, or, when the summary's ``stopped_by`` is set (a stop before the run's end),
    reports and exits with ``128 + signum``. The summary names the run folder
    (``workdir``) and the ``unit``s done (``iterations``, ``turns_done`` for turns)."""
    with StopRequest() as stop:
        summary = run(*args, stop=stop, **kwargs)
    if summary.get("stopped_by"):
        done = summary["turns_done"] if unit == "turn" else summary["iterations"]
        stop.report(done, summary["workdir"], unit)
    return summary
