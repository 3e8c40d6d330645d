"""The benchmark command at tiny sizes: it runs, reports sane figures, compares to anchors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from experiments.benchmarks import run
from tests import run_folder_util as rf


def test_quick_suite_end_to_end(tmp_path):
    """``python -m experiments.benchmarks.run --suite=quick``: the Tag env rows (one per
    backend asked), the CartPole row and the two training rows, each a JSON line with
    sane figures; a matching anchor gives a ratio line."""
    anchor = {
        "bench": "A1_warpdrive_tag_env", "num_envs": 8, "num_taggers": 2, "num_runners": 6,
        "use_full_observation": False, "env_steps_per_s": 1.0,
    }  # fmt: skip
    (tmp_path / "anchor.jsonl").write_text(json.dumps(anchor) + "\n")
    out = tmp_path / "out.jsonl"
    args = [
        "--suite=quick", "--backends=xla", "--num_steps=2", "--repeats=1",
        "--train_iterations=1", f"--out={out}", f"--compare={tmp_path}/anchor*.jsonl",
    ]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.benchmarks.run", *args],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    benches = [r["bench"] for r in records]
    assert benches == ["tag_continuous_env"] * 2 + ["cartpole_env"] + ["train"] * 2
    for r in records:
        assert r["env_steps_per_s"] > 0 and r["seconds_median"] > 0 and r["device"]
        assert r["agent_steps_per_s"] == pytest.approx(r["env_steps_per_s"] * r["num_agents"])
    tag = [r for r in records if r["bench"] == "tag_continuous_env"]
    assert [(r["env_backend"], r["use_full_observation"]) for r in tag] == [
        ("xla", False), ("xla", True)
    ]  # fmt: skip
    assert not any(r["fold"] for r in tag)  # the Tag rows time the env's own outputs
    assert [r["name"] for r in records[3:]] == ["tag_ppo_tiny", "cartpole_a2c_tiny"]
    ratios = proc.stdout.split("ratios against anchors:")[1].strip().split("\n\n")[0]
    ratios = ratios.splitlines()  # printed before the results are written
    assert len(ratios) == 1 and "A1_warpdrive_tag_env" in ratios[0]


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match=r"unknown backend\(s\) \['jax'\]"):
        run.run_suite("quick", 2, 1, ["jax"])


def test_compare_matches_each_anchor_kind(tmp_path):
    """`load_anchors` reads JSON lines (WarpDrive's training lines give their measured
    throughput and env count; breakdown lines are skipped) and `compare` pairs each
    record with the anchors of the same config only."""
    anchors = [
        {"bench": "A1_warpdrive_tag_env", "num_envs": 8, "num_taggers": 2, "num_runners": 6,
         "use_full_observation": True, "env_steps_per_s": 2.0},
        {"bench": "A2_A3_warpdrive_train", "config": "tag_continuous",
         "steps_per_env_per_iter": 25, "measured_env_steps_per_s_excl_first_iter": 4.0,
         "used_trainer_cfg": {"num_envs": 1000}},
        {"bench": "B_gymnax", "env": "CartPole-v1", "num_envs": 64, "env_steps_per_s": 5.0},
        {"bench": "B_gymnax", "env": "CartPole-v1", "num_envs": 64, "env_steps_per_s": 9.0,
         "kind": "breakdown"},
    ]  # fmt: skip
    path = tmp_path / "anchors.jsonl"
    path.write_text("# a comment line\n" + "\n".join(json.dumps(a) for a in anchors) + "\n")
    loaded = run.load_anchors(f"{tmp_path}/*.jsonl,{tmp_path}/none*.jsonl")
    want = ["A1_warpdrive_tag_env", "A2_A3_warpdrive_train", "B_gymnax"]
    assert [a["bench"] for a in loaded] == want
    env_rec = dict(
        bench="tag_continuous_env", num_envs=8, num_taggers=2, num_runners=6,
        use_full_observation=True, num_other_agents_observed=3, env_backend="xla",
        env_steps_per_s=20.0, agent_steps_per_s=160.0, ms_per_batch_step=1.0, compile_s=1.0,
    )  # fmt: skip
    records = [
        env_rec,
        {**env_rec, "use_full_observation": False},  # no anchor of that config
        {"bench": "train", "name": "tag_a2c", "num_envs": 1000, "num_steps": 25,
         "env_steps_per_s": 40.0},
        {"bench": "cartpole_env", "num_envs": 64, "env_steps_per_s": 50.0,
         "agent_steps_per_s": 50.0, "ms_per_batch_step": 1.0, "compile_s": 1.0},
    ]  # fmt: skip
    lines = run.compare(records, loaded)
    assert len(lines) == 3
    assert [float(ln.rsplit(":", 1)[1].rstrip("x")) for ln in lines] == [10.0, 10.0, 10.0]


def test_env_step_timer_compiles_once_and_times_again():
    """`timing.EnvStepTimer`: compiled once when built, then timed as often as asked with
    that same executable (no host transfer: `time_compiled`'s guard; a repeated timing
    compiles nothing; the donated carry is a copy, so the reset state survives), each
    record valid; `time_env_steps` gives the same kind of record."""
    import jax

    import jaxdrive
    from experiments.benchmarks import timing

    env, params = jaxdrive.make("CartPole-v1")
    timer = timing.EnvStepTimer(env, params, num_envs=4, num_steps=3)
    compiled = timer._compiled
    first, second = timer.time(repeats=2), timer.time(repeats=1)
    compiles = []
    listener = lambda event, *_, **__: compiles.append(event)
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        timer.time(repeats=1)  # the same sizes again: nothing to compile
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert "/jax/core/compile/backend_compile_duration" not in compiles, compiles
    assert timer._compiled is compiled
    # the program donates its carry; the timer's reset state survives (each call a copy)
    assert not any(a.is_deleted() for a in jax.tree.leaves((timer._state, timer._ts)))
    for rec in (first, second):
        assert rec["env_steps_per_s"] > 0 and rec["num_steps"] == 3 and rec["num_envs"] == 4
        assert rec["compile_s"] == round(timer.compile_s, 3)
    assert len(first["seconds_all"]) == 2 and len(second["seconds_all"]) == 1
    rec = timing.time_env_steps(env, params, 4, 3, repeats=1, fold=False)
    assert set(rec) == set(first) and rec["env_steps_per_s"] > 0 and not rec["fold"]


def test_final_returns_weight_iterations_by_episodes_done():
    import numpy as np

    from experiments.benchmarks.training import _final_returns

    metrics = {
        "episode_return/agent": np.array([[9.0, 500.0, 0.0, 480.0, 0.0]]),
        "episodes_done": np.array([[3.0, 1.0, 0.0, 3.0, 0.0]]),
    }
    out = _final_returns(metrics, last=2)["episode_return/agent"]
    np.testing.assert_allclose(out, [(500.0 + 3 * 480.0) / 4])
    # iterations with no episode are skipped, however many come last
    sparse = {
        "episode_return/agent": np.array([-150.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
        "episodes_done": np.array([16.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
    }
    np.testing.assert_allclose(_final_returns(sparse, last=5)["episode_return/agent"], -150.0)


def test_learning_run_compiles_init_and_run_apart_and_trains_every_iteration():
    """`learning_run` gives the returns of init followed by every iteration (the same
    two programs run by hand), per seed, with compile time inside the wall time."""
    import jax
    import numpy as np

    from experiments.benchmarks.training import _build, learning_run, load_config

    config = load_config("cartpole", "tiny")
    out = learning_run(config, num_seeds=2, last=2)
    _, _, trainer = _build(config)
    keys = jax.random.split(jax.random.PRNGKey(int(config.seed)), 2)
    rs = jax.jit(jax.vmap(trainer.init))(keys)
    _, metrics = jax.jit(jax.vmap(lambda r: trainer.chunk(r, trainer.num_iterations)))(rs)
    assert 0 < out["compile_s"] <= out["wall_s_incl_compile"]
    assert out["total_env_steps"] == trainer.num_iterations * trainer.env_steps_per_iteration
    assert out["_curves"]["episode_return/agent"].shape == (trainer.num_iterations,)
    done = np.asarray(metrics["episodes_done"])
    want = np.asarray(metrics["episode_return/agent"])[:, -2:]
    weights = done[:, -2:]
    np.testing.assert_allclose(
        out["final_returns"]["episode_return/agent"],
        (want * weights).sum(1) / weights.sum(1),
        rtol=1e-5,
    )


def test_seed_summary_iqm_and_bootstrap_interval():
    import numpy as np
    from scipy import stats

    from experiments.benchmarks.training import seed_summary

    rng = np.random.default_rng(3)
    for n in (1, 3, 4, 10, 17):
        v = rng.normal(size=n)
        out = seed_summary(v, resamples=500)
        assert out["n"] == n and np.isclose(out["mean"], v.mean())
        assert np.isclose(out["iqm"], stats.trim_mean(v, 0.25))
        lo, hi = out["iqm_ci95"]
        assert v.min() <= lo <= hi <= v.max()
    # an outlier moves the mean, not the IQM
    v = np.array([1.0, 2.0, 3.0, 4.0, 1000.0])
    assert seed_summary(v)["iqm"] == 3.0
    with pytest.raises(ValueError, match="at least one"):
        seed_summary([])


def test_time_to_return_reads_the_smoothed_curve():
    import numpy as np

    from experiments.benchmarks.training import time_to_return

    curve = np.array([np.nan, -10.0, -8.0, np.nan, -4.0, -2.0, -1.0, 0.0])
    # 2-iteration windows (NaN skipped): none, -10, -9, -8, -4, -3, -1.5, -0.5
    assert time_to_return(curve, -3.0, 2.0, 8.0, window=2) == 2.0 + 8.0 * 6 / 8
    assert time_to_return(curve, 1.0, 2.0, 8.0, window=2) is None
    assert time_to_return(curve, -10.0, 0.0, 8.0, window=1) == 2.0


def test_timed_calls_refuse_host_transfers():
    """A benchmark call that copies to the device inside the timed region fails."""
    import jax
    import numpy as np

    from experiments.benchmarks.timing import time_compiled

    f = jax.jit(lambda x: x * 2).lower(np.ones(3, np.float32)).compile()
    on_device = jax.device_put(np.ones(3, np.float32))
    first, times = time_compiled(lambda: f(on_device), repeats=2)
    assert first > 0 and len(times) == 2
    with pytest.raises(Exception, match="(?i)disallowed host-to-device"):
        time_compiled(lambda: f(np.ones(3, np.float32)), repeats=1)


def test_tag_tagging_evaluated_per_seed():
    """Two vmapped tiny Tag runs: each seed's taggers are evaluated against its
    own runners (`evaluate_tag_tagging_seeds`, one compiled program for every seed), one
    seed gives the single-run dict."""
    import jax
    import numpy as np

    import algorithms
    import jaxdrive
    from experiments.benchmarks.training import (
        evaluate_tag_tagging,
        evaluate_tag_tagging_seeds,
        load_config,
    )

    config = load_config("tag_continuous", "tiny")
    env, params = jaxdrive.make(config.env_name, **dict(config.env_kwargs))
    trainer = algorithms.make_train(config, env, params)
    # two seeds' runner states (their initial parameters: the evaluation's plumbing is
    # what is tested, not learning)
    rs = jax.jit(jax.vmap(trainer.init))(jax.random.split(jax.random.PRNGKey(0), 2))
    out = evaluate_tag_tagging_seeds(env, params, trainer, rs, 2, num_envs=8)
    assert len(out["per_seed"]) == 2
    ratios = [t["ratio"] for t in out["per_seed"]]
    assert out["ratio_min"] == min(ratios) and np.isclose(out["ratio_mean"], np.mean(ratios))
    second = jax.tree.map(lambda x: x[1], trainer.get_params(rs))
    compiles = []
    listener = lambda event, *_, **__: compiles.append(event)
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:  # the seeds' evaluation compiled the program; another seed compiles nothing
        again = evaluate_tag_tagging(env, params, trainer, second, 8)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert "/jax/core/compile/backend_compile_duration" not in compiles, compiles
    assert out["per_seed"][1] == again
    one = jax.tree.map(lambda x: x[:1], rs)
    assert evaluate_tag_tagging_seeds(env, params, trainer, one, 1, num_envs=8) == (
        evaluate_tag_tagging(
            env, params, trainer, jax.tree.map(lambda x: x[0], trainer.get_params(rs)), 8
        )
    )
    with pytest.raises(ValueError, match="num_envs must be >= 1, got 0"):
        evaluate_tag_tagging(env, params, trainer, second, 0)


def test_profile_trace_summaries_on_cpu(tmp_path):
    """`profile.summarize_trace` falls back to the host's XLA ops on a CPU trace, and
    `profile.kernel_details` (device kernels' launch stats) is then empty; both name the
    folder when it holds no trace."""
    import jax
    import jax.numpy as jnp

    from experiments.benchmarks import profile

    f = jax.jit(lambda x: jnp.sin(x) * 2.0)
    x = jnp.ones((64,))
    f(x).block_until_ready()
    with jax.profiler.trace(str(tmp_path)):
        f(x).block_until_ready()
    kind, totals = profile.summarize_trace(str(tmp_path))
    assert kind == "host"  # no device plane on a CPU
    assert all(ms >= 0 and n >= 1 for ms, n in totals.values())
    assert profile.kernel_details(str(tmp_path)) == {}
    assert profile.kernel_table(totals, 3)[0].split()[:2] == ["ms", "launches"]
    for fn in (profile.summarize_trace, profile.kernel_details):
        with pytest.raises(FileNotFoundError, match="no \\*.xplane.pb"):
            fn(str(tmp_path / "empty"))


def test_profile_script_tiny(tmp_path) -> None:
    """``python -m experiments.benchmarks.profile --tiny``: a target timed, traced and
    summarised on the CPU."""
    out = subprocess.run(
        [sys.executable, "-m", "experiments.benchmarks.profile", "--tiny", "--hlo=false",
         "--targets=cartpole_env", f"--trace_dir={tmp_path}", "--top=5"],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    assert "== cartpole_env: " in out.stdout
    assert "(all)" in out.stdout


def test_anchor_line_that_is_not_json_is_located(tmp_path):
    """An anchor line that is not JSON is refused naming the file and the line."""
    (tmp_path / "a.jsonl").write_text('{"bench": 1}\n{"bench": \n')
    with pytest.raises(ValueError, match=r"a\.jsonl:2: not a JSON record"):
        run.load_anchors(f"{tmp_path}/a.jsonl")


def test_record_sink_writes_each_record_once(tmp_path):
    """Records a suite hands to the sink are on disk at once; the end-of-run append
    (`RecordSink.unwritten`) leaves them out, so every record is written once."""
    path = tmp_path / "out.jsonl"
    sink = run.RecordSink(str(path))
    first, second = {"a": 1}, {"a": 1}  # equal, not the same record
    sink.add(first)
    assert [json.loads(x) for x in path.read_text().splitlines()] == [{"a": 1}]
    rest = sink.unwritten([first, second])
    assert len(rest) == 1 and rest[0] is second
    run.append_records(str(path), rest)
    assert len(path.read_text().splitlines()) == 2


def test_append_records_keeps_old_lines_and_names_the_path(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text('{"old": 1}')  # a last line without its newline
    run.append_records(str(path), [{"a": 1}, {"b": 2}])
    assert [json.loads(x) for x in path.read_text().splitlines()] == [
        {"old": 1}, {"a": 1}, {"b": 2}
    ]  # fmt: skip
    with pytest.raises(OSError) as e:
        run.append_records(str(tmp_path), [{"a": 1}])  # a folder: the rename fails
    assert e.value.filename == str(tmp_path)
    assert not (tmp_path.parent / f"{tmp_path.name}.tmp").exists()


def test_bad_flags_are_one_line_before_any_work(tmp_path):
    """Bad command lines print one ``error:`` line naming the flag (and path), print
    nothing on stdout and exit with status 2 before any suite runs: flag values absl
    cannot check (names of rows, backends, modes, algorithms, env counts, matmul
    precisions, MPE learning runs, reference returns naming no run, overrides of keys
    the config lacks), positional arguments, a value absl refuses, an ``--out`` inside a
    file, naming a folder, in a folder that does not exist or is not writable, and a
    ``--compare`` pattern matching no file (one process runs them all, the suites' work
    replaced by a failure: `rf.commands_in_one_process`)."""
    (tmp_path / "file").write_text("x")
    read_only = tmp_path / "ro"
    read_only.mkdir(mode=0o500)
    out = f"--out={tmp_path / 'out.jsonl'}"
    MPE = "--suite=mpe_learning"
    cases = [
        (["--learning_runs=bogus"], "error: --learning_runs: unknown ['bogus']"),
        (["--scaling_modes=weak,bogus"], "error: --scaling_modes: unknown ['bogus']"),
        (["--backends=foo"], "error: --backends: unknown ['foo']"),
        (["--learn_algos=bogus"], "error: --learn_algos: unknown ['bogus']"),
        (["--locomotion_envs=abc"], "error: --locomotion_envs: 'abc' is not a number"),
        (["--matmul_precision=bogus"], "error: --matmul_precision: 'bogus' is not one of"),
        (["extra"], "error: unexpected arguments ['extra']"),
        (["--num_steps=abc"], "error: flag --num_steps=abc: "),
        ([MPE, "--mpe_runs=bogus"],
         "error: --mpe_runs: 'bogus': unknown config preset(s) ['bogus']"),
        ([MPE, "--mpe_runs=spread+tiny", "--mpe_reference_returns=tag=-5"],
         "error: --mpe_reference_returns: 'tag=-5' is not RUN=RETURN"),
        ([MPE, "--mpe_runs=spread+tiny", "--mpe_overrides=algo.nope=1"],
         "error: --mpe_overrides: 'algo.nope=1' is not KEY=LITERAL"),
        ([f"--compare={tmp_path}/none*.jsonl"],
         f"error: --compare={tmp_path}/none*.jsonl: {tmp_path}/none*.jsonl matches no file"),
    ]  # fmt: skip
    cases = [([*args, out], start, "") for args, start in cases]
    for path, cause in [
        (tmp_path / "file" / "out.jsonl", "is a file"),
        (tmp_path, "is a folder"),
        (tmp_path / "nope" / "out.jsonl", "does not exist"),
    ] + ([(read_only / "out.jsonl", "not writable")] if os.geteuid() != 0 else []):
        cases.append(([f"--out={path}"], f"error: --out={path}: ", cause))
    prelude = "def work(*a, **k):\n    raise RuntimeError('a suite ran')\nmodule.run_suite = work"
    commands = [["--suite=quick", *c[0]] for c in cases]
    results = rf.commands_in_one_process("experiments.benchmarks.run", commands, prelude)
    for (args, start, cause), (code, err, std) in zip(cases, results, strict=True):
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith(start), (args, err)
        assert cause in lines[0] and std == "", (args, err, std)


def test_learning_curve_evaluates_after_chunks_and_reads_crossings():
    """`learning_curve` (the locomotion learning suite's loop) trains in chunks,
    evaluates after every ``eval_every`` chunks and at the end, and reports each point's
    env steps and wall time with the first crossing of every threshold."""
    import math

    from experiments.benchmarks.locomotion_learning import (
        THRESHOLDS,
        _first_crossings,
        learning_curve,
    )
    from experiments.benchmarks.training import load_config

    config = load_config("pendulum", "tiny")  # 4 iterations of 8 env steps, chunks of 2
    rec = learning_curve(config, budget_s=600.0, eval_every=1, eval_episodes=2)
    curve = rec["curve"]
    assert [p["env_steps"] for p in curve] == [16, 32] and rec["env_steps"] == 32
    assert curve[0]["wall_s"] <= curve[1]["wall_s"] <= rec["wall_s_total"]
    assert all(math.isfinite(p["eval_return"]) and p["eval_nonfinite"] == 0 for p in curve)
    assert rec["final_eval_return"] == curve[-1]["eval_return"]
    assert rec["best_eval_return"] == max(p["eval_return"] for p in curve)
    st = rec["startup"]
    assert st["init"]["name"] and st["chunk"]["compile_seconds"] > 0
    assert 0 < st["programs_ready_s"] <= st["first_chunk_end_s"] <= curve[0]["wall_s"]
    assert all(0 <= p["eval_s"] <= p["wall_s"] for p in curve)
    # Pendulum's returns are negative: no threshold is crossed
    assert rec["first_wall_s_at_return"] == {f"{t:g}": None for t in THRESHOLDS}
    points = [(1.0, 500.0), (2.0, 3500.0), (3.0, 2000.0), (4.0, 5200.0)]
    crossings = _first_crossings([{"wall_s": w, "eval_return": r} for w, r in points])
    assert crossings == {"1000": 2.0, "3000": 2.0, "4000": 4.0, "5000": 4.0, "6000": None}
