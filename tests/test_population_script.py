"""``python -m experiments.population``: the run folder, members split over two forced
CPU devices, a resume on one device that continues the run, its evaluation, and errors."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.run_folder_util import assert_refused_in_one_process, snapshot

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = "--config=experiments/configs/population.py:cartpole,tiny"
ARGS = [
    "--config.run.iterations_per_chunk=1",
    "--config.run.checkpoint_every_chunks=2",  # checkpoints 2 (the resume's) and 4
    "--config.run.keep_checkpoints=10",
    "--config.population.pbt.interval_chunks=2",
]


def _script(args: list[str], devices: int = 1) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    flags = env.get("XLA_FLAGS", "")
    if devices > 1:
        flags += f" --xla_force_host_platform_device_count={devices}"
    env["XLA_FLAGS"] = flags.strip()
    return subprocess.run(
        [sys.executable, "-m", "experiments.population", CONFIG, *args],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def _members(workdir) -> list[list[dict]]:
    out = []
    for i in range(4):
        with open(os.path.join(workdir, "members", f"{i:03d}", "metrics.jsonl")) as f:
            recs = [json.loads(line) for line in f if line.strip()]
        out.append([{"iteration": r["iteration"], **r["metrics"]} for r in recs])
    return out


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """A run on 2 devices, then the same folder cut back to its iteration-2 checkpoint
    and resumed on 1 device."""
    wd = str(tmp_path_factory.mktemp("pop") / "run")
    first = _script([f"--workdir={wd}", "--num_devices=2", *ARGS], devices=2)
    assert first.returncode == 0, first.stderr[-3000:]
    saved = {
        "members": _members(wd),
        "leaderboard": json.load(open(os.path.join(wd, "leaderboard.json"))),
        "rounds": open(os.path.join(wd, "population.jsonl")).read(),
        "summary": json.load(open(os.path.join(wd, "summary.json"))),
        "files": sorted(os.listdir(wd)),
        "checkpoints": sorted(os.listdir(os.path.join(wd, "checkpoints"))),
    }
    shutil.rmtree(os.path.join(wd, "checkpoints", "4"))
    second = _script([f"--workdir={wd}", *ARGS])
    assert second.returncode == 0, second.stderr[-3000:]
    return wd, saved, second


def test_run_folder(two_runs):
    wd, saved, _ = two_runs
    for name in ("config.json", "leaderboard.json", "leaderboard.png", "population.jsonl",
                 "summary.json", "members", "checkpoints"):  # fmt: skip
        assert name in saved["files"], name
    assert saved["summary"]["devices"].startswith("cpu: 2 ×")
    assert saved["checkpoints"] == ["2", "4"]
    assert sorted(os.listdir(os.path.join(wd, "members"))) == ["000", "001", "002", "003"]
    assert os.path.isdir(os.path.join(wd, "members", "000", "tb"))
    rounds = [json.loads(x) for x in saved["rounds"].splitlines()]
    assert [r["iteration"] for r in rounds] == [2, 4]
    assert set(rounds[0]["hparams"]) == {"agent/clip_eps", "agent/ent_coef", "agent/lr"}
    entries = saved["leaderboard"]["entries"]
    assert entries and [e["rank"] for e in entries] == list(range(len(entries)))
    assert all(a["score"] >= b["score"] for a, b in itertools.pairwise(entries))
    for recs in saved["members"]:
        assert [r["iteration"] for r in recs] == [1, 2, 3, 4]
        assert "hparams/agent/lr" in recs[0]


def test_resume_on_one_device_continues_exactly(two_runs):
    """Resumed from iteration 2 on 1 device: iterations 3-4 of every member, the
    selection rounds and the leaderboard equal the uninterrupted 2-device run's (to
    float32 rounding: the batched kernels sum over 2 or 4 members in another order)."""
    wd, saved, second = two_runs
    assert "resumed from iteration 2" in second.stderr
    now = _members(wd)
    for a, b in zip(saved["members"], now, strict=True):
        assert len(b) == 4
        for ra, rb in zip(a, b, strict=True):
            assert set(ra) == set(rb)
            for key in ra:
                if key != "iteration":
                    # 2 -> 1 device: the same program up to the summation order of
                    # batched kernels over 2 or 4 members
                    np.testing.assert_allclose(rb[key], ra[key], rtol=1e-5, atol=1e-6, err_msg=key)
    assert open(os.path.join(wd, "population.jsonl")).read().count("\n") == 2
    lb = json.load(open(os.path.join(wd, "leaderboard.json")))
    for ea, eb in zip(saved["leaderboard"]["entries"], lb["entries"], strict=True):
        assert ea["member"] == eb["member"] and ea["generation"] == eb["generation"]
        np.testing.assert_allclose(eb["score"], ea["score"], rtol=1e-5)


def test_script_errors(tmp_path):
    """Bad command lines: exit status 2, one ``error:`` line naming the cause, no run
    folder (one process runs them all: `assert_refused_in_one_process`)."""
    wd = str(tmp_path / "bad")
    cases = [
        (["--num_devices=3"], "config.population.size=4 is not divisible"),
        (["--config.population.mode=evolve"], "config.population.mode must be one of"),
    ]
    cases = [([CONFIG, *args], match) for args, match in cases]
    assert_refused_in_one_process("experiments.population", wd, cases)


def test_evaluate_population_folder(two_runs):
    """`experiments.evaluate` on a population folder: every member with the same key,
    the means over members, ``--member`` alone giving that member's result, a member
    that does not exist refused, and a checkpoint of members split over 2 devices
    evaluated on 1."""
    from experiments.evaluate import evaluate

    wd, _, _ = two_runs
    got = evaluate(wd, episodes=3, max_steps=50)
    assert got["step"] == 4 and sorted(got["members"]) == ["0", "1", "2", "3"]
    means = [r["returns"]["agent"]["mean"] for r in got["members"].values()]
    assert all(np.isfinite(means)) and all(r["episodes"] == 3 for r in got["members"].values())
    np.testing.assert_allclose(got["mean_returns"]["agent"], np.mean(means), rtol=1e-6)
    assert json.load(open(os.path.join(wd, "eval.json")))["members"].keys() == got["members"].keys()
    one = evaluate(wd, episodes=3, max_steps=50, member=2)
    assert list(one["members"]) == ["2"]
    assert one["members"]["2"]["returns"] == got["members"]["2"]["returns"]
    with pytest.raises(ValueError, match="has members 0..3"):
        evaluate(wd, member=4)
    early = evaluate(wd, episodes=3, max_steps=50, step=2)  # saved by the 2-device run
    assert early["step"] == 2 and len(early["members"]) == 4


def test_finished_run_is_left_as_it_is(two_runs, capsys):
    """The same command on the finished folder says so and changes no file (its
    summary, leaderboard and logs keep the run's own figures)."""
    wd, _, _ = two_runs
    from experiments import population
    from experiments.configs import population as configs

    config = configs.get_config("cartpole,tiny")  # the command's config, in-process
    config.run.update(iterations_per_chunk=1, checkpoint_every_chunks=2, keep_checkpoints=10)
    config.population.pbt.interval_chunks = 2
    before = snapshot(wd)
    summary = population.run(config, wd)
    assert summary["finished"] and summary["iterations"] == 4
    assert "this run is finished (4/4 iterations)" in capsys.readouterr().out
    assert snapshot(wd) == before
