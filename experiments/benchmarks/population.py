"""Population benchmark (``--suite=population``): ``P`` members in one program against one.

Throughput of a population is timed as `experiments.benchmarks.training` times one run:
a compiled chunk of ``K`` iterations of every member is called once to compile, then
``repeats`` times; aggregate env steps/s = ``P · K · N · T`` / median seconds. Rows:

* ``cartpole``: PPO on CartPole at its small default batch (launch-bound), 16 members
  against 1 (``ratio`` = aggregate / one member's, in the same process);
* ``tag``: PPO on Tag, 1000 envs × (10+100) agents (compute-bound), 4 members against 1;
* ``devices``: Tag with 2 members per device on 1, 2, 4, ... devices (those present),
  the member axis split over them; ``speedup`` against the first count.

Each row also reports the time of one selection round (scores, leaderboard, PBT).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import jax

import algorithms
from experiments.benchmarks.timing import device_info, time_compiled
from experiments.benchmarks.training import load_config

__all__ = ["population_records", "time_population"]


def time_population(
    config: Any, size: int, num_devices: int = 1, iterations: int = 5, repeats: int = 3
) -> dict[str, Any]:
    """Aggregate training throughput of ``size`` members of ``config`` (PPO/A2C/DDPG)
    split over ``num_devices`` devices, and the median time of a selection round."""
    if "population" not in config:
        config.population = {}
    config.population.size = size
    config.population.mode = "pbt" if size > 1 else "none"
    config.population.num_devices = num_devices
    config.population.hparams = {"lr": (1e-4, 1e-3, "log")}
    config.total_env_steps = max(
        config.total_env_steps, config.num_envs * config.num_steps * iterations
    )
    pop = algorithms.make_population_train(config)
    state = jax.block_until_ready(jax.jit(pop.init)(jax.random.key(0)))
    t0 = time.perf_counter()
    compiled = jax.jit(lambda s: pop.chunk(s, iterations)).lower(state).compile()
    compile_s = time.perf_counter() - t0
    box = {"s": state}

    def call():
        box["s"], metrics = compiled(box["s"])
        return metrics

    _, times = time_compiled(call, repeats)
    metrics = call()
    select = jax.jit(lambda s, m: pop.select(pop.score(s, m))).lower(box["s"], metrics).compile()
    _, sel_times = time_compiled(lambda: select(box["s"], metrics), repeats)
    med = statistics.median(times)
    steps = iterations * pop.trainer.env_steps_per_iteration * size
    return {
        "bench": "population",
        "env": config.env_name,
        "algorithm": config.algorithm,
        "num_envs": config.num_envs,
        "num_steps": config.num_steps,
        "members": size,
        "member_devices": num_devices,
        "iterations_timed": iterations,
        "compile_s": round(compile_s, 2),
        "seconds_median": med,
        "env_steps_per_s": steps / med,
        "select_ms": 1e3 * statistics.median(sel_times),
    }


def _pair(name: str, cfg: str, preset: str, over: dict, size: int, iters: int, reps: int):
    one = time_population(load_config(cfg, preset, **over), 1, 1, iters, reps)
    many = time_population(load_config(cfg, preset, **over), size, 1, iters, reps)
    for rec in (one, many):
        rec.update(row=name, ratio=rec["env_steps_per_s"] / one["env_steps_per_s"])
    return [one, many]


def population_records(
    iterations: int = 5, repeats: int = 3, quick: bool = False
) -> list[dict[str, Any]]:
    """The suite's records (see the module docstring); ``quick``: tiny sizes (CPUs,
    tests). Prints one line per record."""
    info = device_info()
    if quick:
        cart = ("cartpole", "tiny", {})
        tag = ("tag_continuous", "tiny", {"num_envs": 8, "num_steps": 8})
        sizes = (4, 2)
    else:
        cart = ("cartpole", "", {})
        tag = ("tag_continuous", "", {"num_envs": 1000, "num_steps": 25})
        sizes = (16, 4)
    records = _pair("cartpole", *cart, sizes[0], iterations, repeats)
    records += _pair("tag", *tag, sizes[1], iterations, repeats)
    counts = [d for d in (1, 2, 4, 8, 16) if d <= jax.device_count()]
    for d in counts:
        rec = time_population(load_config(tag[0], tag[1], **tag[2]), 2 * d, d, iterations, repeats)
        rec.update(row="devices")
        records.append(rec)
    base = next(r for r in records if r["row"] == "devices")
    for rec in records:
        if rec["row"] == "devices":
            rec["speedup"] = rec["env_steps_per_s"] / base["env_steps_per_s"]
        rec.update(info)
        extra = (
            f"ratio {rec['ratio']:6.2f}x" if "ratio" in rec else f"speedup {rec['speedup']:5.2f}x"
        )
        print(
            f"population {rec['row']:<9} {rec['members']:>3} members "
            f"on {rec['member_devices']} dev "
            f"{rec['num_envs']:>5} envs x {rec['num_steps']:>4} steps "
            f"{rec['env_steps_per_s']:>14,.0f} env steps/s  {extra}  "
            f"select {rec['select_ms']:.2f} ms  compile {rec['compile_s']:.1f}s",
            flush=True,
        )
    return records
