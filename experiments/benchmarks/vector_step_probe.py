r"""Batched-step probe: TagContinuous's ``step_impl="vector"`` kernel against the XLA step.

``python -m experiments.benchmarks.vector_step_probe --probe_out=$OUT/vector_step.jsonl``
(``--tiny``: a CPU check in interpret mode). For ``--vs_config`` (envs × (taggers +
runners), WarpDrive's Tag settings of `experiments.benchmarks.run`, partial observation
of ``--vs_k`` neighbours, the Pallas searches):

1. **check**: `jaxdrive.vectorize`'s step with ``step_impl="vector"`` (one kernel for
   the batch's step and auto-reset, `environments.tag_continuous.vector_step`) against
   ``"xla"`` on the same states, actions and keys, with and without auto-reset, params
   closed over (constants) and traced; states: reset, after ``--vs_check_steps``
   random steps, and those at the episode's last step (every env resets). Each row
   counts the differing elements of the whole ``(state, TimeStep)`` and names the
   differing leaves (signed zeros counted apart).
2. **time**: the kernel alone, ``--vs_steps`` calls in a jitted scan carrying the state
   (fixed actions and reset uniforms; compile excluded, median of ``--vs_repeats``),
   for each ``--vs_variants`` entry (``default`` or ``setting=value/...`` with settings
   ``elements``, ``warps``, ``table``, ``tpos``, ``tpacked`` = 0/1, ``reset`` = 0/1,
   and ``ablate`` = parts left out, ``+``-joined, for timing only:
   `vector_step._ABLATE`), beside ``xla``: the vmapped
   XLA step and reset-by-select that the kernel replaces (its observations unused, so
   XLA drops them). Each row gives µs per batch step and the rate at which the kernel's
   own bytes move (reads and writes, `bytes_moved`).

Prints tables; ``--probe_out=PATH`` appends one JSON line per row.
"""

from __future__ import annotations

import statistics
from typing import Any

import jax
import jax.numpy as jnp
from absl import app, flags

import jaxdrive
from environments.tag_continuous import vector_step
from experiments.benchmarks.knn_obs_probe import parse_config
from experiments.benchmarks.run import make_tag
from experiments.benchmarks.step_kernel_probe import compare, stepped_states
from experiments.benchmarks.timing import append_jsonl, device_info, time_compiled

__all__ = ["bytes_moved", "check", "define_flags", "parse_variant", "time_variant"]

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The probe's flags (only when run as a program; the names are its own)."""
    flags.DEFINE_bool("tiny", False, "tiny sizes for a CPU check (3x2+5, k=3)")
    flags.DEFINE_string("vs_config", "1000x10+100", "envs x taggers+runners")
    flags.DEFINE_integer("vs_k", 10, "neighbours observed")
    flags.DEFINE_integer("vs_steps", 100, "kernel calls per timed call")
    flags.DEFINE_integer("vs_repeats", 5, "timed calls, median reported")
    flags.DEFINE_integer("vs_check_steps", 20, "random steps before the stepped check states")
    flags.DEFINE_list("vs_variants", ["default"], "kernel settings to time (module docstring)")
    flags.DEFINE_bool("vs_check", True, "run the check rows")
    flags.DEFINE_list(
        "vs_check_states", ["reset", "stepped", "last_step"], "state sets of the check rows"
    )
    flags.DEFINE_bool("vs_time", True, "run the timing rows")
    flags.DEFINE_string("probe_out", "", "JSON-lines file to append to (none if empty)")


_SETTINGS = {
    "elements": ("DEFAULT_ELEMENTS", int),
    "warps": ("DEFAULT_WARPS", int),
    "table": ("TABLE_STORE", str),
    "tpos": ("TAGGER_POSITIONS", str),
    "tpacked": ("PACKED_COUNTS", lambda v: bool(int(v))),
    "reset": (None, int),
    "ablate": ("_ABLATE", lambda v: frozenset(v.split("+"))),  # e.g. ablate=tagging+trig
}


def parse_variant(text: str) -> dict[str, Any]:
    """``"elements=128/warps=1"`` -> ``{"elements": 128, "warps": 1}``; ``"default"`` -> ``{}``."""
    if text.strip() == "default":
        return {}
    out = {}
    for part in text.split("/"):
        name, eq, value = part.strip().partition("=")
        if not eq or name not in _SETTINGS:
            raise ValueError(f"unknown setting {part!r} in {text!r}; settings: {list(_SETTINGS)}")
        out[name] = _SETTINGS[name][1](value)
    return out


def bytes_moved(n: int, t: int, r: int, padding: tuple[int, int] | None) -> int:
    """Bytes the kernel must read and write per batch step: state (5 float32, in-game,
    ``t``), actions (one int32 pair per agent), then the new state, rewards, three flags
    per agent, three per-env scalars and, with the search's ``padding`` ``(MQ, MC)``, its
    padded positions and the writer's 32-byte feature rows. (The reset's uniforms are
    read only by the envs that reset: not counted.)"""
    m = t + r
    reads = n * m * (5 * 4 + 1 + 2 * 4) + 4 * n
    writes = n * m * (5 * 4 + 1 + 4 + 3) + n * (4 + 1 + 4 + 4)
    if padding is not None:
        writes += n * (4 * 2 * (padding[0] + padding[1]) + 32 * m)
    return reads + writes


def check(
    t: int, r: int, n: int, k: int, steps: int, only: tuple[str, ...] | None = None
) -> list[dict[str, Any]]:
    """The check rows (module docstring); ``only``: these state sets (default all)."""
    ref_env, params = make_tag(t, r, False, k, "pallas", step_impl="xla")
    env, _ = make_tag(t, r, False, k, "pallas", step_impl="vector")
    key = jax.random.key(11)
    rows = []
    for name, (state, acts) in stepped_states(ref_env, params, n, steps).items():
        if only is not None and name not in only:
            continue
        for auto_reset in (True, False):
            for traced in (False, True):
                outs = []
                for e in (ref_env, env):
                    venv = jaxdrive.vectorize(e, n, auto_reset=auto_reset)
                    if traced:
                        outs.append(jax.jit(venv.step)(key, state, acts, params))
                    else:
                        step = jax.jit(lambda s, a, v=venv: v.step(key, s, a, params))
                        outs.append(step(state, acts))
                rows.append(
                    {
                        "kind": "check",
                        "states": name,
                        "auto_reset": auto_reset,
                        "params": "traced" if traced else "constant",
                        **compare(outs[1], outs[0]),
                    }
                )
    return rows


def time_variant(
    t: int, r: int, n: int, k: int, variant: dict[str, Any], steps: int, repeats: int
) -> dict[str, Any]:
    """Times the kernel alone (or ``variant == {"xla": 1}``: the XLA step and reset it
    replaces) in a scan of ``steps`` batch steps; returns µs per step and GB/s."""
    xla = variant.get("xla", 0) == 1
    reset = bool(variant.get("reset", 1))
    # the Pallas writer, as on GPU by default: the kernel then writes the search's inputs
    env, params = make_tag(t, r, False, k, "pallas", knn_obs_impl="pallas", step_impl="vector")
    venv = jaxdrive.vectorize(env, n)
    key = jax.random.key(3)
    state, ts = jax.jit(venv.reset)(key, params)
    acts = jaxdrive.random_policy(env)(jax.random.fold_in(key, 1), ts.obs)
    r_keys = jax.random.split(jax.random.fold_in(key, 2), n)
    u = jax.jit(jax.vmap(env._reset_uniforms))(r_keys)
    interpret = jax.default_backend() != "gpu"
    padding = env._vector_search_padding()  # what the env asks the kernel to write
    saved = {a: getattr(vector_step, a) for a, _ in _SETTINGS.values() if a}
    try:
        for name, value in variant.items():
            attr = _SETTINGS.get(name, (None,))[0]
            if attr:
                setattr(vector_step, attr, value)

        # ``one(state) -> (new state, the other outputs)``; the scan carries both (the
        # state's arrays once: a buffer carried twice would be copied every step).
        if xla:

            def one(state):
                def single(s, a, rk):
                    s1, ts1 = env.step_env(rk, s, a, params)
                    rs, _ = env.reset_env(rk, params)
                    s2 = jax.tree.map(lambda x, y: jnp.where(ts1.done, x, y), rs, s1)
                    return s2, ts1.replace(obs={})

                return jax.vmap(single)(state, acts, r_keys)
        else:

            def one(state):
                p = env._f32(params)
                args, static = env._kernel_args(state, acts)  # as the env calls it
                out = vector_step.tag_vector_step(
                    [getattr(p, name) for name in vector_step.RAW_PARAMS], *args,
                    u if reset else None, **static, search_padding=padding,
                    feature_table=padding is not None, interpret=interpret,
                )  # fmt: skip
                new = state.replace(
                    x=out.x, y=out.y, speed=out.speed, direction=out.direction,
                    acceleration=out.acceleration, in_game=out.in_game, t=out.t,
                )  # fmt: skip
                return new, (out[7:14], out.search, out.table)

        @jax.jit
        def run(state):
            def body(carry, _):
                return one(carry[0]), None

            out0 = jax.eval_shape(one, state)[1]
            zero = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), out0)
            return jax.lax.scan(body, (state, zero), None, length=steps)[0]

        compiled = run.lower(state).compile()
        _, times = time_compiled(lambda: compiled(state), repeats)
    finally:
        for attr, value in saved.items():
            setattr(vector_step, attr, value)
    us = 1e6 * statistics.median(times) / steps
    moved = bytes_moved(n, t, r, None if xla else padding)
    return {"kind": "time", "us_per_step": us, "gb_per_s": moved / us * 1e-3, "bytes": moved}


def main(argv: list[str]) -> None:
    del argv
    if FLAGS.tiny:
        n, t, r, k, steps, repeats, check_steps = 3, 2, 5, 3, 3, 1, 3
    else:
        n, t, r = parse_config(FLAGS.vs_config)
        k, steps, repeats = FLAGS.vs_k, FLAGS.vs_steps, FLAGS.vs_repeats
        check_steps = FLAGS.vs_check_steps
    info = device_info()
    print(f"# vector_step_probe on {info['device']} ({info['backend']}), jax {info['jax']}")
    base = {"bench": "tag_vector_step", "num_envs": n, "num_taggers": t, "num_runners": r,
            "k": k, **info}  # fmt: skip
    rows = []
    if FLAGS.vs_check:
        print(f"\n== check {n} x ({t}+{r}) against the XLA step")
        for row in check(t, r, n, k, check_steps, only=tuple(FLAGS.vs_check_states)):
            rows.append(dict(base, **row))
            print(
                f"{row['states']:10} auto_reset={row['auto_reset']!s:5} {row['params']:8} "
                f"{row['differing']:>8} of {row['elements']} differ, max |diff| "
                f"{row['max_abs_diff']:.3g}"
            )
            for leaf, d in row["leaves"].items():
                print(f"    {leaf} ({d['dtype']}): {d['differing']} ({d['signed_zeros']} ±0)")
    if FLAGS.vs_time:
        print(f"\n== time {n} x ({t}+{r}), {steps} steps per call, median of {repeats}")
    for text in ["xla", *FLAGS.vs_variants] if FLAGS.vs_time else []:
        variant = {"xla": 1} if text == "xla" else parse_variant(text)
        rec = time_variant(t, r, n, k, variant, steps, repeats)
        rows.append(dict(base, variant=text, **rec))
        print(f"{text:<40} {rec['us_per_step']:9.2f} us/step  {rec['gb_per_s']:8.1f} GB/s")
    if FLAGS.probe_out:
        for row in rows:
            append_jsonl(FLAGS.probe_out, row)


if __name__ == "__main__":
    define_flags()
    app.run(main)
