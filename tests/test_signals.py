"""`jaxdrive.signals.StopRequest`: the handlers (a first signal asks, a second acts as
without them, the old handlers come back), and the population and league scripts'
loops stopping after a chunk or turn with a checkpoint (`experiments.train` through a
real signal: tests/test_run_folder.py)."""

from __future__ import annotations

import json
import os
import signal

import pytest

from experiments import league as league_script
from experiments import population
from experiments.configs import population as population_configs
from jaxdrive.signals import StopRequest, run_stoppable
from tests.test_league_script import _config as league_config


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler for the test (a test runner's worker may have
    installed another, e.g. one that ignores it), the runner's back afterwards."""
    runner = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, runner)


def test_first_signal_asks_second_acts_handlers_restored(python_sigint):
    before = {s: signal.getsignal(s) for s in StopRequest.SIGNALS}
    with StopRequest() as stop:
        assert not stop.requested and stop.name is None
        signal.raise_signal(signal.SIGTERM)
        assert stop.requested and stop.name == "SIGTERM" and stop.signum == signal.SIGTERM
        with pytest.raises(KeyboardInterrupt):  # a second signal: Python's own SIGINT
            signal.raise_signal(signal.SIGINT)
    assert {s: signal.getsignal(s) for s in StopRequest.SIGNALS} == before
    with StopRequest() as stop:
        signal.raise_signal(signal.SIGINT)  # Ctrl-C first: a request, no exception
        assert stop.name == "SIGINT"
    with pytest.raises(SystemExit) as exit_:
        stop.report(7, "runs/x")
    assert exit_.value.code == 130


def _asked(signum: int = signal.SIGTERM) -> StopRequest:
    stop = StopRequest()
    stop.signum = signum  # as if the signal came during the first chunk or turn
    return stop


def test_population_stops_after_the_chunk_with_a_checkpoint(tmp_path):
    config = population_configs.get_config("cartpole,tiny")
    wd = str(tmp_path / "pop")
    summary = population.run(config, wd, stop=_asked())
    k = summary["iterations"]
    assert 0 < k < summary["num_iterations"] and summary["stopped_by"] == "SIGTERM"
    assert os.listdir(os.path.join(wd, "checkpoints")) == [str(k)]
    with open(os.path.join(wd, "summary.json")) as f:
        assert json.load(f)["stopped_by"] == "SIGTERM"


def test_league_stops_after_the_turn_with_a_checkpoint(tmp_path):
    wd = str(tmp_path / "league")
    summary = league_script.run(league_config(), wd, eval_episodes=2, stop=_asked())
    assert summary["turns_done"] == 1 < summary["turns"] and summary["stopped_by"] == "SIGTERM"
    assert os.listdir(os.path.join(wd, "checkpoints")) == ["1"]
    assert not os.path.exists(os.path.join(wd, league_script.HELD_OUT_FILE))  # at the end


def test_run_stoppable_reports_a_stop_before_the_end(capsys):
    def stopped(stop: StopRequest) -> dict:
        signal.raise_signal(signal.SIGTERM)  # during the run
        return {"stopped_by": stop.name, "turns_done": 3, "workdir": "runs/x"}

    with pytest.raises(SystemExit) as exit_:
        run_stoppable(stopped, unit="turn")
    assert exit_.value.code == 143
    assert "SIGTERM: stopped after turn 3, checkpointed in runs/x" in capsys.readouterr().err
    assert run_stoppable(lambda stop: {"stopped_by": None}) == {"stopped_by": None}
