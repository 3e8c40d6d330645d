"""The MPE experiment config (`experiments/configs/mpe.py`) trains through
`experiments.train` at its ``tiny`` size (IPPO on simple_spread); its presets build the
scenarios' policies and MAPPO's centralised critic."""

from __future__ import annotations

import pytest

from experiments import train
from experiments.configs import mpe
from jaxdrive.logging import read_metrics


def test_tiny_config_trains(tmp_path):
    config = mpe.get_config("tiny")
    summary = train.run(config, str(tmp_path / "run"), progress=False, animation=False)
    assert summary["iterations"] == 4 and summary["env_steps"] == 128
    assert "episode_return/agent" in read_metrics(str(tmp_path / "run"))[-1]["metrics"]


def test_config_presets():
    config = mpe.get_config("speaker_listener,mappo")
    assert config.algo.centralized_critic and config.num_envs == 128
    assert {p: config.policies[p].groups for p in config.policies} == {
        "speaker": ["speaker"],
        "listener": ["listener"],
    }
    assert mpe.get_config("tag").env_kwargs.to_dict() == {"num_good": 1, "num_adversaries": 1}
    with pytest.raises(ValueError, match="choose one MPE scenario preset"):
        mpe.get_config("tag,spread")


def test_mappo_presets_are_jaxmarls_recurrent_form_and_ff():
    """``mappo`` is JaxMARL's recurrent MAPPO (a 128-unit layer, then a GRU of 128) for
    every policy; ``ff`` makes it feed-forward with IPPO's 10M budget. (Two recurrent
    policies with a centralised critic train in `tests/test_recurrent.py`.)"""
    rnn = mpe.get_config("tag,mappo")
    for p in ("adversary", "agent"):
        hp = rnn.policies[p]
        assert (hp.core, hp.core_size, tuple(hp.hidden_sizes)) == ("gru", 128, (128,))
    assert rnn.total_env_steps == 2_000_000 and rnn.algo.centralized_critic
    ff = mpe.get_config("tag,mappo,ff")
    assert ff.policies.agent.core == "mlp" and ff.total_env_steps == 10_000_000
