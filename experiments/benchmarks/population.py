"""Population throughput benchmark (``--suite=population``): ``P`` members in one program
against one member, and members split over devices.

Every case builds its `algorithms.population.Population` and compiles its three programs
ahead of time, once: ``init`` (the members' initial state), ``chunk`` (``K`` training
iterations of every member, then their scores: what a population run repeats) and
``select`` (one PBT round: exploit and explore). Each is traced and lowered in turn
from abstract arguments (``jax.eval_shape``; the members' sharding where they are
split), then the three are compiled concurrently; the record holds both times, and
the per-program compile seconds. The compiled ``chunk`` is then called once (warm-up)
and ``repeats`` times, each call ended by one ``block_until_ready`` and nothing else
crossing to the host (`experiments.benchmarks.timing.time_compiled`); aggregate env
steps/s = ``P · K · N · T`` / median seconds. Each case prints its row as soon as it has
been timed. Cases (``--pop_cases``):

* ``cartpole``: PPO on CartPole at a small batch, 4 envs × 128 steps (launch-bound):
  ``--pop_cartpole_members`` members against 1 (``ratio`` = aggregate / the one
  member's, in the same process), ``--pop_cartpole_iterations`` per call;
* ``tag``: PPO on Tag, 1000 envs × (10+100) agents (compute-bound):
  ``--pop_tag_members`` members against 1, ``--train_iterations`` per call;
* ``devices``: the population of ``--pop_devices_task`` (``tag``, or ``cartpole``) with
  its member count per device on 2, 4, 8 ... devices (those visible; the member axis
  split over them), ``speedup`` = aggregate / the one-device population's (timed first
  when that task is not among the cases).

Each row says the visible device count and the devices its members run on.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jax
from absl import flags

import algorithms
from experiments.benchmarks.timing import device_info, peak_memory_bytes, time_compiled
from experiments.benchmarks.training import load_config

__all__ = ["CASES", "compile_population", "population_records", "time_population"]

CASES = ("cartpole", "tag", "devices")

FLAGS = flags.FLAGS
flags.DEFINE_list("pop_cases", list(CASES), f"cases of --suite=population, of {list(CASES)}")
flags.DEFINE_integer("pop_cartpole_members", 16, "members of the CartPole population")
flags.DEFINE_integer("pop_cartpole_iterations", 20, "iterations per timed CartPole call")
flags.DEFINE_integer("pop_tag_members", 4, "members of the Tag population (per device)")
flags.DEFINE_enum("pop_devices_task", "tag", ["tag", "cartpole"], "task of the devices case")

#: (config file, preset, overrides) of the two tasks, full size and tiny (``quick``).
_TASKS = {
    "cartpole": ("cartpole", "", {"num_envs": 4, "num_steps": 128}),
    "tag": ("tag_continuous", "", {"num_envs": 1000, "num_steps": 25}),
}
_QUICK = {
    "cartpole": ("cartpole", "tiny", {}),
    "tag": ("tag_continuous", "tiny", {"num_envs": 8, "num_steps": 8}),
}


def _abstract(tree: Any, shardings: Any) -> Any:
    """``tree``'s shapes and dtypes (``jax.ShapeDtypeStruct``) with ``shardings`` (a tree
    of the same structure, or ``None``)."""
    if shardings is None:
        return tree
    return jax.tree.map(
        lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), tree, shardings
    )


def compile_population(pop: Any, iterations: int) -> dict[str, Any]:
    """``pop``'s ``init``, ``chunk`` (``iterations`` iterations then scores) and
    ``select`` compiled ahead of time: each traced and lowered in turn, then compiled
    concurrently. Returns ``{"init", "chunk", "select"}`` executables, ``lower_s`` (all
    three), ``compile_s`` (the concurrent compile's wall time) and ``compile_s_each``."""
    key = jax.random.key(0)

    def scored_chunk(state):
        state, metrics = pop.chunk(state, iterations)
        return pop.score(state, metrics), metrics

    t0 = time.perf_counter()
    shape = jax.eval_shape(pop.init, key)
    shape = _abstract(shape, pop.shardings(shape))
    lowered = {
        "init": jax.jit(pop.init).lower(key),
        "chunk": jax.jit(scored_chunk).lower(shape),
        "select": jax.jit(pop.select).lower(shape),
    }
    lower_s = time.perf_counter() - t0

    def compile_one(item):
        name, low = item
        t = time.perf_counter()
        return name, low.compile(), time.perf_counter() - t

    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(lowered)) as ex:
        done = list(ex.map(compile_one, lowered.items()))
    out: dict[str, Any] = {name: exe for name, exe, _ in done}
    out.update(
        lower_s=round(lower_s, 2),
        compile_s=round(time.perf_counter() - t0, 2),
        compile_s_each={name: round(s, 2) for name, _, s in done},
    )
    return out


def time_population(
    config: Any, size: int, num_devices: int = 1, iterations: int = 5, repeats: int = 3
) -> dict[str, Any]:
    """Aggregate training throughput of ``size`` PPO/A2C/DDPG members of ``config``
    (learning rates drawn log-uniformly from [1e-4, 1e-3]) split over ``num_devices``
    devices, and the median time of one selection round (see the module docstring)."""
    config.population = {
        "size": size,
        "mode": "pbt" if size > 1 else "none",
        "num_devices": num_devices,
        "hparams": {"lr": (1e-4, 1e-3, "log")},
        "tournament": {"leaderboard_size": 0},
    }
    config.total_env_steps = max(
        config.total_env_steps, config.num_envs * config.num_steps * iterations
    )
    t0 = time.perf_counter()
    pop = algorithms.make_population_train(config)
    build_s = time.perf_counter() - t0
    progs = compile_population(pop, iterations)
    chunk, select = progs["chunk"], progs["select"]
    box = {"s": jax.block_until_ready(progs["init"](jax.random.key(0)))}

    def call():
        box["s"], metrics = chunk(box["s"])
        return metrics

    first_s, times = time_compiled(call, repeats)
    _, sel_times = time_compiled(lambda: select(box["s"]), repeats)
    med = statistics.median(times)
    steps = iterations * pop.trainer.env_steps_per_iteration * size
    rec = {
        "bench": "population",
        "env": config.env_name,
        "algorithm": config.algorithm,
        "num_envs": config.num_envs,
        "num_steps": config.num_steps,
        "members": size,
        "member_devices": num_devices,
        "iterations_timed": iterations,
        "repeats": repeats,
        "build_s": round(build_s, 2),
        "lower_s": progs["lower_s"],
        "compile_s": progs["compile_s"],
        "compile_s_each": progs["compile_s_each"],
        "first_call_s": round(first_s, 4),
        "seconds_median": med,
        "seconds_all": [round(t, 6) for t in times],
        "env_steps_per_s": steps / med,
        "env_steps_per_s_per_member": steps / med / size,
        "select_ms": 1e3 * statistics.median(sel_times),
        "peak_memory_bytes": peak_memory_bytes(),
    }
    return rec


def _row(rec: dict[str, Any]) -> str:
    extra = f"ratio {rec['ratio']:6.2f}x" if "ratio" in rec else f"speedup {rec['speedup']:5.2f}x"
    return (
        f"population {rec['row']:<8} {rec['members']:>3} members on {rec['member_devices']} "
        f"of {rec['num_devices']} dev  {rec['num_envs']:>5} envs x {rec['num_steps']:>4} steps  "
        f"aggregate {rec['env_steps_per_s']:>14,.0f} env steps/s  {extra}  "
        f"select {rec['select_ms']:7.2f} ms  lower {rec['lower_s']:.1f}s "
        f"compile {rec['compile_s']:.1f}s"
    )


def population_records(
    iterations: int = 5,
    repeats: int = 3,
    quick: bool = False,
    cases: tuple[str, ...] | None = None,
    cartpole_members: int | None = None,
    cartpole_iterations: int | None = None,
    tag_members: int | None = None,
    devices_task: str | None = None,
) -> list[dict[str, Any]]:
    """The suite's records (see the module docstring), each printed when timed;
    ``quick``: tiny sizes (CPUs, tests). ``None`` arguments come from the ``--pop_*``
    flags (``quick``: 4 CartPole members, 2 Tag members, ``iterations`` for both)."""
    cases = tuple(FLAGS.pop_cases if cases is None else cases)
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise ValueError(f"--pop_cases: unknown {unknown}; known: {list(CASES)}")
    tasks = _QUICK if quick else _TASKS
    n_cart = cartpole_members or (4 if quick else FLAGS.pop_cartpole_members)
    it_cart = cartpole_iterations or (iterations if quick else FLAGS.pop_cartpole_iterations)
    n_tag = tag_members or (2 if quick else FLAGS.pop_tag_members)
    info = device_info()
    records: list[dict[str, Any]] = []

    def case(row: str, task: str, size: int, devices: int, iters: int, rel: str, ref) -> dict:
        """Times one case, sets ``rel`` (ratio or speedup) against ``ref`` env steps/s
        (``None``: itself), prints its row."""
        name, preset, over = tasks[task]
        rec = time_population(load_config(name, preset, **over), size, devices, iters, repeats)
        rec.update(row=row, **info)
        rec[rel] = rec["env_steps_per_s"] / (ref or rec["env_steps_per_s"])
        records.append(rec)
        print(_row(rec), flush=True)
        return rec

    plan = {"cartpole": (n_cart, it_cart), "tag": (n_tag, iterations)}
    for task, (size, iters) in plan.items():
        if task in cases:
            one = case(task, task, 1, 1, iters, "ratio", None)
            case(task, task, size, 1, iters, "ratio", one["env_steps_per_s"])
    if "devices" in cases:
        task = devices_task or FLAGS.pop_devices_task
        if task not in plan:
            raise ValueError(f"--pop_devices_task: {task!r} is not one of {list(plan)}")
        size, iters = plan[task]
        base = next((r for r in records if r["row"] == task and r["members"] == size), None)
        if base is None:
            base = case("devices", task, size, 1, iters, "speedup", None)
        for d in (d for d in (2, 4, 8, 16, 32, 64) if d <= jax.device_count()):
            case("devices", task, size * d, d, iters, "speedup", base["env_steps_per_s"])
    return records
