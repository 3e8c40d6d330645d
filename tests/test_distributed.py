"""Data-parallel training over several devices and processes (CPU, in subprocesses).

One subprocess forces 8 CPU devices (``XLA_FLAGS`` must be set before jax starts) and
trains tiny CartPole PPO and Tag A2C configs on 1, 2 and 4 devices; two more
subprocesses form a 2-process JAX cluster over localhost (CPU collectives: gloo).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from jaxdrive import distributed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tests", "distributed_script.py")
RTOL = 1e-4


def _env() -> dict[str, str]:
    """The test run's environment (its compile flags included) for one CPU process."""
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    for k in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        env.pop(k, None)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> dict:
    """The single-process script's results (≈ 50 s of subprocess), computed once per
    test run: under xdist the first worker to get here runs it into the workers' shared
    temporary folder, the others wait for its file."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the xdist workers of this run
    out, failed = root / "dist_single.json", root / "dist_single.failed"
    try:
        os.close(os.open(root / "dist_single.lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:  # another worker runs it
        deadline = time.monotonic() + 450
        while not (out.exists() or failed.exists()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert out.exists(), f"the single-process script failed in another worker: {failed}"
        return json.loads(out.read_text())
    part = root / "dist_single.part.json"
    proc = subprocess.run(
        [sys.executable, SCRIPT, "single", str(part)],
        env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    if proc.returncode != 0:
        failed.write_text(proc.stderr[-3000:])
    assert proc.returncode == 0, proc.stderr[-3000:]
    os.replace(part, out)  # whole, for the waiting workers
    return json.loads(out.read_text())


def test_devices_forced(single):
    assert single["devices"] == 8


@pytest.mark.parametrize("d", [2])
def test_cartpole_ppo_same_on_d_devices(single, d):
    """Params and every metric after 4 PPO iterations agree with 1 device (4 devices:
    `test_checkpoint_resumes_on_other_device_count`)."""
    assert single["cartpole_ppo_episodes"] > 0  # episodes ended: returns are compared
    assert single[f"cartpole_ppo_D{d}"] < RTOL
    assert single[f"cartpole_ppo_D{d}_shards"] == d  # the env state really is split


def test_auto_partitioner_same_as_one_device(single):
    """``partitioner="auto"`` (the one-device program split by XLA, as the MuJoCo configs
    run on several GPUs) trains like 1 device, its env state split over both."""
    assert single["cartpole_ppo_auto_D2"] < RTOL
    assert single["cartpole_ppo_auto_D2_shards"] == 2
    # the auto program has no shard_map region (the default's has): the option is used
    assert single["cartpole_shard_map_D2_manual"] and not single["cartpole_auto_D2_manual"]


def test_population_members_partitioned_by_xla_as_in_shard_map(single):
    """A population over 2 devices computes the same members and metrics with the
    member config's ``partitioner="auto"`` as in ``shard_map``, split over both."""
    assert single["population_auto_D2"] < RTOL
    assert single["population_shard_map_shards"] == single["population_auto_shards"] == 2
    assert single["population_shard_map_manual"] and not single["population_auto_manual"]


def test_evaluation_of_sharded_params_uses_its_compiled_program(single):
    """Parameters replicated over 2 devices are evaluated on one by the program compiled
    ahead for their shapes: no second compile."""
    assert single["eval_D2_fallbacks"] == 0
    assert single["eval_D2_return"] > 0


def test_program_store_loads_onto_the_devices_it_was_built_for(single):
    """With 2 devices, a stored one-device executable runs on one device and a stored
    two-device one on both (it used to load onto every device and fail on its
    arguments)."""
    assert single["store_one_device"] == single["store_two_device"] == 12.0


def test_tag_a2c_normalization_same_on_2_devices(single):
    """Pooled obs/return statistics and the A2C step agree across device counts."""
    assert single["tag_a2c_normalized_D2"] < RTOL
    assert single["tag_obs_norm_count"] > 1.0  # the statistics were updated


@pytest.mark.parametrize("d_new", [1, 4])
def test_checkpoint_resumes_on_other_device_count(single, d_new):
    """Saved with 2 devices after 2 iterations, resumed on 1 or 4: same end as 1 device."""
    assert single[f"resume_D2_to_D{d_new}_from"] == 2
    assert single[f"resume_D2_to_D{d_new}"] < RTOL


def test_recurrent_ppo_same_on_2_devices(single):
    """Recurrent PPO (CartPole's ``tiny,gru`` preset: GRU actor, LSTM critic, 2 minibatches
    of whole sequences): parameters, carries and metrics agree with 1 device (metrics
    relative to ``max(|value|, 1)``: the policy loss of normalised advantages is near 0);
    the carries are split."""
    assert single["recurrent_D1_shards"] == 1 and single["recurrent_D2_shards"] == 2
    assert single["recurrent_ppo_D2"] < RTOL
    assert single["recurrent_ppo_D2_metrics"] < RTOL


def test_bad_device_counts(single):
    assert "num_envs=4 is not divisible by the device count 3" in single["err_divisible"]
    assert "mesh larger than the 8 device(s) present" in single["err_too_many"]
    assert "DDPG runs on one device for now" in single["err_ddpg"]
    assert "num_minibatches=4 does not divide num_steps*agents" in single["err_minibatches"]


def test_two_processes_agree(single, tmp_path):
    """A 2-process cluster (one CPU device each) trains like one process on 1 device."""
    port = str(_free_port())
    outs = [tmp_path / f"p{i}.json" for i in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, SCRIPT, "multi", str(outs[i]), port, str(i)],
            env=_env(),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    if any("collective" in log.lower() and "not" in log.lower() for log in logs) and any(
        p.returncode for p in procs
    ):
        pytest.skip("this jax build has no CPU collectives for multi-process runs")
    for p, log in zip(procs, logs, strict=True):
        assert p.returncode == 0, log[-3000:]
    res = [json.loads(o.read_text()) for o in outs]
    assert [r["process"] for r in res] == [0, 1]
    assert all(r["processes"] == 2 and r["devices"] == 2 for r in res)
    ref = single["cartpole_ref_params"]
    for r in res:
        for a, b in zip(r["params"], ref, strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=RTOL, atol=1e-6)
    np.testing.assert_allclose(res[0]["returns"], res[1]["returns"])


# ---- start-up errors (no subprocess needed) ------------------------------------------------
def test_coordinator_that_does_not_answer_times_out():
    port = _free_port()  # nothing listens there
    with pytest.raises(TimeoutError, match=rf"127.0.0.1:{port} did not answer within 2 s"):
        distributed.initialize(f"127.0.0.1:{port}", 2, 1, timeout_s=2)


def test_initialize_bad_arguments(monkeypatch):
    for k in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        monkeypatch.delenv(k, raising=False)
    assert distributed.initialize() is False  # nothing asked: single process
    with pytest.raises(ValueError, match="without a coordinator address"):
        distributed.initialize(num_processes=2, process_id=1)
    with pytest.raises(ValueError, match="host:port"):
        distributed.initialize("localhost", 2, 1)
    with pytest.raises(ValueError, match=r"process_id=2 must lie in \[0, 2\)"):
        distributed.initialize("localhost:1234", 2, 2)


def test_resolve_num_devices_errors():
    import jax

    n = jax.device_count()
    assert distributed.resolve_num_devices(0) == n
    assert distributed.resolve_num_devices("all") == n
    with pytest.raises(ValueError, match="mesh larger than"):
        distributed.resolve_num_devices(n + 1)
    with pytest.raises(ValueError, match="positive integer, 0 or 'all'"):
        distributed.resolve_num_devices("many")
    with pytest.raises(ValueError, match="positive integer, 0 or 'all'"):
        distributed.resolve_num_devices(-1)


# ---- autoscale ------------------------------------------------------------------------------
def test_autoscale_picks_largest_fitting_size():
    from experiments.benchmarks.training import load_config
    from experiments.common import build
    from jaxdrive.autoscale import autoscale

    c = load_config("cartpole", "tiny")  # 4 envs × 16 steps
    make_trainer = lambda config: build(config)[2]
    res = autoscale(
        c, make_trainer, memory_budget_bytes=60_000, min_envs=8, max_envs=64, refine_steps=1
    )  # tries 8 (fits), 16 (does not), then 12 between them (does not)
    by_n = {t.num_envs: t for t in res.trials}
    assert by_n[res.num_envs].fits and by_n[res.num_envs].total_bytes <= 60_000
    assert any(not t.fits and t.num_envs > res.num_envs for t in res.trials)  # a miss above
    assert len(res.trials) == 3  # the refinement between the last fit and the first miss
    assert all(t.fits == (t.total_bytes <= 60_000) for t in res.trials)
    sizes = sorted(by_n)  # bytes grow with the batch
    assert [by_n[n].total_bytes for n in sizes] == sorted(by_n[n].total_bytes for n in sizes)
    assert res.config.num_envs == res.num_envs and c.num_envs == 4  # input untouched
    assert "chosen: num_envs=" in res.table()
    # 8 envs again: its program comes from the compilation cache (compiled above)
    with pytest.raises(ValueError, match="even num_envs=8 does not fit the memory budget"):
        autoscale(c, make_trainer, memory_budget_bytes=1000, min_envs=8, max_envs=64)
    with pytest.raises(ValueError, match="memory_budget_bytes must be > 0"):
        autoscale(c, make_trainer, memory_budget_bytes=0)
