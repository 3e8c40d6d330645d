"""The benchmark command at tiny sizes: it runs, reports sane figures, compares to anchors."""

from __future__ import annotations

import json

import pytest

from experiments.benchmarks import run
from experiments.benchmarks import settings as bench_settings
from experiments.benchmarks.training import load_config, time_training


def test_env_suite_quick_and_compare(tmp_path):
    records = run.run_suite("quick", num_steps=4, repeats=1, impls=["jax"])
    assert {r["bench"] for r in records} == {"tag_continuous_env", "cartpole_env"}
    for r in records:
        assert r["env_steps_per_s"] > 0 and r["seconds_median"] > 0
        assert r["agent_steps_per_s"] == r["env_steps_per_s"] * r["num_agents"]
    # A fake anchor with the same config gives a ratio line.
    anchor = {
        "bench": "A1_warpdrive_tag_env",
        "num_envs": 8,
        "num_taggers": 2,
        "num_runners": 6,
        "use_full_observation": False,
        "env_steps_per_s": 1.0,
    }
    path = tmp_path / "anchor.jsonl"
    path.write_text(json.dumps(anchor) + "\n")
    lines = run.compare(records, run.load_anchors(str(path)))
    assert len(lines) == 1 and "x" in lines[0]


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
    rec = timing.time_env_steps(env, params, 4, 3, repeats=1)
    assert set(rec) == set(first) and rec["env_steps_per_s"] > 0
    assert rec["action_keys"] == "threefry"


def test_env_step_timer_rbg_action_keys():
    """``action_keys="rbg"``: the random actions drawn with rbg keys (one per step,
    seeded from the threefry keys) are valid Tag actions that differ from the threefry
    ones; an unknown PRNG name raises."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxdrive
    from experiments.benchmarks import timing

    env, params = jaxdrive.make("CartPole-v1")
    rec = timing.time_env_steps(env, params, 4, 3, repeats=1, action_keys="rbg")
    assert rec["action_keys"] == "rbg" and rec["env_steps_per_s"] > 0
    with pytest.raises(ValueError, match="action_keys must be one of"):
        timing.EnvStepTimer(env, params, 4, 3, action_keys="philox")
    # the draw the harness makes with such keys: in range, not the threefry actions
    tag, _ = run.make_tag(2, 6, False, 3, "jax", "auto", "auto")
    policy = jaxdrive.random_policy(tag)
    obs = {g: jnp.zeros((8, tag.num_agents(g), 1)) for g in tag.groups}
    key = jax.random.key(3)
    bits = jax.random.bits(key, (4,), jnp.uint32)
    rbg = policy(jax.random.wrap_key_data(bits, impl="rbg"), obs)
    ref = policy(key, obs)
    for g in tag.groups:
        a = np.asarray(rbg[g])
        assert a.shape == ref[g].shape and a.dtype == ref[g].dtype
        assert tag.action_space(g).contains(a)
    assert any(not np.array_equal(rbg[g], ref[g]) for g in tag.groups)


def test_tag_settings_apply_and_restore():
    """`settings.apply_settings` (``--tag_settings``) sets the named module defaults, gives
    them back as a dict and restores them; harness settings and bad ones are refused."""
    from environments.tag_continuous import grid_knn, knn_obs

    before = (grid_knn.GRID_PREP_CELL_STARTS, knn_obs.SORTED_ROWS)
    settings, restore = bench_settings.apply_settings("gstarts=runs/wsorted=1")
    try:
        assert settings == {"gstarts": "runs", "wsorted": True}
        assert (grid_knn.GRID_PREP_CELL_STARTS, knn_obs.SORTED_ROWS) == ("runs", True)
    finally:
        restore()
    assert (grid_knn.GRID_PREP_CELL_STARTS, knn_obs.SORTED_ROWS) == before
    assert bench_settings.apply_settings("")[0] == {}
    with pytest.raises(ValueError, match="not a module setting"):
        bench_settings.apply_settings("step=vector")
    with pytest.raises(ValueError, match="unknown setting"):
        bench_settings.apply_settings("nosuch=1")


def test_training_throughput_tiny():
    config = load_config("cartpole", "tiny,a2c")
    rec = time_training(config, iterations=2, repeats=1)
    assert rec["env_steps_per_s"] > 0
    assert rec["num_envs"] == config.num_envs and rec["algorithm"] == "a2c"


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


def test_timed_calls_refuse_host_transfers():
    """A benchmark call that copies to the device inside the timed region fails."""
    import jax
    import numpy as np
    import pytest

    from experiments.benchmarks.timing import time_compiled

    f = jax.jit(lambda x: x * 2).lower(np.ones(3, np.float32)).compile()
    on_device = jax.device_put(np.ones(3, np.float32))
    first, times = time_compiled(lambda: f(on_device), repeats=2)
    assert first > 0 and len(times) == 2
    with pytest.raises(Exception, match="(?i)disallowed host-to-device"):
        time_compiled(lambda: f(np.ones(3, np.float32)), repeats=1)


def test_tag_tagging_evaluated_per_seed():
    """Two vmapped tiny Tag runs: each seed's trained taggers are evaluated against its
    own runners (`evaluate_tag_tagging_seeds`, one compiled program for every seed), one
    seed gives the single-run dict."""
    import jax
    import numpy as np

    import algorithms
    import jaxdrive
    from experiments.benchmarks.training import evaluate_tag_tagging, evaluate_tag_tagging_seeds

    config = load_config("tag_continuous", "tiny")
    env, params = jaxdrive.make(config.env_name, **dict(config.env_kwargs))
    trainer = algorithms.make_train(config, env, params)
    rs, _ = jax.jit(jax.vmap(trainer))(jax.random.split(jax.random.PRNGKey(0), 2))
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


def test_rollout_probe_variants_train_alike():
    """The acting-path A/B probe: the program before the joint acting head and the
    logsumexp log-prob ("base") trains a tiny Tag A2C to the same metrics, up to float
    rounding, as today's ("both"); "joint" and "lse" install one new piece each; today's
    code is in place afterwards."""
    import jax
    import numpy as np

    import algorithms
    from algorithms.common import networks
    from algorithms.common.config import make_env
    from experiments.benchmarks import rollout_probe
    from experiments.benchmarks.training import load_config

    act, lp = networks.ActorCritic.act, networks.MultiCategorical.log_prob
    out, pieces = {}, {}
    try:
        for v in ("base", "joint", "lse", "both"):
            rollout_probe._set(v)
            pieces[v] = (networks.ActorCritic.act is act, networks.MultiCategorical.log_prob is lp)
            if v in ("base", "both"):
                c = load_config("tag_continuous", "tiny,a2c")
                _, m = jax.jit(algorithms.make_train(c, *make_env(c)))(jax.random.PRNGKey(0))
                out[v] = jax.device_get(m)
    finally:
        rollout_probe._set("both")
    assert networks.ActorCritic.act is act and networks.MultiCategorical.log_prob is lp
    assert pieces == {
        "base": (False, False), "joint": (True, False), "lse": (False, True), "both": (True, True)
    }  # fmt: skip
    for k in out["base"]:
        np.testing.assert_allclose(out["both"][k], out["base"][k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_train_suite_dense_impl_applies_to_bfloat16_tag_policies(monkeypatch):
    """``--tag_dense_impl`` reaches the bfloat16 relu Tag policies (and is recorded);
    float32 policies keep the default layers."""
    bf16 = {f"policies.{p}.compute_dtype": "bfloat16" for p in ("tagger", "runner")}
    wide = {f"policies.{p}.hidden_sizes": (16, 16) for p in ("tagger", "runner")}
    suite = [
        ("tiny_bf16", "tag_continuous", "tiny,a2c", {**bf16, **wide}),
        ("tiny_f32", "tag_continuous", "tiny,a2c", {**wide}),
    ]
    monkeypatch.setitem(run.TRAIN_CONFIGS, "test_dense", suite)
    recs = run.run_train_suite("test_dense", 1, 1, dense_impl="pallas", head_impl="pallas")
    assert [r["dense_impl"] for r in recs] == [["pallas"], ["xla"]]
    assert [r["head_impl"] for r in recs] == ["pallas", "pallas"]
    assert all(r["env_steps_per_s"] > 0 for r in recs)


def test_env_ab_probe_tiny(tmp_path, monkeypatch, capsys):
    """`env_ab_probe` times its variants in interleaved rounds, finds their observations
    equal (the writer forms and the kernel settings compute the same function), restores
    the module defaults, prints each variant's traced kernels with ``details``, and
    rejects malformed variants."""
    import pytest

    from environments.tag_continuous import kernels, knn_obs
    from experiments.benchmarks import env_ab_probe

    assert env_ab_probe.parse_variant("pallas") == ("pallas", ())
    assert env_ab_probe.parse_variant("xla/chunk=16/sort=argsort/block=512") == (
        "xla", (("chunk", 16), ("sort", "argsort"), ("block", 512))
    )  # fmt: skip
    assert env_ab_probe.parse_variant("pallas/step=vector/fold=0/elements=64") == (
        "pallas", (("step", "vector"), ("fold", "0"), ("elements", 64))
    )  # fmt: skip
    assert env_ab_probe.parse_variant("pallas/network=insert/draws=0") == (
        "pallas", (("network", "insert"), ("draws", False))
    )  # fmt: skip
    assert env_ab_probe.parse_variant("pallas/fallback=0/wablate=const") == (
        "pallas", (("fallback", False), ("wablate", "const"))
    )  # fmt: skip
    assert env_ab_probe.parse_variant("pallas/wlayout=flat/wrows=8/tevict=none") == (
        "pallas", (("wlayout", "flat"), ("wrows", 8), ("tevict", None))  # "none": None
    )  # fmt: skip
    assert env_ab_probe.parse_variant("pallas/wingame=0/wtime=1/gpwarps=8") == (
        "pallas", (("wingame", False), ("wtime", True), ("gpwarps", 8))
    )  # fmt: skip
    assert env_ab_probe.parse_variant("pallas/large=grid/gcell=1.5/gunroll=4/gpos=0") == (
        "pallas", (("large", "grid"), ("gcell", 1.5), ("gunroll", 4), ("gpos", False))
    )  # fmt: skip
    bad = (
        "rows", "pallas/chunk=6", "pallas/unroll=x", "pallas/sort=radix", "pallas/lanes=4",
        "pallas/step=cuda", "pallas/fold=2", "pallas/warps=3", "pallas/draws=yes",
        "pallas/network=bubble", "pallas/pwarps=6", "pallas/wablate=all",
        "pallas/large=cells", "pallas/gcell=x", "pallas/gtarget=-1", "pallas/queries=some",
    )  # fmt: skip
    for text in bad:
        with pytest.raises(
            ValueError, match="variant must be|power of two|one of|unknown|1 or 0|number > 0"
        ):
            env_ab_probe.parse_variant(text)
    with pytest.raises(ValueError, match="rounds"):
        env_ab_probe.probe([(2, 1, 3)], [("xla", ())], 2, 0, 1, 1, 0)
    defaults = (
        kernels.CHUNK_SIZE, kernels.BRUTE_UNROLL, kernels.SORT_KEYS, knn_obs.DEFAULT_BLOCK,
        kernels.PREP_WARPS,
    )  # fmt: skip
    out = tmp_path / "ab.jsonl"
    # The sorted search from 8 agents (default 256), so chunk and sort are exercised.
    monkeypatch.setattr(kernels, "SORTED_MIN_AGENTS", 8)
    monkeypatch.setattr(kernels, "LARGE_METHOD", "sorted")
    settings = (("chunk", 4), ("unroll", 2), ("sort", "argsort"), ("block", 64))
    settings += (("step", "vector"), ("fold", "0"), ("elements", 64), ("draws", False))
    settings += (("pwarps", 2),)
    variants = [("xla", (("chunk", 16),)), ("pallas", settings)]
    capsys.readouterr()
    recs = env_ab_probe.probe([(2, 2, 18)], variants, 2, 2, 2, 1, 2, str(out), details=True)
    printed = capsys.readouterr().out
    assert printed.count("us/step") >= 2, printed  # each variant's traced kernels (round 1)
    now = (
        kernels.CHUNK_SIZE, kernels.BRUTE_UNROLL, kernels.SORT_KEYS, knn_obs.DEFAULT_BLOCK,
        kernels.PREP_WARPS,
    )  # fmt: skip
    assert now == defaults
    names = [
        "xla/chunk=16",
        "pallas/chunk=4/unroll=2/sort=argsort/block=64/step=vector/fold=0/elements=64/draws=0"
        "/pwarps=2",
    ]
    assert [(r["variant"], r["round"]) for r in recs] == [(v, i) for i in (1, 2) for v in names]
    assert recs[1]["check"]["differ"] == 0
    assert all(r["ms_per_step"] > 0 for r in recs)
    assert len(out.read_text().splitlines()) == 4


def test_profile_trace_summaries_on_cpu(tmp_path):
    """`profile.summarize_trace` falls back to the host's XLA ops on a CPU trace, and
    `profile.kernel_details` (device kernels' launch stats) is then empty; both name the
    folder when it holds no trace."""
    import jax
    import jax.numpy as jnp
    import pytest

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


@pytest.mark.slow
def test_profile_script_tiny(tmp_path) -> None:
    """`python -m experiments.benchmarks.profile --tiny`: the 2000-env Tag target (as the
    suite builds it, WarpDrive's settings; here with ``--settings``' Philox draws),
    traced and summarised on the CPU."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "experiments.benchmarks.profile", "--tiny", "--hlo=false",
         "--targets=tag_big", f"--trace_dir={tmp_path}", "--top=5", "--settings=mdraw=philox"],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    assert "== tag_big: " in out.stdout
    assert "(all)" in out.stdout


def test_draws_probe_checks_and_times() -> None:
    """`draws_probe`: each hash method's kernel (interpret mode here) agrees with its XLA
    form; every draw form times to a positive figure and the module default is restored
    (also after a bad form)."""
    from experiments.benchmarks import draws_probe
    from jaxdrive import spaces

    draws_probe.check_kernels(37, (21, 21))
    before = spaces.MULTI_DISCRETE_DRAW
    for draw in spaces.MULTI_DISCRETE_DRAWS:
        assert draws_probe.time_draws(draw, 50, (3, 5), 2, 1) > 0
    with pytest.raises(ValueError, match="MULTI_DISCRETE_DRAW must be one of"):
        draws_probe.time_draws("xorwow", 50, (3, 5), 2, 1)
    assert spaces.MULTI_DISCRETE_DRAW == before


def test_ncu_sass_summary(tmp_path) -> None:
    """`ncu_sass` on an export of Nsight Compute's source page (two kernels, the CSV
    layout ncu 2025.3 writes): opcode shares, stall reasons, the hottest instruction;
    the script names the kernels it has when asked for another."""
    import subprocess
    import sys

    from experiments.benchmarks import ncu_sass

    head = (
        '"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed",'
        '"L2 Theoretical Sectors Global","L2 Theoretical Sectors Global Excessive",'
        '"stall_long_sb","stall_math","stall_long_sb (Not Issued)"\n'
    )
    rows = (
        '"0x10","      IMAD R1, R2, 0x47, R3","10","300","0","0","2","8","1"\n'
        '"0x20","      LDG.E R6, desc[UR8][R16.64]","90","100","1,364","300","85","5","40"\n'
        '"0x30","      @!P6  STG.E desc[UR8][R4.64], R23","0","100","400","80","0","0","0"\n'
    )
    text = '"Kernel Name","tag_knn_obs",\n' + head + rows + '"Kernel Name","other",\n' + head
    kernels = ncu_sass.read_kernels(text)
    assert list(kernels) == ["tag_knn_obs", "other"] and len(kernels["tag_knn_obs"]) == 3
    lines = ncu_sass.summarize(kernels["tag_knn_obs"], top=1)
    assert lines[0] == "warp instructions executed: 500"
    assert any(ln.split()[:2] == ["IMAD", "60.0%"] for ln in lines)
    assert any(ln.split()[:2] == ["STG", "20.0%"] for ln in lines)  # predicated: its opcode
    assert "stalls: long_sb 87.0%, math 13.0%" in lines
    assert "LDG.E" in lines[-1] and "l2      1,364 +300" in lines[-1]
    assert ncu_sass.summarize([]) == ["(no instructions)"]
    path = tmp_path / "sass.csv"
    path.write_text(text)
    run = lambda *a: subprocess.run(
        [sys.executable, "-m", "experiments.benchmarks.ncu_sass", f"--csv={path}", *a],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    ok = run("--kernel=tag_knn_obs", "--top=2")
    assert ok.returncode == 0 and "== tag_knn_obs" in ok.stdout and "== other" not in ok.stdout
    bad = run("--kernel=nope")
    assert bad.returncode != 0 and "no kernel 'nope'" in bad.stderr and "tag_knn_obs" in bad.stderr
