"""One process per run folder: an advisory lock on ``<workdir>/run.lock``.

A run folder is written by one process at a time. `RunLock` takes an exclusive
``fcntl.flock`` on the file ``run.lock`` inside the folder and then writes the holder's
pid, host name and start time into it. The kernel releases a ``flock`` when its process
exits, however it exits (``kill -9`` included), so a lock can never outlive its holder:
a ``run.lock`` naming a process that no longer holds it is *stale*, and the next
process takes it over, saying whose it was. A second process that finds the lock held
gets `RunLockedError` naming the holder. A take-over is logged as a warning.

The lock is re-entrant within a process (``experiments.train`` holds it around
`jaxdrive.loop.train_loop`, which takes it too). Only process 0 of a multi-host run
takes it, as only process 0 writes the folder. ``run.lock`` is the one file the lock
creates in an existing folder before a run is validated; its content names the last
holder and means nothing else.

Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with RunLock(folder) as lock:
    ...     lock.held
    True
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import sys
import time
from typing import Any

__all__ = ["LOCK_FILE", "RunLock", "RunLockedError", "read_holder"]

LOCK_FILE = "run.lock"

log = logging.getLogger(__name__)

_HELD: dict[str, list[Any]] = {}  # realpath of the lock file -> [fd, depth] in this process


class RunLockedError(RuntimeError):
    """Another live process holds the run folder's lock. ``holder``: its ``run.lock``
    record (``pid``, ``host``, ``started``, ``argv``) or ``{}`` when unreadable."""

    def __init__(self, message: str, holder: dict[str, Any]):
        super().__init__(message)
        self.holder = holder


def read_holder(workdir: str | os.PathLike) -> dict[str, Any]:
    """The record of the last holder written in ``<workdir>/run.lock`` (``{}`` if none)."""
    try:
        with open(os.path.join(os.fspath(workdir), LOCK_FILE)) as f:
            rec = json.loads(f.read() or "{}")
        return rec if isinstance(rec, dict) else {}
    except (OSError, ValueError):
        return {}


def _describe(rec: dict[str, Any]) -> str:
    if not rec:
        return "another process (its record is not written yet)"
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(rec.get("started", 0)))
    return f"pid {rec.get('pid')} on host {rec.get('host')} (since {when})"


class RunLock:
    """An exclusive advisory lock on the run folder ``workdir`` (a context manager).

    Args:
      workdir: the run folder; it must exist when `acquire` is called.
      enabled: ``False`` makes the lock a no-op (processes other than 0).

    `acquire` raises `RunLockedError` when another process holds the lock and
    ``OSError`` (with the lock file's path) when the folder cannot hold it. ``taken_over``
    is the stale record of a dead holder this acquisition replaced (``None`` if none).
    """

    def __init__(self, workdir: str | os.PathLike, *, enabled: bool = True):
        self.workdir = os.fspath(workdir)
        self.path = os.path.join(self.workdir, LOCK_FILE)
        self.enabled = bool(enabled)
        self.held = False
        self.taken_over: dict[str, Any] | None = None

    def acquire(self) -> RunLock:
        """Takes the lock (non-blocking); see the class doc."""
        if not self.enabled or self.held:
            return self
        key = os.path.realpath(self.path)
        if key in _HELD:  # re-entered by this process
            _HELD[key][1] += 1
            self.held = True
            return self
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = read_holder(self.workdir)
            raise RunLockedError(
                f"{self.workdir} is in use by {_describe(holder)}: one process per run "
                "folder; wait for it, stop it, or choose another --workdir",
                holder,
            ) from None
        previous = read_holder(self.workdir)
        if previous and previous.get("released") is not True:
            self.taken_over = previous
            log.warning(
                "%s: taking over the run folder from pid %s on host %s, which exited "
                "without releasing it",
                self.workdir, previous.get("pid"), previous.get("host"),
            )  # fmt: skip
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.time(),
            "argv": sys.argv,
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        _HELD[key] = [fd, 1]
        self.held = True
        return self

    def release(self) -> None:
        """Releases the lock (the outermost release of this process unlocks the file)."""
        if not self.held:
            return
        self.held = False
        key = os.path.realpath(self.path)
        entry = _HELD.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] > 0:
            return
        del _HELD[key]
        fd = entry[0]
        try:  # a clean release: the next holder has nothing to take over
            rec = read_holder(self.workdir)
            rec["released"] = True
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(rec) + "\n").encode(), 0)
        except OSError:
            pass  # a read-only or full disk: the kernel still drops the lock below
        finally:
            os.close(fd)  # closing the last descriptor drops the flock

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()
