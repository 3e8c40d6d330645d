"""Shared pytest configuration.

One run of the suite compiles many identical XLA programs: tests that build the same
env or trainer afresh, the xdist workers, and the absl scripts the tests start as
subprocesses. The controller points all of them at one persistent compilation cache
in a temporary folder (removed when the run ends), so each program compiles once per
run. A ``JAX_COMPILATION_CACHE_DIR`` already set is used as it is and kept;
``JAXDRIVE_TEST_XLA_CACHE=0`` turns the shared cache off.

The tests run tiny programs, whose time is XLA's compile time, so they compile without
the CPU backend's expensive LLVM passes (``XLA_FLAGS``, set before jax starts) and, test
by test, without the backend's optimisations and with XLA's older CPU fusion emitters,
which compile several times faster (`_UNOPTIMIZED_OPTIONS`, added to each compile's
options). Tests marked ``xla_optimized`` compile as XLA does by default: those that
compare two separately compiled programs bit for bit (the unoptimised forms can round
differently) or whose seeded learning outcome was set that way. The scripts and
notebooks the tests start compile unoptimised too (``XLA_FLAGS`` of child processes).
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
_OPTIMIZED = "xla_optimized"
#: XLA options of an unoptimised compile, those this jax knows (`_known_options`).
_UNOPTIMIZED_OPTIONS = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}
#: Whether this process's compiles currently take `_UNOPTIMIZED_OPTIONS`, and those known.
_UNOPTIMIZED: list[bool] = [False]
_KNOWN: dict[str, object] = {}


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


def _known_options() -> dict[str, object]:
    """The entries of `_UNOPTIMIZED_OPTIONS` that this jax's XLA accepts."""
    import jax

    known: dict[str, object] = {}
    for name, value in _UNOPTIMIZED_OPTIONS.items():
        try:
            jax.jit(lambda x: x + 1, compiler_options={**known, name: value})(1.0)
        except Exception:  # an option this XLA does not have
            continue
        known[name] = value
    return known


def _add_options_to_unoptimized_compiles() -> None:
    """Wraps jax's compile-options builder (its one call site reads it from the
    module) to add `_KNOWN` while `_UNOPTIMIZED` holds; options a program asks for
    itself win. The persistent cache keys these options with the program. A jax
    without that builder compiles every program as XLA does by default."""
    from jax._src import compiler

    original = getattr(compiler, "get_compile_options", None)
    if original is None:
        return

    def get_compile_options(*args, env_options_overrides=None, **kwargs):
        if _UNOPTIMIZED[0]:
            env_options_overrides = {**_KNOWN, **(env_options_overrides or {})}
        return original(*args, env_options_overrides=env_options_overrides, **kwargs)

    compiler.get_compile_options = get_compile_options


def _child_flag(name: str, value: object) -> str:
    return f"--{name}={str(value).lower()}"


@pytest.fixture(scope="session", autouse=True)
def _unoptimized_compiles():
    """`_KNOWN` for this process's compiles (test by test, `pytest_runtest_setup`) and
    in ``XLA_FLAGS`` for the processes tests start; this process's backend starts
    first, with the flags it had."""
    if os.environ.get("JAXDRIVE_TEST_FAST_COMPILE") == "0":
        yield
        return
    import jax

    jax.devices()  # this process's backend reads XLA_FLAGS now, not later
    _KNOWN.update(_known_options())
    _add_options_to_unoptimized_compiles()
    old = os.environ.get("XLA_FLAGS")
    flags = " ".join(_child_flag(k, v) for k, v in _KNOWN.items())
    os.environ["XLA_FLAGS"] = f"{old or ''} {flags}".strip()
    yield
    if old is None:
        os.environ.pop("XLA_FLAGS", None)
    else:
        os.environ["XLA_FLAGS"] = old


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    """Before the test's fixtures (module-scoped ones compile in the first test's
    setup, so a module shares one setting: mark it whole): compiles take `_KNOWN`
    unless the test is marked `_OPTIMIZED`. jax's in-memory caches keep the two apart
    through ``jax_optimization_level`` (part of their keys; the CPU backend compiles
    the same with "O0" as with its default), else they are emptied on entering a
    marked test, so that no unoptimised program is reused there."""
    if os.environ.get("JAXDRIVE_TEST_FAST_COMPILE") == "0":
        return
    unoptimized = item.get_closest_marker(_OPTIMIZED) is None
    if unoptimized == _UNOPTIMIZED[0]:
        return
    import jax

    try:
        jax.config.update("jax_optimization_level", "O0" if unoptimized else "UNKNOWN")
    except (AttributeError, ValueError):  # a jax without that option
        if not unoptimized:
            jax.clear_caches()
    _UNOPTIMIZED[0] = unoptimized
