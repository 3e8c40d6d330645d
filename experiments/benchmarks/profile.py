"""Where the time goes: device-kernel summaries of the benchmark workloads.

``python -m experiments.benchmarks.profile --targets=tag_k10,tag_a2c`` times each
target like the benchmark suites do, traces one more call with `jax.profiler`, and
prints the device kernels that took the most time (total ms per traced call, launches,
share). On a CPU (no device plane in the trace) it prints the host's XLA ops instead.
``--tiny`` shrinks every size for a quick check; ``--backend`` picks the Tag env's
backend (`TagContinuous`'s ``backend``).

Targets: ``tag_k10`` (1000 envs × (10+100), k = 10), ``tag_full`` (same, full
observation), ``tag_big`` (2000 envs × (5+995), k = 10), ``tag_a2c`` and ``tag_ppo``
(training, 1000 envs × (10+100), 25 steps, fc 256×256), ``cartpole_a2c`` (10,000 envs ×
500 steps), ``cartpole_env`` (CartPole env-only, ``--cartpole_envs`` envs × 1000 steps,
auto-reset by ``--reset_mode``), ``qmix_smax`` (QMIX on SMAX ``3s5z``, the
``qlearning.py:qmix_smax`` config), ``humanoid_ppo`` (Humanoid-v5 PPO, the
``locomotion.py:humanoid`` config: 10,240 envs × 32 steps, 8 epochs of 32 minibatches),
``humanoid_env`` (Humanoid-v5 env-only, 2048 envs × 100 steps, auto-reset by
``--auto_reset``).
"""

from __future__ import annotations

import ast
import collections
import glob
import os
import re
import sys
import tempfile
from typing import Any

from absl import app, flags

__all__ = ["hlo_lines", "kernel_details", "kernel_table", "summarize_trace"]

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The script's flags (defined only when run as a program, so that other scripts
    can import its functions)."""
    flags.DEFINE_list("targets", ["tag_k10", "tag_a2c"], "workloads to profile (module docstring)")
    flags.DEFINE_integer("top", 25, "kernels to list per target")
    flags.DEFINE_integer(
        "seeds", 1, "training targets: seeds vmapped in one program", lower_bound=1
    )
    flags.DEFINE_bool("tiny", False, "tiny sizes (CPU check)")
    flags.DEFINE_string("trace_dir", "", "where traces go (default: a temporary folder)")
    flags.DEFINE_bool("auto_reset", True, "env-only targets: auto-reset finished envs")
    flags.DEFINE_integer("cartpole_envs", 1000, "cartpole_env: number of envs")
    flags.DEFINE_enum(
        "reset_mode", "auto", ["auto", "select", "cond"], "cartpole_env: auto-reset mode"
    )
    flags.DEFINE_enum("backend", "auto", ["auto", "xla", "pallas"], "the Tag targets' backend")
    flags.DEFINE_bool("hlo", True, "print the top kernels' HLO instructions")
    flags.DEFINE_bool(
        "details", True, "print the top device kernels' launch details (registers, occupancy)"
    )
    flags.DEFINE_multi_string(
        "override",
        [],
        "training targets: a dotted config key and a Python literal, e.g. "
        "--override=policies.tagger.shared_torso=True (repeatable)",
    )


TARGETS = (
    "tag_k10", "tag_full", "tag_big", "tag_a2c", "tag_ppo", "cartpole_a2c", "cartpole_env",
    "qmix_smax", "humanoid_ppo", "humanoid_env",
)  # fmt: skip


def _newest_trace(trace_dir: str):
    """The newest ``*.xplane.pb`` under ``trace_dir``, loaded (`jax.profiler.ProfileData`)."""
    from jax.profiler import ProfileData

    files = sorted(glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True))
    if not files:
        raise FileNotFoundError(f"no *.xplane.pb under {trace_dir!r}")
    return ProfileData.from_file(max(files, key=os.path.getmtime))


def _kernel_lines(data) -> list:
    """The device planes' kernel lines (one per stream), without the summary lines
    (XLA ops, modules, steps) that repeat their events."""
    return [
        line
        for plane in data.planes
        if plane.name.startswith("/device:")
        for line in plane.lines
        if not ("XLA Ops" in line.name or "XLA Modules" in line.name or "Steps" in line.name)
    ]


def summarize_trace(trace_dir: str) -> tuple[str, dict[str, tuple[float, int]]]:
    """Sums event durations by name in the newest ``*.xplane.pb`` under ``trace_dir``.

    Returns ``(plane kind, {name: (total_ms, count)})``: device planes (``/device:*``)
    when the trace has any, otherwise the host's XLA-op lines.
    """
    data = _newest_trace(trace_dir)
    totals: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    if any(p.name.startswith("/device:") for p in data.planes):
        lines, kind = _kernel_lines(data), "device"
    else:
        lines = [
            line
            for plane in data.planes
            for line in plane.lines
            if line.name.startswith("tf_XLA") or "XLA" in line.name
        ]
        kind = "host"
    for line in lines:
        for ev in line.events:
            t = totals[ev.name]
            t[0] += ev.duration_ns / 1e6
            t[1] += 1
    return kind, {k: (v[0], int(v[1])) for k, v in totals.items()}


def kernel_details(trace_dir: str) -> dict[str, dict[str, str]]:
    """The profiler's stats of each device kernel's first launch in the newest trace under
    ``trace_dir``: ``{name: {stat: value}}`` (on a GPU, CUPTI's ``kernel_details``:
    registers per thread, shared memory, grid, block, theoretical occupancy). Empty when
    the trace has no device plane."""
    out: dict[str, dict[str, str]] = {}
    for line in _kernel_lines(_newest_trace(trace_dir)):
        for ev in line.events:
            if ev.name not in out:
                out[ev.name] = {str(k): str(v) for k, v in ev.stats}
    return out


def hlo_lines(hlo: str, totals: dict[str, tuple[float, int]], top: int) -> list[str]:
    """For the ``top`` kernels of ``totals``, the optimised-HLO instruction of the same
    name (kernel names spell the instruction's ``.`` as ``_``): its result type and op,
    and the end of the JAX op it came from."""
    by_name: dict[str, str] = {}
    for raw in hlo.splitlines():
        line = raw.strip()
        if " = " not in line:
            continue
        name = line.split(" = ", 1)[0].removeprefix("ROOT ").lstrip("%").replace(".", "_")
        by_name.setdefault(name, line)
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]
    out = []
    for k, _ in ranked:
        line = by_name.get(k.replace(".", "_"))
        if not line:
            continue
        head = line.split(" = ", 1)[1].split("(", 1)[0]  # result type and op
        op_name = re.search(r'op_name="([^"]*)"', line)
        where = op_name.group(1).replace("jit(<lambda>)/", "")[-150:] if op_name else ""
        out.append(f"{k}: {head[:110]} <- {where}")
    return out


def kernel_table(totals: dict[str, tuple[float, int]], top: int) -> list[str]:
    """The ``top`` names by total time, as printable lines (ms, launches, share)."""
    grand = sum(t for t, _ in totals.values()) or 1.0
    rows = sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]
    out = [f"{'ms':>10} {'launches':>9} {'share':>6}  kernel", "-" * 72]
    for name, (ms, n) in rows:
        out.append(f"{ms:10.3f} {n:9d} {100 * ms / grand:5.1f}%  {name[:100]}")
    out.append(f"{grand:10.3f} {sum(n for _, n in totals.values()):9d} 100.0%  (all)")
    return out


def _run_target(name: str, tiny: bool, trace_dir: str) -> dict[str, Any]:
    import jaxdrive
    from experiments.benchmarks.tag_config import make_tag
    from experiments.benchmarks.timing import time_env_steps
    from experiments.benchmarks.training import load_config, set_dotted, time_training

    if name.startswith("tag_") and not name.endswith(("a2c", "ppo")):
        shape = {
            "tag_k10": (1000, 10, 100, False),
            "tag_full": (1000, 10, 100, True),
            "tag_big": (2000, 5, 995, False),
        }[name]
        n, t, r, full = shape
        if tiny:
            n, t, r = 8, 2, 10
        # the env suite's env and harness: WarpDrive's Tag settings, no output folds
        env, params = make_tag(t, r, full, min(10, t + r - 1), FLAGS.backend)
        return time_env_steps(
            env, params, n, 10 if tiny else 100, 3, profile_dir=trace_dir,
            auto_reset=FLAGS.auto_reset, fold=False,
        )  # fmt: skip
    if name == "cartpole_env":
        env, params = jaxdrive.make("CartPole-v1")
        n = 64 if tiny else FLAGS.cartpole_envs
        return time_env_steps(
            env, params, n, 10 if tiny else 1000, 3, profile_dir=trace_dir,
            reset_mode=FLAGS.reset_mode,
        )  # fmt: skip
    if name == "humanoid_env":
        env, params = jaxdrive.make("Humanoid-v5")
        return time_env_steps(
            env, params, 4 if tiny else 2048, 5 if tiny else 100, 3, profile_dir=trace_dir,
            auto_reset=FLAGS.auto_reset, fold=False,
        )  # fmt: skip
    if name in ("tag_a2c", "tag_ppo"):
        config = load_config("tag_continuous", name.split("_")[1] if name == "tag_a2c" else "")
        config.num_envs, config.num_steps = (8, 8) if tiny else (1000, 25)
        if tiny:
            config.env_kwargs.num_taggers, config.env_kwargs.num_runners = 2, 10
    elif name == "cartpole_a2c":
        config = load_config("cartpole", "a2c")
        config.num_envs, config.num_steps = (16, 10) if tiny else (10_000, 500)
        config.policies.agent.hidden_sizes = (32, 32)
    elif name == "humanoid_ppo":  # the locomotion_learning row's trainer, without evaluations
        config = load_config("locomotion", "humanoid,tiny" if tiny else "humanoid")
    elif name == "qmix_smax":  # the marl_learning row: SMAX 3s5z, JaxMARL's QMIX settings
        config = load_config("qlearning", "qmix_smax,tiny" if tiny else "qmix_smax")
    else:
        raise ValueError(f"unknown profile target {name!r}; targets: {', '.join(TARGETS)}")
    for item in FLAGS.override:
        dotted, sep, literal = item.partition("=")
        if not sep:
            raise ValueError(f"--override wants key=value, got {item!r}")
        set_dotted(config, dotted, ast.literal_eval(literal))
    iters = 1 if tiny else 3
    config.total_env_steps = config.num_envs * config.num_steps * iters * 10
    return time_training(
        config, iterations=iters, repeats=2, profile_dir=trace_dir, num_seeds=FLAGS.seeds
    )


def main(argv: list[str]) -> None:
    del argv
    unknown = [t for t in FLAGS.targets if t not in TARGETS]
    if unknown:
        targets = ", ".join(TARGETS)
        print(f"error: --targets: unknown {unknown}; targets: {targets}", file=sys.stderr)
        sys.exit(2)
    root = FLAGS.trace_dir or tempfile.mkdtemp(prefix="jaxdrive_profile_")
    for name in FLAGS.targets:
        d = os.path.join(root, name)
        rec = _run_target(name, FLAGS.tiny, d)
        kind, totals = summarize_trace(d)
        print(
            f"\n== {name}: {rec['env_steps_per_s']:,.0f} env steps/s "
            f"(median {1e3 * rec['seconds_median']:.2f} ms per timed call; {kind} time "
            "of one traced call below)",
            flush=True,
        )
        for line in kernel_table(totals, FLAGS.top):
            print(line, flush=True)
        if FLAGS.details and kind == "device":
            details = kernel_details(d)
            print(f"\n-- {name}: the top kernels' launch details (first launch)")
            for k, _ in sorted(totals.items(), key=lambda kv: -kv[1][0])[: FLAGS.top]:
                stats = details.get(k, {})
                text = stats.get("kernel_details") or "; ".join(
                    f"{a}={b}" for a, b in stats.items()
                )
                print(f"{k[:60]}: {text[:300]}", flush=True)
        if FLAGS.hlo and rec.get("_hlo"):
            print(f"\n-- {name}: the top kernels' HLO instructions (result = op(operands))")
            for line in hlo_lines(rec["_hlo"], totals, FLAGS.top):
                print(line, flush=True)


if __name__ == "__main__":
    define_flags()
    app.run(main)
