"""The population benchmark suites at tiny sizes: the throughput rows (aggregate env
steps/s, members split over two forced CPU devices against one, compile reported, one
printed row per case) and the PBT learning comparison (both populations start equal;
the summary's times and finals against hand-computed values). Both suites run in one
child process, which compiles with the test suite's fast-compile flags
(`tests/conftest.py`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from experiments.benchmarks.population import population_records
from experiments.benchmarks.population_learning import summarize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CHILD = """
import json
from experiments.benchmarks.population import population_records
from experiments.benchmarks.population_learning import population_learning_records
a = population_records(iterations=1, repeats=2, quick=True, cases=("devices",),
                       cartpole_members=2, devices_task="cartpole")
b = population_learning_records(members=2, seeds=2, env_steps=32, target=-1e9,
                                final_episodes=2, tiny=True)
import jax, jax.numpy as jnp
from experiments.benchmarks.population_learning import _train_leagues
class Fake:  # a league whose state records each turn: x -> 3x + (1 if side "a" else 2)
    sides = ("a", "b")
    init = staticmethod(lambda key: {"x": key[0].astype(jnp.float32)})
    chunk = staticmethod(lambda st, it, side: ({"x": 3 * st["x"] + (1 if side == "a" else 2)}, 0))
keys = jnp.array([[1, 0], [2, 0]], jnp.uint32)
lg = _train_leagues({"p": Fake(), "q": Fake()}, keys, {"p": 2, "q": 3}, 1)
c = {n: {"x": s["x"].tolist(), "devices": [d.id for d in s["x"].devices()], "wall": w}
     for n, (s, w) in lg.items()}
print("RECORDS " + json.dumps({"throughput": a, "learning": b, "leagues": c}, default=str))
"""


@pytest.fixture(scope="module")
def suites():
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2"
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, cwd=ROOT, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    recs = json.loads(out.stdout.split("RECORDS ", 1)[1])
    return {"out": out.stdout, **recs}


def test_throughput_rows(suites):
    recs = suites["throughput"]
    lines = [x for x in suites["out"].splitlines() if x.startswith("population ")]
    assert len(lines) == 2 and "aggregate" in lines[0]
    one, split = recs  # 2 members on one device, then 2 per device on two
    assert (one["members"], split["members"]) == (2, 4)
    assert (one["member_devices"], split["member_devices"], split["num_devices"]) == (1, 2, 2)
    assert "4 members on 2 of 2 dev" in lines[1]
    for rec in recs:
        steps = rec["members"] * rec["iterations_timed"] * rec["num_envs"] * rec["num_steps"]
        assert rec["env_steps_per_s"] == pytest.approx(steps / rec["seconds_median"])
        assert len(rec["seconds_all"]) == 2
        assert set(rec["compile_s_each"]) == {"init", "chunk", "select"}
        assert rec["compile_s"] > 0 and rec["lower_s"] > 0 and rec["select_ms"] > 0
    assert one["speedup"] == 1.0
    assert split["speedup"] == pytest.approx(split["env_steps_per_s"] / one["env_steps_per_s"])


def test_leagues_side_by_side_on_two_devices(suites):
    out = suites["leagues"]
    # 2 turns (a, b) from x0: 3(3x0 + 1) + 2; 3 turns: 3(that) + 1
    assert out["p"]["x"] == [14.0, 23.0] and out["q"]["x"] == [43.0, 70.0]
    for n in out:  # back on the first device after training on their own
        assert out[n]["devices"] == [0] and out[n]["wall"] > 0


def test_unknown_case():
    with pytest.raises(ValueError, match="--pop_cases"):
        population_records(quick=True, cases=("cartpole", "nope"))
    with pytest.raises(ValueError, match="--pop_devices_task"):
        population_records(quick=True, cases=("devices",), devices_task="nope")


def test_summary_against_hand_computed_values():
    times = np.array([1.0, 2.0, 3.0])
    # [C=3, S=1, P=4]; target 0: member 0 reaches it at chunk 1, member 1 at 2, others never
    fixed_scores = np.array(
        [[[-5.0, -5.0, -9.0, np.nan]], [[0.5, -1.0, -9.0, -8.0]], [[1.0, 2.0, -9.0, -8.0]]]
    )
    pbt_scores = np.array(
        [[[-5.0, -5.0, -9.0, np.nan]], [[-0.5, -1.0, -9.0, -8.0]], [[0.0, 3.0, 1.0, 1.0]]]
    )
    fixed = {"times": times, "scores": fixed_scores, "final": np.array([[7.0, 6.0, np.nan, 1]])}
    pbt = {"times": times, "scores": pbt_scores, "final": np.array([[5.0, 4.0, 3, 2]])}
    out = summarize(pbt, fixed, target=0.0)
    t = out["time_to_target_s"]
    assert t["pbt"] == [3.0]
    assert t["fixed_best_member"] == [2.0]
    assert t["fixed_median_member"] == [None]  # median of (2, 3, inf, inf)
    f = out["final_return"]
    # best member = highest last score: fixed member 1 (2.0), PBT member 1 (3.0)
    assert f["fixed_best"] == [6.0] and f["pbt_best"] == [4.0]
    assert f["fixed_median"] == [3.5] and f["pbt_median"] == [3.5]  # NaN counts lowest


def test_learning_suite_tiny(suites):
    (rec,) = suites["learning"]
    out = suites["out"]
    assert "population_learning pbt" in out and "population_learning fixed" in out
    pbt, fixed = rec["curves"]["pbt"], rec["curves"]["fixed"]
    assert len(pbt["wall_s"]) == len(fixed["wall_s"]) == 2  # 4 iterations, 2 per chunk
    # the same members and hyper-parameters until the first selection round
    assert pbt["best"][0] == fixed["best"][0] and pbt["median"][0] == fixed["median"][0]
    assert np.all(np.diff(pbt["wall_s"]) > 0)
    t = rec["time_to_target_s"]
    assert t["pbt"] == [pbt["wall_s"][0]] * 2  # every member is past a target of -1e9
    assert t["fixed_best_member"] == t["fixed_median_member"] == [fixed["wall_s"][0]] * 2
    assert all(v is not None for v in rec["final_return"]["fixed_median"])
    assert set(rec["hparams"]) == {
        "agent/actor_lr",
        "agent/critic_lr",
        "agent/tau",
        "agent/noise_scale",
    }
