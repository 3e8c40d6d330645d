"""Scaling benchmark: training throughput on 1..D devices (data parallel, `shard_map`).

Weak scaling keeps ``per_device_envs`` envs on every device (the global batch grows
with D); strong scaling keeps the global batch at ``per_device_envs`` (what one device
holds) and splits it over D. Speedup = throughput on D devices / throughput on the first entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from experiments.benchmarks.training import load_config, time_training

__all__ = ["scaling_records", "speedup_lines"]


def scaling_records(
    config_name: str,
    preset: str,
    devices_list: Sequence[int],
    per_device_envs: int,
    weak: bool = True,
    *,
    iterations: int = 3,
    repeats: int = 3,
    **overrides: Any,
) -> list[dict[str, Any]]:
    """One `time_training` record per device count, with ``speedup`` and ``efficiency``
    (speedup / (D / D_0) for strong scaling; throughput per device ratio for weak)."""
    if not devices_list:
        raise ValueError("devices_list must name at least one device count")
    records = []
    for d in devices_list:
        n = per_device_envs * d if weak else per_device_envs
        config = load_config(config_name, preset, **overrides)
        config.num_envs = n
        config.num_devices = int(d)
        config.total_env_steps = max(config.total_env_steps, n * config.num_steps * iterations)
        rec = time_training(config, iterations=iterations, repeats=repeats)
        rec.update(bench="scaling", config=config_name, preset=preset, weak=weak)
        records.append(rec)
    base = records[0]
    for rec in records:
        ratio = rec["env_steps_per_s"] / base["env_steps_per_s"]
        rec["speedup"] = ratio
        rec["efficiency"] = ratio / (rec["num_devices"] / base["num_devices"])
    return records


def speedup_lines(records: list[dict[str, Any]]) -> list[str]:
    """``D devices  N envs  steps/s  speedup  efficiency`` lines."""
    return [
        f"scaling {r['config']}:{r['preset']} {'weak' if r['weak'] else 'strong'} "
        f"{r['num_devices']:>2} dev {r['num_envs']:>7} envs {r['env_steps_per_s']:>14,.0f} "
        f"env steps/s  speedup {r['speedup']:5.2f}x  efficiency {r['efficiency']:5.2f}"
        for r in records
    ]
