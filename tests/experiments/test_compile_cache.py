"""The experiment scripts' persistent compilation cache (`experiments.common.
setup_compilation_cache`), through ``python -m experiments.train`` in subprocesses on a
tiny CartPole PPO run. Every subprocess gets its own cache folder, ``HOME`` and
``XDG_CACHE_HOME`` under ``tmp_path``: nothing is written to the user's home."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("algorithms.ppo.train")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: 2 iterations of 4 envs x 16 steps in one chunk, evaluation episodes after it, no
#: animation, no progress bar.
ARGS = (
    "--config=experiments/configs/cartpole.py:tiny",
    "--config.total_env_steps=128",
    "--config.run.eval_every_chunks=1",
    "--noprogress",
    "--noanimation",
)


def _train(tmp_path, workdir: str, *extra: str) -> subprocess.CompletedProcess:
    """``experiments.train`` with the user's cache locations inside ``tmp_path``, no
    ``JAX_COMPILATION_CACHE_DIR`` (the scripts' default applies) and every program
    stored (minimum compile time and entry size 0)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    env.pop("JAXDRIVE_CACHE_DIR", None)
    env.update(
        JAX_PLATFORMS="cpu",
        HOME=str(tmp_path / "home"),
        XDG_CACHE_HOME=str(tmp_path / "xdg"),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0",
    )
    cmd = [sys.executable, "-m", "experiments.train", *ARGS, f"--workdir={workdir}", *extra]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    with open(os.path.join(workdir, "summary.json")) as f:
        assert json.load(f)["finished"]
    return out


def _entries(folder) -> list[str]:
    if not os.path.isdir(folder):
        return []
    return sorted(n for n in os.listdir(folder) if not n.startswith("."))


def _compiled_line(out: subprocess.CompletedProcess) -> str:
    """The log line about the chunk program's compilation (after "compiling the init
    and chunk programs…"), which comes before the first iteration's line."""
    lines = out.stderr.splitlines()
    first = [i for i, ln in enumerate(lines) if "compiling the init and chunk programs" in ln]
    assert first, out.stderr[-3000:]
    done = [i for i, ln in enumerate(lines) if "chunk program compiled in" in ln]
    assert done and "from cache:" in lines[done[0]], out.stderr[-3000:]
    it1 = [i for i, ln in enumerate(lines) if "iteration 1/" in ln and "first iteration" in ln]
    assert it1 and first[0] < done[0] < it1[0], out.stderr[-3000:]
    return lines[done[0]]


def test_second_run_loads_the_first_chunk_from_the_default_cache(tmp_path):
    """The default folder is ``$XDG_CACHE_HOME/jaxdrive/xla``; the first run fills it
    (its init, chunk and evaluation executables in ``programs/``), and the same command
    into a new run folder loads them from there, stores nothing new and evaluates the
    same returns. Programs that come from JAX's cache are not put in the store."""
    cache = tmp_path / "xdg" / "jaxdrive" / "xla"
    first = _train(tmp_path, str(tmp_path / "run1"))
    assert _compiled_line(first).rstrip().endswith("from cache: no)")
    stored = _entries(cache)
    assert stored, "the first run stored no compiled program"
    assert len(_entries(cache / "programs")) == 3  # the init, chunk and evaluation
    assert not os.path.exists(tmp_path / "home" / ".cache" / "jaxdrive")
    second = _train(tmp_path, str(tmp_path / "run2"))
    assert _compiled_line(second).rstrip().endswith("from cache: yes, from the program store)")
    assert "evaluation program loaded from the program store" in second.stderr
    assert _entries(cache) == stored  # every program came from the cache

    def evals(run: str) -> list:
        with open(tmp_path / run / "eval.jsonl") as f:
            return [json.loads(line)["returns"] for line in f]

    assert evals("run1") and evals("run2") == evals("run1")
    third = _train(tmp_path, str(tmp_path / "run3"), "--program_store=false")
    assert _compiled_line(third).rstrip().endswith("from cache: yes)")  # traced, XLA cached
    # programs loaded from JAX's cache are not stored: serialized again, XLA:CPU's lost
    # compiled functions and failed at their first call in the next run
    for name in _entries(cache / "programs"):
        os.remove(cache / "programs" / name)
    fourth = _train(tmp_path, str(tmp_path / "run4"))
    assert _compiled_line(fourth).rstrip().endswith("from cache: yes)")
    assert fourth.stderr.count("not stored (loaded from JAX's compilation cache)") == 3
    assert _entries(cache / "programs") == []


def test_cache_off_writes_nothing(tmp_path):
    """``--compilation_cache=false`` neither creates nor writes the folder, even with
    ``--compilation_cache_dir`` naming one."""
    folder = tmp_path / "cache"
    out = _train(
        tmp_path, str(tmp_path / "run"), "--compilation_cache=false",
        f"--compilation_cache_dir={folder}",
    )  # fmt: skip
    assert "the persistent cache is off" in _compiled_line(out)
    assert not folder.exists()
    assert not (tmp_path / "xdg" / "jaxdrive").exists()
    assert not (tmp_path / "home" / ".cache" / "jaxdrive").exists()


def test_unwritable_cache_folder_warns_and_trains(tmp_path):
    """A cache folder that cannot be created (its parent is a file: this holds for root
    too) is one warning line naming it; the run trains without the cache."""
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder\n")
    folder = blocker / "xla"
    out = _train(tmp_path, str(tmp_path / "run"), f"--compilation_cache_dir={folder}")
    warnings = [ln for ln in out.stderr.splitlines() if "compilation cache" in ln.lower()]
    assert len(warnings) == 1, out.stderr[-3000:]
    assert warnings[0].startswith(f"warning: compilation cache {folder}: ")
    assert "the persistent cache is off" in _compiled_line(out)
