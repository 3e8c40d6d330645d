"""Shared pytest configuration.

One run of the suite compiles many identical XLA programs: tests that build the same
env or trainer afresh, the xdist workers, and the absl scripts the tests start as
subprocesses. The controller points all of them at one persistent compilation cache
in a temporary folder (removed when the run ends), so each program compiles once per
run. A ``JAX_COMPILATION_CACHE_DIR`` already set is used as it is and kept;
``JAXDRIVE_TEST_XLA_CACHE=0`` turns the shared cache off.

The tests run tiny programs, whose time is XLA's compile time, so they compile without
the CPU backend's expensive LLVM passes (``XLA_FLAGS``, set before jax starts) and, test
by test, without the backend's optimisations (``jax_disable_most_optimizations``, read
at each compile). Tests marked ``xla_optimized`` compile with the backend's
optimisations: those that compare two separately compiled programs bit for bit (which
the optimisations' absence can change) or whose seeded learning outcome was set under
them. The scripts and notebooks the tests start skip the optimisations too (set for
child processes once the test process's own backend has started).
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
_OPTIMIZED = "xla_optimized"
#: Whether this process's compiles currently skip the backend's optimisations.
_UNOPTIMIZED: list[bool] = [False]


def pytest_configure(config) -> None:
    """Set the compile flags and the cache's environment before any test imports jax
    (workers and child processes inherit them)."""
    config.addinivalue_line(
        "markers",
        f"{_OPTIMIZED}: compile with XLA's backend optimisations (bitwise comparisons of "
        "separately compiled programs, learning outcomes set under them)",
    )
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


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    """Before the test's fixtures (module-scoped ones compile in the first test's
    setup, so a module shares one setting: mark it whole): compiles skip the backend's
    optimisations unless the test is marked `_OPTIMIZED`. Entering a marked test after
    unoptimised compiles empties jax's in-memory caches, so that no program compiled
    without the optimisations is reused there (the persistent cache keys the setting)."""
    if os.environ.get("JAXDRIVE_TEST_FAST_COMPILE") == "0":
        return
    import jax

    unoptimized = item.get_closest_marker(_OPTIMIZED) is None
    if unoptimized == _UNOPTIMIZED[0]:
        return
    if not unoptimized:
        jax.clear_caches()
    jax.config.update("jax_disable_most_optimizations", unoptimized)
    _UNOPTIMIZED[0] = unoptimized
