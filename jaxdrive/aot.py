"""Ahead-of-time compilation in worker threads: several programs compile at once.

`compile_async(jitted, *args)` traces and lowers a jitted function for ``args`` (arrays
or `jax.ShapeDtypeStruct` leaves; or lowers an already traced `jax.stages.Traced`) on
the calling thread, then hands XLA's compilation
to a worker thread and returns at once. Tracing and lowering are Python and hold the
interpreter lock; XLA's compilation (or its load from the persistent compilation cache)
does not, so programs started one after another compile side by side while the caller
goes on (runs another program, restores a checkpoint, lowers the next one). The
returned `Compiling` gives the executable (`jax.stages.Compiled`) and a `CompileInfo`:
seconds spent tracing and lowering, seconds of XLA compilation, and whether JAX's
persistent compilation cache supplied it.

An executable is bound to the shapes, dtypes and shardings it was lowered for;
`matches` says whether a pytree of arrays fits it.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time
import warnings
from typing import Any

import jax

__all__ = ["CompileInfo", "Compiling", "compile_async", "matches", "wait_pending"]

#: Fixed: compilations running at once (each may use several threads of its own).
_WORKERS = 4
_POOL: list[concurrent.futures.ThreadPoolExecutor] = []
_POOL_LOCK = threading.Lock()
#: Compilations started and not yet finished (see `wait_pending`).
_PENDING: set[concurrent.futures.Future] = set()


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    """The shared worker pool, created on first use (never at import)."""
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(
                concurrent.futures.ThreadPoolExecutor(_WORKERS, thread_name_prefix="jaxdrive-aot")
            )
        return _POOL[0]


class _CacheEvents:
    """The `jax.monitoring` events one thread records while this is entered (the
    persistent compilation cache records ``…/compile_requests_use_cache`` and
    ``…/cache_hits``); events of other threads' compilations are left out. Listeners
    compare by identity: `jax.monitoring` removes a listener by equality, and
    compilations in other threads have listeners of their own."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self._thread = threading.get_ident()

    def __call__(self, event: str, **kwargs: Any) -> None:
        if threading.get_ident() == self._thread:
            self.events.append(event)

    def __enter__(self) -> _CacheEvents:
        jax.monitoring.register_event_listener(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        jax.monitoring.unregister_event_listener(self)

    def from_cache(self) -> str:
        """``"yes"``, ``"no"`` or ``"no, the persistent cache is off"``."""
        if "/jax/compilation_cache/cache_hits" in self.events:
            return "yes"
        if "/jax/compilation_cache/compile_requests_use_cache" in self.events:
            return "no"
        return "no, the persistent cache is off"


@dataclasses.dataclass(frozen=True)
class CompileInfo:
    """How a program was built."""

    name: str  # the jitted function's name
    lower_seconds: float  # tracing and lowering to StableHLO (calling thread)
    compile_seconds: float  # XLA compilation, or the load from the persistent cache
    from_cache: str  # "yes", "no" or "no, the persistent cache is off"

    def text(self) -> str:
        """``"compiled in 12.3 s (tracing and lowering 1.2 s, XLA 11.1 s; from cache: no)"``."""
        took = self.lower_seconds + self.compile_seconds
        return (
            f"compiled in {took:.1f} s (tracing and lowering {self.lower_seconds:.1f} s, "
            f"XLA {self.compile_seconds:.1f} s; from cache: {self.from_cache})"
        )


class Compiling:
    """A program whose XLA compilation runs in a worker thread (see `compile_async`)."""

    def __init__(self, name: str, lowered: Any, lower_seconds: float):
        self.name = name
        self.lowered = lowered  # jax.stages.Lowered
        self.lower_seconds = lower_seconds
        self._future = _executor().submit(self._compile)
        with _POOL_LOCK:
            _PENDING.add(self._future)
        self._future.add_done_callback(_finished)

    def _compile(self) -> tuple[Any, float, str]:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*donated buffers.*")
            t0 = time.perf_counter()
            with _CacheEvents() as events:
                exe = self.lowered.compile()
            return exe, time.perf_counter() - t0, events.from_cache()

    @property
    def out_info(self) -> Any:
        """The outputs' `jax.ShapeDtypeStruct`s (known before compilation ends)."""
        return self.lowered.out_info

    def done(self) -> bool:
        """Whether compilation has finished (successfully or not)."""
        return self._future.done()

    def result(self) -> tuple[Any, CompileInfo]:
        """Waits for the executable; ``(jax.stages.Compiled, CompileInfo)``. Re-raises
        the compilation's error."""
        exe, secs, from_cache = self._future.result()
        return exe, CompileInfo(self.name, self.lower_seconds, secs, from_cache)


def _finished(future: concurrent.futures.Future) -> None:
    with _POOL_LOCK:
        _PENDING.discard(future)


def wait_pending() -> None:
    """Waits until every compilation started by `compile_async` has finished (their
    errors are left to their `Compiling.result`). Call it before running a program that
    needs most of the device memory: XLA's GPU autotuner runs candidate kernels on the
    device while it compiles and allocates device memory for them, so a compilation
    that overlaps such a program can make that program's allocation fail."""
    with _POOL_LOCK:
        pending = list(_PENDING)
    concurrent.futures.wait(pending)


def compile_async(jitted: Any, *args: Any, **kwargs: Any) -> Compiling:
    """Lowers ``jitted`` (a `jax.jit` function, or a `jax.stages.Traced` with no
    arguments) for ``args``/``kwargs`` here and starts its XLA compilation in a worker
    thread; returns the `Compiling` handle."""
    name = getattr(jitted, "fun_name", None) or getattr(jitted, "__name__", None) or "program"
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*donated buffers.*")
        lowered = jitted.lower(*args, **kwargs)
    return Compiling(name, lowered, time.perf_counter() - t0)


def matches(executable: Any, args: tuple[Any, ...]) -> bool:
    """Whether the positional ``args`` (pytrees of arrays) have the structure, shapes,
    dtypes and shardings ``executable`` (a `jax.stages.Compiled`) was compiled for."""
    want_shardings = executable.input_shardings[0]
    want_info = executable.args_info[0]
    treedef = jax.tree.structure(tuple(want_info))
    if jax.tree.structure(tuple(args)) != treedef:
        return False
    have = jax.tree.leaves(tuple(args))
    infos = jax.tree.leaves(tuple(want_info))
    shardings = treedef.flatten_up_to(tuple(want_shardings))  # None: an unused argument
    for x, info, sharding in zip(have, infos, shardings, strict=True):
        if tuple(jax.numpy.shape(x)) != tuple(info.shape):
            return False
        if jax.numpy.result_type(x) != info.dtype:
            return False
        got = getattr(x, "sharding", None)
        if got is None or sharding is None:
            continue
        if not got.is_equivalent_to(sharding, len(info.shape)):
            return False
    return True
