r"""Full-observation probe: TagContinuous's full-observation forms, checked then timed.

``python -m experiments.benchmarks.full_obs_probe`` (``--tiny`` for a CPU check in well
under a minute). For each config (default ``1000x10+100`` and ``100x10+100``: envs ×
(taggers + runners), WarpDrive's Tag settings of `experiments.benchmarks.run`, full
observation) and each ``full_obs_impl`` form of `environments.tag_continuous.full_obs`:

1. **check**: the form's observations equal those of ``"gather"`` (the original) bit
   for bit on the same states (the ``--probe_steps``-step states of the reference's timed
   run, about 30% of the agents marked out of the game), with params closed over (compile-time
   constants, as the timings run) and passed as jit arguments (traced). Then **traj**:
   whether the whole timed run (state, TimeStep, reward sum) came out identical. That can
   differ by an ulp for reasons outside the observation function: XLA may fuse the
   position update into the observation's fusion and recompute it there with or without
   a fused multiply-add, depending on the program.
2. **obs**: `TagContinuous.observations` alone, vmapped over the envs, ``--probe_steps``
   times in a `lax.scan` on states that change every iteration (nothing loop-invariant to
   hoist), the observations carried (so each iteration writes them).
3. **step**: the vmapped env step without auto-reset, ``--probe_steps`` steps in a
   `lax.scan` with random actions drawn on the device, the TimeStep and a reward/done sum
   carried; and **step+reset**: `experiments.benchmarks.timing.time_env_steps` (the suite's
   env-only figure, auto-reset on).

Every timing: compile excluded, median of ``--probe_repeats`` calls, each ended by
``block_until_ready``. The **floor** line times a scan writing arrays of the observations'
size (a broadcast of the iteration number): the device's write cost for those bytes in
this harness. With ``--hlo`` the table also gives, per compiled program, how many kernels
(fusions, custom calls, copies ...) write an array at least as large as the smallest
group's observations per step ("big writes") and their total bytes: the passes over the
output that XLA scheduled (1 per group is the minimum).

Prints a table; ``--jsonl=PATH`` appends one JSON line per measurement.
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
import numpy as np
from absl import app, flags

import jaxdrive
from environments.tag_continuous import full_obs
from experiments.benchmarks.timing import device_info, time_compiled, time_env_steps

__all__ = [
    "big_writes",
    "check_form",
    "make_env",
    "parse_config",
    "probe",
    "time_floor",
    "time_observations",
    "time_steps",
]

FLAGS = flags.FLAGS
flags.DEFINE_bool("tiny", False, "tiny sizes for a CPU check (8x3+5, 4 steps, 2 repeats, LLVM -O0)")
flags.DEFINE_list("forms", list(full_obs.IMPLS), "full_obs_impl forms to compare")
flags.DEFINE_list(
    "configs", [], "envs x taggers+runners (default 1000x10+100,100x10+100; --tiny 8x3+5)"
)
flags.DEFINE_integer("probe_steps", 100, "steps per timed call (--tiny: 4)")
flags.DEFINE_integer("probe_repeats", 5, "timed calls, median reported (--tiny: 2)")
flags.DEFINE_bool("hlo", True, "count the kernels writing observation-sized arrays")
flags.DEFINE_string("jsonl", "", "append one JSON line per measurement (e.g. $OUT/x.jsonl)")


def parse_config(text: str) -> tuple[int, int, int]:
    """``"1000x10+100"`` -> ``(num_envs, taggers, runners)``."""
    m = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*\+\s*(\d+)\s*", text)
    if not m:
        raise ValueError(f"config must look like 1000x10+100, got {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def make_env(taggers: int, runners: int, form: str, episode_length: int | None = None):
    """WarpDrive's Tag config (`experiments.benchmarks.run`) with full observation built
    by ``form``; returns ``(env, params)``."""
    from experiments.benchmarks.tag_config import WARPDRIVE_TAG_ENV

    kw = dict(WARPDRIVE_TAG_ENV)
    if episode_length is not None:
        kw["episode_length"] = episode_length
    kw.update(
        num_taggers=taggers, num_runners=runners, use_full_observation=True, full_obs_impl=form
    )
    return jaxdrive.make("tag_continuous", **kw)


def _observations(env, state, params) -> dict[str, jax.Array]:
    """``{g: [A_g, D]}`` as the TimeStep holds them."""
    if hasattr(env, "observations"):
        return env.observations(state, params)
    return env.split_groups(env.observe(state, params))


# ------------------------------------------------------------------------------ HLO
_COMP = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=\s*(.+?)\s+([\w\-]+)\((.*)$")
_SKIP = {"parameter", "get-tuple-element", "tuple", "bitcast", "constant", "while"}
_SKIP |= {"conditional", "call", "after-all", "opt-barrier", "copy-done"}
_BYTES = {"f32": 4, "s32": 4, "u32": 4, "f16": 2, "bf16": 2, "pred": 1, "s8": 1, "u8": 1}


def _computations(hlo_text: str) -> dict[str, list[str]]:
    """Computation name -> its lines, from a module's HLO text."""
    comps: dict[str, list[str]] = {}
    comp = None
    for line in hlo_text.splitlines():
        mc = _COMP.match(line)
        if mc and "=" not in line.split("(")[0]:
            comp = mc.group(1)
            comps[comp] = []
        elif comp is not None:
            comps[comp].append(line)
    return comps


def big_writes(hlo_text: str, min_elements: int) -> list[tuple[str, str, int]]:
    """Kernel-level instructions run once per loop iteration (those of the `while` bodies
    and the non-fusion computations they call, e.g. command buffers; the whole module if
    it has no loop) whose result holds arrays of at least ``min_elements`` elements:
    ``(opcode, name, bytes of those arrays)``."""
    comps = _computations(hlo_text)
    refs = {
        c: set(
            re.findall(
                r"(?:body|to_apply|true_computation|false_computation)=%?([\w.\-]+)",
                "\n".join(lines),
            )
        )
        | {
            x.strip().lstrip("%")
            for grp in re.findall(r"branch_computations=\{([^}]*)\}", "\n".join(lines))
            for x in grp.split(",")
        }
        for c, lines in comps.items()
    }
    bodies = {
        b for lines in comps.values() for b in re.findall(r"body=%?([\w.\-]+)", "\n".join(lines))
    }
    todo, seen = list(bodies or comps), set()
    while todo:
        c = todo.pop()
        if c in seen or c not in comps:
            continue
        seen.add(c)
        todo.extend(refs.get(c, ()))
    out = []
    for c in seen:
        for line in comps[c]:
            mi = _INSTR.match(line)
            if not mi or mi.group(3) in _SKIP:
                continue
            total = 0
            for sm in re.finditer(r"\b(\w+)\[([\d,]*)\]", mi.group(2)):
                dims = [int(d) for d in sm.group(2).split(",") if d]
                n = int(np.prod(dims)) if dims else 1
                if n >= min_elements:
                    total += n * _BYTES.get(sm.group(1), 4)
            if total:
                out.append((mi.group(3), mi.group(1), total))
    return out


def _hlo_summary(compiled, min_elements: int) -> dict[str, Any]:
    try:
        writes = big_writes(compiled.as_text(), min_elements)
    except Exception as e:  # the text format is not an API
        return {"hlo_error": repr(e)}
    return {
        "big_writes": len(writes),
        "big_write_bytes": sum(w[2] for w in writes),
        "big_write_ops": [f"{op}:{name}" for op, name, _ in writes],
    }


# --------------------------------------------------------------------------- timing
def _median_call(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
    first, times = time_compiled(fn, repeats)
    return statistics.median(times), first


def time_observations(env, params, num_envs: int, steps: int, repeats: int, seed: int = 0):
    """``(seconds per iteration, compiled)`` of `_observations` vmapped over ``num_envs``
    envs, ``steps`` times in a scan on states moved every iteration."""
    venv = jaxdrive.vectorize(env, num_envs)
    state, ts = jax.jit(lambda k: venv.reset(k, params))(jax.random.key(seed))
    obs_fn = jax.vmap(lambda s: _observations(env, s, params))

    def run(state, obs0):
        def body(obs, i):
            s = state.replace(x=state.x + i * jnp.float32(1e-6), t=state.t + i.astype(jnp.int32))
            return obs_fn(s), None

        obs, _ = jax.lax.scan(body, obs0, jnp.arange(steps, dtype=jnp.float32))
        return obs

    compiled = jax.jit(run).lower(state, ts.obs).compile()
    med, _ = _median_call(lambda: compiled(state, ts.obs), repeats)
    return med / steps, compiled


def time_floor(shapes: dict[str, tuple[int, ...]], steps: int, repeats: int) -> float:
    """Seconds per iteration of a scan writing float32 arrays of ``shapes`` (a broadcast of
    the iteration number): the write cost of those bytes in this harness."""

    def run(obs0):
        def body(obs, i):
            return {g: jnp.broadcast_to(i, s) for g, s in shapes.items()}, None

        obs, _ = jax.lax.scan(body, obs0, jnp.arange(steps, dtype=jnp.float32))
        return obs

    obs0 = {g: jnp.zeros(s, jnp.float32) for g, s in shapes.items()}
    compiled = jax.jit(run).lower(obs0).compile()
    med, _ = _median_call(lambda: compiled(obs0), repeats)
    return med / steps


def time_steps(env, params, num_envs: int, steps: int, repeats: int, seed: int = 0):
    """``(seconds per step, compiled, final (state, ts, acc))`` of a scan of ``steps``
    vmapped env steps without auto-reset (random actions drawn on the device, the
    TimeStep and a reward/done sum carried). Params are closed over (constants)."""
    venv = jaxdrive.vectorize(env, num_envs, auto_reset=False)
    policy = jaxdrive.random_policy(env)
    state, ts = jax.jit(lambda k: venv.reset(k, params))(jax.random.key(seed))

    def run(key, state, ts):
        def body(carry, k):
            state, ts, acc = carry
            k_act, k_env = jax.random.split(k)
            state, ts = venv.step(k_env, state, policy(k_act, ts.obs), params)
            acc = acc + sum(jnp.sum(r) for r in ts.reward.values()) + jnp.sum(ts.done)
            return (state, ts, acc), None

        keys = jax.random.split(key, steps)
        carry, _ = jax.lax.scan(body, (state, ts, jnp.zeros((), jnp.float32)), keys)
        return carry

    key = jax.random.key(seed + 1)
    compiled = jax.jit(run).lower(key, state, ts).compile()
    final = compiled(key, state, ts)
    med, _ = _median_call(lambda: compiled(key, state, ts), repeats)
    return med / steps, compiled, final


# ---------------------------------------------------------------------------- check
def _bits(x: jax.Array) -> jax.Array:
    if x.dtype == jnp.float32:
        return jax.lax.bitcast_convert_type(x, jnp.uint32)
    return x


@jax.jit
def _compare(a, b) -> dict[str, jax.Array]:
    """Elements that differ bitwise, and the largest absolute float difference."""
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    diff = sum(jnp.sum(_bits(x) != _bits(y)) for x, y in zip(la, lb, strict=True))
    fl = [(x, y) for x, y in zip(la, lb, strict=True) if x.dtype == jnp.float32]
    mx = jnp.max(jnp.stack([jnp.max(jnp.abs(x - y)) for x, y in fl])) if fl else jnp.zeros(())
    return {"differ": diff, "max_abs": mx}


def _check_states(state, seed: int = 0):
    """``state`` (batched) with about 30% of the agents marked out of the game."""
    out = jax.random.uniform(jax.random.key(seed), state.in_game.shape) < 0.3
    return state.replace(in_game=state.in_game & ~out)


def _obs_on_states(env, params, states) -> tuple[Any, Any]:
    """`_observations` of the batched ``states`` with params constant, then traced."""
    const = jax.jit(jax.vmap(lambda s: _observations(env, s, params)))(states)
    traced = jax.jit(jax.vmap(lambda s, p: _observations(env, s, p), in_axes=(0, None)))(
        states, params
    )
    return const, traced


def check_form(reference, got) -> dict[str, Any]:
    """``{"differ": int, "max_abs": float}`` between two trees on the device."""
    r = _compare(reference, got)
    return {"differ": int(r["differ"]), "max_abs": float(r["max_abs"])}


# ---------------------------------------------------------------------------- probe
def probe(
    configs: list[tuple[int, int, int]],
    forms: list[str],
    steps: int,
    repeats: int,
    hlo: bool = True,
    jsonl: str = "",
    episode_length: int | None = None,
) -> list[dict[str, Any]]:
    """Runs the probe (module docstring); returns one record per (config, form)."""
    for f in forms:
        if f not in full_obs.IMPLS:
            raise ValueError(f"unknown form {f!r}; forms: {full_obs.IMPLS}")
    forms = ["gather"] + [f for f in forms if f != "gather"]  # the reference first
    info = device_info()
    print(
        f"device {info['device']} ({info['backend']}), jax {info['jax']}, "
        f"{steps} steps per call, median of {repeats}",
        flush=True,
    )
    records = []
    for n, t, r in configs:
        m = t + r
        d = full_obs.obs_size(m)
        shapes = {"tagger": (n, t, d), "runner": (n, r, d)}
        obs_bytes = 4 * n * m * d
        min_el = n * min(t, r) * d
        floor = time_floor(shapes, steps, repeats)
        print(
            f"\n== {n} envs x ({t}+{r}) agents, D = {d}: observations {obs_bytes / 1e6:.1f} MB "
            f"per step; write floor {1e3 * floor:.3f} ms ({obs_bytes / floor / 1e9:.0f} GB/s)",
            flush=True,
        )
        print(
            f"{'form':<8} {'obs check const/traced':<22} {'traj':<14} {'obs ms':>8} "
            f"{'GB/s':>6} {'writes':>7} {'step ms':>8} {'writes':>7} {'+reset ms':>10} "
            f"{'env steps/s':>12}",
            flush=True,
        )
        ref = None
        for form in forms:
            rec: dict[str, Any] = dict(
                bench="tag_full_obs_probe",
                form=form,
                num_envs=n,
                num_taggers=t,
                num_runners=r,
                obs_size=d,
                obs_bytes=obs_bytes,
                num_steps=steps,
                repeats=repeats,
                floor_ms=1e3 * floor,
                **info,
            )
            try:
                env, params = make_env(t, r, form, episode_length)
                t0 = time.perf_counter()
                obs_s, obs_c = time_observations(env, params, n, steps, repeats)
                rec["obs_ms"] = 1e3 * obs_s
                rec["obs_gb_per_s"] = obs_bytes / obs_s / 1e9
                if hlo:
                    rec["obs_hlo"] = _hlo_summary(obs_c, min_el)
                step_s, step_c, final = time_steps(env, params, n, steps, repeats)
                rec["step_ms"] = 1e3 * step_s
                if hlo:
                    rec["step_hlo"] = _hlo_summary(step_c, min_el)
                rr = time_env_steps(env, params, n, steps, repeats)
                rec["step_reset_ms"] = rr["ms_per_batch_step"]
                rec["env_steps_per_s"] = rr["env_steps_per_s"]
            except Exception as e:  # one form failing (e.g. a lowering) must not stop the rest
                rec["error"] = f"{type(e).__name__}: {e}"[:2000]
                traceback.print_exc()
            if "error" not in rec:
                try:
                    if ref is None:  # the reference ("gather") comes first
                        states = _check_states(final[0])
                        ref = (states, _obs_on_states(env, params, states), final)
                        const, traced = ref[1]
                    else:
                        const, traced = _obs_on_states(env, params, ref[0])
                    states, (ref_const, ref_traced), ref_final = ref
                    rec["check_const"] = check_form(ref_const, const)
                    rec["check_traced"] = check_form(ref_traced, traced)
                    rec["check_traj"] = check_form(ref_final, final)
                    del final, const, traced
                except Exception as e:
                    rec["check_error"] = f"{type(e).__name__}: {e}"[:2000]
                    traceback.print_exc()
                rec["wall_s"] = time.perf_counter() - t0
            records.append(rec)
            print(_row(rec), flush=True)
            if jsonl:
                os.makedirs(os.path.dirname(os.path.abspath(jsonl)), exist_ok=True)
                with open(jsonl, "a", encoding="utf8") as fp:
                    fp.write(json.dumps(rec, default=str) + "\n")
    return records


def _row(rec: dict[str, Any]) -> str:
    if "error" in rec:
        return f"{rec['form']:<8} ERROR {rec['error'][:200]}"

    def chk(c: dict[str, Any] | None) -> str:
        if not c:
            return "ERROR" if "check_error" in rec else "?"
        return "equal" if c["differ"] == 0 else f"{c['differ']}!({c['max_abs']:.1e})"

    def nw(h: dict[str, Any] | None) -> str:
        return "-" if not h or "big_writes" not in h else str(h["big_writes"])

    check = f"{chk(rec.get('check_const'))}/{chk(rec.get('check_traced'))}"
    return (
        f"{rec['form']:<8} {check:<22} {chk(rec.get('check_traj')):<14} "
        f"{rec['obs_ms']:>8.3f} {rec['obs_gb_per_s']:>6.0f} {nw(rec.get('obs_hlo')):>7} "
        f"{rec['step_ms']:>8.3f} {nw(rec.get('step_hlo')):>7} "
        f"{rec['step_reset_ms']:>10.3f} {rec['env_steps_per_s']:>12,.0f}"
    )


def main(argv: list[str]) -> None:
    del argv
    if FLAGS.tiny:
        # A smoke test: skip LLVM's optimisations (XLA's HLO passes, fusion included, still
        # run) to compile ~4x faster. Read when the backend starts, i.e. after this line.
        xla_flags = os.environ.get("XLA_FLAGS", "")
        if "xla_backend_optimization_level" not in xla_flags:
            os.environ["XLA_FLAGS"] = f"{xla_flags} --xla_backend_optimization_level=0".strip()
        configs = [parse_config(c) for c in FLAGS.configs] or [(8, 3, 5)]
        steps = 4 if FLAGS["probe_steps"].using_default_value else FLAGS.probe_steps
        repeats = 2 if FLAGS["probe_repeats"].using_default_value else FLAGS.probe_repeats
    else:
        configs = [parse_config(c) for c in FLAGS.configs] or [(1000, 10, 100), (100, 10, 100)]
        steps, repeats = FLAGS.probe_steps, FLAGS.probe_repeats
    records = probe(configs, list(FLAGS.forms), steps, repeats, FLAGS.hlo, FLAGS.jsonl)
    if FLAGS.hlo:
        print("\nbig writes per compiled program (kernels writing >= one group's obs):")
        for rec in records:
            for key in ("obs_hlo", "step_hlo"):
                h = rec.get(key) or {}
                if "big_write_ops" in h:
                    print(
                        f"  {rec['num_envs']}x({rec['num_taggers']}+{rec['num_runners']}) "
                        f"{rec['form']:<7} {key[:-4]:<5} {h['big_write_bytes'] / 1e6:8.1f} MB "
                        f"{', '.join(h['big_write_ops'])}"
                    )
    bad = [r for r in records if "error" in r or "check_error" in r]
    bad += [
        r
        for r in records
        if any((r.get(k) or {}).get("differ", 0) for k in ("check_const", "check_traced"))
    ]
    if bad:
        print(f"\n{len(bad)} form(s) failed or differ: {sorted({r['form'] for r in bad})}")
    traj = [r["form"] for r in records if (r.get("check_traj") or {}).get("differ", 0)]
    if traj:
        print(f"whole runs differ (see the module docstring, 'traj'): {sorted(set(traj))}")


if __name__ == "__main__":
    app.run(main)
