"""Time to the first result: ``experiments.train`` started cold, then warm.

    python -m experiments.benchmarks.startup \\
        --config=experiments/configs/tag_continuous.py:advnorm --num_envs=1000

Runs the training command twice in subprocesses with one fresh compilation-cache
folder: first with the folder empty (cold), then again into a new run folder (warm:
every program comes from the cache). Each run trains ``--iterations`` iterations and
exits normally. From the time-stamped lines of each run it reports, in seconds after
the process started: the chunk program compiled (or loaded), the first progress line
(and its iteration), the last iteration's line, and the exit (``end of run`` is exit
minus last iteration: final checkpoint, plots, evaluation and animation). Prints a
table and, with ``--out``, appends one JSON line per run (with ``log``: the run's log
lines up to its first progress line, each with its time after the start).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Any

from absl import app, flags

__all__ = ["time_run"]

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "config", "experiments/configs/tag_continuous.py:advnorm", "config file[:presets]"
)
flags.DEFINE_integer("num_envs", 1000, "config.num_envs")
flags.DEFINE_integer("num_steps", None, "config.num_steps (default: the config's)")
flags.DEFINE_integer("iterations", 20, "iterations to train (total_env_steps is set from it)")
flags.DEFINE_bool("animation", True, "write the animation at the end (as the CLI does)")
flags.DEFINE_string("out", None, "append the records as JSON lines to this file")
flags.DEFINE_bool("program_store", True, "experiments.train's --program_store")


def _steps_per_iteration(config: str, num_envs: int, num_steps: int | None) -> int:
    """Env steps per iteration of ``config`` (``experiments/configs/<name>.py[:presets]``)."""
    import importlib

    path, _, presets = config.partition(":")
    module = importlib.import_module(os.path.splitext(path)[0].replace(os.sep, "."))
    return int(num_envs) * int(num_steps or module.get_config(presets).num_steps)


def time_run(args: list[str], cache_dir: str, workdir: str, iterations: int = 0) -> dict[str, Any]:
    """Runs ``python -m experiments.train *args`` with ``cache_dir`` and ``workdir``;
    returns the seconds after start of its milestones (see the module docstring) and,
    given the run's ``iterations``, the seconds per iteration after the first line."""
    cmd = [
        sys.executable, "-m", "experiments.train", *args, f"--workdir={workdir}",
        f"--compilation_cache_dir={cache_dir}", "--noprogress", "--alsologtostderr",
    ]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    marks: dict[str, Any] = {"log": []}
    lines = []
    for line in proc.stdout:
        t = time.perf_counter() - t0
        lines.append(line)
        m = re.match(r"[IWE]\d{4} [\d:.]+ +\d+ ([\w.]+:\d+)\] (.*)", line)
        if m and "first_progress_s" not in marks:  # the log lines up to the first result
            marks["log"].append([round(t, 2), f"{m[1]}: {m[2][:150]}"])
        if "compiled in" in line and "from cache:" in line and "chunk_compiled_s" not in marks:
            marks["chunk_compiled_s"] = round(t, 2)
            m = re.search(r"from cache: ([\w ,]+)\)", line)
            marks["from_cache"] = m.group(1) if m else None
            m = re.search(r"tracing and lowering ([\d.]+) s, XLA ([\d.]+) s", line)
            if m:
                marks["chunk_lower_s"], marks["chunk_xla_s"] = map(float, m.groups())
        elif re.search(r"iteration \d+/\d+ ", line) and "first_progress_s" not in marks:
            marks["first_progress_s"] = round(t, 2)
            marks["first_progress_iteration"] = int(re.search(r"iteration (\d+)/", line)[1])
        if re.search(r"iteration (\d+)/\1\b", line):
            marks["last_iteration_s"] = round(t, 2)
    rc = proc.wait()
    marks["exit_s"] = round(time.perf_counter() - t0, 2)
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {rc}:\n{''.join(lines[-30:])}")
    if "last_iteration_s" in marks:
        marks["end_of_run_s"] = round(marks["exit_s"] - marks["last_iteration_s"], 2)
        n = iterations - marks.get("first_progress_iteration", iterations)
        if n > 0:  # later iterations: the training speed under these XLA flags
            marks["seconds_per_iteration"] = round(
                (marks["last_iteration_s"] - marks["first_progress_s"]) / n, 4
            )
    return marks


def main(argv: list[str]) -> None:
    """Cold then warm (see the module docstring)."""
    del argv
    import jax

    per_it = _steps_per_iteration(FLAGS.config, FLAGS.num_envs, FLAGS.num_steps)
    args = [
        f"--config={FLAGS.config}", f"--config.num_envs={FLAGS.num_envs}",
        f"--config.total_env_steps={per_it * FLAGS.iterations}",
        "--animation" if FLAGS.animation else "--noanimation",
        f"--program_store={str(FLAGS.program_store).lower()}",
    ]  # fmt: skip
    if FLAGS.num_steps:
        args.append(f"--config.num_steps={FLAGS.num_steps}")
    records = []
    with tempfile.TemporaryDirectory(prefix="jaxdrive-startup-") as tmp:
        cache = os.path.join(tmp, "cache")
        for name in ("cold", "warm"):
            rec = time_run(args, cache, os.path.join(tmp, f"run-{name}"), FLAGS.iterations)
            rec.update(bench="startup", cache=name, config=FLAGS.config, num_envs=FLAGS.num_envs,
                       iterations=FLAGS.iterations, backend=jax.default_backend(),
                       program_store=FLAGS.program_store,
                       xla_flags=os.environ.get("XLA_FLAGS", ""))  # fmt: skip
            records.append(rec)
    print(f"{'cache':<6} {'chunk ready':>12} {'first line':>18} {'last iter':>10} "
          f"{'end of run':>11} {'exit':>8}  chunk: lower / XLA (from cache)")  # fmt: skip
    for r in records:
        print(
            f"{r['cache']:<6} {r.get('chunk_compiled_s', float('nan')):>11.1f}s "
            f"{r.get('first_progress_s', float('nan')):>10.1f}s "
            f"(it {r.get('first_progress_iteration')}) "
            f"{r.get('last_iteration_s', float('nan')):>9.1f}s "
            f"{r.get('end_of_run_s', float('nan')):>10.1f}s {r['exit_s']:>7.1f}s  "
            f"{r.get('chunk_lower_s', float('nan')):.1f} / {r.get('chunk_xla_s', float('nan')):.1f}"
            f" ({r.get('from_cache')})"
        )
    if FLAGS.out:
        with open(FLAGS.out, "a") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    app.run(main)
