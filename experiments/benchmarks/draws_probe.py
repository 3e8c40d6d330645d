"""The random actions alone: `MultiDiscrete.sample` under each `spaces.MULTI_DISCRETE_DRAW`.

``python -m experiments.benchmarks.draws_probe --sizes=2000000,110000`` first checks, per
size, that the hash draws' Pallas kernels give the same components as their XLA forms
(`jaxdrive.hash_draws`, on the device; also under `jax.vmap`), then times a scan of
``--num_steps`` iterations of ``--per_step`` draws each (each draw's key folded from its
index, its actions part of the scan's carry, so each draw is written once; several per
iteration so that the while loop's own kernels and launch gaps weigh little) and prints
µs per draw beside two floors: the output bytes (components × 4 at ``--bandwidth_gbs``)
and the ``store`` row, the same loop filling the same arrays with a constant. The
env-only benchmark draws ``[21, 21]`` actions for every agent each step: 2M samples at
2000 × (5+995), 110k at 1000 × (10+100). ``--tiny`` for a CPU smoke test.
"""

from __future__ import annotations

import statistics
from typing import Any

import jax
import jax.numpy as jnp
from absl import app, flags

from experiments.benchmarks.timing import append_jsonl, device_info, time_compiled
from jaxdrive import hash_draws, spaces

__all__ = ["check_kernels", "define_flags", "time_draws"]

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The probe's flags (defined only when run as a program)."""
    flags.DEFINE_list("sizes", ["2000000", "110000"], "samples per draw")
    flags.DEFINE_list("nvec", ["21", "21"], "the MultiDiscrete's sizes")
    flags.DEFINE_list("draws", list(spaces.MULTI_DISCRETE_DRAWS), "draw forms to time")
    flags.DEFINE_integer("num_steps", 25, "scan iterations per timed call")
    flags.DEFINE_integer("per_step", 8, "draws per scan iteration")
    flags.DEFINE_integer("repeats", 5, "timed calls (median reported)")
    flags.DEFINE_float("bandwidth_gbs", 4800.0, "memory bandwidth for the floor (H200: 4800)")
    flags.DEFINE_string("probe_out", "", "JSON-lines file to append to (none if empty)")
    flags.DEFINE_bool("tiny", False, "tiny sizes (CPU smoke test)")


def check_kernels(samples: int, nvec: tuple[int, ...]) -> None:
    """Raises unless each hash method's kernel and XLA form agree on ``samples`` draws,
    and on 3 vmapped keys' draws of ``samples // 3 + 1`` each."""
    key = jax.random.key(samples)
    keys = jax.random.split(key, 3)
    for method in hash_draws.METHODS:
        draw = lambda k, n, p, m=method: hash_draws.multi_discrete(
            k, (n,), nvec, method=m, use_pallas=p
        )
        for name, fn in (
            ("", lambda p: draw(key, samples, p)),
            (" (vmapped)", lambda p: jax.vmap(lambda k: draw(k, samples // 3 + 1, p))(keys)),
        ):
            bad = int(jnp.sum(fn(True) != fn(False)))
            if bad:
                raise AssertionError(f"{method}{name}: kernel and XLA differ in {bad} values")


def time_draws(
    draw: str,
    samples: int,
    nvec: tuple[int, ...],
    num_steps: int,
    repeats: int,
    per_step: int = 8,
) -> float:
    """Median seconds per draw of ``[samples, C]`` actions with ``draw`` (one of
    `spaces.MULTI_DISCRETE_DRAWS`, or ``"store"``: a constant fill of the same arrays),
    timed as a scan of ``num_steps`` iterations of ``per_step`` draws."""
    space = spaces.MultiDiscrete(nvec)
    shape = (samples, len(nvec))

    def one(key: jax.Array, i: jax.Array) -> jax.Array:
        if draw == "store":
            return jnp.full(shape, i, jnp.int32)
        return space.sample(jax.random.fold_in(key, i), (samples,))

    def run(key: jax.Array) -> tuple[jax.Array, ...]:
        def body(carry, t):
            del carry
            return tuple(one(key, t * per_step + i) for i in range(per_step)), None

        init = tuple(jnp.zeros(shape, jnp.int32) for _ in range(per_step))
        return jax.lax.scan(body, init, jnp.arange(num_steps))[0]

    saved = spaces.MULTI_DISCRETE_DRAW
    spaces.MULTI_DISCRETE_DRAW = draw if draw != "store" else saved
    try:
        compiled = jax.jit(run).lower(jax.random.key(0)).compile()
    finally:
        spaces.MULTI_DISCRETE_DRAW = saved
    key = jax.random.key(1)
    _, times = time_compiled(lambda: jax.block_until_ready(compiled(key)), repeats)
    return statistics.median(times) / (num_steps * per_step)


def main(argv: list[str]) -> None:
    del argv
    nvec = tuple(int(n) for n in FLAGS.nvec)
    sizes = [int(s) for s in FLAGS.sizes] if not FLAGS.tiny else [1000, 37]
    steps, repeats = (3, 2) if FLAGS.tiny else (FLAGS.num_steps, FLAGS.repeats)
    per_step = 2 if FLAGS.tiny else FLAGS.per_step
    if min(steps, repeats, per_step) < 1:
        raise app.UsageError("--num_steps, --repeats and --per_step must be >= 1")
    info = device_info()
    print(f"# draws_probe on {info['device']} ({info['backend']}), nvec {list(nvec)}")
    for samples in sizes:
        if samples < 1:
            raise app.UsageError(f"--sizes must be >= 1, got {samples}")
        check_kernels(samples, nvec)
        floor_us = samples * len(nvec) * 4 / (FLAGS.bandwidth_gbs * 1e9) * 1e6
        print(f"\n== {samples:,} samples: kernels == XLA; output floor {floor_us:.2f} us")
        base = None
        for draw in ["store", *FLAGS.draws]:
            sec = time_draws(draw, samples, nvec, steps, repeats, per_step)
            base = base or sec
            print(f"{draw:12s} {1e6 * sec:9.2f} us per draw  store +{1e6 * (sec - base):.2f}")
            rec: dict[str, Any] = {
                "bench": "multi_discrete_draws", "draw": draw, "samples": samples,
                "nvec": list(nvec), "us_per_draw": 1e6 * sec, "floor_us": floor_us, **info,
            }  # fmt: skip
            if FLAGS.probe_out:
                append_jsonl(FLAGS.probe_out, rec)


if __name__ == "__main__":
    define_flags()
    app.run(main)
