"""The fused dense + bias + relu kernel (`algorithms.common.pallas_dense`) on the GPU:

1. **The layer alone**, bfloat16 ``[M, 256] → [M, 256]`` at the rollout's runner rows
   (M = 100,000) and the learning batch's (M = 2,502,656): a chain of ``--chain`` layers
   (each reads the previous output, so nothing can be skipped) for ``xla`` (the GEMM,
   then bias and relu: today's layer), ``fused_xla`` (the fused arithmetic in XLA) and
   the kernel at several block shapes. Prints µs per layer, the floors (bytes at
   ``--bandwidth_tbps``, flops at ``--tflops``), and each form's largest error against a
   float64 reference relative to the unfused layer's.
2. **Tag A2C training** (1000 envs × (10+100), 25 steps, fc 256×256, bfloat16), variants
   ``DENSE:HEAD`` of ``policies.*.dense_impl`` and ``policies.*.head_impl`` (the Pallas
   categorical log-prob/entropy, `algorithms.common.pallas_categorical`) interleaved in
   one process (``--train_variants``).

``python -m experiments.benchmarks.dense_probe [--tiny]`` (``--tiny``: small sizes, CPU).
"""

from __future__ import annotations

import statistics

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from algorithms.common import networks
from algorithms.common import pallas_dense as pd
from experiments.benchmarks.timing import device_info, time_compiled
from experiments.benchmarks.training import load_config, tag_a2c_throughput, time_training

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the probe's flags (only when run as a program: other probes use some of
    the same names, and the tests import several of them)."""
    flags.DEFINE_bool("tiny", False, "small sizes for a CPU check")
    flags.DEFINE_list("rows", ["100000", "2502656"], "M values of the layer-alone timing")
    flags.DEFINE_integer("chain", 10, "layers per timed call")
    flags.DEFINE_integer("dense_repeats", 10, "timed calls (median reported)")
    flags.DEFINE_list(
        "blocks",
        ["128x128x64w4s3", "128x256x64w8s3", "64x256x64w4s3", "128x128x32w4s4", "256x128x64w8s3"],
        "kernel block shapes: BMxBNxBK, warps, stages",
    )
    flags.DEFINE_list(
        "train_variants",
        ["xla:xla", "pallas:xla", "xla:pallas", "pallas:pallas", "fused_xla:xla", "xla:xla"],
        "DENSE_IMPL:HEAD_IMPL pairs, timed in this order",
    )
    flags.DEFINE_float("bandwidth_tbps", 4.3, "DRAM bandwidth for the byte floor, TB/s")
    flags.DEFINE_float("tflops", 990.0, "dense bfloat16 tensor rate for the flop floor, TFLOP/s")


def _parse_block(s: str) -> dict[str, int]:
    shape, rest = s.split("w")
    bm, bn, bk = (int(v) for v in shape.split("x"))
    warps, stages = (int(v) for v in rest.split("s"))
    return dict(block_m=bm, block_n=bn, block_k=bk, num_warps=warps, num_stages=stages)


def _layer(form: str, block: dict[str, int] | None):
    if form == "xla":
        bf = jnp.dtype(jnp.bfloat16)
        return lambda x, w, b: jax.nn.relu(networks._dense(x, w, b, bf, bf))
    if form == "fused_xla":
        return pd.dense_relu_xla
    return lambda x, w, b: pd.dense_relu_pallas(x, w, b, **(block or {}))


def layer_alone(
    m: int,
    width: int,
    chain: int,
    repeats: int,
    blocks: list[str],
    bandwidth_tbps: float = 4.3,
    tflops: float = 990.0,
) -> list[dict[str, object]]:
    """Times and checks each form (printing a table); returns one record per form that
    ran: ``form``, ``us_per_layer``, ``max_err`` (against float64, first 4096 rows)."""
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(k1, (m, width)).astype(jnp.bfloat16)
    w = jax.random.normal(k2, (width, width)) * (2.0 / width) ** 0.5
    b = 0.05 * jax.random.normal(k3, (width,))
    bytes_ = 2 * 2 * m * width  # read x, write y (bfloat16)
    floor_b = bytes_ / (bandwidth_tbps * 1e12) * 1e6
    floor_f = 2 * m * width * width / (tflops * 1e12) * 1e6
    print(
        f"\n== [{m}, {width}] x [{width}, {width}] bfloat16, bias + relu: floors "
        f"{floor_b:.1f} us (bytes) / {floor_f:.1f} us (flops)"
    )
    # accuracy on the first 4096 rows against float64
    xs = np.asarray(x[:4096], np.float64)
    exact = np.maximum(xs @ np.asarray(w.astype(jnp.bfloat16), np.float64) + np.asarray(b), 0.0)
    forms = [("xla", None), ("fused_xla", None)] + [("pallas", _parse_block(s)) for s in blocks]
    names = ["xla", "fused_xla"] + [f"pallas {s}" for s in blocks]
    errs, records = {}, []
    print(f"{'form':24} {'us/layer':>9} {'x floor':>8} {'max err':>9} {'vs xla':>7}")
    for name, (form, block) in zip(names, forms, strict=True):
        layer = _layer(form, block)
        try:
            y1 = jax.jit(layer)(x[:4096], w, b)
            errs[name] = float(np.abs(np.asarray(y1, np.float64) - exact).max())

            def run(x0, layer=layer):
                return jax.lax.fori_loop(0, chain, lambda i, h: layer(h, w, b), x0)

            fn = jax.jit(run).lower(x).compile()
            _, times = time_compiled(lambda fn=fn: fn(x), repeats)
        except Exception as e:  # a block shape Triton rejects: report, go on
            print(f"{name:24} failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            continue
        us = statistics.median(times) / chain * 1e6
        rel = errs[name] / max(errs.get("xla", errs[name]), 1e-30)
        print(
            f"{name:24} {us:9.1f} {us / max(floor_b, floor_f):8.2f} {errs[name]:9.2e} {rel:7.2f}",
            flush=True,
        )
        records.append({"form": name, "us_per_layer": us, "max_err": errs[name]})
    return records


def main(argv: list[str]) -> None:
    del argv
    info = device_info()
    print(f"device {info['device']} ({info['backend']}), jax {info['jax']}")
    rows = [int(r) for r in FLAGS.rows]
    width, chain, repeats, blocks = 256, FLAGS.chain, FLAGS.dense_repeats, FLAGS.blocks
    if FLAGS.tiny:
        rows, width, chain, repeats, blocks = [300], 64, 2, 2, ["64x64x32w4s2"]
    for m in rows:
        layer_alone(m, width, chain, repeats, blocks, FLAGS.bandwidth_tbps, FLAGS.tflops)
    print("\nTag A2C training, bfloat16, dense_impl:head_impl variants interleaved")
    for impl in FLAGS.train_variants:
        dense, _, head = impl.partition(":")
        over = {}
        for p in ("tagger", "runner"):
            over[f"policies.{p}.dense_impl"] = dense
            over[f"policies.{p}.head_impl"] = head or "xla"
        if FLAGS.tiny:
            over.update({f"policies.{p}.compute_dtype": "bfloat16" for p in ("tagger", "runner")})
            over.update({f"policies.{p}.hidden_sizes": (16, 16) for p in ("tagger", "runner")})
            config = load_config("tag_continuous", "tiny,a2c", **over)
            rate = time_training(config, iterations=2, repeats=1)["env_steps_per_s"]
        else:
            rate = tag_a2c_throughput("bfloat16", max(1, repeats // 2), **over)
        print(f"train {impl:<16} {rate:>12,.0f} env steps/s", flush=True)


if __name__ == "__main__":
    define_flags()
    app.run(main)
