"""The host loop's two compiled programs, built ahead of time and side by side.

For a trainer and a chunk capacity ``K`` (`jaxdrive.loop.train_loop`'s
``iterations_per_chunk``), `LoopPrograms` holds

* **init**: ``init(key) -> runner_state``;
* **chunk**: ``chunk(runner_state, n) -> (runner_state, metrics [K], finite [L])``:
  `jaxdrive.training.run_iterations` of ``n <= K`` iterations (``n`` an argument, so
  one executable serves the first, one-iteration call, full chunks and a shorter last
  chunk), with ``finite``: whether each float leaf of the new state is all finite (the
  divergence check, in the same program). The state is donated.

With a `jaxdrive.program_store.ProgramStore`, programs built before under the same key
are loaded instead (no tracing, lowering or compiling), and programs built are stored.

`LoopPrograms.start` lowers both and starts their XLA compilations in worker threads
(`jaxdrive.aot`): the chunk is lowered from the init program's output shapes, before
any state exists, so the init program compiles and runs (and a checkpoint is restored)
while the chunk compiles. Programs are kept per trainer (`programs_for`), so repeated
`train_loop` calls (resumes, notebooks) compile once.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdrive.aot import CompileInfo, Compiling, compile_async, matches
from jaxdrive.program_store import ProgramStore
from jaxdrive.training import Trainer, run_iterations

__all__ = ["LoopPrograms", "finite_flags", "float_leaves", "programs_for"]

log = logging.getLogger("jaxdrive.loop")


def _path_str(path: tuple) -> str:
    parts = []
    for k in path:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return "/".join(parts) or "<root>"


def float_leaves(tree: Any) -> tuple[list[str], list[Any]]:
    """``(names, leaves)`` of the floating-point leaves of ``tree`` (``/``-joined paths)."""
    names, leaves = [], []
    for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]:
        dtype = getattr(x, "dtype", None)
        if dtype is not None and jnp.issubdtype(dtype, jnp.inexact):
            names.append(_path_str(path))
            leaves.append(x)
    return names, leaves


def finite_flags(tree: Any) -> jax.Array:
    """``bool[L]``: whether each float leaf of ``tree`` is all finite (one reduction)."""
    _, leaves = float_leaves(tree)
    if not leaves:
        return jnp.ones((0,), bool)
    return jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves])


def _count() -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((), jnp.int32)


class LoopPrograms:
    """A trainer's init and chunk programs for chunks of at most ``capacity`` iterations
    (see the module docstring)."""

    def __init__(
        self,
        trainer: Trainer,
        capacity: int,
        store: ProgramStore | None = None,
        material: Mapping[str, Any] | None = None,
    ):
        update = trainer.update  # the programs hold the trainer's functions, not the trainer
        self.capacity = int(capacity)
        self._init = jax.jit(trainer.init)
        self._store = store  # where built programs are kept and looked up (or None)
        self._material = dict(material or {})
        self._chunk_loaded: CompileInfo | None = None  # the loaded chunk's, until reported

        def chunk(state: Any, n: jax.Array) -> tuple[Any, Any, jax.Array]:
            state, metrics = run_iterations(update, state, n, self.capacity)
            return state, metrics, finite_flags(state)

        self._chunk = jax.jit(chunk, donate_argnums=0)
        self._init_exe: Any = None
        self.init_info: CompileInfo | None = None  # how the init program was built
        self._chunk_exe: Any = None
        self._init_job: Compiling | None = None
        self._shapes: Any = None  # the init's output shapes
        self._chunk_job: Compiling | None = None

    @property
    def chunk_ready(self) -> bool:
        """Whether the chunk program is compiled (or compiling has been started)."""
        return self._chunk_exe is not None or self._chunk_job is not None

    def start(self, key: jax.Array, chunk: bool = True) -> Any:
        """Lowers the programs not built yet (the chunk only with ``chunk``: a finished
        run needs none) and starts their compilation; returns the runner state's
        abstract value (`jax.ShapeDtypeStruct` leaves, with shardings on several
        devices), for lowering further programs of the run. The chunk, the longer
        compilation, is lowered and started first, from the traced init's output
        shapes; the init is lowered (not traced again) after it. Programs the store
        has are loaded instead."""
        traced_init = None
        if self._init_job is None and self._init_exe is None:
            traced_init = self._init.trace(key)
            self._shapes = traced_init.out_info
            loaded = self._load("init", (key,), lambda meta: self._shapes)
            if loaded is not None:
                (self._init_exe, self.init_info), traced_init = loaded, None
        shapes = self._shapes
        if chunk and not self.chunk_ready:
            loaded = self._load("chunk", (shapes, _count()), self._chunk_outputs)
            if loaded is not None:
                self._chunk_exe, self._chunk_loaded = loaded
        if jax.device_count() > 1:  # the shardings come with the init executable
            if traced_init is not None:
                self._init_job, traced_init = compile_async(traced_init), None
            shapes = jax.tree.map(
                lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                shapes,
                self._init_executable().output_shardings,
            )
        if chunk and not self.chunk_ready:
            self._chunk_job = compile_async(self._chunk, shapes, _count())
        if traced_init is not None:
            self._init_job = compile_async(traced_init)
        return shapes

    def _init_executable(self) -> Any:
        if self._init_exe is None:
            self._init_exe, self.init_info = self._init_job.result()
            self._save("init", self._init_exe, (0,), {}, self.init_info)
        return self._init_exe

    # ---- the program store ---------------------------------------------------------
    def _store_key(self, name: str) -> str:
        return self._store.key({**self._material, "program": name, "capacity": self.capacity})

    def _chunk_outputs(self, meta: dict[str, Any]) -> Any:
        """The chunk's results' structure: ``(state, metrics, finite)``, the metrics'
        nested dict keys from the entry's ``meta``."""
        metrics: dict = {}
        for path in meta["metrics"]:
            node = metrics
            for k in path[:-1]:
                node = node.setdefault(k, {})
            node[path[-1]] = 0
        return (self._shapes, metrics, 0)

    def _load(self, name: str, args: tuple, outputs: Any) -> tuple[Any, CompileInfo] | None:
        """``name``'s executable from the store for ``args`` (its results structured as
        ``outputs(meta)``), or ``None``."""
        if self._store is None:
            return None
        t0 = time.perf_counter()
        exe = self._store.load_executable(self._store_key(name), args, outputs)
        if exe is None:
            return None
        return exe, CompileInfo(name, 0.0, time.perf_counter() - t0, "yes, from the program store")

    def _save(
        self, name: str, executable: Any, args: tuple, meta: dict[str, Any], info: CompileInfo
    ) -> None:
        """Stores a built executable (in a thread of its own: the run goes on), where its
        argument and result structures are the ones `_load` rebuilds; on the CPU, not one
        loaded from JAX's compilation cache (``info.from_cache``, see
        `ProgramStore.save_executable`)."""
        if self._store is not None:
            outputs = self._chunk_outputs(meta) if name == "chunk" else self._shapes
            self._store.save_executable(
                self._store_key(name), executable, args, outputs, meta,
                from_jax_cache=info.from_cache == "yes",
            )  # fmt: skip

    def init(self, key: jax.Array) -> Any:
        """The fresh runner state for ``key`` (waits for the init program)."""
        if self._init_job is None:
            self.start(key)
        exe = self._init_executable()
        if not matches(exe, (key,)):  # another kind of key than the one lowered for
            exe, _ = compile_async(self._init, key).result()
        return exe(key)

    def chunk(self, state: Any) -> tuple[Any, CompileInfo | None]:
        """``(executable, info)``: the chunk program for states like ``state``, waiting
        for its compilation; ``info`` when it was built by this call, else ``None``. A
        program lowered for other shardings than ``state``'s is built again for them."""
        args = (state, np.int32(0))
        if self._chunk_exe is not None and matches(self._chunk_exe, args):
            info, self._chunk_loaded = self._chunk_loaded, None
            return self._chunk_exe, info
        self._chunk_loaded = None
        if self._chunk_job is None:
            self._chunk_job = compile_async(self._chunk, *args)
        exe, info = self._chunk_job.result()
        self._chunk_job = None
        if matches(exe, args):  # the program for the init's layout: the one to keep
            paths = jax.tree_util.tree_flatten_with_path(exe.out_info[1])[0]
            keys = [k for p, _ in paths for k in p]
            if all(isinstance(k, jax.tree_util.DictKey) and isinstance(k.key, str) for k in keys):
                names = [[k.key for k in p] for p, _ in paths]
                self._save("chunk", exe, (self._shapes, 0), {"metrics": names}, info)
        else:
            log.info("the runner state's shardings differ from the init program's: lowering again")
            exe, info = compile_async(self._chunk, *args).result()
        self._chunk_exe = exe
        return exe, info


_PROGRAMS: weakref.WeakKeyDictionary[Trainer, dict[int, LoopPrograms]] = weakref.WeakKeyDictionary()


def programs_for(
    trainer: Trainer,
    capacity: int,
    store: ProgramStore | None = None,
    material: Mapping[str, Any] | None = None,
) -> LoopPrograms:
    """The `LoopPrograms` of ``trainer`` for chunks of ``capacity`` (kept while the
    trainer lives; ``store`` and ``material`` apply where they are first built)."""
    per = _PROGRAMS.setdefault(trainer, {})
    if int(capacity) not in per:
        per[int(capacity)] = LoopPrograms(trainer, capacity, store, material)
    return per[int(capacity)]
