r"""One benchmark command: ``python -m experiments.benchmarks.run --suite=<name>``.

Suites:
  env      Tag env-only stepping, WarpDrive's Tag settings at the anchors' sizes, once per
           backend of ``--backends``.
  env_big  the 10 envs × (100+10,000 agents) Tag config (each backend).
  classic  CartPole env-only stepping at 1e3..1e6 envs (gymnax's scheme).
  train    end-to-end training throughput: Tag 1000 envs × (10+100) (A2C as WarpDrive
           runs it: its shared-torso network, then PPO), CartPole 10,000 envs (A2C, fc 32×32).
  learning the learning targets: PPO CartPole (8 vmapped seeds), PPO Acrobot, DDPG, SAC
           and TD3 Pendulum, PPO Tag (the ``advnorm`` preset, 1e8 env steps; trained vs
           random taggers); return targets also give the wall time (compile included)
           at which the seeds' mean return first reaches them (5-iteration window).
  quick    tiny sizes of the env and train suites, for CPUs and the test suite.
  marl_learning  Q-learning return vs wall time: PQN CartPole, VDN/QMIX/IQL MPE
           simple_spread (`experiments.benchmarks.qlearning`); SMAX win rate vs env steps
           and wall time: MAPPO (recurrent, feed-forward) and QMIX, ``--smax_seeds`` seeds
           (`experiments.benchmarks.smax_learning`); ``--marl_runs`` picks the rows.
  mpe, mpe_learning, mpe_parity  the MPE suites (`experiments.benchmarks.mpe`): env-only
           stepping against JaxMARL's MPE, IPPO/MAPPO on simple_spread (10 vmapped seeds),
           10⁴-transition parity with mpe2 per scenario; mpe_quick: mpe at a tiny size.
  locomotion_learning  PPO/SAC/TD3 on the MJX locomotion envs (when registered): evaluation
           return against wall time, several seeds, beside Brax's PPO when importable
           (experiments/benchmarks/locomotion_learning.py).
  scaling  data-parallel scaling on 1, 2, 4, ... devices (those present): Tag A2C
           1000 envs × (10+100) per device, CartPole A2C 10,000 envs per device; weak
           (envs per device fixed) and strong (the largest count's global batch, split).
  adapters from_jaxmarl(MPE simple_spread) vs JaxMARL's own env at 1e3..1e5 envs (the
           adapter's overhead ratio), to_gymnasium(CartPole, 1024 envs) from a host loop
           (`experiments.benchmarks.adapters`).
  recurrent  PPO throughput with GRU and LSTM policies beside feed-forward ones: Tag 1000 envs ×
           (10+100), CartPole 10,000 envs (`experiments.benchmarks.recurrent`).
  locomotion     MJX Humanoid-v5/Ant-v5 env-only stepping at ``--locomotion_envs`` beside
           raw ``vmap(mjx.step)`` and Brax's MJX envs (`experiments.benchmarks.locomotion`).
  mujoco_parity  ``--parity_states`` one-step comparisons per MJX env with Gymnasium v5.
  population  16 PPO members on CartPole vs 1, 4 on Tag 1000 envs × (10+100) vs 1, and
           members split over 1, 2, 4, ... devices (`experiments.benchmarks.population`).
  population_learning  PBT vs a fixed-hyper-parameter population, DDPG Pendulum, several
           vmapped seeds (`experiments.benchmarks.population_learning`).

Prints a table and appends one JSON line per measurement to ``--out`` (checked before
any work; the file is rewritten atomically). A bad ``--out`` or ``--compare`` and any
file-system error are one ``error: ...`` line naming the path, exit status 2.
``--compare=PATH[,PATH]`` reads anchor JSON lines (e.g. ``anchors/*.jsonl`` here) and
prints ratios against the matching anchor figures.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

from absl import app, flags

from experiments import common
from experiments.benchmarks import locomotion_learning, mpe, population, population_learning
from experiments.benchmarks.tag_config import make_tag

__all__ = [
    "BACKENDS",
    "SUITES",
    "RecordSink",
    "append_records",
    "compare",
    "load_anchors",
    "run_learning_suite",
    "run_scaling_suite",
    "run_suite",
    "run_train_suite",
]

FLAGS = flags.FLAGS
SUITES = (
    "quick", "env", "env_big", "classic", "train", "learning", "scaling", "marl_learning",
    "adapters", "recurrent", "locomotion", "mujoco_parity", "locomotion_learning", "population",
    "population_learning",
)  # fmt: skip
MPE_SUITES = ("mpe", "mpe_quick", "mpe_learning", "mpe_parity")  # experiments.benchmarks.mpe
BACKENDS = ("auto", "xla", "pallas")
#: The rows of ``--suite=learning`` (`run_learning_suite`).
LEARNING_RUNS = (
    "ppo_cartpole", "ppo_acrobot", "ddpg_pendulum", "sac_pendulum", "td3_pendulum", "ppo_tag",
    "ppo_cartpole_bf16", "ppo_tag_bf16",
)  # fmt: skip
flags.DEFINE_enum("suite", "quick", SUITES + MPE_SUITES, "which benchmark suite to run")
flags.DEFINE_string("out", "experiments/benchmarks/results/results.jsonl", "JSON-lines output")
flags.DEFINE_list("backends", ["xla", "pallas"], f"TagContinuous backends to time {BACKENDS}")
flags.DEFINE_integer("num_steps", 100, "steps per timed call", lower_bound=1)
flags.DEFINE_integer("repeats", 5, "timed calls (median reported)", lower_bound=1)
flags.DEFINE_integer("train_iterations", 5, "iterations per timed training call", lower_bound=1)
flags.DEFINE_integer("num_seeds", 8, "vmapped seeds of the CartPole learning run")
flags.DEFINE_integer("spread_env_steps", 10_000_000, "env steps of the marl_learning MPE runs")
flags.DEFINE_list("marl_runs", None, "rows of --suite=marl_learning (default: all but the opt-in)")
flags.DEFINE_integer("smax_seeds", 3, "vmapped seeds of the SMAX runs", lower_bound=1)
flags.DEFINE_integer("smax_env_steps", 0, "env steps of every SMAX run (0: each run's own)")
flags.DEFINE_float("smax_budget_s", 0.0, "wall-time cap of each SMAX run in s (0: none)")
flags.DEFINE_integer(
    "tag_seeds", 1, "vmapped seeds of the Tag learning runs (each evaluated)", lower_bound=1
)
flags.DEFINE_integer("tag_seed", 0, "config seed of the Tag learning runs (the seeds' root)")
flags.DEFINE_string(
    "matmul_precision",
    "",
    "jax_default_matmul_precision for the train suites (e.g. 'tensorfloat32', 'bfloat16'); "
    "comma-separated to time several",
)
flags.DEFINE_list(
    "scaling_modes",
    ["weak", "strong"],
    "scaling suite: weak (fixed envs per device) and/or strong (fixed global batch)",
)
flags.DEFINE_enum(
    "reset_mode", "auto", ["auto", "select", "cond"], "auto-reset of the classic suite"
)
flags.DEFINE_list(
    "learning_runs",
    ["ppo_cartpole", "ppo_acrobot", "ddpg_pendulum", "sac_pendulum", "td3_pendulum", "ppo_tag"],
    "runs of --suite=learning (also: ppo_cartpole_bf16, ppo_tag_bf16: mixed precision)",
)
flags.DEFINE_integer("tag_learning_steps", 100_000_000, "env steps of the Tag learning runs")
flags.DEFINE_list("locomotion_envs", ["1024", "4096", "16384"], "env counts of --suite=locomotion")
flags.DEFINE_list(
    "locomotion_names",
    ["Humanoid", "Ant"],
    "envs of --suite=locomotion (also HalfCheetah, Hopper, Walker2d)",
)
flags.DEFINE_float(
    "locomotion_compile_limit_s", 240.0, "--suite=locomotion: skip a longer compile (0: no limit)"
)
flags.DEFINE_list(
    "locomotion_impls",
    ["jaxdrive", "mjx_raw", "brax", "jaxdrive_obs", "mjx_raw_obs", "brax_obs"],
    "rows of --suite=locomotion",
)
flags.DEFINE_integer("parity_states", 10_000, "states per env of --suite=mujoco_parity")
flags.DEFINE_enum("parity_model", "mjx", ["mjx", "gymnasium"], "model of --suite=mujoco_parity")
flags.DEFINE_string("compare", "", "anchor JSON lines to compare with (comma-separated globs)")

# (num_envs, taggers, runners, full_obs, k)
TAG_CONFIGS = {
    "env": [
        (2000, 5, 995, False, 10),
        (1000, 10, 100, False, 10),
        (1000, 10, 100, True, 10),
        (100, 10, 100, False, 10),
        (100, 10, 100, True, 10),
    ],
    "env_big": [(10, 100, 10_000, False, 10)],
    "quick": [(8, 2, 6, False, 3), (8, 2, 6, True, 3)],
}
CLASSIC_SIZES = {"classic": [1_000, 10_000, 100_000, 1_000_000], "quick": [64]}


def run_suite(
    suite: str,
    num_steps: int,
    repeats: int,
    backends: tuple[str, ...] = ("auto",),
    reset_mode: str = "auto",
) -> list[dict[str, Any]]:
    """Runs the env-only rows of ``suite``; returns its records (also used by the tests at
    tiny sizes). Tag rows time each of ``backends`` (`TagContinuous`'s) with the env's
    own outputs only; CartPole rows also fold outputs into a scalar each step, as
    gymnax's anchor script does (`time_env_steps`). The default backend, ``"auto"``,
    is the env's own choice: the Pallas kernels on a GPU, plain JAX elsewhere."""
    import jaxdrive
    from experiments.benchmarks.timing import device_info, time_env_steps

    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        raise ValueError(f"unknown backend(s) {unknown}; known: {BACKENDS}")
    info = device_info()
    records = []
    for n, t, r, full, k in TAG_CONFIGS.get(suite, []):
        for backend in backends:
            env, params = make_tag(t, r, full, k, backend)
            rec = time_env_steps(env, params, n, num_steps, repeats, fold=False)
            rec.update(
                bench="tag_continuous_env",
                env_backend=backend,  # ("backend" is the device platform's, device_info)
                num_taggers=t,
                num_runners=r,
                use_full_observation=full,
                num_other_agents_observed=k,
                **info,
            )
            records.append(rec)
            print(_row(rec), flush=True)
    for n in CLASSIC_SIZES.get(suite, []):
        env, params = jaxdrive.make("CartPole-v1")
        rec = time_env_steps(
            env, params, n, num_steps if suite != "classic" else 1000, repeats,
            reset_mode=reset_mode,
        )  # fmt: skip
        rec.update(bench="cartpole_env", reset_mode=reset_mode, **info)
        records.append(rec)
        print(_row(rec), flush=True)
    return records


_TAG = {"num_envs": 1000, "num_steps": 25}
_SHARED = {"policies.tagger.shared_torso": True, "policies.runner.shared_torso": True}
_BF16 = {"policies.tagger.compute_dtype": "bfloat16", "policies.runner.compute_dtype": "bfloat16"}

# (name, config file, preset, overrides)
TRAIN_CONFIGS = {
    "train": [
        ("tag_a2c", "tag_continuous", "a2c", {"num_envs": 1000, "num_steps": 25}),
        ("tag_a2c_bf16", "tag_continuous", "a2c", {**_TAG, **_BF16}),
        ("tag_ppo", "tag_continuous", "", {"num_envs": 1000, "num_steps": 25}),
        ("tag_ppo_shared_bf16", "tag_continuous", "", {**_TAG, **_SHARED, **_BF16}),
        (
            "cartpole_a2c",
            "cartpole",
            "a2c",
            {"num_envs": 10_000, "num_steps": 500, "policies.agent.hidden_sizes": (32, 32)},
        ),
    ],
    "quick": [
        ("tag_ppo_tiny", "tag_continuous", "tiny", {}),
        ("cartpole_a2c_tiny", "cartpole", "tiny,a2c", {}),
    ],
}


def run_train_suite(suite: str, iterations: int, repeats: int) -> list[dict[str, Any]]:
    """Training throughput records of ``suite`` (`TRAIN_CONFIGS`)."""
    import jax

    from experiments.benchmarks.timing import device_info
    from experiments.benchmarks.training import load_config, time_training

    info = device_info()
    records = []
    for name, cfg, preset, over in TRAIN_CONFIGS.get(suite, []):
        config = load_config(cfg, preset, **over)
        config.total_env_steps = max(
            config.total_env_steps, config.num_envs * config.num_steps * iterations
        )
        rec = time_training(config, iterations=iterations, repeats=repeats)
        rec.update(bench="train", name=name, **info)
        records.append(rec)
        print(
            f"train {name:<18} {jax.config.jax_default_matmul_precision or 'default':<14} "
            f"{rec['num_envs']:>6} envs x {rec['num_steps']:>4} steps "
            f"{rec['env_steps_per_s']:>14,.0f} env steps/s {rec['agent_steps_per_s']:>16,.0f} "
            f"agent steps/s  compile {rec['compile_s']:.1f}s",
            flush=True,
        )
    return records


# (config, preset, per-device envs, overrides)
SCALING_CONFIGS = [
    ("tag_continuous", "a2c", 1000, {"num_steps": 25}),
    ("cartpole", "a2c", 10_000, {"num_steps": 500, "policies.agent.hidden_sizes": (32, 32)}),
]


def run_scaling_suite(iterations: int, repeats: int) -> list[dict[str, Any]]:
    """Weak scaling over 1, 2, 4, ... devices (up to those present); prints speedups."""
    import jax

    from experiments.benchmarks.scaling import scaling_records, speedup_lines
    from experiments.benchmarks.timing import device_info

    n = jax.device_count()
    devices = [d for d in (1, 2, 4, 8, 16) if d <= n]
    info = device_info()
    records = []
    for cfg, preset, per_dev, over in SCALING_CONFIGS:
        for mode in FLAGS.scaling_modes:
            recs = scaling_records(
                cfg, preset, devices, per_dev, weak=mode == "weak", iterations=iterations,
                repeats=repeats, **over,
            )  # fmt: skip
            for line in speedup_lines(recs):
                print(line, flush=True)
            for r in recs:
                r.update(**info)
            records += recs
    return records


def _bf16(*policies: str) -> dict[str, str]:
    return {f"policies.{p}.compute_dtype": "bfloat16" for p in policies}


def run_learning_suite(num_seeds: int) -> list[dict[str, Any]]:
    """The learning targets (see the module docstring)."""
    import jaxdrive
    from experiments.benchmarks.timing import device_info
    from experiments.benchmarks.training import (
        evaluate_tag_tagging_seeds,
        learning_run,
        load_config,
        time_to_return,
    )

    info = device_info()
    records = []

    def tag(**over: Any):  # WarpDrive's Tag config, advnorm preset, 1000 envs × 100 steps
        return load_config(
            "tag_continuous",
            "advnorm",
            num_envs=1000,
            num_steps=100,
            total_env_steps=FLAGS.tag_learning_steps,
            seed=FLAGS.tag_seed,
            **over,
        )

    runs = [
        ("ppo_cartpole", load_config("cartpole"), num_seeds, 475.0),
        ("ppo_acrobot", load_config("acrobot"), 1, -100.0),
        ("ddpg_pendulum", load_config("pendulum"), 1, -200.0),
        ("sac_pendulum", locomotion_learning.pendulum_config("sac"), 1, -200.0),
        ("td3_pendulum", locomotion_learning.pendulum_config("td3"), 1, -200.0),
        ("ppo_tag", tag(), FLAGS.tag_seeds, 3.0),
        # mixed precision (compute_dtype bfloat16), otherwise the runs above
        ("ppo_cartpole_bf16", load_config("cartpole", **_bf16("agent")), num_seeds, 475.0),
        ("ppo_tag_bf16", tag(**_bf16("tagger", "runner")), FLAGS.tag_seeds, 3.0),
    ]
    assert tuple(r[0] for r in runs) == LEARNING_RUNS  # what _check_flags accepts
    for name, config, seeds, target in runs:
        if name not in FLAGS.learning_runs:
            continue
        out = learning_run(config, num_seeds=seeds)
        rs, trainer, env = out.pop("_runner_state"), out.pop("_trainer"), out.pop("_env")
        curves = out.pop("_curves")
        out.update(bench="learning", name=name, target=target, **info)
        if not name.startswith("ppo_tag"):  # a return target (Tag's is a tagging ratio)
            # wall time (compile included) at which the seeds' mean return reaches it
            run_s = out["wall_s_incl_compile"] - out["compile_s"]
            out["wall_s_to_target"] = {
                k: time_to_return(c, target, out["compile_s"], run_s) for k, c in curves.items()
            }
        if name.startswith("ppo_tag"):
            _, env_params = jaxdrive.make(config.env_name, **dict(config.env_kwargs))
            out["tagging"] = evaluate_tag_tagging_seeds(env, env_params, trainer, rs, seeds)
        records.append(out)
        print(f"learning {name:<14} {json.dumps(out, default=str)}", flush=True)
    return records


def _row(rec: dict[str, Any]) -> str:
    if rec["bench"] == "tag_continuous_env":
        obs = "full" if rec["use_full_observation"] else f"k={rec['num_other_agents_observed']}"
        what = f"{rec['num_envs']}x({rec['num_taggers']}+{rec['num_runners']}) {obs}"
    else:
        what = f"{rec['num_envs']} envs"
    mem = rec.get("peak_memory_bytes")
    mem_s = f"{mem / 2**30:7.2f} GiB" if mem else "      n/a"
    backend = rec.get("env_backend", "")
    return (
        f"{rec['bench']:<20} {what:<26} {backend:<7} {rec['env_steps_per_s']:>14,.0f} env/s "
        f"{rec['agent_steps_per_s']:>16,.0f} agent/s {rec['ms_per_batch_step']:>9.3f} ms/step "
        f"{mem_s}  compile {rec['compile_s']:.1f}s"
    )


def load_anchors(spec: str) -> list[dict[str, Any]]:
    """Anchor records from comma-separated files or globs (a pattern matching no file
    gives none). A line starting with ``{`` that is not JSON raises ``ValueError`` naming
    the file and line."""
    out = []
    for part in filter(None, spec.split(",")):
        for path in sorted(glob.glob(part)):
            with open(path, encoding="utf8") as fp:
                for lineno, line in enumerate(fp, 1):
                    line = line.strip()
                    if not line.startswith("{"):
                        continue
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise ValueError(f"{path}:{lineno}: not a JSON record ({e.msg})") from None
                    measured = rec.get("measured_env_steps_per_s_excl_first_iter")
                    if measured and not rec.get("env_steps_per_s"):  # WarpDrive training
                        rec["env_steps_per_s"] = measured
                        rec["num_envs"] = rec["used_trainer_cfg"]["num_envs"]
                    if rec.get("env_steps_per_s") and rec.get("kind") != "breakdown":
                        out.append(rec)
    return out


def append_records(path: str, records: list[dict[str, Any]]) -> None:
    """Appends ``records`` as JSON lines to ``path``: the file is rewritten atomically
    (`experiments.common.write_text`), so a failed write leaves the old lines intact;
    an ``OSError`` names the file."""
    old = ""
    if os.path.exists(path):
        with open(path, encoding="utf8") as fp:
            old = fp.read()
    if old and not old.endswith("\n"):
        old += "\n"
    lines = "".join(json.dumps(rec, default=str) + "\n" for rec in records)
    common.write_text(path, old + lines)


class RecordSink:
    """Appends records to ``path`` one at a time as a long suite finishes them, so a run
    stopped part way (a time limit, an interrupt) keeps the records already finished;
    `unwritten` leaves those out of the end-of-run append."""

    def __init__(self, path: str):
        self.path = path
        self._written: list[dict[str, Any]] = []

    def add(self, rec: dict[str, Any]) -> None:
        """Appends ``rec`` to the file now (`append_records`)."""
        append_records(self.path, [rec])
        self._written.append(rec)

    def unwritten(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The records of ``records`` (by identity) not yet added."""
        return [r for r in records if not any(r is w for w in self._written)]


def compare(records: list[dict[str, Any]], anchors: list[dict[str, Any]]) -> list[str]:
    """Lines ``ours / anchor`` for records with a matching anchor config."""
    lines = []
    for rec in records:
        for a in anchors:
            same = False
            if rec["bench"] == "tag_continuous_env" and a.get("bench") == "A1_warpdrive_tag_env":
                same = (
                    a["num_envs"] == rec["num_envs"]
                    and a["num_taggers"] == rec["num_taggers"]
                    and a["num_runners"] == rec["num_runners"]
                    and bool(a["use_full_observation"]) == bool(rec["use_full_observation"])
                )
            elif rec["bench"] == "train" and a.get("bench") == "A2_A3_warpdrive_train":
                same = (
                    a.get("num_envs") == rec["num_envs"]
                    and a.get("steps_per_env_per_iter") == rec["num_steps"]
                    and ("tag" in rec["name"]) == (a.get("config") == "tag_continuous")
                )
            elif rec["bench"] == "cartpole_env" and a.get("bench") == "B_gymnax":
                same = a.get("num_envs") == rec["num_envs"] and a.get("env") == "CartPole-v1"
            if same:
                ratio = rec["env_steps_per_s"] / a["env_steps_per_s"]
                label = (
                    f"train {rec['name']} ({rec.get('matmul_precision', 'default')})"
                    if rec["bench"] == "train"
                    else _row(rec)[:60]
                )
                lines.append(
                    f"{label:<60}  vs {a['bench']} {a['env_steps_per_s']:,.0f}: {ratio:8.1f}x"
                )
    return lines


def main(argv: list[str]) -> None:
    """The absl entry point: a bad ``--out`` or ``--compare`` and any file-system error
    are one ``error: ...`` line with exit status 2 (`experiments.common.exit_on_error`);
    ``--out`` and ``--compare`` are checked before any work."""
    common.refuse_extra_args(argv)
    common.exit_on_error(_run)


def _check_flags() -> None:
    """The suite flags whose values absl cannot check, before any work: ``ValueError``
    naming the flag."""
    import jax

    def refuse(flag: str, bad: list[str], known: tuple[str, ...]) -> None:
        if bad:
            raise ValueError(f"--{flag}: unknown {bad}; known: {list(known)}")

    refuse("backends", [b for b in FLAGS.backends if b not in BACKENDS], BACKENDS)
    modes = ("weak", "strong")
    refuse("scaling_modes", [m for m in FLAGS.scaling_modes if m not in modes], modes)
    refuse(
        "learning_runs", [n for n in FLAGS.learning_runs if n not in LEARNING_RUNS], LEARNING_RUNS
    )
    algos = ("ppo", "sac", "td3")
    refuse("learn_algos", [a for a in FLAGS.learn_algos if a not in algos], algos)
    for n in FLAGS.locomotion_envs:
        if not n.isdigit() or int(n) < 1:
            raise ValueError(f"--locomotion_envs: {n!r} is not a number of envs >= 1")
    for precision in filter(None, FLAGS.matmul_precision.split(",")):
        try:
            with jax.default_matmul_precision(precision):
                pass
        except ValueError as e:
            raise ValueError(f"--matmul_precision: {precision!r} is not one of JAX's: {e}") from e


def _run() -> None:
    import jax

    _check_flags()
    out = common.check_output_path(FLAGS.out)
    for part in filter(None, FLAGS.compare.split(",")):
        if not glob.glob(part):
            raise ValueError(f"--compare={FLAGS.compare}: {part} matches no file")
    anchors = load_anchors(FLAGS.compare)
    mpe_runs = mpe.learning_runs() if FLAGS.suite == "mpe_learning" else None
    sink = RecordSink(out)  # learning suites append each record when it is finished
    records = run_suite(
        FLAGS.suite, FLAGS.num_steps, FLAGS.repeats, FLAGS.backends, FLAGS.reset_mode
    )
    for precision in FLAGS.matmul_precision.split(",") if FLAGS.matmul_precision else [""]:
        with jax.default_matmul_precision(precision or None):
            recs = run_train_suite(FLAGS.suite, FLAGS.train_iterations, FLAGS.repeats)
        for rec in recs:
            rec["matmul_precision"] = precision or "default"
        records += recs
    if FLAGS.suite == "learning":
        records += run_learning_suite(FLAGS.num_seeds)
    if FLAGS.suite == "scaling":
        records += run_scaling_suite(FLAGS.train_iterations, FLAGS.repeats)
    if FLAGS.suite == "marl_learning":
        from experiments.benchmarks import smax_learning as sl

        runs = tuple(FLAGS.marl_runs or sl.DEFAULT_MARL_RUNS)
        records += sl.marl_learning_records(
            runs, FLAGS.num_seeds, FLAGS.spread_env_steps, FLAGS.smax_seeds,
            FLAGS.smax_env_steps, smax_budget_s=FLAGS.smax_budget_s, sink=sink,
        )  # fmt: skip
    if FLAGS.suite == "adapters":
        from experiments.benchmarks.adapters import run_adapters_suite

        records += run_adapters_suite(FLAGS.num_steps, FLAGS.repeats)
    if FLAGS.suite in MPE_SUITES:
        records += mpe.run_mpe_suite(FLAGS.suite, FLAGS.repeats, mpe_runs, sink=sink)
    if FLAGS.suite == "recurrent":
        from experiments.benchmarks.recurrent import run_recurrent_suite

        records += run_recurrent_suite(FLAGS.train_iterations, FLAGS.repeats)
    if FLAGS.suite in ("locomotion", "mujoco_parity"):
        from experiments.benchmarks import locomotion

        if FLAGS.suite == "locomotion":
            sizes = tuple(int(n) for n in FLAGS.locomotion_envs)
            records += locomotion.run_locomotion_suite(
                sizes, FLAGS.num_steps, FLAGS.repeats, envs=tuple(FLAGS.locomotion_names),
                compile_limit_s=FLAGS.locomotion_compile_limit_s,
                impls=tuple(FLAGS.locomotion_impls),
            )  # fmt: skip
        else:
            records += locomotion.run_parity_suite(FLAGS.parity_states, FLAGS.parity_model)
    if FLAGS.suite == "locomotion_learning":
        records += locomotion_learning.run_locomotion_learning_suite(sink)
    if FLAGS.suite == "population":
        records += population.population_records(FLAGS.train_iterations, FLAGS.repeats)
    if FLAGS.suite == "population_learning":
        records += population_learning.population_learning_records(parts=tuple(FLAGS.popl_parts))
    if FLAGS.compare:
        print("\nratios against anchors:")
        for line in compare(records, anchors):
            print(line)
    append_records(out, sink.unwritten(records))
    print(f"\n{len(records)} results appended to {os.path.abspath(out)}")


if __name__ == "__main__":
    app.run(main, flags_parser=common.parse_flags)
