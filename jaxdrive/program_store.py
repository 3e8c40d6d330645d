"""Compiled programs kept on disk under a key of everything that makes them, so that a
run started again loads them instead of tracing, lowering and compiling.

JAX's persistent compilation cache skips XLA's compilation of a program seen before,
but its key is the lowered program: every start still traces and lowers it (seconds
for a large env such as MJX's Humanoid). A `ProgramStore` keys a serialized executable
(`jax.experimental.serialize_executable`) by what determines the program instead:

* the caller's material (the experiment scripts: the program's name, the chunk
  capacity and the hash of the config without its seed, which only makes the init's
  key argument; the device count included);
* the environment (`environment_fingerprint`): the name and version of every installed
  distribution (jax and jaxlib among them; metadata in installed-packages folders only,
  not a checkout's ``*.egg-info``), the backend, its platform version,
  the device kinds and counts, ``XLA_FLAGS`` and the jax settings that change programs;
* the source (`source_digest`): the bytes of every file of the loaded packages and
  modules that are not part of an installed distribution or of Python itself (this
  repository's packages, the user's modules; a folder with ``*.dist-info`` entries,
  e.g. a ``pip install --target`` one, counts as installed), so that any edit of code
  that could be traced gives another key.

Use it only where the program is a function of that key: the experiment scripts build
the env and the trainer from the config alone. A program built from objects made
elsewhere (an env constructed in a notebook with other arguments) may not be.

An entry is a serialized executable and a little JSON about it; `jaxdrive.loop_programs`
rebuilds the argument and result structures from the current process (they are not
stored). Loading never fails a run: an entry that cannot be read or loaded is logged,
ignored and replaced. Entries are written whole (a temporary file, then a rename).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import json
import logging
import os
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Callable, Mapping
from typing import Any

import jax

__all__ = ["ProgramStore", "environment_fingerprint", "source_digest"]

log = logging.getLogger("jaxdrive.program_store")

#: jax settings that change the programs traced or compiled.
_JAX_SETTINGS = (
    "jax_enable_x64",
    "jax_default_matmul_precision",
    "jax_default_prng_impl",
    "jax_threefry_partitionable",
    "jax_use_shardy_partitioner",
    "jax_numpy_dtype_promotion",
    "jax_numpy_rank_promotion",
)


def _holds_distributions(path: str) -> bool:
    """Whether ``path`` is a folder packages are installed into: ``site-packages``,
    ``dist-packages`` or any folder with ``*.dist-info`` metadata (``pip --target``)."""
    if os.path.basename(path) in ("site-packages", "dist-packages"):
        return True
    try:
        return any(n.endswith(".dist-info") for n in os.listdir(path))
    except OSError:
        return False


def _installed_roots() -> tuple[str, ...]:
    """Folders of Python's own modules and of installed distributions."""
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots |= {p for p in sys.path if p and _holds_distributions(p)}
    return tuple(sorted(os.path.realpath(r) + os.sep for r in roots if r))


def _own_files() -> list[tuple[str, str]]:
    """``(top-level name, file)`` of every ``.py`` file of the loaded top-level modules
    and packages whose source lies outside `_installed_roots` (this repository's
    packages, an editable install included, and the user's modules): whole packages, so
    that modules imported only later (inside traced functions) count too."""
    roots = _installed_roots()
    out = set()
    # ``__main__`` last: a script run with ``-m`` is already part of its package, and how
    # a program was started (``-m``, a profiler, a notebook) does not change its key
    names = {n.split(".", 1)[0] for n in list(sys.modules)} - {"__main__"}
    for name in [*sorted(names), "__main__"]:
        mod = sys.modules.get(name)
        path = getattr(mod, "__file__", None)
        if not path or os.path.realpath(path).startswith(roots):
            continue
        dirs = [os.path.realpath(d) for d in getattr(mod, "__path__", ())]
        if not dirs:
            real = os.path.realpath(path)
            if real.endswith(".py") and os.path.isfile(real):
                if name != "__main__" or all(real != f for _, f in out):
                    out.add((name, real))
            continue
        for d in dirs:
            for here, subdirs, files in os.walk(d):
                subdirs[:] = sorted(x for x in subdirs if not x.startswith((".", "__pycache__")))
                out.update((name, os.path.join(here, f)) for f in files if f.endswith(".py"))
    return sorted(out)


def source_digest() -> str:
    """sha256 of the paths and bytes of `_own_files` (see the module docstring)."""
    h = hashlib.sha256()
    for name, path in _own_files():
        h.update(f"{name}:{os.path.basename(path)}".encode() + b"\0")
        with open(path, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


@functools.cache
def _installed_distributions() -> tuple[tuple[str, str, str], ...]:
    """``(name, version, digest of its RECORD)`` of every installed distribution (any
    install, upgrade or reinstall changes the key: modules imported only while tracing
    count too)."""
    roots = _installed_roots()
    found = set()
    for d in importlib.metadata.distributions():
        # metadata found beside source on sys.path (a checkout's egg-info, seen or not
        # depending on how Python was started) is not an install: the source digest
        # covers that code
        if not (os.path.realpath(str(d.locate_file(""))) + os.sep).startswith(roots):
            continue
        record = d.read_text("RECORD") or ""  # its files' hashes: a reinstall of changed code
        digest = hashlib.sha256(record.encode()).hexdigest()
        meta = d.metadata  # parsed once: its name and version
        found.add((meta["Name"] or "", meta["Version"] or "", digest))
    return tuple(sorted(found))


def environment_fingerprint() -> dict[str, Any]:
    """What besides the source and the config changes a compiled program (see the
    module docstring), as JSON-able data."""
    devices = jax.devices()
    client = getattr(devices[0], "client", None)
    return {
        "python": sys.version,
        "distributions": _installed_distributions(),
        "platform": jax.default_backend(),
        "platform_version": getattr(client, "platform_version", ""),
        "devices": sorted(getattr(d, "device_kind", str(d)) for d in devices),
        "processes": jax.process_count(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "settings": {k: str(getattr(jax.config, k, None)) for k in _JAX_SETTINGS},
    }


def _platform(executable: Any) -> str:
    """The platform (``"cpu"``, ``"gpu"``, …) of a compiled executable's devices."""
    try:
        return executable.runtime_executable().local_devices()[0].platform
    except Exception:  # no devices to ask: the default backend compiled it
        return jax.default_backend()


class ProgramStore:
    """Serialized executables in ``folder``, one file per key (see the module docstring).

    Args:
      folder: where entries live (created on first save).
      max_bytes: the folder's size bound: after a save, the entries used least recently
        (a load counts as a use) are deleted until the rest fit (the newest always stays).
        Configs that differ only in traced hyper-parameters (a learning-rate sweep) have
        programs of their own here, so a sweep would otherwise grow the folder without end.
    """

    def __init__(self, folder: str | os.PathLike, max_bytes: int = 4 << 30):
        self.folder = os.path.abspath(os.fspath(folder))
        self.max_bytes = int(max_bytes)
        self._env_key: str | None = None

    def key(self, material: Mapping[str, Any]) -> str:
        """The entry name of a program: sha256 of ``material`` (JSON-able), the
        `environment_fingerprint` and the `source_digest` (both taken once per store:
        call it after the env and trainer are built, when their modules are loaded)."""
        if self._env_key is None:
            env = json.dumps(environment_fingerprint(), sort_keys=True, default=str)
            self._env_key = hashlib.sha256((env + source_digest()).encode()).hexdigest()
        text = json.dumps(dict(material), sort_keys=True, default=str)
        return hashlib.sha256((self._env_key + text).encode()).hexdigest()[:32]

    def _path(self, key: str) -> str:
        return os.path.join(self.folder, f"{key}.program")

    def load(self, key: str) -> tuple[bytes, dict[str, Any]] | None:
        """``(payload, meta)`` stored under ``key`` (see `save`), or ``None`` where there is
        no readable entry (a bad one is logged and ignored)."""
        path = self._path(key)
        if not os.path.exists(path):
            return None
        try:
            with open(path, "rb") as f:
                blob = f.read()
            os.utime(path)  # used now: evicted last
            n = int.from_bytes(blob[:8], "little")
            meta = json.loads(blob[8 : 8 + n].decode())
            payload = blob[8 + n :]
            if not isinstance(meta, dict) or len(payload) != meta.get("payload_bytes"):
                raise ValueError("truncated or not an entry")
        except (OSError, ValueError) as e:
            log.info("program store: %s unreadable (%s); building the program", path, e)
            return None
        return payload, meta

    def _evict(self, keep: str) -> None:
        """Deletes the least recently used entries (modification times) until the folder
        fits ``max_bytes``; ``keep`` (the entry just written) is never deleted."""
        entries = []
        for name in os.listdir(self.folder):
            path = os.path.join(self.folder, name)
            if name.endswith(".program") and path != keep:
                try:
                    st = os.stat(path)
                except OSError:  # deleted meanwhile (another process)
                    continue
                entries.append((st.st_mtime, st.st_size, path))
        total = sum(size for _, size, _ in entries) + os.path.getsize(keep)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            try:
                os.remove(path)
            except OSError:
                continue
            total -= size
            log.info(
                "program store: %s evicted (the folder is over %d bytes)", path, self.max_bytes
            )

    def load_executable(
        self, key: str, args: tuple, outputs: Callable[[dict[str, Any]], Any]
    ) -> Any | None:
        """The executable stored under ``key`` for arguments like ``args`` (arrays or
        `jax.ShapeDtypeStruct` s), its results structured as ``outputs(meta)``, on the
        devices it was stored from (all devices for one that spanned processes); ``None``
        where there is none or it does not load (logged: a miss, never an error)."""
        got = self.load(key)
        if got is None:
            return None
        payload, meta = got
        try:
            from jax.experimental import serialize_executable

            _bind_lazy_kernels()
            in_tree = jax.tree.structure((tuple(args), {}))
            out_tree = jax.tree.structure(outputs(meta))
            devices = None  # None: all of the backend's devices
            if meta.get("device_ids") is not None:
                by_id = {d.id: d for d in jax.devices()}
                devices = [by_id[i] for i in meta["device_ids"]]
            return serialize_executable.deserialize_and_load(
                payload, in_tree, out_tree, execution_devices=devices
            )
        except Exception as e:  # an entry that does not load is a miss, never an error
            log.info("program store: %s did not load (%s); building it", key, e)
            return None

    def save_executable(
        self,
        key: str,
        executable: Any,
        args: tuple,
        outputs: Any,
        meta: Mapping[str, Any],
        *,
        from_jax_cache: bool = False,
    ) -> threading.Thread | None:
        """Stores ``executable`` under ``key`` with ``meta`` in a thread of its own (the
        caller goes on; the thread is returned), where its argument and result structures
        are those of ``args`` and ``outputs`` (what `load_executable` rebuilds them from).

        ``from_jax_cache``: the executable was itself loaded from JAX's persistent
        compilation cache. On the CPU it is then not stored (``None``, one log line):
        serialized again, an XLA:CPU executable loaded from the cache lacks compiled
        functions and fails at its first call ("Function ... not found"). GPU
        executables survive it and are stored."""
        if from_jax_cache and _platform(executable) == "cpu":
            log.info("program store: %s not stored (loaded from JAX's compilation cache)", key)
            return None

        def save() -> None:
            from jax.experimental import serialize_executable

            try:
                payload, in_tree, out_tree = serialize_executable.serialize(executable)
                # the devices it runs on, to load it back onto (a one-device program in
                # a process with several); one spanning processes loads onto all
                devices = executable.runtime_executable().local_devices()
                ids = [d.id for d in devices] if jax.process_count() == 1 else None
            except Exception as e:  # not serializable here: nothing stored
                log.info("program store: %s not stored (%s)", key, e)
                return
            same_in = in_tree == jax.tree.structure((tuple(args), {}))
            if same_in and out_tree == jax.tree.structure(outputs):
                self.save(key, payload, {**meta, "device_ids": ids})
            else:
                log.info("program store: %s not stored (its structures are not rebuilt)", key)

        thread = threading.Thread(target=save)
        thread.start()
        return thread

    def save(self, key: str, payload: bytes, meta: Mapping[str, Any]) -> bool:
        """Writes ``payload`` (a serialized executable) and ``meta`` (JSON-able) under
        ``key``, whole or not at all; ``False`` (and one log line) where it cannot."""
        tmp = None
        try:
            header = json.dumps({**meta, "payload_bytes": len(payload)}).encode()
            os.makedirs(self.folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.folder)
            with os.fdopen(fd, "wb") as f:
                f.write(len(header).to_bytes(8, "little") + header + payload)
            os.replace(tmp, self._path(key))
            self._evict(keep=self._path(key))
            return True
        except (OSError, TypeError, ValueError) as e:  # a run never fails for its store
            log.info("program store: cannot store %s (%s)", key, e)
            if tmp is not None and os.path.exists(tmp):
                os.remove(tmp)
            return False


def _bind_lazy_kernels() -> None:
    """Binds the kernels JAX binds only while lowering a program that uses them (which a
    loaded program skips): LAPACK's (CPU linear algebra) and, on GPUs, the custom calls of
    Pallas's Triton and Mosaic GPU kernels."""
    from jax._src.lax import linalg

    linalg.initialize_lapack()
    if jax.default_backend() == "gpu":
        for name in ("triton", "mosaic_gpu"):
            try:
                importlib.import_module(f"jax._src.pallas.{name}.pallas_call_registration")
            except ImportError:  # a jax without that backend
                continue
