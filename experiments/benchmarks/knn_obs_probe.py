r"""k-nearest observation probe: TagContinuous's two ``knn_obs_impl`` forms, checked then timed.

``python -m experiments.benchmarks.knn_obs_probe --out=$OUT/knn_obs.jsonl`` (``--tiny``
for a CPU check). For each config (default ``1000x10+100`` and ``2000x5+995``: envs ×
(taggers + runners); WarpDrive's Tag settings of `experiments.benchmarks.run`, partial
observation with ``k = --k`` neighbours, the Pallas neighbour search ``impl="pallas"``)
and each form of `environments.tag_continuous.knn_obs` (``"xla"``, the original, and
``"pallas"``, the kernel writing the rows in their final layout):

1. **check**: each form's observations against ``"xla"``'s on the same states, params
   closed over (compile-time constants, as the timings run) and passed as jit arguments
   (traced): the number of differing float32 elements, the largest absolute difference
   and the largest difference in ulps. States: the reset ones, after ``--check_steps``
   random steps (auto-reset), the stepped ones with about 30% of the agents out of the
   game, and with only about ``k/2`` agents left in each env (empty, padded slots).
2. **step**: `experiments.benchmarks.timing.EnvStepTimer` (the suite's env-only
   figure: a scan of ``--probe_steps`` vmapped steps with random actions, auto-reset).
3. **obs**: `TagContinuous.observations` alone (the neighbour search and both groups'
   assembly), vmapped over the envs, ``--probe_steps`` times in a `lax.scan` on states
   moved every iteration (nothing loop-invariant), the observations carried.
4. **asm**: the assembly alone: both groups' observations from fixed neighbour lists
   (``idx, valid`` of the reset states, searched once outside the loop) on states moved
   every iteration; for ``"pallas"`` once per ``--blocks`` × ``--warps`` kernel option
   (``block_size`` × ``num_warps`` of `knn_obs.knn_obs_pallas`; the env uses the
   defaults), each checked against the XLA form on the last iteration's output.
5. With ``--rounds=R > 1``: the env step of every form timed again, in turn, R − 1 more
   times (A/B interleaved in one process).

Every timing: compile excluded, median of ``--probe_repeats`` calls, each ended by
``block_until_ready``. Bandwidth figures use the bytes of the observations written per
step (both groups); **floor** is those bytes at ``--bandwidth_tbps`` (4.3 TB/s, about
an H200's), **harness** the measured cost of a scan writing arrays of that size (a
broadcast of the iteration number).

Prints a table; ``--out=PATH`` appends one JSON line per measurement (without it,
nothing is written: the flag is `experiments.benchmarks.run`'s, whose default is not used).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
import traceback
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from absl import app, flags

import jaxdrive
from environments.tag_continuous import knn_obs
from experiments.benchmarks.run import make_tag  # also defines the --out flag
from experiments.benchmarks.timing import EnvStepTimer, device_info, time_compiled

__all__ = [
    "assembly_fn",
    "check_states",
    "compare",
    "define_flags",
    "make_env",
    "parse_config",
    "probe",
    "time_assembly",
    "time_floor",
    "time_observations",
]

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the probe's flags (only when run as a program: other probes use some of
    the same names, and the tests import several of them)."""
    flags.DEFINE_bool("tiny", False, "tiny sizes for a CPU check (4x3+5, k=3, 4 steps)")
    flags.DEFINE_list(
        "configs", [], "envs x taggers+runners (default 1000x10+100,2000x5+995; --tiny 4x3+5)"
    )
    flags.DEFINE_integer("k", 10, "neighbours observed (--tiny: 3 unless given)")
    flags.DEFINE_list("forms", list(knn_obs.IMPLS), "knn_obs_impl forms (xla: the reference)")
    flags.DEFINE_list("blocks", ["512", "1024", "2048"], "Pallas block sizes, asm sweep")
    flags.DEFINE_list("warps", ["4"], "Pallas num_warps, asm sweep")
    flags.DEFINE_integer("rounds", 2, "env-step timings of the kernel forms, interleaved")
    flags.DEFINE_integer("probe_steps", 100, "steps per timed call (--tiny: 4)")
    flags.DEFINE_integer("probe_repeats", 5, "timed calls, median reported (--tiny: 2)")
    flags.DEFINE_integer("check_steps", 20, "random steps before the stepped check states")
    flags.DEFINE_float("bandwidth_tbps", 4.3, "DRAM bandwidth for the write floor, TB/s")
    # --out (defined by experiments.benchmarks.run, imported above): here, when given,
    # the JSON-lines file to append to; left at its default, nothing is written.


def parse_config(text: str) -> tuple[int, int, int]:
    """``"1000x10+100"`` -> ``(num_envs, taggers, runners)``."""
    m = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*\+\s*(\d+)\s*", text)
    if not m:
        raise ValueError(f"config must look like 1000x10+100, got {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def make_env(
    taggers: int, runners: int, k: int, form: str, impl: str = "pallas", step_impl: str = "auto"
):
    """WarpDrive's Tag config (`experiments.benchmarks.run.make_tag`) with partial
    observation of ``k`` neighbours assembled by ``form``; returns ``(env, params)``."""
    return make_tag(taggers, runners, False, k, impl, knn_obs_impl=form, step_impl=step_impl)


# ---------------------------------------------------------------------------- check
def _bits(x: jax.Array) -> jax.Array:
    return jax.lax.bitcast_convert_type(x, jnp.int32)


def _ulps(a: jax.Array, b: jax.Array) -> jax.Array:
    """``|a − b|`` in float32 ulps of the larger magnitude (0 where equal)."""
    big = jnp.maximum(jnp.abs(a), jnp.abs(b))
    ulp = jnp.nextafter(big, jnp.float32(jnp.inf)) - big
    return jnp.where(a == b, 0.0, jnp.abs(a - b) / ulp)


@jax.jit
def _compare(a: dict[str, jax.Array], b: dict[str, jax.Array]) -> dict[str, jax.Array]:
    differ = sum(jnp.sum(_bits(a[g]) != _bits(b[g])) for g in a)
    max_abs = jnp.max(jnp.stack([jnp.max(jnp.abs(a[g] - b[g])) for g in a]))
    ulps = jnp.max(jnp.stack([jnp.max(_ulps(a[g], b[g])) for g in a]))
    return {"differ": differ, "max_abs": max_abs, "max_ulps": ulps}


def compare(reference: dict[str, jax.Array], got: dict[str, jax.Array]) -> dict[str, Any]:
    """``{"differ", "max_abs", "max_ulps"}`` between two ``{group: obs}`` trees (computed
    on the device; ``differ`` counts bitwise differences, ``−0.0`` vs ``0.0`` included)."""
    r = _compare(reference, got)
    return {
        "differ": int(r["differ"]),
        "max_abs": float(r["max_abs"]),
        "max_ulps": float(r["max_ulps"]),
    }


def check_states(env, params, num_envs: int, steps: int, seed: int = 0) -> dict[str, Any]:
    """Batched check states (module docstring): ``{name: state [N, ...]}``."""
    venv = jaxdrive.vectorize(env, num_envs)
    policy = jaxdrive.random_policy(env)
    state, ts = jax.jit(lambda key: venv.reset(key, params))(jax.random.key(seed))

    @jax.jit
    def run(key, state, ts):
        def body(carry, k):
            state, ts = carry
            k_act, k_env = jax.random.split(k)
            return venv.step(k_env, state, policy(k_act, ts.obs), params), None

        (state, _), _ = jax.lax.scan(body, (state, ts), jax.random.split(key, steps))
        return state

    stepped = run(jax.random.key(seed + 1), state, ts)
    u = jax.random.uniform(jax.random.key(seed + 2), stepped.in_game.shape)
    m = env.num_agents_total
    keep = 0.5 * env.num_other_agents_observed / m  # about k/2 agents left per env
    return {
        "reset": state,
        "stepped": stepped,
        "out30": stepped.replace(in_game=stepped.in_game & (u >= 0.3)),
        "sparse": stepped.replace(in_game=stepped.in_game & (u < keep)),
    }


def _observations_on(env, params, states) -> tuple[Any, Any]:
    """Observations of the batched ``states``, params constant, then traced."""
    const = jax.jit(jax.vmap(lambda s: env.observations(s, params)))(states)
    traced = jax.jit(jax.vmap(env.observations, in_axes=(0, None)))(states, params)
    return const, traced


# --------------------------------------------------------------------------- timing
def _median(fn: Callable[[], Any], repeats: int) -> float:
    _, times = time_compiled(fn, repeats)
    return statistics.median(times)


def _moved(state, i: jax.Array):
    """``state`` with x shifted by ``i·1e-6`` and ``t`` advanced by ``i``: differs every
    iteration, so nothing is hoisted out of the timed loop."""
    return state.replace(x=state.x + i * jnp.float32(1e-6), t=state.t + i.astype(jnp.int32))


def time_observations(env, params, states, steps: int, repeats: int) -> float:
    """Seconds per iteration of `TagContinuous.observations` vmapped over the batch
    ``states`` (search and assembly), ``steps`` times in a scan on moved states."""
    obs_fn = jax.vmap(lambda s: env.observations(s, params))

    def run(state, obs0):
        def body(obs, i):
            return obs_fn(_moved(state, i)), None

        obs, _ = jax.lax.scan(body, obs0, jnp.arange(steps, dtype=jnp.float32))
        return obs

    obs0 = jax.jit(obs_fn)(states)
    compiled = jax.jit(run).lower(states, obs0).compile()
    return _median(lambda: compiled(states, obs0), repeats) / steps


def assembly_fn(env, params, **options) -> Callable[..., dict[str, jax.Array]]:
    """``(state, idx, valid) -> {group: [A_g, 7k+1]}`` for one env: both groups' rows from
    given neighbour lists, by the env's ``knn_obs_impl`` (``options``: the Pallas
    kernel's ``block_size`` / ``num_warps``)."""

    def fn(state, idx, valid):
        return {
            g: env._observe_knn(state, params, env.group_ids(g), idx, valid, **options)
            for g in env.groups
        }

    return fn


def time_assembly(env, params, states, steps: int, repeats: int, **options):
    """``(seconds per iteration, last output)`` of `assembly_fn` vmapped over ``states``,
    from their neighbour lists (searched once, outside the loop), on moved states."""
    idx, valid = jax.jit(jax.vmap(env._nearest_k))(states)
    asm = jax.vmap(assembly_fn(env, params, **options))

    def run(state, idx, valid, obs0):
        def body(obs, i):
            return asm(_moved(state, i), idx, valid), None

        obs, _ = jax.lax.scan(body, obs0, jnp.arange(steps, dtype=jnp.float32))
        return obs

    obs0 = jax.jit(asm)(states, idx, valid)
    compiled = jax.jit(run).lower(states, idx, valid, obs0).compile()
    sec = _median(lambda: compiled(states, idx, valid, obs0), repeats) / steps
    return sec, compiled(states, idx, valid, obs0)


def time_floor(shapes: dict[str, tuple[int, ...]], steps: int, repeats: int) -> float:
    """Seconds per iteration of a scan writing float32 arrays of ``shapes`` (a broadcast
    of the iteration number): the write cost of those bytes in this harness."""

    def run(obs0):
        def body(obs, i):
            return {g: jnp.broadcast_to(i, s) for g, s in shapes.items()}, None

        obs, _ = jax.lax.scan(body, obs0, jnp.arange(steps, dtype=jnp.float32))
        return obs

    obs0 = {g: jnp.zeros(s, jnp.float32) for g, s in shapes.items()}
    compiled = jax.jit(run).lower(obs0).compile()
    return _median(lambda: compiled(obs0), repeats) / steps


# ---------------------------------------------------------------------------- probe
def _emit(rec: dict[str, Any], out: str) -> None:
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "a", encoding="utf8") as fp:
            fp.write(json.dumps(rec, default=str) + "\n")


def _guard(rec: dict[str, Any], fn: Callable[[], None]) -> None:
    """Runs ``fn``; an exception (e.g. a lowering failure) goes into ``rec["error"]``."""
    try:
        fn()
    except Exception as e:
        rec["error"] = f"{type(e).__name__}: {e}"[:2000]
        traceback.print_exc()


def probe(
    configs: list[tuple[int, int, int]],
    k: int,
    forms: list[str],
    steps: int,
    repeats: int,
    blocks: list[int],
    warps: list[int],
    check_steps: int = 20,
    bandwidth_tbps: float = 4.3,
    out: str = "",
    rounds: int = 1,
) -> list[dict[str, Any]]:
    """Runs the probe (module docstring); returns its records (also written to ``out``)."""
    for f in forms:
        if f not in knn_obs.IMPLS:
            raise ValueError(f"unknown form {f!r}; forms: {knn_obs.IMPLS}")
    forms = ["xla"] + [f for f in forms if f != "xla"]  # the reference first
    info = device_info()
    print(
        f"device {info['device']} ({info['backend']}), jax {info['jax']}, k = {k}, "
        f"{steps} steps per call, median of {repeats}",
        flush=True,
    )
    records: list[dict[str, Any]] = []

    def record(**kw: Any) -> dict[str, Any]:
        rec = dict(bench="tag_knn_obs_probe", **kw, **info)
        records.append(rec)
        return rec

    for n, t, r in configs:
        d = knn_obs.obs_size(k)
        shapes = {"tagger": (n, t, d), "runner": (n, r, d)}
        obs_bytes = 4 * n * (t + r) * d
        floor_s = obs_bytes / (bandwidth_tbps * 1e12)
        base = dict(num_envs=n, num_taggers=t, num_runners=r, k=k, obs_bytes=obs_bytes)
        harness_s = time_floor(shapes, steps, repeats)
        rec = record(kind="floor", **base, floor_us=1e6 * floor_s, harness_us=1e6 * harness_s)
        _emit(rec, out)
        print(
            f"\n== {n} envs x ({t}+{r}) agents, k = {k}, D = {d}: observations "
            f"{obs_bytes / 1e6:.1f} MB per step; write floor {1e6 * floor_s:.1f} us at "
            f"{bandwidth_tbps} TB/s; harness {1e6 * harness_s:.1f} us "
            f"({obs_bytes / harness_s / 1e9:.0f} GB/s)",
            flush=True,
        )
        envs = {f: make_env(t, r, k, f) for f in forms}

        # 1. check
        env_x, params = envs["xla"]
        states = check_states(env_x, params, n, check_steps)
        refs = {name: _observations_on(env_x, params, s) for name, s in states.items()}
        print(f"{'check':<8} {'states':<9} {'const: differ/max_abs/ulps':<30} traced", flush=True)
        for form in forms[1:]:
            env, _ = envs[form]
            for name, s in states.items():
                rec = record(kind="check", form=form, states=name, **base)

                def run_check(env=env, s=s, ref=refs[name], rec=rec):
                    const, traced = _observations_on(env, params, s)
                    rec["const"] = compare(ref[0], const)
                    rec["traced"] = compare(ref[1], traced)
                    rec["in_game_frac"] = float(jnp.mean(s.in_game))

                _guard(rec, run_check)
                _emit(rec, out)
                print(_check_row(rec), flush=True)
        del refs

        # 2-4. timings
        print(
            f"{'form':<8} {'variant':<12} {'step ms':>8} {'env steps/s':>12} {'obs us':>8} "
            f"{'asm us':>8} {'asm GB/s':>9} {'x floor':>8}  check",
            flush=True,
        )
        state0 = states["reset"]
        ref_obs: dict[str, Any] = {}  # the XLA form's last asm output
        timers: dict[str, EnvStepTimer] = {}  # each form's env step, compiled once
        for form in forms:
            env, params = envs[form]
            rec = record(kind="time", form=form, variant="env", **base, floor_us=1e6 * floor_s)

            def run_time(env=env, params=params, rec=rec, form=form):
                timers[form] = EnvStepTimer(env, params, n, steps)  # reused by later rounds
                tr = timers[form].time(repeats)
                rec["step_ms"] = tr["ms_per_batch_step"]
                rec["env_steps_per_s"] = tr["env_steps_per_s"]
                rec["obs_us"] = 1e6 * time_observations(env, params, state0, steps, repeats)
                sec, last = time_assembly(env, params, state0, steps, repeats)
                _asm(rec, sec, obs_bytes, floor_s)
                if form == "xla":
                    ref_obs["obs"] = last
                else:
                    rec["asm_check"] = compare(ref_obs["obs"], last)

            _guard(rec, run_time)
            _emit(rec, out)
            print(_time_row(rec), flush=True)
            sweep = {"pallas": ("block_size", "B", blocks)}
            if form not in sweep or "obs" not in ref_obs:
                continue
            option, tag, values = sweep[form]
            for b in values:
                for w in warps:
                    variant = f"{tag}{b}/w{w}"
                    rec = record(kind="asm", form=form, variant=variant, num_warps=w)
                    rec.update(base, floor_us=1e6 * floor_s, **{option: b})

                    def run_asm(
                        env=env, params=params, rec=rec, opts=((option, b), ("num_warps", w))
                    ):
                        sec, last = time_assembly(env, params, state0, steps, repeats, **dict(opts))
                        _asm(rec, sec, obs_bytes, floor_s)
                        rec["asm_check"] = compare(ref_obs["obs"], last)

                    _guard(rec, run_asm)
                    _emit(rec, out)
                    print(_time_row(rec), flush=True)
        # Later rounds: the env step of every form again, in turn (A/B interleaved).
        for rnd in range(2, rounds + 1):
            for form in forms:
                env, params = envs[form]
                rec = record(kind="time", form=form, variant=f"env#{rnd}", **base)

                def run_again(env=env, params=params, rec=rec, form=form):
                    if form not in timers:  # its first round failed before compiling
                        timers[form] = EnvStepTimer(env, params, n, steps)
                    tr = timers[form].time(repeats)
                    rec["step_ms"] = tr["ms_per_batch_step"]
                    rec["env_steps_per_s"] = tr["env_steps_per_s"]

                _guard(rec, run_again)
                _emit(rec, out)
                print(_time_row(rec), flush=True)
    return records


def _asm(rec: dict[str, Any], sec: float, obs_bytes: int, floor_s: float) -> None:
    rec["asm_us"] = 1e6 * sec
    rec["asm_gb_per_s"] = obs_bytes / sec / 1e9
    rec["asm_over_floor"] = sec / floor_s


def _cmp(c: dict[str, Any] | None) -> str:
    if not c:
        return "?"
    if c["differ"] == 0:
        return "equal"
    return f"{c['differ']}/{c['max_abs']:.1e}/{c['max_ulps']:.0f}"


def _check_row(rec: dict[str, Any]) -> str:
    if "error" in rec:
        return f"{rec['form']:<8} {rec['states']:<9} ERROR {rec['error'][:200]}"
    return (
        f"{rec['form']:<8} {rec['states']:<9} {_cmp(rec.get('const')):<30} "
        f"{_cmp(rec.get('traced'))}  (in game {rec['in_game_frac']:.2f})"
    )


def _time_row(rec: dict[str, Any]) -> str:
    head = f"{rec['form']:<8} {rec['variant']:<12}"
    if "error" in rec:
        return f"{head} ERROR {rec['error'][:200]}"

    def num(key: str, width: int, fmt: str) -> str:
        v = rec.get(key)
        return f"{'-':>{width}}" if v is None else f"{v:>{width}{fmt}}"

    check = _cmp(rec.get("asm_check")) if "asm_check" in rec else "(reference)"
    return (
        f"{head} {num('step_ms', 8, '.3f')} {num('env_steps_per_s', 12, ',.0f')} "
        f"{num('obs_us', 8, '.1f')} {num('asm_us', 8, '.1f')} {num('asm_gb_per_s', 9, '.0f')} "
        f"{num('asm_over_floor', 8, '.2f')}  {check}"
    )


def main(argv: list[str]) -> None:
    del argv
    k = FLAGS.k
    if FLAGS.tiny:
        configs = [parse_config(c) for c in FLAGS.configs] or [(4, 3, 5)]
        k = 3 if FLAGS["k"].using_default_value else k
        steps = 4 if FLAGS["probe_steps"].using_default_value else FLAGS.probe_steps
        repeats = 2 if FLAGS["probe_repeats"].using_default_value else FLAGS.probe_repeats
        check_steps = 3 if FLAGS["check_steps"].using_default_value else FLAGS.check_steps
        blocks = [64, 1024] if FLAGS["blocks"].using_default_value else None
    else:
        configs = [parse_config(c) for c in FLAGS.configs] or [(1000, 10, 100), (2000, 5, 995)]
        steps, repeats, check_steps = FLAGS.probe_steps, FLAGS.probe_repeats, FLAGS.check_steps
        blocks = None
    blocks = blocks or [int(b) for b in FLAGS.blocks]
    t0 = time.perf_counter()
    records = probe(
        configs,
        k,
        list(FLAGS.forms),
        steps,
        repeats,
        blocks,
        [int(w) for w in FLAGS.warps],
        check_steps=check_steps,
        bandwidth_tbps=FLAGS.bandwidth_tbps,
        out="" if FLAGS["out"].using_default_value else FLAGS.out,
        rounds=FLAGS.rounds,
    )
    bad = [r for r in records if "error" in r]
    differ = [
        r
        for r in records
        if any((r.get(key) or {}).get("differ", 0) for key in ("const", "traced", "asm_check"))
    ]
    print(f"\n{len(records)} records in {time.perf_counter() - t0:.0f} s", flush=True)
    if bad:
        print(f"{len(bad)} measurement(s) failed: {sorted({(r['kind'], r['form']) for r in bad})}")
    if differ:
        worst = max(
            max((r.get(key) or {}).get("max_ulps", 0) for key in ("const", "traced", "asm_check"))
            for r in differ
        )
        print(f"{len(differ)} check(s) found differing elements (worst {worst:.0f} ulps)")
    if not bad and not differ:
        print("all checks equal bit for bit")


if __name__ == "__main__":
    define_flags()
    app.run(main)
