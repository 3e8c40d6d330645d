"""The experiment scripts: experiments.train and experiments.evaluate on a tiny real config
(Tag grid world, ``tiny`` preset, PPO), in-process and through their command lines."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("algorithms.ppo.train")
tag_config = pytest.importorskip("experiments.configs.tag_gridworld")

from algorithms.common.config import config_to_dict  # noqa: E402
from experiments import common, evaluate, train  # noqa: E402
from jaxdrive.logging import read_metrics  # noqa: E402
from tests.run_folder_util import commands_in_one_process  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PNG = b"\x89PNG\r\n\x1a\n"


def cli(module: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_train_evaluate_resume_cli(tmp_path):
    """One tiny Tag grid-world run (4 iterations, chunks of 2, checkpoints after each,
    with a GIF), then every check on it. A single test, so that pytest-xdist never
    trains it twice (a module fixture runs once per worker)."""
    config = tag_config.get_config("tiny")
    config.run.checkpoint_every_chunks = 1
    wd = str(tmp_path / "tag")
    summary = train.run(config, wd, progress=False, animation=True)
    check_run_folder(wd, config, summary)
    check_resume_and_config_checks(wd, config, tmp_path)
    check_evaluate(wd, tmp_path)
    check_cli(wd)


def snapshot(wd) -> dict[str, tuple[int, int]]:
    """``{relative path: (size, mtime_ns)}`` of every file but the lock file."""
    out = {}
    for root, _, files in os.walk(wd):
        for f in files:
            p = os.path.join(root, f)
            if f != "run.lock":
                st = os.stat(p)
                out[os.path.relpath(p, wd)] = (st.st_size, st.st_mtime_ns)
    return out


def check_run_folder(wd, config, summary):
    names = set(os.listdir(wd))
    assert {"config.json", "metrics.jsonl", "tb", "checkpoints", "summary.json"} <= names
    with open(os.path.join(wd, "config.json")) as f:
        assert json.load(f) == config_to_dict(config)
    recs = read_metrics(wd)
    assert [r["iteration"] for r in recs] == [1, 2, 3, 4]
    assert [r["env_steps"] for r in recs] == [32, 64, 96, 128]  # 4 envs x 8 steps
    assert {"episode_return/tagger", "episode_return/runner"} <= set(recs[-1]["metrics"])
    assert any(k.startswith("loss") for k in recs[-1]["metrics"])
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(os.path.join(wd, "tb")))
    assert sorted(os.listdir(os.path.join(wd, "checkpoints"))) == ["2", "4"]
    for png in ("returns.png", "losses.png"):
        with open(os.path.join(wd, png), "rb") as f:
            assert f.read(8) == PNG
    with open(os.path.join(wd, "animation.gif"), "rb") as f:
        assert f.read(6) == b"GIF89a"
    assert summary["iterations"] == 4 and summary["env_steps"] == 128
    assert summary["session_env_steps"] == 128 and summary["compile_seconds"] > 0
    ended = [r for r in recs if r["metrics"]["episodes_done"] > 0]  # returns mean something
    assert all(
        ("episode_return/tagger" in r["metrics"]) == (r["metrics"]["episodes_done"] > 0)
        for r in recs
    )  # no return recorded where no episode ended
    assert ended and (
        summary["final_returns"]["episode_return/tagger"]
        == ended[-1]["metrics"]["episode_return/tagger"]
    )
    with open(os.path.join(wd, "summary.json")) as f:
        assert json.load(f)["iterations"] == 4


def check_resume_and_config_checks(wd, config, tmp_path):
    copy = str(tmp_path / "copy")
    shutil.copytree(wd, copy)
    changed = tag_config.get_config("tiny")
    changed.algo.gamma = 0.5
    with pytest.raises(ValueError, match=r"different config:\n  algo.gamma: 0.98 -> 0.5"):
        train.run(changed, copy, progress=False)
    with pytest.raises(ValueError, match="already holds checkpoints .* resume that run"):
        train.run(config, copy, resume=False, progress=False)
    # a finished run has nothing to train with a changed config: its files stay
    out = train.run(changed, copy, progress=False, allow_config_change=True, animation=False)
    assert out["finished"] and out["iterations"] == 4
    assert common.load_config(copy).algo.gamma == 0.98

    with pytest.raises(ValueError, match="missing the key"):
        train.run({"env_name": "CartPole-v1"}, str(tmp_path / "x"))


def check_evaluate(wd, tmp_path):
    res = evaluate.evaluate(wd, episodes=3)
    assert (
        res["animation"] is None
        and res["step"] == 4
        and res["env_steps"] == 128
        and res["episodes"] == 3
    )
    assert set(res["returns"]) == {"tagger", "runner"}
    assert 1 <= res["episode_length"] <= 12  # tiny episodes last 12 steps at most
    with open(os.path.join(wd, "eval.json")) as f:
        assert json.load(f)["returns"] == res["returns"]

    with pytest.raises(ValueError, match="no config.json"):
        evaluate.evaluate(str(tmp_path / "nothing"))
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(os.path.join(wd, "config.json"), bare)
    with pytest.raises(ValueError, match="no checkpoints in"):
        evaluate.evaluate(str(bare))
    with pytest.raises(ValueError, match=r"no checkpoint for step 3 .* \[2, 4\]"):
        evaluate.evaluate(wd, step=3)


def test_evaluate_policy_masks_replayed_episodes_and_counts_nonfinite_returns():
    """Ended envs reset and play on, but only each env's first episode counts (Counter
    truncates after 7 steps of reward 1 per agent); non-finite returns are counted."""
    from tests.toy_envs import Counter

    env = Counter()
    still = types.SimpleNamespace(
        act=lambda p, k, obs: {g: jnp.ones(o.shape[:-1], jnp.int32) for g, o in obs.items()}
    )
    key = jax.random.PRNGKey(0)
    params = env.default_params
    res = common.evaluate_policy(env, params, still, None, key, episodes=3, max_steps=20)
    assert res["episode_length"] == 7 and res["unfinished"] == 0 and res["nonfinite"] == 0
    assert {g: r["mean"] for g, r in res["returns"].items()} == {"red": 7.0, "blue": 7.0}
    bad = params.replace(step_reward=float("nan"))
    res = common.evaluate_policy(env, bad, still, None, key, episodes=3, max_steps=20)
    assert res["nonfinite"] == 3 * len(env.groups)


def test_known_problem_warns_for_sharded_mujoco_on_gpus_only():
    """The XLA crash warning names MuJoCo envs on several GPUs, nothing else."""
    import jaxdrive

    pytest.importorskip("mujoco")
    hopper, _ = jaxdrive.make("Hopper-v5")
    assert "Hopper on 2 GPUs" in common.known_problem(hopper, 2, "gpu")
    assert common.known_problem(hopper, 2, "gpu", "auto") is None  # XLA partitions it
    assert common.known_problem(hopper, 1, "gpu") is None
    assert common.known_problem(hopper, 2, "cpu") is None
    cartpole, _ = jaxdrive.make("CartPole-v1")
    assert common.known_problem(cartpole, 2, "gpu") is None


def test_evaluate_policy_counts_rewards_until_done():
    """CartPole pays 1 per step: an episode's return equals its length; steps after
    the end are masked out, and a step cap leaves episodes unfinished."""
    import jaxdrive

    env, params = jaxdrive.make("CartPole-v1")
    push_left = types.SimpleNamespace(
        act=lambda p, k, obs: {"agent": jnp.zeros(obs["agent"].shape[:-1], jnp.int32)}
    )
    key = jax.random.PRNGKey(0)
    res = common.evaluate_policy(env, params, push_left, None, key, episodes=5, max_steps=60)
    assert res["unfinished"] == 0 and 5 < res["episode_length"] < 30
    r = res["returns"]["agent"]
    np.testing.assert_allclose(r["mean"], res["episode_length"], rtol=1e-6)
    capped = common.evaluate_policy(env, params, push_left, None, key, episodes=5, max_steps=3)
    assert capped["unfinished"] == 5 and capped["returns"]["agent"]["max"] == 3.0
    with pytest.raises(ValueError, match="episodes must be an integer >= 1"):
        common.evaluate_policy(env, params, push_left, None, key, episodes=0)
    with pytest.raises(ValueError, match="has no `act`"):
        common.evaluate_policy(env, params, types.SimpleNamespace(act=None), None, key)


def check_cli(wd):
    cfg = "experiments/configs/tag_gridworld.py:tiny"
    before = snapshot(wd)
    # a misspelt override; resuming the finished run (flags reach `run`); another seed
    commands = [
        [f"--config={cfg}", "--config.algo.gama=0.9", f"--workdir={wd}"],
        [f"--config={cfg}", f"--workdir={wd}", "--noprogress"],
        [f"--config={cfg}", f"--workdir={wd}", "--seed=5"],
    ]
    (bad, bad_err, _), (ok, ok_err, ok_out), (other_seed, seed_err, _) = commands_in_one_process(
        "experiments.train", commands
    )
    assert bad == 2
    assert "--config.algo.gama names no config key: config.algo has no key 'gama'" in bad_err
    assert 'Did you mean "gamma"' in bad_err
    assert ok in (0, None), ok_err[-2000:]
    assert "this run is finished (4/4 iterations); nothing to do" in ok_out
    assert other_seed == 2 and "seed: 20 -> 5" in seed_err
    assert snapshot(wd) == before  # no file touched (summary, plots, metrics, config)

    gif = os.path.join(os.path.dirname(wd), "eval.gif")
    ev = cli(
        "experiments.evaluate", f"--workdir={wd}", "--episodes=2", "--nodeterministic",
        f"--animation={gif}", "--animation_steps=5",
    )  # fmt: skip
    assert ev.returncode == 0, ev.stderr[-2000:]
    assert "2 sampled episodes" in ev.stdout and "tagger=" in ev.stdout
    with open(gif, "rb") as f:
        assert f.read(6) == b"GIF89a"
    with open(os.path.join(wd, "eval.json")) as f:
        saved = json.load(f)
    assert saved["episodes"] == 2 and not saved["deterministic"] and saved["animation"] == gif
    missing = cli("experiments.evaluate", f"--workdir={wd}/nope")
    assert missing.returncode == 2 and "no config.json" in missing.stderr


def test_makefile_run_folder_and_setup_stamp():
    """`make train` keeps one run folder per TRAIN_ARGS/JAX_EXTRA (the plain command
    resumes runs/tag, other arguments get their own folder) and the setup stamp names
    JAX_EXTRA, so a changed JAX_EXTRA reinstalls (dry runs: nothing is executed)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")

    def dry(*args):
        out = subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout

    plain = dry("train", "VENV=/nonexistent-venv")
    assert "--workdir=runs/tag " in plain
    other = dry("train", "VENV=/nonexistent-venv", "TRAIN_ARGS=--config.num_envs=8")
    again = dry("train", "VENV=/nonexistent-venv", "TRAIN_ARGS=--config.num_envs=8")
    assert other == again and "--workdir=runs/tag-" in other
    assert "--workdir=runs/tag-" in dry("train", "VENV=/x", "TRAIN_ARGS=--config.num_envs='1'")

    def stamp(extra):
        lines = dry("setup", "VENV=/x", f"JAX_EXTRA={extra}").splitlines()
        return [ln for ln in lines if ln.startswith("touch /x/.installed-")]

    stamps = {extra: stamp(extra) for extra in ("", "jax[cuda12]")}
    assert stamps[""] and stamps["jax[cuda12]"] and stamps[""] != stamps["jax[cuda12]"]
