"""The random actions alone: `MultiDiscrete.sample` under each `spaces.MULTI_DISCRETE_DRAW`.

``python -m experiments.benchmarks.draws_probe --sizes=2000000,110000`` first checks, per
size, that the hash draws' Pallas kernels give the same components as their XLA forms
(`jaxdrive.hash_draws`, on the device), then times a scan of ``--num_steps`` draws (each
step's key folded from the step index, its actions the scan's carry, so each draw is
written once) and prints µs per draw beside the output-bytes floor (components × 4 bytes
at ``--bandwidth_gbs``). The env-only benchmark draws ``[21, 21]`` actions for every
agent each step: 2M samples at 2000 × (5+995), 110k at 1000 × (10+100). ``--tiny`` for a
CPU smoke test.
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
    flags.DEFINE_integer("num_steps", 100, "draws per timed call")
    flags.DEFINE_integer("repeats", 5, "timed calls (median reported)")
    flags.DEFINE_float("bandwidth_gbs", 4800.0, "memory bandwidth for the floor (H200: 4800)")
    flags.DEFINE_string("probe_out", "", "JSON-lines file to append to (none if empty)")
    flags.DEFINE_bool("tiny", False, "tiny sizes (CPU smoke test)")


def check_kernels(samples: int, nvec: tuple[int, ...]) -> None:
    """Raises unless each hash method's kernel and XLA form agree on ``samples`` draws."""
    key = jax.random.key(samples)
    for method in hash_draws.METHODS:
        got, want = (
            hash_draws.multi_discrete(key, (samples,), nvec, method=method, use_pallas=p)
            for p in (True, False)
        )
        bad = int(jnp.sum(got != want))
        if bad:
            raise AssertionError(f"{method}: kernel and XLA differ in {bad} components")


def time_draws(
    draw: str, samples: int, nvec: tuple[int, ...], num_steps: int, repeats: int
) -> float:
    """Median seconds per draw of ``[samples, C]`` actions with ``draw`` (a scan of
    ``num_steps`` draws per timed call)."""
    space = spaces.MultiDiscrete(nvec)
    saved = spaces.MULTI_DISCRETE_DRAW
    spaces.MULTI_DISCRETE_DRAW = draw
    try:

        def run(key: jax.Array) -> jax.Array:
            def body(carry: jax.Array, t: jax.Array) -> tuple[jax.Array, None]:
                del carry
                return space.sample(jax.random.fold_in(key, t), (samples,)), None

            init = jnp.zeros((samples, len(nvec)), jnp.int32)
            return jax.lax.scan(body, init, jnp.arange(num_steps))[0]

        compiled = jax.jit(run).lower(jax.random.key(0)).compile()
    finally:
        spaces.MULTI_DISCRETE_DRAW = saved
    key = jax.random.key(1)
    _, times = time_compiled(lambda: compiled(key).block_until_ready(), repeats)
    return statistics.median(times) / num_steps


def main(argv: list[str]) -> None:
    del argv
    nvec = tuple(int(n) for n in FLAGS.nvec)
    sizes = [int(s) for s in FLAGS.sizes] if not FLAGS.tiny else [1000, 37]
    steps, repeats = (3, 2) if FLAGS.tiny else (FLAGS.num_steps, FLAGS.repeats)
    info = device_info()
    print(f"# draws_probe on {info['device']} ({info['backend']}), nvec {list(nvec)}")
    for samples in sizes:
        if samples < 1:
            raise app.UsageError(f"--sizes must be >= 1, got {samples}")
        check_kernels(samples, nvec)
        floor_us = samples * len(nvec) * 4 / (FLAGS.bandwidth_gbs * 1e9) * 1e6
        print(f"\n== {samples:,} samples: kernels == XLA; output floor {floor_us:.2f} us")
        base = None
        for draw in FLAGS.draws:
            sec = time_draws(draw, samples, nvec, steps, repeats)
            base = base or sec
            print(f"{draw:12s} {1e6 * sec:9.2f} us per draw  x{base / sec:.2f}", flush=True)
            rec: dict[str, Any] = {
                "bench": "multi_discrete_draws", "draw": draw, "samples": samples,
                "nvec": list(nvec), "us_per_draw": 1e6 * sec, "floor_us": floor_us, **info,
            }  # fmt: skip
            if FLAGS.probe_out:
                append_jsonl(FLAGS.probe_out, rec)


if __name__ == "__main__":
    define_flags()
    app.run(main)
