"""`jaxdrive.program_store` and `jaxdrive.loop.train_loop`'s ``program_store``: entries
round-trip whole or not at all, keys cover the material, the source and the
environment, and a second trainer of the same config loads its programs (no tracing)
and computes the same numbers; another config builds its own."""

from __future__ import annotations

import logging
import os
import time

import numpy as np

from experiments import common
from experiments.configs import cartpole
from jaxdrive import program_store as ps
from jaxdrive.loop import train_loop
from jaxdrive.loop_programs import programs_for


def test_entries_round_trip_and_bad_ones_are_misses(tmp_path):
    store = ps.ProgramStore(tmp_path / "programs")
    assert store.load("k") is None
    assert store.save("k", b"\x00payload", {"metrics": [["a"]]})
    payload, meta = store.load("k")
    assert payload == b"\x00payload" and meta["metrics"] == [["a"]]
    path = tmp_path / "programs" / "k.program"
    path.write_bytes(path.read_bytes()[:-1])  # truncated: a miss, not an error
    assert store.load("k") is None
    path.write_bytes(b"junk")
    assert store.load("k") is None
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    assert not ps.ProgramStore(blocked / "programs").save("k", b"x", {})
    assert [n for n in os.listdir(tmp_path / "programs") if n.startswith(".tmp")] == []


def test_the_folder_keeps_its_size_bound_evicting_the_least_recently_used(tmp_path):
    store = ps.ProgramStore(tmp_path, max_bytes=3000)
    for i, k in enumerate("abc"):
        assert store.save(k, b"x" * 900, {})
        os.utime(tmp_path / f"{k}.program", (100 + i, 100 + i))  # a, b, c: oldest first
    assert store.load("a") is not None  # a load is a use: "a" is now the newest
    assert store.save("d", b"x" * 900, {})  # over 3000 bytes: the least recent goes
    assert sorted(os.listdir(tmp_path)) == ["a.program", "c.program", "d.program"]
    assert ps.ProgramStore(tmp_path, max_bytes=10).save("e", b"x" * 900, {})
    assert os.listdir(tmp_path) == ["e.program"]  # the newest stays even when too big


def test_key_covers_material_source_and_environment(tmp_path, monkeypatch):
    a = ps.ProgramStore(tmp_path)
    assert a.key({"config": "x"}) == a.key({"config": "x"}) != a.key({"config": "y"})
    assert "jax" in {name for name, *_ in ps.environment_fingerprint()["distributions"]}
    assert any(path.endswith("program_store.py") for _, path in ps._own_files())
    monkeypatch.setattr(ps, "source_digest", lambda: "edited")
    assert ps.ProgramStore(tmp_path).key({"config": "x"}) != a.key({"config": "x"})


def test_key_does_not_depend_on_how_python_was_started(tmp_path, monkeypatch, request):
    """Metadata beside source on ``sys.path`` (a checkout's ``*.egg-info``, seen only when
    the checkout is the working folder) and a ``__main__`` that is a module of a package
    already counted leave the key as it is; a folder of installed packages (with
    ``*.dist-info``, e.g. ``pip install --target``) is not hashed as source."""
    import sys
    import types

    def key_parts():  # the distributions are cached per process: read them afresh
        ps._installed_distributions.cache_clear()
        return ps._installed_distributions(), ps.source_digest()

    request.addfinalizer(ps._installed_distributions.cache_clear)
    before = key_parts()
    checkout = tmp_path / "checkout"
    (checkout / "somepkg.egg-info").mkdir(parents=True)
    (checkout / "somepkg.egg-info" / "PKG-INFO").write_text("Name: somepkg\nVersion: 1.0\n")
    monkeypatch.syspath_prepend(str(checkout))
    main = types.ModuleType("__main__")
    main.__file__ = ps.__file__  # as `python -m jaxdrive.program_store` would have it
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert key_parts() == before
    target = tmp_path / "target"
    (target / "tgtpkg").mkdir(parents=True)
    (target / "tgtpkg" / "__init__.py").write_text("")
    (target / "tgtpkg-1.0.dist-info").mkdir()
    monkeypatch.syspath_prepend(str(target))
    monkeypatch.setitem(sys.modules, "tgtpkg", types.ModuleType("tgtpkg"))
    sys.modules["tgtpkg"].__file__ = str(target / "tgtpkg" / "__init__.py")
    sys.modules["tgtpkg"].__path__ = [str(target / "tgtpkg")]
    assert "tgtpkg" not in {name for name, _ in ps._own_files()}


def _trainer(**changes):
    c = cartpole.get_config("tiny")
    for k, v in changes.items():
        c.policies.agent[k] = v
    return common.build(c)[2]  # as the experiment scripts build it


def _wait_for(folder, n: int) -> None:
    """The executables are written by threads of their own."""
    for _ in range(600):
        if (
            os.path.isdir(folder)
            and len([f for f in os.listdir(folder) if f.endswith(".program")]) >= n
        ):
            return
        time.sleep(0.1)
    raise AssertionError(f"{n} programs were not stored in {folder}")


def test_same_config_loads_its_programs_and_computes_the_same(tmp_path, caplog):
    store, folder = ps.ProgramStore(tmp_path / "p"), tmp_path / "p"
    size = (20, 20)  # programs no other test compiles: not in the tests' shared JAX cache
    first = _trainer(hidden_sizes=size)
    _, h1 = train_loop(first, 3, None, iterations_per_chunk=2, progress=False, program_store=store)
    assert "program store" not in programs_for(first, 2).init_info.from_cache
    _wait_for(folder, 2)
    again = _trainer(hidden_sizes=size)
    _, h2 = train_loop(again, 3, None, iterations_per_chunk=2, progress=False, program_store=store)
    assert programs_for(again, 2).init_info.from_cache == "yes, from the program store"
    assert h2.compile_seconds < h1.compile_seconds
    for k, v in h1.metrics.items():
        np.testing.assert_array_equal(v, h2.metrics[k], err_msg=k)
    other = _trainer(hidden_sizes=(20, 12))  # another config: built, not loaded
    train_loop(other, 3, None, iterations_per_chunk=2, progress=False, program_store=store)
    assert "program store" not in programs_for(other, 2).init_info.from_cache
    _wait_for(folder, 4)
    # another learning rate (traced): its chunk is the first one's, from JAX's cache where
    # that is on, and on the CPU is not stored (serialized again, an XLA:CPU executable
    # loaded from the cache lacks compiled functions); what it compiled is stored
    caplog.set_level(logging.INFO, logger="jaxdrive.program_store")
    lr = _trainer(hidden_sizes=size, lr=1e-2)
    train_loop(lr, 3, None, iterations_per_chunk=2, progress=False, program_store=store)
    skipped = caplog.text.count("not stored (loaded from JAX's compilation cache)")
    assert skipped == (0 if os.environ.get("JAX_ENABLE_COMPILATION_CACHE") == "false" else 1)
    _wait_for(folder, 6 - skipped)
    time.sleep(0.5)
    assert len([f for f in os.listdir(folder) if f.endswith(".program")]) == 6 - skipped
