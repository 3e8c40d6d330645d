"""Tag A2C training throughput (1000 envs × (10+100), 25 steps, shared torso) in float32
and bfloat16 under the current ``XLA_FLAGS``: ``XLA_FLAGS=... python -m
experiments.benchmarks.xla_flags_probe`` once per flag set, to A/B compiler options.
``PROBE_DTYPES=bfloat16`` times one compute dtype only."""

from __future__ import annotations

import os

from experiments.benchmarks.training import tag_a2c_throughput


def main() -> None:
    flags = os.environ.get("XLA_FLAGS", "")
    for dt in os.environ.get("PROBE_DTYPES", "float32,bfloat16").split(","):
        rate = tag_a2c_throughput(dt, repeats=3)
        print(f"{dt:<9} {rate:>12,.0f} env steps/s  XLA_FLAGS={flags!r}")


if __name__ == "__main__":
    main()
