r"""Step-kernel probe: TagContinuous's ``step_impl="pallas"`` (one kernel) against ``"xla"``.

``python -m experiments.benchmarks.step_kernel_probe --probe_out=$OUT/step_kernel.jsonl``
(``--tiny`` for a CPU check in interpret mode). For ``--sk_config`` (default
``1000x10+100``: envs × (taggers + runners), WarpDrive's Tag settings of
`experiments.benchmarks.run`, partial observation of ``--sk_k`` neighbours, the Pallas
neighbour search):

1. **check**: one vmapped `TagContinuous.step_env` with ``step_impl="pallas"`` (and with
   the kernel's ``fence_products=True``, which stops FMA contraction) against
   ``"xla"`` on the same states and actions: the number of differing elements over the
   whole ``(state, TimeStep)`` and the largest absolute difference, params closed over
   (constants) and traced. States: the reset ones, after ``--sk_check_steps`` random
   steps (some runners tagged out), and the same at the episode's last step.
   (`env.action_values` keeps its bounds behind an optimization barrier, so both steps
   use np.linspace's float32 tables with constant params too; before that, XLA folded
   the constant tables with other roundings and the "constant" rows differed.)
2. **time**: `experiments.benchmarks.timing.time_env_steps` (env-only stepping: a scan
   of ``--sk_steps`` vmapped steps with random actions, auto-reset) for ``step_impl``
   ``xla`` and ``pallas``, each with ``knn_obs_impl`` ``xla`` and ``pallas``.

Prints a table; ``--probe_out=PATH`` appends one JSON line per row.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

import jaxdrive
from experiments.benchmarks.run import make_tag
from experiments.benchmarks.timing import device_info, time_env_steps

__all__ = ["check", "compare", "define_flags", "make_env", "stepped_states"]

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the probe's flags (only when run as a program; the names are its own)."""
    flags.DEFINE_bool("tiny", False, "tiny sizes for a CPU check (4x3+5, k=3, 4 steps)")
    flags.DEFINE_string("sk_config", "1000x10+100", "envs x taggers+runners")
    flags.DEFINE_integer("sk_k", 10, "neighbours observed (--tiny: 3)")
    flags.DEFINE_integer("sk_steps", 100, "steps per timed call (--tiny: 4)")
    flags.DEFINE_integer("sk_repeats", 5, "timed calls, median reported (--tiny: 2)")
    flags.DEFINE_integer("sk_check_steps", 20, "random steps before the stepped check states")
    flags.DEFINE_string("probe_out", None, "JSON-lines file to append to (none: no file)")


def make_env(taggers: int, runners: int, k: int, step_impl: str, knn_obs_impl: str = "xla"):
    """WarpDrive's Tag config (`experiments.benchmarks.run.make_tag`), partial observation
    of ``k``, the Pallas searches; returns ``(env, params)``."""
    return make_tag(taggers, runners, False, k, "pallas", knn_obs_impl, step_impl)


def compare(got: Any, ref: Any) -> dict[str, Any]:
    """Differing elements and the largest absolute difference over two pytrees, and
    ``leaves``: for each differing leaf (by its path) the count, and for float leaves how
    many of them are signed zeros (+0 vs -0, equal as numbers)."""
    diff, total, worst, leaves = 0, 0, 0.0, {}
    flat_got = jax.tree_util.tree_leaves_with_path(got)
    for (path, a), b in zip(flat_got, jax.tree.leaves(ref), strict=True):
        a, b = np.asarray(a), np.asarray(b)
        total += a.size
        zeros = 0
        if a.dtype.kind == "f":
            bits = f"u{a.itemsize}"
            ne = a.reshape(-1).view(bits) != b.reshape(-1).view(bits)
            if ne.any():
                worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b))))
                zeros = int(np.sum(ne & (a.reshape(-1) == 0) & (b.reshape(-1) == 0)))
        else:
            ne = a.reshape(-1) != b.reshape(-1)
        n = int(ne.sum())
        diff += n
        if n:
            leaves[jax.tree_util.keystr(path)] = {
                "dtype": str(a.dtype),
                "differing": n,
                "signed_zeros": zeros,
            }
    return {"elements": total, "differing": diff, "max_abs_diff": worst, "leaves": leaves}


def stepped_states(env, params, num_envs: int, steps: int, seed: int = 0):
    """``{name: (state, actions)}``: reset states, states after ``steps`` random steps,
    and those at the episode's last step (``t = E - 1``), with random actions."""
    venv = jaxdrive.vectorize(env, num_envs)
    policy = jaxdrive.random_policy(env)
    key = jax.random.key(seed)
    state, ts = jax.jit(venv.reset)(key, params)
    out = {"reset": (state, policy(jax.random.fold_in(key, 1), ts.obs))}

    @jax.jit
    def run(key, state, ts):
        def body(carry, k):
            state, ts = carry
            state, ts = venv.step(k, state, policy(k, ts.obs), params)
            return (state, ts), None

        return jax.lax.scan(body, (state, ts), jax.random.split(key, steps))[0]

    state, ts = run(jax.random.fold_in(key, 2), state, ts)
    acts = policy(jax.random.fold_in(key, 3), ts.obs)
    out["stepped"] = (state, acts)
    last = jnp.full_like(state.t, env.episode_length - 1)
    out["last_step"] = (state.replace(t=last), acts)
    return out


def check(taggers: int, runners: int, num_envs: int, k: int, steps: int) -> list[dict]:
    """The check rows (see the module docstring)."""
    ref_env, params = make_env(taggers, runners, k, "xla")
    env, _ = make_env(taggers, runners, k, "pallas")
    keys = jax.random.split(jax.random.key(7), num_envs)
    forms = {
        "pallas": env.step_env,
        "pallas_fence": lambda key, s, a, p: env._step_pallas(s, a, p, fence_products=True),
    }
    # one jitted program per (params mode, form), built before the state sets: the
    # state sets share shapes, so each program compiles once
    programs = {}
    for traced in (False, True):
        for form, fn in {"xla": ref_env.step_env, **forms}.items():
            if traced:
                programs[traced, form] = jax.jit(jax.vmap(fn, in_axes=(0, 0, 0, None)))
            else:
                programs[traced, form] = jax.jit(
                    jax.vmap(lambda k, s, a, fn=fn: fn(k, s, a, params))
                )

    def call(traced: bool, form: str, state, acts):
        if traced:
            return programs[traced, form](keys, state, acts, params)
        return programs[traced, form](keys, state, acts)

    rows = []
    for name, (state, acts) in stepped_states(ref_env, params, num_envs, steps).items():
        for traced in (False, True):
            ref = call(traced, "xla", state, acts)
            for form in forms:
                got = call(traced, form, state, acts)
                rows.append(
                    {
                        "kind": "check",
                        "states": name,
                        "params": "traced" if traced else "constant",
                        "form": form,
                        **compare(got, ref),
                    }
                )
    return rows


def main(argv: list[str]) -> None:
    del argv
    k, steps, repeats, config = FLAGS.sk_k, FLAGS.sk_steps, FLAGS.sk_repeats, FLAGS.sk_config
    check_steps = FLAGS.sk_check_steps
    if FLAGS.tiny:
        k, steps, repeats, config, check_steps = 3, 4, 2, "4x3+5", 4
    envs_s, agents = config.split("x")
    num_envs = int(envs_s)
    taggers, runners = (int(v) for v in agents.split("+"))
    info = device_info()
    print(f"device {info['device']} ({info['backend']}), jax {info['jax']}, {config}, k = {k}")
    base = {"config": config, "k": k, "device": info["device"], "backend": info["backend"]}
    rows = [dict(base, **r) for r in check(taggers, runners, num_envs, k, check_steps)]
    print(f"{'states':10} {'params':9} {'form':13} {'differing':>10} {'of':>10} {'max|diff|':>10}")
    for r in rows:
        print(
            f"{r['states']:10} {r['params']:9} {r['form']:13} {r['differing']:>10} "
            f"{r['elements']:>10} {r['max_abs_diff']:>10.3g}"
        )
        for leaf, d in r["leaves"].items():
            print(f"    {leaf} ({d['dtype']}): {d['differing']} differ, {d['signed_zeros']} ±0")
    print(f"\nenv-only stepping, {steps} steps per call, median of {repeats}")
    print(f"{'step_impl':10} {'knn_obs':8} {'ms/step':>9} {'M env-steps/s':>14}")
    for knn in ("xla", "pallas"):
        for step_impl in ("xla", "pallas"):
            env, params = make_env(taggers, runners, k, step_impl, knn)
            rec = time_env_steps(env, params, num_envs, steps, repeats)
            ms = rec["seconds_median"] / steps * 1e3
            row = dict(base, kind="time", step_impl=step_impl, knn_obs_impl=knn, ms_per_step=ms)
            row.update(rec)
            rows.append(row)
            print(f"{step_impl:10} {knn:8} {ms:>9.4f} {num_envs / ms * 1e-3:>14.3f}")
    if FLAGS.probe_out:
        os.makedirs(os.path.dirname(os.path.abspath(FLAGS.probe_out)), exist_ok=True)
        with open(FLAGS.probe_out, "a") as f:
            for r in rows:
                f.write(json.dumps(r, default=str) + "\n")
        print(f"wrote {len(rows)} lines to {FLAGS.probe_out}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
