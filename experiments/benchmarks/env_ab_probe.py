"""Env-only A/B probe: Tag env steps under several kernel settings, interleaved.

``python -m experiments.benchmarks.env_ab_probe --variants=pallas:16,pallas:8,xla:8``
times the suite's env-only figure (`experiments.benchmarks.timing.time_env_steps`: a
scan of ``--num_steps`` vmapped steps with random actions, auto-reset, compile
excluded, median of ``--repeats`` calls; both flags are `experiments.benchmarks.run`'s)
for each config (``--configs``, envs x taggers+runners, WarpDrive's Tag settings,
partial observation of ``--k`` neighbours, the Pallas searches) and each variant
``knn_obs_impl:chunk_size[:brute_unroll]``: the env's observation writer, and
`kernels.CHUNK_SIZE` (the sorted search's candidates per chunk) and
`kernels.BRUTE_UNROLL` (the brute-force kernel's unroll) set while it is traced. The
variants run in turn ``--rounds`` times, so drift over time shows as the spread of one
variant's rounds, not as a difference between variants. Before timing, each variant's
observations after ``--check_steps`` random steps are compared with the first
variant's (same keys, same actions): ``equal``, or the count of differing float32
elements and the largest absolute difference.

Prints one row per (config, variant, round) and a summary (median over rounds, ratio
to the first variant); ``--probe_out=PATH`` appends JSON lines. ``--tiny``: a CPU
smoke test.
"""

from __future__ import annotations

import json
import os
import re
import statistics
from typing import Any

import jax
import jax.numpy as jnp
from absl import app, flags

import jaxdrive
from environments.tag_continuous import kernels, knn_obs
from experiments.benchmarks.run import make_tag  # also defines --num_steps, --repeats
from experiments.benchmarks.timing import device_info, time_env_steps

__all__ = ["define_flags", "parse_variant", "probe", "run_variant"]

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The probe's flags (defined only when run as a program)."""
    flags.DEFINE_list("configs", ["2000x5+995", "1000x10+100"], "envs x taggers+runners")
    flags.DEFINE_list(
        "variants", ["pallas:16", "pallas:8"], "knn_obs_impl:chunk_size[:brute_unroll]"
    )
    flags.DEFINE_integer("k", 10, "neighbours observed")
    flags.DEFINE_integer("rounds", 2, "times each variant is timed, in turn")
    flags.DEFINE_integer("check_steps", 20, "random steps before the equality check")
    flags.DEFINE_string("probe_out", "", "JSON-lines file to append to (none if empty)")
    flags.DEFINE_bool("tiny", False, "tiny sizes (CPU smoke test)")


def parse_variant(text: str) -> tuple[str, int, int]:
    """``"pallas:8"`` -> ``("pallas", 8, BRUTE_UNROLL)``; ``"pallas:8:16"`` -> ``("pallas",
    8, 16)`` (``knn_obs_impl:chunk_size[:brute_unroll]``)."""
    m = re.fullmatch(r"\s*(\w+)\s*:\s*(\d+)\s*(?::\s*(\d+)\s*)?", text)
    if not m or m.group(1) not in ("auto", *knn_obs.IMPLS):
        raise ValueError(
            f"variant must be knn_obs_impl:chunk_size[:brute_unroll] with knn_obs_impl in "
            f"{('auto', *knn_obs.IMPLS)}, got {text!r}"
        )
    chunk = int(m.group(2))
    unroll = int(m.group(3)) if m.group(3) else kernels.BRUTE_UNROLL
    for name, v in (("chunk_size", chunk), ("brute_unroll", unroll)):
        if v < 1 or v & (v - 1):
            raise ValueError(f"{name} must be a power of two >= 1, got {v} in {text!r}")
    return m.group(1), chunk, unroll


def _parse_config(text: str) -> tuple[int, int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*\+\s*(\d+)\s*", text)
    if not m:
        raise ValueError(f"config must look like 1000x10+100, got {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def _env(t: int, r: int, k: int, form: str):
    return make_tag(t, r, False, k, "pallas", knn_obs_impl=form)


def _observations_after(env, params, n: int, steps: int) -> dict[str, jax.Array]:
    """Both groups' observations after ``steps`` random steps of ``n`` envs (fixed keys)."""
    venv = jaxdrive.vectorize(env, n)
    policy = jaxdrive.random_policy(env)

    @jax.jit
    def run(key):
        state, ts = venv.reset(key, params)

        def body(carry, k):
            state, ts = carry
            k_act, k_env = jax.random.split(k)
            return venv.step(k_env, state, policy(k_act, ts.obs), params), None

        (state, ts), _ = jax.lax.scan(body, (state, ts), jax.random.split(key, steps))
        return ts.obs

    return run(jax.random.key(7))


def run_variant(
    n: int, t: int, r: int, k: int, form: str, chunk: int, unroll: int, num_steps: int,
    repeats: int, check_steps: int = 0,
) -> tuple[dict[str, Any], dict[str, jax.Array] | None]:  # fmt: skip
    """Times one variant (``kernels.CHUNK_SIZE = chunk``, ``kernels.BRUTE_UNROLL =
    unroll`` while it is traced); returns the timing record and, with ``check_steps``,
    the observations to compare."""
    saved = kernels.CHUNK_SIZE, kernels.BRUTE_UNROLL
    kernels.CHUNK_SIZE, kernels.BRUTE_UNROLL = chunk, unroll
    try:
        env, params = _env(t, r, k, form)
        obs = _observations_after(env, params, n, check_steps) if check_steps else None
        rec = time_env_steps(env, params, n, num_steps, repeats)
    finally:
        kernels.CHUNK_SIZE, kernels.BRUTE_UNROLL = saved
    return rec, obs


def _name(form: str, chunk: int, unroll: int) -> str:
    return f"{form}:{chunk}:{unroll}"


def _compare(a: dict[str, jax.Array], b: dict[str, jax.Array]) -> dict[str, Any]:
    bits = lambda x: jax.lax.bitcast_convert_type(x, jnp.int32)
    differ = sum(int(jnp.sum(bits(a[g]) != bits(b[g]))) for g in a)
    max_abs = max(float(jnp.max(jnp.abs(a[g] - b[g]))) for g in a)
    return {"differ": differ, "max_abs": max_abs}


def probe(
    configs: list[tuple[int, int, int]],
    variants: list[tuple[str, int, int]],
    k: int,
    rounds: int,
    num_steps: int,
    repeats: int,
    check_steps: int,
    out: str = "",
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
        for rnd in range(1, rounds + 1):
            for form, chunk, unroll in variants:
                steps = check_steps if rnd == 1 else 0
                tr, obs = run_variant(n, t, r, k, form, chunk, unroll, num_steps, repeats, steps)
                rec = dict(
                    bench="tag_env_ab", num_envs=n, num_taggers=t, num_runners=r, k=k,
                    knn_obs_impl=form, chunk_size=chunk, brute_unroll=unroll, round=rnd,
                    ms_per_step=tr["ms_per_batch_step"], env_steps_per_s=tr["env_steps_per_s"],
                    compile_s=tr["compile_s"], **info,
                )  # fmt: skip
                check = ""
                if obs is not None:
                    if ref is None:
                        ref, check = obs, "(reference)"
                    else:
                        rec["check"] = _compare(ref, obs)
                        c = rec["check"]
                        check = "equal" if c["differ"] == 0 else f"{c['differ']}/{c['max_abs']:.1e}"
                records.append(rec)
                if out:
                    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
                    with open(out, "a", encoding="utf8") as fp:
                        fp.write(json.dumps(rec, default=str) + "\n")
                name = _name(form, chunk, unroll)
                print(
                    f"{name:<14} round {rnd}  {rec['ms_per_step']:.4f} ms/step "
                    f"{rec['env_steps_per_s']:>14,.0f} env steps/s  {check}",
                    flush=True,
                )
        print("summary (median over rounds):")
        base = None
        for form, chunk, unroll in variants:
            ms = statistics.median(
                x["ms_per_step"]
                for x in records
                if x["num_envs"] == n and x["num_runners"] == r and x["knn_obs_impl"] == form
                and x["chunk_size"] == chunk and x["brute_unroll"] == unroll
            )  # fmt: skip
            base = base or ms
            print(f"  {_name(form, chunk, unroll):<14} {ms:.4f} ms/step  x{base / ms:.3f}")
    return records


def main(argv: list[str]) -> None:
    del argv
    if FLAGS.tiny:
        configs = [(3, 2, 5)]
        k, steps, repeats, check = 3, 3, 1, 2
    else:
        configs = [_parse_config(c) for c in FLAGS.configs]
        k, steps, repeats, check = FLAGS.k, FLAGS.num_steps, FLAGS.repeats, FLAGS.check_steps
    variants = [parse_variant(v) for v in FLAGS.variants]
    probe(configs, variants, k, FLAGS.rounds, steps, repeats, check, FLAGS.probe_out)


if __name__ == "__main__":
    define_flags()
    app.run(main)
