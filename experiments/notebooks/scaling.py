"""Cells of tutorial notebook 04: many seeds at once, devices, benchmarks."""

from __future__ import annotations

from experiments.notebooks.cells import SMALL_CELL, Cell, code, md

__all__ = ["CELLS"]

CELLS: list[Cell] = [
    md("""
    # 04 · Scaling: many seeds at once, devices, benchmarks

    A whole training run is one pure function of its key, so `jax.vmap` runs many seeds
    side by side in one program: one compile, one launch, all seeds sharing the device.
    Then: which devices JAX sees, one run over several devices, and the benchmark suite.
    """),
    code(
        SMALL_CELL
        + """
import subprocess
import sys
import time

import jax
import matplotlib.pyplot as plt
import numpy as np

import algorithms
import jaxdrive
from experiments import common
from experiments.configs import cartpole

ON_GPU = jax.default_backend() == "gpu"
"""
    ),
    md("## Devices"),
    code("""
    print(common.describe_devices())
    for d in jax.devices():
        print(" ", d.id, d.device_kind, d.platform)
    """),
    md("""
    ## Many seeds with `jax.vmap(trainer)`

    PPO on CartPole. `trainer(key)` trains one seed; `jax.vmap(trainer)(keys)` trains one
    per key, and every metric gains a leading seed axis: `[S, num_iterations]`.
    """),
    code("""
    NUM_SEEDS = 2 if SMALL else (64 if ON_GPU else 8)
    ITERATIONS = 3 if SMALL else 30
    config = cartpole.get_config()
    config.num_envs = 4 if SMALL else 8
    config.num_steps = 16 if SMALL else 128
    config.total_env_steps = config.num_envs * config.num_steps * ITERATIONS
    config.policies.agent.hidden_sizes = (16, 16) if SMALL else (32, 32)
    config.policies.agent.lr = 2.5e-3
    config.algo.ent_coef = 0.0

    env, params = jaxdrive.make(config.env_name)
    trainer = algorithms.make_train(config, env, params)
    keys = jax.random.split(jax.random.PRNGKey(0), NUM_SEEDS)  # [S, 2]: one key per run

    train_seeds = jax.jit(jax.vmap(trainer))
    t0 = time.perf_counter()
    compiled = train_seeds.lower(keys).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    runner_states, metrics = jax.block_until_ready(compiled(keys))
    run_s = time.perf_counter() - t0

    # [S, num_iterations]; an iteration in which no episode ended reports 0: mask it out
    ended = np.asarray(metrics["episodes_done"]) > 0
    returns = np.where(ended, np.asarray(metrics["episode_return/agent"]), np.nan)
    total = NUM_SEEDS * trainer.num_iterations * trainer.env_steps_per_iteration
    print(
        f"{NUM_SEEDS} seeds x {trainer.num_iterations} iterations: compile {compile_s:.1f} s, "
        f"run {run_s:.1f} s, {total / run_s:,.0f} env steps/s over all seeds"
    )
    print("returns", returns.shape)
    """),
    code("""
    steps = np.asarray(metrics["env_steps"][0])
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, returns.T, color="tab:blue", alpha=0.3, lw=1)
    mean = np.nanmean(returns, axis=0)
    ax.plot(steps, mean, color="tab:blue", lw=2, label=f"mean of {NUM_SEEDS} seeds")
    lo, hi = np.nanmin(returns, axis=0), np.nanmax(returns, axis=0)
    ax.fill_between(steps, lo, hi, color="tab:blue", alpha=0.1)
    ax.set_xlabel("env steps per seed")
    ax.set_ylabel("episode return")
    ax.legend()
    plt.show()
    last = np.array([r[np.isfinite(r)][-1] for r in returns])  # each seed's last value
    stats = {"mean": last.mean(), "min": last.min(), "max": last.max()}
    print("final return over seeds:", {k: round(float(v), 1) for k, v in stats.items()})
    """),
    md("""
    ## Several devices

    `config.num_devices = D` (or `python -m experiments.train ... --num_devices=D`) spreads
    one run's environment batch over a device mesh (`shard_map` with a named axis;
    gradients and statistics combined across devices), and `--coordinator_address`,
    `--num_processes`, `--process_id` start the same program on several hosts. Per-env
    randomness is keyed by the env's global index, so 1 and D devices give the same
    numbers up to floating-point summation order.

    To develop multi-device code without GPUs, XLA can pretend the CPU is several devices.
    The flag must be set before JAX starts, so here it runs in a fresh Python process:
    `XLA_FLAGS=--xla_force_host_platform_device_count=4`.
    """),
    code("""
    snippet = "import jax; print(jax.device_count(), 'devices:', jax.devices())"
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    child_env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
    cmd = [sys.executable, "-c", snippet]
    done = subprocess.run(cmd, env=child_env, capture_output=True, text=True)
    print(done.stdout or done.stderr)
    """),
    md("""
    ## Benchmarks

    `python -m experiments.benchmarks.run --suite=quick` times env-only stepping (random
    actions, auto-reset, compile excluded, median of several calls) for Tag and CartPole
    at small sizes; the `env`, `env_big` and `classic` suites use WarpDrive's and gymnax's
    benchmark sizes (`--compare` prints ratios against stored anchor figures). The same
    from Python: `run_suite`, which returns one record per measurement. Tag runs with its
    default `backend="auto"`: the Pallas kernels on a GPU, plain JAX on a CPU.
    """),
    code("""
    from experiments.benchmarks.run import run_suite

    num_steps, repeats = (10, 1) if SMALL else (100, 5)
    records = run_suite("quick", num_steps=num_steps, repeats=repeats)
    print(len(records), "measurements; fields:", sorted(records[0]))
    """),
]
