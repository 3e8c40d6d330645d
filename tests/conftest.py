"""Shared pytest configuration.

One run of the suite compiles many identical XLA programs: tests that build the same
env or trainer afresh, the xdist workers, and the absl scripts the tests start as
subprocesses. The controller points all of them at one persistent compilation cache
in a temporary folder (removed when the run ends), so each program compiles once per
run. A ``JAX_COMPILATION_CACHE_DIR`` already set is used as it is and kept;
``JAXDRIVE_TEST_XLA_CACHE=0`` turns the shared cache off.

The tests run tiny programs, whose time is XLA's compile time, so they compile without
the CPU backend's expensive LLVM passes (``XLA_FLAGS``, set before jax starts). The
scripts and notebooks the tests start also skip the backend's optimisations (set for
child processes once the test process's own backend has started: some in-process tests
compare two compiled forms bit for bit, which those optimisations' absence can change).
``JAXDRIVE_TEST_FAST_COMPILE=0`` keeps XLA's defaults everywhere.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest

_OWNED_CACHE: list[str] = []
_FAST_COMPILE = "--xla_llvm_disable_expensive_passes=true"
_FASTER_IN_CHILDREN = "--xla_backend_optimization_level=0"


def pytest_configure(config) -> None:
    """Set the compile flags and the cache's environment before any test imports jax
    (workers and child processes inherit them)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if os.environ.get("JAXDRIVE_TEST_FAST_COMPILE") != "0":
        flags = os.environ.get("XLA_FLAGS", "")
        if _FAST_COMPILE not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} {_FAST_COMPILE}".strip()
    if os.environ.get("JAXDRIVE_TEST_XLA_CACHE") == "0":  # no cache, also in the scripts
        os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"
        return
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        path = tempfile.mkdtemp(prefix="jaxdrive-xla-cache-")
        _OWNED_CACHE.append(path)
        os.environ["JAX_COMPILATION_CACHE_DIR"] = path
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.1")
    if "jax" in sys.modules:  # imported by a plugin before this hook
        import jax

        jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
        jax.config.update(
            "jax_persistent_cache_min_compile_time_secs",
            float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]),
        )


def pytest_unconfigure(config) -> None:
    """Remove the cache folder this run made."""
    for path in _OWNED_CACHE:
        shutil.rmtree(path, ignore_errors=True)
    _OWNED_CACHE.clear()


@pytest.fixture(scope="session", autouse=True)
def _faster_compile_in_child_processes():
    """`_FASTER_IN_CHILDREN` in ``XLA_FLAGS`` for the processes tests start; this
    process's backend starts first, with the flags it had."""
    if os.environ.get("JAXDRIVE_TEST_FAST_COMPILE") == "0":
        yield
        return
    import jax

    jax.devices()  # this process's backend reads XLA_FLAGS now, not later
    old = os.environ.get("XLA_FLAGS")
    os.environ["XLA_FLAGS"] = f"{old or ''} {_FASTER_IN_CHILDREN}".strip()
    yield
    if old is None:
        os.environ.pop("XLA_FLAGS", None)
    else:
        os.environ["XLA_FLAGS"] = old
