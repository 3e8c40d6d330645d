"""Shared pytest configuration.

One run of the suite compiles many identical XLA programs: tests that build the same
env or trainer afresh, the xdist workers, and the absl scripts the tests start as
subprocesses. The controller points all of them at one persistent compilation cache
in a temporary folder (removed when the run ends), so each program compiles once per
run. A ``JAX_COMPILATION_CACHE_DIR`` already set is used as it is and kept;
``JAXDRIVE_TEST_XLA_CACHE=0`` turns the shared cache off.

The scripts and notebooks the tests start run tiny programs, whose time is XLA's
compile time: they compile without the CPU backend's expensive LLVM passes (``XLA_FLAGS``
set for child processes once the test process's own backend has started, so the
in-process tests, some of which compare two compiled forms bit for bit, keep XLA's
default passes; ``JAXDRIVE_TEST_FAST_COMPILE=0`` keeps the defaults everywhere).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest

_OWNED_CACHE: list[str] = []


def pytest_configure(config) -> None:
    """Set the cache's environment before any test imports jax (workers inherit it)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
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
def _fast_compile_in_child_processes():
    """``XLA_FLAGS`` with the fast-compile flags for the processes tests start (module
    docstring); this process's backend starts first, with the flags it had."""
    if os.environ.get("JAXDRIVE_TEST_FAST_COMPILE") == "0":
        yield
        return
    import jax

    jax.devices()  # this process's backend reads XLA_FLAGS now, not later
    old = os.environ.get("XLA_FLAGS")
    fast = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    os.environ["XLA_FLAGS"] = f"{old or ''} {fast}".strip()
    yield
    if old is None:
        os.environ.pop("XLA_FLAGS", None)
    else:
        os.environ["XLA_FLAGS"] = old
