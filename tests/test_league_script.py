"""``python -m experiments.league``: the run folder of a four-turn Tag league, a resume
from turn 2 that ends where the uninterrupted run ended, and errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = "--config=experiments/configs/tag_continuous.py:tiny"
ARGS = [
    "--config.total_env_steps=128",  # 4 iterations of 4 envs x 8 steps: 4 turns of 1
    "--config.run.checkpoint_every_chunks=1",
    "--config.run.keep_checkpoints=10",
    "--turn_iterations=1",
    "--league_pool=2",
    "--eval_episodes=2",
]


def _script(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run(
        [sys.executable, "-m", "experiments.league", CONFIG, *args],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def _read(wd: str, name: str) -> str:
    with open(os.path.join(wd, name)) as f:
        return f.read()


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """A four-turn run, then the same folder cut back to its turn-2 checkpoint and
    resumed."""
    wd = str(tmp_path_factory.mktemp("league") / "run")
    first = _script([f"--workdir={wd}", *ARGS])
    assert first.returncode == 0, first.stderr[-3000:]
    saved = {n: _read(wd, n) for n in ("league.jsonl", "held_out.json", "config.json")}
    saved["files"] = sorted(os.listdir(wd))
    for turn in ("3", "4"):
        shutil.rmtree(os.path.join(wd, "checkpoints", turn))
    second = _script([f"--workdir={wd}", *ARGS])
    assert second.returncode == 0, second.stderr[-3000:]
    return wd, saved, second


def test_run_folder(two_runs):
    _, saved, _ = two_runs
    for name in ("config.json", "league.jsonl", "held_out.json", "summary.json", "checkpoints"):
        assert name in saved["files"], name
    turns = [json.loads(x) for x in saved["league.jsonl"].splitlines()]
    assert [t["turn"] for t in turns] == [1, 2, 3, 4]
    assert [t["side"] for t in turns] == ["tagger", "runner", "tagger", "runner"]
    assert [t["env_steps"] for t in turns] == [32, 64, 96, 128]
    assert all(t["opponent_entry"] in (0, 1) for t in turns)
    assert "return/tagger" in turns[0] and "return/runner" in turns[1]
    league = json.loads(saved["config.json"])["league"]
    assert league == {
        "sides": ["tagger", "runner"],
        "pool_size": 2,
        "sampling": "prioritized",
        "turn_iterations": 1,
    }
    held = json.loads(saved["held_out.json"])
    for side in ("tagger", "runner"):
        assert set(held[side]) == {"oldest", "random", "latest"}
        assert set(held[side]["random"]) == {"tagger", "runner"}  # returns of both groups


def test_resume_continues_exactly(two_runs):
    """Turns 3-4 after the resume and the held-out evaluation equal the uninterrupted
    run's (the timing field aside); the first run's turns 3-4 are set aside."""
    wd, saved, second = two_runs
    assert "resumed from turn 2" in second.stderr

    def strip(text):
        return [
            {k: v for k, v in json.loads(x).items() if k != "elapsed_s"} for x in text.splitlines()
        ]

    assert strip(_read(wd, "league.jsonl")) == strip(saved["league.jsonl"])
    assert _read(wd, "held_out.json") == saved["held_out.json"]
    assert len(_read(wd, "league.jsonl.discarded-1").splitlines()) == 2
    assert json.loads(_read(wd, "summary.json"))["resumed_from"] == 2


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--league_sampling=best"], "--league_sampling=best: must be one of"),
        (["--league_sides=tagger,chaser"], "--league_sides=tagger,chaser: must name two"),
        (["--league_pool=0"], "--league_pool=0: must be >= 1"),
    ],
)
def test_script_errors(tmp_path, args, match):
    wd = str(tmp_path / "bad")
    out = _script([f"--workdir={wd}", *args])
    assert out.returncode == 2
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and match in last, out.stderr[-2000:]
    assert not os.path.exists(wd)  # refused before anything was written
