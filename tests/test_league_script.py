"""``experiments.league``: the run folder of a four-turn league (a toy env of two
opposed groups, in this process), a resume from turn 2 that ends where the
uninterrupted run ended, and the command line's errors."""

from __future__ import annotations

import json
import os
import shutil

import pytest

import jaxdrive
from algorithms.common.config import base_config
from experiments import league as league_script
from tests.run_folder_util import assert_refused_in_one_process
from tests.toy_envs import Counter


def _config():
    jaxdrive.register("toy-counter-league", Counter, overwrite=True)
    c = base_config("ppo", "toy-counter-league", policies={"tagger": ["red"], "runner": ["blue"]})
    c.num_envs, c.num_steps = 2, 8
    c.total_env_steps = 2 * 8 * 4  # 4 iterations: 4 turns of 1
    c.algo.num_epochs, c.algo.num_minibatches = 1, 1
    for p in ("tagger", "runner"):
        c.policies[p].hidden_sizes = (8,)
    c.run.update(checkpoint_every_chunks=2, keep_checkpoints=10)  # turns 2 and 4
    return league_script._with_league(c, ("tagger", "runner"), 2, "prioritized", 1)


def _read(wd: str, name: str) -> str:
    with open(os.path.join(wd, name)) as f:
        return f.read()


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """A four-turn run, then the same folder cut back to its turn-2 checkpoint and
    resumed."""
    wd = str(tmp_path_factory.mktemp("league") / "run")
    first = league_script.run(_config(), wd, eval_episodes=2)
    saved = {n: _read(wd, n) for n in ("league.jsonl", "held_out.json", "config.json")}
    saved["files"] = sorted(os.listdir(wd))
    shutil.rmtree(os.path.join(wd, "checkpoints", "4"))
    second = league_script.run(_config(), wd, eval_episodes=2)
    return wd, saved, first, second


def test_run_folder(two_runs):
    _, saved, first, _ = two_runs
    for name in ("config.json", "league.jsonl", "held_out.json", "summary.json", "checkpoints"):
        assert name in saved["files"], name
    assert first["turns"] == 4 and first["resumed_from"] is None
    turns = [json.loads(x) for x in saved["league.jsonl"].splitlines()]
    assert [t["turn"] for t in turns] == [1, 2, 3, 4]
    assert [t["side"] for t in turns] == ["tagger", "runner", "tagger", "runner"]
    assert [t["env_steps"] for t in turns] == [16, 32, 48, 64]
    assert all(t["opponent_entry"] in (0, 1) for t in turns)
    assert "return/red" in turns[0] and "return/blue" in turns[1]
    assert any(t["opponent_score"] is not None for t in turns)
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
        assert set(held[side]["random"]) == {"red", "blue"}  # returns of both groups


def test_resume_continues_exactly(two_runs):
    """Turns 3-4 after the resume and the held-out evaluation equal the uninterrupted
    run's (the timing field aside); the first run's turns 3-4 are set aside."""
    wd, saved, _, second = two_runs
    assert second["resumed_from"] == 2

    def strip(text):
        return [
            {k: v for k, v in json.loads(x).items() if k != "elapsed_s"} for x in text.splitlines()
        ]

    assert strip(_read(wd, "league.jsonl")) == strip(saved["league.jsonl"])
    assert _read(wd, "held_out.json") == saved["held_out.json"]
    assert len(_read(wd, "league.jsonl.discarded-1").splitlines()) == 2


def test_finished_run_is_left_as_it_is(two_runs, capsys):
    """The same run on the finished folder says so and rewrites nothing."""
    wd = two_runs[0]
    names = ("league.jsonl", "held_out.json", "summary.json", "config.json")
    before = {n: _read(wd, n) for n in names}
    again = league_script.run(_config(), wd, eval_episodes=2)
    assert again["finished"] and again["turns"] == 4
    assert "this run is finished (4/4 turns)" in capsys.readouterr().out
    assert {n: _read(wd, n) for n in names} == before


def test_script_errors(tmp_path):
    """Bad league flags: exit status 2, one ``error:`` line naming the flag, no run
    folder (one process runs them all: `assert_refused_in_one_process`)."""
    wd = str(tmp_path / "bad")
    cases = [
        (["--league_sampling=best"], "--league_sampling=best: must be one of"),
        (["--league_sides=tagger,chaser"], "--league_sides=tagger,chaser: must name two"),
        (["--league_pool=0"], "--league_pool=0: must be >= 1"),
    ]
    config = "--config=experiments/configs/tag_continuous.py:tiny"
    cases = [([config, *args], match) for args, match in cases]
    assert_refused_in_one_process("experiments.league", wd, cases)
