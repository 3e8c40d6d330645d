"""How the run scripts write a run folder's ``config.json`` and check ``config.run``
(`experiments.common.run_config_written`, `experiments.common.run_settings`): bad
settings are refused before the folder exists, and a resume refused after the new config
was written leaves the folder's config as it was."""

from __future__ import annotations

import os

import pytest

from experiments import common
from experiments.configs import cartpole
from experiments.configs import population as population_configs


def _step(workdir, step: int) -> None:
    """A checkpoint step folder as `jaxdrive.checkpoint.step_folders` counts it."""
    os.makedirs(os.path.join(workdir, "checkpoints", str(step), "state"))


def _files(workdir) -> dict[str, str]:
    return {
        n: open(os.path.join(workdir, n)).read()
        for n in sorted(os.listdir(workdir))
        if n.startswith("config")
    }


def test_refused_run_puts_the_old_config_back(tmp_path):
    old, new = cartpole.get_config("tiny"), cartpole.get_config("tiny")
    new.num_envs = 8
    wd = str(tmp_path / "run")
    os.makedirs(wd)
    common.save_config(old, os.path.join(wd, common.CONFIG_FILE))
    _step(wd, 4)
    before = _files(wd)
    with pytest.raises(ValueError, match="restores"):  # refused before saving anything
        with common.run_config_written(new, wd, diffs=["num_envs: 4 -> 8"]):
            assert common.load_config(wd).num_envs == 8  # written for the run
            raise ValueError("no checkpoint restores")
    assert _files(wd) == before
    with pytest.raises(RuntimeError):  # a checkpoint of the new config was saved first
        with common.run_config_written(new, wd):
            _step(wd, 6)
            raise RuntimeError("diverged")
    after = _files(wd)
    assert common.load_config(wd).num_envs == 8 and len(after) == 2  # the old one kept
    kept = next(n for n in after if n != common.CONFIG_FILE)
    assert after[kept] == before[common.CONFIG_FILE]
    with common.run_config_written(new, wd):  # the same config: nothing written
        pass
    assert _files(wd) == after


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("keep_checkpoints", 0, "config.run.keep_checkpoints must be an integer >= 1, got 0"),
        ("checkpoint_every_chunks", 0, "config.run.checkpoint_every_chunks must be"),
        ("iterations_per_chunk", -2, "config.run.iterations_per_chunk must be"),
        ("eval_num_envs", 0, "config.run.eval_num_envs must be"),
    ],
)
def test_bad_run_settings_are_refused_before_the_folder_exists(tmp_path, key, value, match):
    from experiments import population, train

    c = cartpole.get_config("tiny")
    c.run[key] = value
    wd = str(tmp_path / "run")
    with pytest.raises(ValueError, match=match):
        train.run(c, wd, progress=False)
    assert not os.path.exists(wd)
    p = population_configs.get_config("cartpole,tiny")
    p.run[key] = value
    with pytest.raises(ValueError, match=match):
        population.run(p, wd)
    assert not os.path.exists(wd)


@pytest.mark.parametrize("budget", [0.0, -1.0, float("nan")])
def test_autoscale_budget_must_be_positive(budget):
    from experiments import train

    with pytest.raises(ValueError, match=r"^--autoscale_budget_mib=.*: expected a positive"):
        train.apply_scaling(cartpole.get_config("tiny"), autoscale=True, budget_mib=budget)


def test_autoscale_budget_needs_autoscale():
    from experiments import train

    with pytest.raises(ValueError, match=r"^--autoscale_budget_mib=64.0: only used with"):
        train.apply_scaling(cartpole.get_config("tiny"), budget_mib=64.0)
