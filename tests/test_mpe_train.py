"""The MPE experiment config (`experiments/configs/mpe.py`) trains through
`experiments.train` at its ``tiny`` size: MAPPO on simple_speaker_listener (two groups,
one policy each, a critic on the global state; IPPO is the same run without it)."""

from __future__ import annotations

import pytest

from experiments import train
from experiments.configs import mpe
from jaxdrive.logging import read_metrics


def test_tiny_config_trains(tmp_path):
    config = mpe.get_config("tiny,speaker_listener,mappo")
    summary = train.run(config, str(tmp_path / "run"), progress=False, animation=False)
    assert summary["iterations"] == 4 and summary["env_steps"] == 128
    metrics = read_metrics(str(tmp_path / "run"))[-1]["metrics"]
    assert {"episode_return/speaker", "episode_return/listener"} <= set(metrics)


def test_config_presets():
    assert mpe.get_config("mappo").algo.centralized_critic
    assert mpe.get_config("tag").env_kwargs.to_dict() == {"num_good": 1, "num_adversaries": 1}
    with pytest.raises(ValueError, match="choose one MPE scenario preset"):
        mpe.get_config("tag,spread")
