"""Fault injection on run folders: a read-only checkpoints folder and a full disk
(``RLIMIT_FSIZE``) in the middle of a run, then a resume after the fault is fixed, ending
bitwise equal to an uninterrupted run; and a read-only run folder for evaluate. Each
failing command must exit with status 2 and one ``error: <path>: <cause>`` line.

As root, file permissions do not bind, so the read-only cases run the command as the
user ``nobody`` (skipped where that is not possible).
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import stat

import pytest

from tests import run_folder_util as rf

pytest.importorskip("algorithms.ppo.train")
# the preexec_fn runs between fork and exec, where it touches no JAX state
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")


@pytest.fixture(scope="module")
def ref(tmp_path_factory) -> str:
    """The uninterrupted reference run (shared, read only)."""
    wd = rf.reference(tmp_path_factory)
    return wd


def _permissions_bind():
    """A ``preexec_fn`` under which file permissions bind the child: as root, it drops
    the capabilities that override them (``CAP_DAC_OVERRIDE``, ``CAP_DAC_READ_SEARCH``)
    from the bounding set before ``exec``; otherwise nothing is needed."""
    if os.geteuid() != 0:
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop, caps = 24, (1, 2)

    def drop():
        for cap in caps:
            if libc.prctl(pr_capbset_drop, cap, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")

    probe = rf.run([rf.sys.executable, "-c", "pass"], preexec=drop)
    if probe.returncode != 0:
        pytest.skip("root without CAP_SETPCAP: file permissions cannot bind")
    return drop


def test_read_only_checkpoints_mid_run_then_resume(ref, tmp_path):
    """A run resumed from checkpoint 4 whose checkpoints/ folder is read-only trains
    iterations 5-6, fails to save 6: exit 2, one line naming checkpoints/ and the cause.
    Made writable again, the run resumes (records 5-6 moved aside) and ends exactly like
    the uninterrupted one."""
    drop = _permissions_bind()
    wd = rf.copy_run(ref, str(tmp_path / "run"))
    for step in ("6", "8", "10"):  # as if it had stopped after checkpoint 4
        shutil.rmtree(os.path.join(wd, "checkpoints", step))
    ck = os.path.join(wd, "checkpoints")
    os.chmod(ck, 0o555)
    try:
        out = rf.train(wd, preexec=drop)
    finally:
        os.chmod(ck, 0o755)
    assert out.returncode == 2, out.stderr[-3000:]
    line = rf.last_error_line(out.stderr)
    assert line.startswith(f"error: {ck}: could not write checkpoint 6: "), line
    assert "Traceback" not in out.stderr and "Event loop is closed" not in out.stderr
    assert rf.lines(wd) == 6
    out = rf.train(wd)
    assert out.returncode == 0, out.stderr[-3000:]
    rf.assert_same_run(wd, ref)


def test_read_only_run_folder_evaluate_prints_then_fails(ref, tmp_path):
    """evaluate on a read-only run folder prints its result, then exits 2 with one line
    naming eval.json's temporary file and the cause; train on a --workdir inside it
    names that path and creates nothing."""
    drop = _permissions_bind()
    wd = rf.copy_run(ref, str(tmp_path / "run"))
    os.chmod(wd, 0o555)
    try:
        cmd = [rf.sys.executable, "-m", "experiments.evaluate", f"--workdir={wd}",
               "--episodes=2", "--max_steps=20"]  # fmt: skip
        ev = rf.run(cmd, preexec=drop)
        sub = os.path.join(wd, "sub")
        tr = rf.train(sub, preexec=drop)
    finally:
        os.chmod(wd, 0o755)
    assert ev.returncode == 2, ev.stderr[-3000:]
    assert "checkpoint 10 (640 env steps), 2 deterministic episodes" in ev.stdout
    line = rf.last_error_line(ev.stderr)
    assert line.startswith(f"error: {os.path.join(wd, 'eval.json.tmp')}: Permission"), line
    assert "Traceback" not in ev.stderr
    assert tr.returncode == 2 and not os.path.exists(sub)
    assert rf.last_error_line(tr.stderr).startswith(f"error: {sub}: Permission denied")


def test_disk_full_mid_run_then_resume(ref, tmp_path):
    """With a file size limit (RLIMIT_FSIZE, SIGXFSZ ignored so that writes fail with
    EFBIG as on a full disk) a fresh run trains a few iterations and then cannot write:
    exit 2, one line naming the file and "File too large". Without the limit the run
    resumes and ends exactly like the uninterrupted one."""
    wd = str(tmp_path / "run")
    limit = 3000  # bytes: metrics.jsonl or a checkpoint file passes it within the run

    def small_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    out = rf.train(wd, preexec=small_disk)
    assert out.returncode == 2, out.stderr[-3000:]
    line = rf.last_error_line(out.stderr)
    assert line.startswith(f"error: {wd}") and "File too large" in line, line
    assert "Traceback" not in out.stderr
    assert 0 < rf.lines(wd) < rf.ITERATIONS  # it failed mid-run
    out = rf.train(wd)
    assert out.returncode == 0, out.stderr[-3000:]
    rf.assert_same_run(wd, ref)
    assert not stat.S_ISDIR(os.stat(os.path.join(wd, "metrics.jsonl")).st_mode)
