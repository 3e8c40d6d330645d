"""Fault injection on run folders (issue "run folders that never lie"), through
``python -m experiments.train`` in subprocesses on a tiny CartPole PPO run (10
iterations, a checkpoint every 2). One uninterrupted reference run serves the module;
every case states its expectation in its docstring. Read-only and disk-full cases are
in tests/test_run_folder_io.py, bad inputs in tests/test_run_folder_inputs.py.
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from jaxdrive.runlock import read_holder
from tests import run_folder_util as rf

pytest.importorskip("algorithms.ppo.train")


@pytest.fixture(scope="module")
def ref(tmp_path_factory) -> str:
    """The uninterrupted reference run (shared, read only)."""
    wd = rf.reference(tmp_path_factory)
    assert sorted(map(int, rf.ckpt_entries(wd))) == [2, 4, 6, 8, 10]
    assert [r["iteration"] for r in rf.records(wd)] == list(range(1, 11))
    return wd


def test_kill9_at_random_points_then_resume_is_exact(ref, tmp_path):
    """kill -9 before the first checkpoint, in the middle of a save, right after a
    checkpoint appears and at a random moment; each restart resumes (taking over the
    dead process's lock, with a message) and the finished run equals the uninterrupted
    one: whole runner state and every metrics record, bitwise, each iteration once."""
    wd = str(tmp_path / "run")
    rng = random.Random(33)
    log = str(tmp_path / "log")

    def ckpts():
        return {e for e in rf.ckpt_entries(wd) if e.isdigit()}

    points = {
        "before the first checkpoint": lambda: rf.lines(wd) >= 1 and not ckpts(),
        "mid-save": lambda: any("tmp" in e for e in rf.ckpt_entries(wd)),
        "right after a checkpoint": lambda: len(ckpts()) > seen,
        "random": lambda: rf.lines(wd) > lines0,
    }
    killed, takeovers, seen, lines0 = [], 0, 0, 0
    for name, cond in points.items():
        seen, lines0 = len(ckpts()), rf.lines(wd)
        proc = rf.start(wd, log)
        if name == "random":
            rf.wait_until(proc, cond)
            time.sleep(rng.uniform(0.0, 0.3))
            hit = proc.poll() is None
        else:
            hit = rf.wait_until(proc, cond)
        pid = proc.pid
        rf.kill9(proc)
        text = open(log).read()
        takeovers += "taking over the run folder from pid" in text
        if hit:
            killed.append(name)
            assert read_holder(wd).get("pid") == pid  # the dead holder's record stays
        if name == "before the first checkpoint":
            assert hit and not ckpts(), "the first kill must land before any checkpoint"
    out = rf.train(wd)
    assert out.returncode == 0, out.stderr[-3000:]
    takeovers += "taking over the run folder from pid" in out.stderr
    assert len(killed) >= 3, killed
    assert takeovers >= 3
    rf.assert_same_run(wd, ref)
    assert any(n.startswith("metrics.jsonl.discarded-") for n in os.listdir(wd))


def test_second_process_on_a_folder_exits_2_naming_the_holder(ref, tmp_path):
    """While one run holds the folder (stopped with SIGSTOP so that it is surely alive),
    a second one exits with status 2 naming the holder's pid and host and changes no
    file; the first then finishes exactly like the reference."""
    wd = str(tmp_path / "run")
    first = rf.start(wd, str(tmp_path / "log"))
    assert rf.wait_until(first, lambda: read_holder(wd).get("pid") == first.pid)
    os.kill(first.pid, signal.SIGSTOP)
    try:
        before = rf.snapshot(wd)
        second = rf.train(wd)
        assert second.returncode == 2
        line = rf.last_error_line(second.stderr)
        assert line.startswith(f"error: {wd} is in use by pid {first.pid} on host ")
        assert rf.snapshot(wd) == before
    finally:
        os.kill(first.pid, signal.SIGCONT)
    assert first.wait(timeout=300) == 0
    rf.assert_same_run(wd, ref)


def test_refused_config_change_leaves_the_folder_untouched(ref, tmp_path):
    """An invalid value with --allow_config_change, and a changed config without it,
    exit with status 2 and leave every file as it was (config.json included); an
    invalid config never creates its run folder (the three commands in one process)."""
    wd = rf.copy_run(ref, str(tmp_path / "run"))
    before = rf.snapshot(wd)
    fresh = str(tmp_path / "never")
    commands = [
        [*rf.ARGS, f"--workdir={wd}", "--allow_config_change", "--config.policies.agent.lr=-1.0"],
        [*rf.ARGS, f"--workdir={wd}", "--config.algo.gamma=0.5"],
        [*rf.ARGS, f"--workdir={fresh}", "--config.policies.agent.lr=-1.0"],
    ]
    (bad, bad_err, _), (changed, changed_err, _), (new, _, _) = rf.commands_in_one_process(
        "experiments.train", commands
    )
    assert bad == 2 and "lr must be > 0" in rf.last_error_line(bad_err)
    assert changed == 2 and "algo.gamma: 0.99 -> 0.5" in changed_err
    assert "use a fresh --workdir" in changed_err
    assert rf.snapshot(wd) == before
    assert new == 2 and not os.path.exists(fresh)


def _damage(step_dir: str, how: str) -> None:
    """Truncates, or flips 8 bytes in the middle of (same size), the largest array file
    of a checkpoint."""
    path = rf.array_file(step_dir)
    data = bytearray(open(path, "rb").read())
    mid = len(data) // 2
    if how == "truncate":
        data = data[:mid]
    else:
        data[mid : mid + 8] = bytes(b ^ 0xFF for b in data[mid : mid + 8])
    open(path, "wb").write(bytes(data))


def test_damaged_newest_checkpoints_fall_back_then_continue_exactly(ref, tmp_path):
    """A same-size bit-flipped array file in the newest checkpoint (10) and a truncated
    one in the next (8): evaluate uses checkpoint 6; train names checkpoints 10 and 8
    and why, moves them to checkpoints.discarded/, resumes from 6 and ends bitwise equal
    to the reference."""
    from experiments import evaluate

    wd = rf.copy_run(ref, str(tmp_path / "run"))
    _damage(os.path.join(wd, "checkpoints", "10"), "flip")
    _damage(os.path.join(wd, "checkpoints", "8"), "truncate")
    res = evaluate.evaluate(wd, episodes=2, max_steps=20)
    assert res["step"] == 6
    out = rf.train(wd)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "resuming from checkpoint 6" in out.stderr
    assert "skipped checkpoint 10: " in out.stderr and "; checkpoint 8: " in out.stderr
    assert "exception was never retrieved" not in out.stderr  # one line, not a wall
    assert sorted(os.listdir(os.path.join(wd, "checkpoints.discarded"))) == ["10", "8"]
    rf.assert_same_run(wd, ref)


def test_same_command_twice_at_once(ref, tmp_path):
    """The same command started twice at the same moment on a new folder: one trains
    (exactly like the reference), the other exits with status 2 saying the folder is in
    use; neither crashes."""
    wd = str(tmp_path / "run")
    logs = [str(tmp_path / f"log{i}") for i in range(2)]
    procs = [rf.start(wd, log) for log in logs]
    codes = sorted(p.wait(timeout=300) for p in procs)
    texts = [open(log).read() for log in logs]
    assert codes == [0, 2], texts
    refused = next(t for t in texts if "is in use by" in t)
    assert rf.last_error_line(refused).startswith(f"error: {wd} is in use by ")
    assert "Traceback" not in refused
    rf.assert_same_run(wd, ref)


def test_sigterm_stops_at_a_checkpoint_then_resume_is_exact(ref, tmp_path):
    """SIGTERM (a preemption; Ctrl-C's SIGINT takes the same path, see
    tests/test_signals.py) during training: the run stops after the running chunk with
    a checkpoint of it (no iteration lost, boundary or not), exits with 143 saying how
    to resume, and the same command then ends exactly like the reference."""
    sig = signal.SIGTERM
    wd, log = str(tmp_path / "run"), str(tmp_path / "log")
    proc = rf.start(wd, log)
    assert rf.wait_until(proc, lambda: rf.lines(wd) >= 3), open(log).read()[-3000:]
    proc.send_signal(sig)
    assert proc.wait(timeout=120) == 128 + sig, open(log).read()[-3000:]
    text = open(log).read()
    stopped = rf.records(wd)[-1]["iteration"]
    assert 3 <= stopped < rf.ITERATIONS
    assert max(map(int, rf.ckpt_entries(wd))) == stopped  # the stop's own checkpoint
    name = signal.Signals(sig).name
    assert f"{name}: stopped after iteration {stopped}, checkpointed in {wd}" in text
    assert "Traceback" not in text
    assert rf.train(wd).returncode == 0
    rf.assert_same_run(wd, ref)
