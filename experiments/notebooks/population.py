"""Cells of tutorial notebook 05: a population with PBT in one compiled program."""

from __future__ import annotations

from experiments.notebooks.cells import SMALL_CELL, Cell, code, md

__all__ = ["CELLS"]

CELLS: list[Cell] = [
    md("""
    # 05 · Populations: PBT in one compiled program

    A population trains `P` members side by side: one `jax.vmap` over a member axis, each
    member with its own key and its own hyper-parameters. Hyper-parameters that fix no
    shape (learning rate, entropy coefficient, clip ε, γ, λ, ...) live in the runner
    state as data (`PolicyState.hparams`), so one program serves all members. Between
    chunks, **population-based training** (PBT) replaces the worst members by copies of
    the best ones and perturbs their hyper-parameters; that step is a jitted function too.
    """),
    code(
        SMALL_CELL
        + """
import time

import jax
import matplotlib.pyplot as plt
import numpy as np

import algorithms
from experiments.configs import population
"""
    ),
    md("""
    ## A population config

    A run config plus a `population` section: the size, the ranges hyper-parameters are
    drawn from (`(low, high, "log")` draws log-uniformly) and how selection works.
    """),
    code("""
    config = population.get_config("cartpole")
    config.num_envs, config.num_steps = 4, 32
    config.policies.agent.hidden_sizes = (32, 32)
    config.algo.lr_schedule = "constant"
    ITERATIONS, CHUNK = (4, 2) if SMALL else (60, 6)
    config.total_env_steps = config.num_envs * config.num_steps * ITERATIONS
    config.population.size = 4 if SMALL else 8
    config.population.hparams = {"lr": (3e-4, 1e-2, "log"), "ent_coef": (0.0, 0.02)}
    config.population.pbt.truncation = 0.25
    config.population.tournament.leaderboard_size = 4

    pop = algorithms.make_population_train(config)
    state = jax.jit(pop.init)(jax.random.key(0))
    print("varied:", [s.label for s in pop.slots])
    print("member hyper-parameters [P, H]:")
    print(np.asarray(pop.hparams(state.members)).round(4))
    """),
    md("""
    ## Training with PBT

    `pop.chunk(state, K)` runs `K` iterations of every member (metrics `[P, K]`);
    `pop.score` ranks members by their running episode returns and `pop.select` updates
    the leaderboard and does one PBT round: the bottom quarter copy the parameters,
    optimiser state and hyper-parameters of a top-quarter member, then multiply each
    hyper-parameter by 0.8 or 1.2 (or resample it).
    """),
    code("""
    chunk = jax.jit(lambda s: pop.chunk(s, CHUNK))
    select = jax.jit(lambda s, m: pop.select(pop.score(s, m)))
    history = []
    t0 = time.perf_counter()
    for r in range(ITERATIONS // CHUNK):
        state, metrics = chunk(state)
        state = select(state, metrics)
        scores = np.asarray(state.scores)
        lr = np.asarray(pop.hparams(state.members))[:, 1]
        history.append((scores, lr))
        copied = {int(i): int(p) for i, p in enumerate(np.asarray(state.parent)) if p >= 0}
        print(f"round {r + 1}: scores {scores.round(1)}; copied (member: source) {copied}")
    steps = ITERATIONS * pop.trainer.env_steps_per_iteration * pop.size
    print(f"{steps:,} env steps in {time.perf_counter() - t0:.1f} s (compile included)")
    """),
    code("""
    scores = np.stack([h[0] for h in history])
    lrs = np.stack([h[1] for h in history])
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.5))
    a1.plot(np.arange(1, len(scores) + 1), scores, ".-", alpha=0.6)
    a1.set_xlabel("selection round")
    a1.set_ylabel("member score (episode return)")
    a2.semilogy(np.arange(1, len(lrs) + 1), lrs, ".-", alpha=0.6)
    a2.set_xlabel("selection round")
    a2.set_ylabel("member learning rate")
    plt.tight_layout()
    plt.show()
    """),
    md("""
    ## The leaderboard

    The `K` best snapshots seen so far stay on the device, best first. With
    `population.mode = "tournament"` the worst members restart from leaderboard entries
    drawn by rank instead of copying live members.
    """),
    code("""
    lb = jax.device_get(state.leaderboard)
    for r in range(int(lb.valid.sum())):
        lr = float(lb.snapshots["agent"].hparams["lr"][r])
        print(
            f"rank {r}: score {lb.score[r]:.1f}, member {lb.member[r]}, "
            f"round {lb.generation[r]}, lr {lr:.2e}"
        )
    print("leaderboard best", float(lb.score[0]))
    """),
    md("""
    ## From the command line

    `python -m experiments.population --config=experiments/configs/population.py:cartpole`
    runs the same loop into a run folder: per-member metrics and TensorBoard runs under
    `members/<i>/`, `population.jsonl` (one record per round), `leaderboard.json` and
    `leaderboard.png`, checkpoints to resume from (also on another number of devices:
    `--num_devices` splits the members over devices).
    """),
]
