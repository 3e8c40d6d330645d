"""Helpers of the run-folder fault-injection tests (tests/test_run_folder*.py): a tiny
CartPole PPO run through ``python -m experiments.train`` in subprocesses, and exact
comparisons of a run folder's final runner state and ``metrics.jsonl`` with a reference.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

import jax
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ITERATIONS = 10
#: 10 iterations of 4 envs x 16 steps, one iteration per chunk, a checkpoint every 2.
ARGS = (
    "--config=experiments/configs/cartpole.py:tiny",
    f"--config.total_env_steps={64 * ITERATIONS}",
    "--config.run.iterations_per_chunk=1",
    "--config.run.checkpoint_every_chunks=2",
    "--config.run.keep_checkpoints=10",
    "--noprogress",
    "--noanimation",
)


def reference(tmp_path_factory) -> str:
    """The uninterrupted reference run, trained once per pytest process (per xdist
    worker) and shared by the run-folder test modules; callers copy it, never write it."""
    wd = str(tmp_path_factory.getbasetemp() / "run_folder_reference" / "run")
    if not os.path.isdir(os.path.join(wd, "checkpoints", str(ITERATIONS))):
        shutil.rmtree(os.path.dirname(wd), ignore_errors=True)
        out = train(wd)
        assert out.returncode == 0, out.stderr[-3000:]
    return wd


def env() -> dict[str, str]:
    """The test run's environment (its compile flags included) on the CPU."""
    e = dict(os.environ)
    e["JAX_PLATFORMS"] = "cpu"
    return e


def train_cmd(wd: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "experiments.train", *ARGS, f"--workdir={wd}", *extra]


def run(cmd: list[str], preexec=None, extra_env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, cwd=ROOT, env={**env(), **(extra_env or {})}, capture_output=True, text=True,
        timeout=timeout, preexec_fn=preexec,
    )  # fmt: skip


def train(wd: str, *extra: str, **kw: Any) -> subprocess.CompletedProcess:
    return run(train_cmd(wd, *extra), **kw)


def start(wd: str, log: str, *extra: str) -> subprocess.Popen:
    """A training subprocess writing its stdout+stderr to ``log``."""
    out = open(log, "w")
    return subprocess.Popen(
        train_cmd(wd, *extra), cwd=ROOT, env=env(), stdout=out, stderr=subprocess.STDOUT
    )


def wait_until(proc: subprocess.Popen, cond, timeout: float = 240.0) -> bool:
    """Polls ``cond()`` every ms until it holds (``True``) or ``proc`` exits (``False``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.001)
    raise TimeoutError("the training subprocess neither met the condition nor exited")


def kill9(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def lines(wd: str) -> int:
    try:
        with open(os.path.join(wd, "metrics.jsonl"), "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return 0


def ckpt_entries(wd: str) -> list[str]:
    try:
        return os.listdir(os.path.join(wd, "checkpoints"))
    except OSError:
        return []


def records(wd: str) -> list[dict[str, Any]]:
    """metrics.jsonl without the wall-clock fields, parsed strictly (every line whole)."""
    out = []
    with open(os.path.join(wd, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            out.append({k: rec[k] for k in ("iteration", "env_steps", "metrics")})
    return out


_TARGET: dict[str, Any] = {}


def final_state(wd: str, step: int = ITERATIONS) -> Any:
    """The runner state of checkpoint ``step`` of ``wd``, restored (and verified) into
    the structure of the run's trainer."""
    from experiments import common
    from jaxdrive.checkpoint import Checkpointer

    if "target" not in _TARGET:
        _, _, trainer = common.build(common.load_config(wd))
        _TARGET["target"] = jax.eval_shape(trainer.init, jax.random.PRNGKey(0))
    with Checkpointer(os.path.join(wd, "checkpoints")) as ckpt:
        state, _ = ckpt.restore(_TARGET["target"], step)
    return state


def assert_same_run(wd: str, ref: str) -> None:
    """The whole final runner state and every metrics record equal the reference's,
    bit for bit."""
    a, b = jax.tree.leaves(final_state(wd)), jax.tree.leaves(final_state(ref))
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()
    assert records(wd) == records(ref)


def snapshot(wd: str) -> dict[str, bytes]:
    """Every file of ``wd`` but the lock file: ``{relative path: bytes}``."""
    out = {}
    for root, _, files in os.walk(wd):
        for f in files:
            p = os.path.join(root, f)
            if f != "run.lock":
                with open(p, "rb") as fh:
                    out[os.path.relpath(p, wd)] = fh.read()
    return out


def copy_run(ref: str, dest: str) -> str:
    shutil.copytree(ref, dest, ignore=shutil.ignore_patterns("run.lock"))
    return dest


def array_file(step_dir: str) -> str:
    """The largest data file of a step's ``state`` item that restoring reads: orbax's
    OCDBT layout keeps the merged tree, with small arrays' bytes inline, in
    ``state/d/`` (the per-process ``ocdbt.process_*/`` copies are not read back)."""
    folder = os.path.join(step_dir, "state", "d")
    files = [os.path.join(folder, f) for f in os.listdir(folder)]
    return max(files, key=os.path.getsize)


def last_error_line(stderr: str) -> str:
    """The command's last stderr line (its ``error: ...`` report)."""
    return [ln for ln in stderr.splitlines() if ln.strip()][-1]


_ONE_PROCESS = """\
import contextlib, importlib, io, json, sys
from absl import flags
from experiments import common
module = importlib.import_module(sys.argv[1])
getattr(module, "_define_flags", lambda: None)()
{prelude}
out = []
for args in json.loads(sys.argv[2]):
    sys.modules.pop("config_config", None)  # ml_collections' name for a loaded config file
    flags.FLAGS.unparse_flags()
    for name in [n for n in flags.FLAGS if n.startswith("config.")]:
        delattr(flags.FLAGS, name)  # the previous command's --config.<key> overrides
    sys.argv = ["script", *args]  # ml_collections reads the overrides from sys.argv
    err, std = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
        try:
            module.main(common.parse_flags(sys.argv))
            code = 0
        except SystemExit as e:
            code = e.code
    out.append([code, err.getvalue(), std.getvalue()])
print(json.dumps(out))
"""


def commands_in_one_process(
    module: str, commands: list[list[str]], prelude: str = ""
) -> list[tuple[Any, str, str]]:
    """``(exit code, stderr, stdout)`` of each command line of the absl script ``module``
    (``python -m module *args``; 0 when ``main`` returns), all run one after another in
    one subprocess as the script's flag parsing and ``main``: for commands refused
    before any work, whose start-up would otherwise dominate. ``prelude``: Python run
    once first (e.g. replacing the work by a failure)."""
    code = _ONE_PROCESS.format(prelude=prelude)
    proc = run([sys.executable, "-c", code, module, json.dumps(commands)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [tuple(r) for r in json.loads(proc.stdout)]


def assert_refused_in_one_process(module: str, wd: str, cases: list[tuple[list[str], str]]) -> None:
    """Each ``(args, match)`` of ``cases`` run as ``python -m module --workdir=wd *args``
    (`commands_in_one_process`): exit status 2, one ``error:`` line containing ``match``,
    and no run folder ``wd`` made."""
    commands = [[f"--workdir={wd}", *args] for args, _ in cases]
    for (args, match), (code, err, _) in zip(
        cases, commands_in_one_process(module, commands), strict=True
    ):
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, (args, err)
        assert lines[0].startswith("error: ") and match in lines[0], (args, err)
    assert not os.path.exists(wd)
