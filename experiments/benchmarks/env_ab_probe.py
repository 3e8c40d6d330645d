"""Env-only A/B probe: Tag env steps under several kernel settings, interleaved.

``python -m experiments.benchmarks.env_ab_probe --variants=pallas,pallas/sort=argsort``
times the suite's env-only figure (`experiments.benchmarks.timing.time_env_steps`: a
scan of ``--num_steps`` vmapped steps with random actions, auto-reset, compile excluded,
median of ``--repeats`` calls; both flags are `experiments.benchmarks.run`'s) for each
config (``--configs``, envs x taggers+runners, WarpDrive's Tag settings, partial
observation of ``--k`` neighbours, the Pallas searches) and each variant
``knn_obs_impl[/setting=value...]``: the env's observation writer (`knn_obs.IMPLS`) and
module defaults read when the env is traced (`SETTINGS`: ``chunk`` =
`kernels.CHUNK_SIZE`, ``unroll`` = `kernels.BRUTE_UNROLL`, ``sunroll`` =
`kernels.SORTED_UNROLL`, ``network`` = `kernels.PACKED_NETWORK`, ``sort`` =
`kernels.SORT_KEYS`, ``block`` = `knn_obs.DEFAULT_BLOCK`, ``wwarps`` =
`knn_obs.DEFAULT_WARPS`, ``opaque`` = `knn_obs.OPAQUE_STORE`, ``wlean`` =
`knn_obs.LEAN_INDEX`, the probe-only ablation ``wablate`` = `knn_obs._ABLATE` (wrong
values), ``prep`` = `kernels.PREP_IMPL`, ``psort`` = `kernels.PREP_SORT`, ``psbits`` =
`kernels.PREP_SORT_BITS`, ``sblock`` = `kernels.SORTED_BLOCK_ROWS`, ``prepick`` =
`kernels.SORTED_PREPICK`, ``lanetest`` = `kernels.SORTED_LANE_TEST`, ``order`` =
`kernels.CHUNK_ORDER`, ``elements`` = `vector_step.DEFAULT_ELEMENTS`, ``warps`` =
`vector_step.DEFAULT_WARPS`, ``table`` = `vector_step.TABLE_STORE`, ``tpos`` =
`vector_step.TAGGER_POSITIONS`, ``tpacked`` = `vector_step.PACKED_COUNTS`, ``draws`` =
`env.RESET_DRAWS_IN_KERNEL`, ``skip`` = `kernels.PACKED_SKIP_DISTINCT` as 1 or 0, ``lstore`` =
`kernels.LIST_STORE`,
``pwarps`` = `kernels.PREP_WARPS`, ``gpbool`` = `grid_knn.GRID_PREP_BOOL`, ``glrows`` =
`grid_knn.GRID_LANE_ROWS`, ``vtable`` = `env.VECTOR_TABLE`, ``wlayout`` =
`knn_obs.LAYOUT`, ``wrows`` = `knn_obs.COLS_ROWS`, ``wsorted`` = `knn_obs.SORTED_ROWS`,
``wevict`` / ``tevict`` = `knn_obs.STORE_EVICTION` / `knn_obs.TABLE_EVICTION` (``none``
for None) (the grid's settings ``g…`` are listed in `SETTINGS`), and the probe-only
ablation ``fallback`` =
`kernels._SORTED_EXACT_FALLBACK`, whose 0 gives wrong lists where packed keys collide),
restored afterwards, the env's ``step`` (``step_impl``) and the harness's ``fold``
(`time_env_steps`'s, 1 or 0) and ``akeys`` (its ``action_keys``: threefry or rbg);
``mdraw`` = `jaxdrive.spaces.MULTI_DISCRETE_DRAW` (the random actions' draw; ``hblock``,
``hprog`` and ``hwarps`` set its hash kernel's `jaxdrive.hash_draws` knobs). The settings
live in `experiments.benchmarks.settings` (no flags: any script may import it).
``block``, ``opaque``, ``wtime`` and ``wablate`` set the
flat writer's knobs: pair them with ``wlayout=flat`` (the default writer is the
column-tile layout; ``wablate`` with it is an error). The variants run in turn
``--rounds`` times, so drift over time shows as the spread of one variant's rounds, not
as a difference between variants; each variant is compiled once, in round 1
(`build_variant`: an `experiments.benchmarks.timing.EnvStepTimer`), and its compiled
program is timed again in the later rounds.
Before timing, each variant's observations after ``--check_steps`` random steps are
compared with the first variant's (same keys, same actions): ``equal``, or the count of
differing float32 elements and the largest absolute difference.

Prints one row per (config, variant, round) and a summary (median over rounds, ratio
to the first variant); ``--probe_out=PATH`` appends JSON lines. ``--details``: in the
first round, one more call of each variant is traced, and the Pallas kernels' device
time per step and launch details (registers per thread, block, theoretical occupancy;
`experiments.benchmarks.profile.kernel_details`) are printed. ``--tiny``: a CPU smoke
test.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from typing import Any

import jax
from absl import app, flags

from experiments.benchmarks.knn_obs_probe import check_states, compare, make_env, parse_config
from experiments.benchmarks.settings import SETTINGS, Variant, apply_settings, parse_variant
from experiments.benchmarks.timing import EnvStepTimer, append_jsonl, device_info

__all__ = [
    "SETTINGS",
    "apply_settings",
    "build_variant",
    "define_flags",
    "parse_variant",
    "probe",
    "run_variant",
]

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The probe's flags (defined only when run as a program)."""
    flags.DEFINE_list("configs", ["2000x5+995", "1000x10+100"], "envs x taggers+runners")
    flags.DEFINE_list(
        "variants",
        ["pallas/chunk=16", "pallas"],
        "knn_obs_impl[/setting=value...]; settings: " + ", ".join(SETTINGS),
    )
    flags.DEFINE_integer("k", 10, "neighbours observed")
    flags.DEFINE_integer("rounds", 2, "times each variant is timed, in turn")
    flags.DEFINE_integer("check_steps", 20, "random steps before the equality check")
    flags.DEFINE_string("probe_out", "", "JSON-lines file to append to (none if empty)")
    flags.DEFINE_bool("tiny", False, "tiny sizes (CPU smoke test)")
    flags.DEFINE_bool("details", False, "round 1: trace each variant, print its kernels")


def _observations_after(env, params, n: int, steps: int) -> dict[str, jax.Array]:
    """Both groups' observations of ``n`` envs after ``steps`` random steps (the stepped
    state of `knn_obs_probe.check_states`: fixed keys, so every variant sees the same)."""
    state = check_states(env, params, n, steps)["stepped"]
    return jax.jit(jax.vmap(lambda s: env.observations(s, params)))(state)


def build_variant(
    n: int, t: int, r: int, k: int, variant: Variant, num_steps: int, check_steps: int = 0
) -> tuple[EnvStepTimer, dict[str, jax.Array] | None]:  # fmt: skip
    """One variant's compiled env-only program (its settings applied while the env is
    traced, then restored): its `EnvStepTimer` and, with ``check_steps``, the
    observations to compare. The rounds reuse the timer: one compile per variant."""
    form, settings = variant
    given = dict(settings)
    module_settings = [(name, v) for name, v in settings if SETTINGS[name][0] is not None]
    saved = [(SETTINGS[name], getattr(*SETTINGS[name][:2])) for name, _ in module_settings]
    try:
        for name, value in module_settings:
            setattr(*SETTINGS[name][:2], value)
        env, params = make_env(t, r, k, form, step_impl=given.get("step", "auto"))
        obs = _observations_after(env, params, n, check_steps) if check_steps else None
        timer = EnvStepTimer(
            env, params, n, num_steps, fold=given.get("fold", "1") == "1",
            action_keys=given.get("akeys", "threefry"),
        )  # fmt: skip
    finally:
        for (module, attr, _), value in reversed(saved):
            setattr(module, attr, value)
    return timer, obs


def run_variant(
    n: int, t: int, r: int, k: int, variant: Variant, num_steps: int, repeats: int,
    check_steps: int = 0, profile_dir: str | None = None,
) -> tuple[dict[str, Any], dict[str, jax.Array] | None]:  # fmt: skip
    """Times one variant once (`build_variant`, then its timer's `EnvStepTimer.time`);
    returns the timing record and, with ``check_steps``, the observations to compare.
    With ``profile_dir``, one more call is traced there."""
    timer, obs = build_variant(n, t, r, k, variant, num_steps, check_steps)
    return timer.time(repeats, profile_dir), obs


def kernel_lines(trace_dir: str, num_steps: int) -> list[str]:
    """The traced call's Pallas kernels (names ``tag_*``): device µs per step and launch
    details (`profile.kernel_details`), one line each; the host's ops on a CPU."""
    from experiments.benchmarks.profile import kernel_details, summarize_trace

    kind, totals = summarize_trace(trace_dir)
    details = kernel_details(trace_dir)
    out = []
    for name, (ms, _) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
        if kind == "device" and not name.startswith("tag_"):
            continue
        info = details.get(name, {}).get("kernel_details", "")
        out.append(f"{name[:28]:<28} {1e3 * ms / num_steps:9.1f} us/step  {info}")
    return out[:8]


def _name(variant: Variant) -> str:
    form, settings = variant
    parts = [f"{name}={int(v) if isinstance(v, bool) else v}" for name, v in settings]
    return "/".join([form, *parts])


def probe(
    configs: list[tuple[int, int, int]],
    variants: list[Variant],
    k: int,
    rounds: int,
    num_steps: int,
    repeats: int,
    check_steps: int,
    out: str = "",
    details: bool = False,
) -> list[dict[str, Any]]:
    """Runs the probe (module docstring); returns its records."""
    if rounds < 1 or num_steps < 1 or repeats < 1 or check_steps < 0:
        raise ValueError(
            f"rounds, num_steps, repeats must be >= 1 and check_steps >= 0, got {rounds}, "
            f"{num_steps}, {repeats}, {check_steps}"
        )
    if not variants:
        raise ValueError("no variants given")
    info = device_info()
    print(f"# env_ab_probe on {info['device']} ({info['backend']}), jax {info['jax']}, k = {k}")
    records: list[dict[str, Any]] = []
    for n, t, r in configs:
        ref = None
        print(f"\n== {n} envs x ({t}+{r}), {num_steps} steps per call, median of {repeats}")
        timers: dict[int, EnvStepTimer] = {}
        for rnd in range(1, rounds + 1):
            for v, variant in enumerate(variants):
                obs = None
                if v not in timers:  # round 1: compile (and the check's observations)
                    timers[v], obs = build_variant(n, t, r, k, variant, num_steps, check_steps)
                trace = tempfile.mkdtemp(prefix="env_ab_") if details and rnd == 1 else None
                tr = timers[v].time(repeats, trace)
                rec = dict(
                    bench="tag_env_ab", num_envs=n, num_taggers=t, num_runners=r, k=k,
                    variant=_name(variant), knn_obs_impl=variant[0],
                    settings=dict(variant[1]), round=rnd,
                    ms_per_step=tr["ms_per_batch_step"], env_steps_per_s=tr["env_steps_per_s"],
                    compile_s=tr["compile_s"], **info,
                )  # fmt: skip
                check = ""
                if obs is not None:
                    if ref is None:
                        ref, check = obs, "(reference)"
                    else:
                        rec["check"] = compare(ref, obs)
                        c = rec["check"]
                        check = "equal" if c["differ"] == 0 else f"{c['differ']}/{c['max_abs']:.1e}"
                records.append(rec)
                if out:
                    append_jsonl(out, rec)
                print(
                    f"{_name(variant):<24} round {rnd}  {rec['ms_per_step']:.4f} ms/step "
                    f"{rec['env_steps_per_s']:>14,.0f} env steps/s  {check}",
                    flush=True,
                )
                if trace:
                    for line in kernel_lines(trace, num_steps):
                        print(f"    {line}", flush=True)
                    shutil.rmtree(trace, ignore_errors=True)
        print("summary (median over rounds):")
        base = None
        for variant in variants:
            ms = statistics.median(
                x["ms_per_step"]
                for x in records
                if x["num_envs"] == n and x["num_runners"] == r
                and x["variant"] == _name(variant)
            )  # fmt: skip
            base = base or ms
            print(f"  {_name(variant):<24} {ms:.4f} ms/step  x{base / ms:.3f}")
    return records


def main(argv: list[str]) -> None:
    del argv
    if FLAGS.tiny:
        configs = [(3, 2, 5)]
        k, steps, repeats, check = 3, 3, 1, 2
    else:
        configs = [parse_config(c) for c in FLAGS.configs]
        k, steps, repeats, check = FLAGS.k, FLAGS.num_steps, FLAGS.repeats, FLAGS.check_steps
    variants = [parse_variant(v) for v in FLAGS.variants]
    probe(
        configs, variants, k, FLAGS.rounds, steps, repeats, check, FLAGS.probe_out,
        FLAGS.details,
    )  # fmt: skip


if __name__ == "__main__":
    define_flags()
    app.run(main)
