"""Cells of tutorial notebook 03: training taggers and runners with two policies."""

from __future__ import annotations

from experiments.notebooks.cells import SMALL_CELL, Cell, code, md

__all__ = ["CELLS"]

CELLS: list[Cell] = [
    md("""
    # 03 · Training taggers and runners with two policies

    Multi-agent training on **TagContinuous** with a *tagger* policy and a *runner*
    policy, each with its own network, optimiser and learning rate. The host loop
    `jaxdrive.loop.train_loop` runs the trainer in compiled chunks and writes a run folder:
    `metrics.jsonl`, TensorBoard events and orbax checkpoints. We plot the learning
    curves, watch the trained agents, load the checkpoint back and evaluate it.

    The command-line equivalent is
    `python -m experiments.train --config=experiments/configs/tag_continuous.py`.
    """),
    code(
        SMALL_CELL
        + """
import tempfile

import jax
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Image, display

import algorithms
import jaxdrive
from experiments import common
from experiments.configs import tag_continuous

ON_GPU = jax.default_backend() == "gpu"
print("JAX on", jax.devices())
"""
    ),
    md("""
    ## The config

    We start from `experiments/configs/tag_continuous.py` (WarpDrive's Tag settings)
    with its `tiny` preset and size it for a CPU: 2 taggers and 5 runners on a 5 × 5
    square. `config.policies` maps each policy to the groups it acts for.
    """),
    code("""
    config = tag_continuous.get_config("tiny")
    if not SMALL:
        config.env_kwargs.update(num_taggers=2, num_runners=5, episode_length=50)
        config.env_kwargs.update(num_other_agents_observed=3, grid_length=5.0)
        config.env_kwargs.tagging_distance = 0.08
        config.num_envs = 256 if ON_GPU else 32
        config.num_steps = 50
        config.total_env_steps = config.num_envs * config.num_steps * 150
        config.algo.num_minibatches = 4
        config.algo.num_epochs = 4
        for name in ("tagger", "runner"):
            config.policies[name].hidden_sizes = (64, 64)
            config.policies[name].lr = 1e-3
        config.run.iterations_per_chunk = 10
    print({k: config.env_kwargs[k] for k in ("num_taggers", "num_runners", "episode_length")})
    for name, policy in config.policies.items():
        groups, lr, layers = list(policy.groups), policy.lr, policy.hidden_sizes
        print(f"policy {name}: groups {groups}, learning rate {lr}, layers {layers}")
    """),
    code("""
    env, params = jaxdrive.make(config.env_name, **config.env_kwargs)
    trainer = algorithms.make_train(config, env, params)
    print(env)
    print(trainer.num_iterations, "iterations of", trainer.env_steps_per_iteration, "env steps")
    """),
    md("""
    ## Train into a run folder

    `train_loop(trainer, seed, workdir, iterations_per_chunk=K)` compiles one program that
    runs up to `K` iterations (the first call runs one, so the first line comes early),
    then, on the host after each chunk, logs its metrics, checks for NaNs, saves a
    checkpoint and calls it again. `on_chunk` sees each chunk's metrics.
    Calling `train_loop` again on the same folder resumes from the latest checkpoint.
    """),
    code("""
    from jaxdrive.loop import train_loop

    os.makedirs("runs", exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="tag-", dir="runs")
    common.save_config(config, os.path.join(workdir, "config.json"))  # for experiments.evaluate


    def report(info):
        \"\"\"Prints the chunk's mean returns over the iterations in which episodes ended.\"\"\"
        ended = info.metrics["episodes_done"] > 0  # [K]
        returns = {g: info.metrics[f"episode_return/{g}"][ended] for g in env.groups}
        returns = {g: round(float(r.mean()), 2) if r.size else None for g, r in returns.items()}
        steps = int(info.env_steps[-1])
        print(f"iteration {info.end_iteration:3d}, {steps:>7,} env steps, returns {returns}")


    runner_state, history = train_loop(
        trainer,
        config.seed,
        workdir,
        iterations_per_chunk=config.run.iterations_per_chunk,
        progress=False,
        on_chunk=report,
    )
    print(
        f"compile {history.compile_seconds:.1f} s, train {history.train_seconds:.1f} s, "
        f"{history.env_steps_per_second():,.0f} env steps/s"
    )
    print("run folder", workdir, sorted(os.listdir(workdir)))
    """),
    md("""
    ## Learning curves from `metrics.jsonl`

    One JSON record per iteration: `{"iteration", "env_steps", "metrics": {...}}`. Episode
    returns are the mean over the episodes that ended in that iteration (iterations where
    none ended are left out).
    """),
    code("""
    from jaxdrive.logging import read_metrics

    records = read_metrics(workdir)
    steps = np.array([r["env_steps"] for r in records])
    panels = [
        ("episode_return/{}", "return per agent"),
        ("loss/{}/value", "value loss"),
        ("loss/{}/entropy", "entropy"),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.5))
    for ax, (name, title) in zip(axes, panels, strict=True):
        for g in env.groups:
            # iterations in which no episode ended record no episode_return: skipped
            values = np.array([r["metrics"].get(name.format(g), np.nan) for r in records])
            keep = np.isfinite(values)
            ax.plot(steps[keep], values[keep], label=g)
        ax.set_title(title)
        ax.set_xlabel("env steps")
        ax.legend()
    plt.show()
    """),
    md("""
    ## Watch the trained agents

    `trainer.act(params_by_policy, key, obs)` maps batched observations to actions with
    the trained policies. `jaxdrive.render.rollout_states` plays one episode with it and
    `jaxdrive.render.animate` writes the frames drawn by the Tag renderer to a GIF.
    """),
    code("""
    from environments.tag_continuous.render import render
    from jaxdrive.render import animate, rollout_states

    policy_params = trainer.get_params(runner_state)


    def policy(key, obs):
        \"\"\"One env's {g: [A_g, O]} -> actions, through the trainer's batched `act`.\"\"\"
        batched = jax.tree.map(lambda o: o[None], obs)
        actions = trainer.act(policy_params, key, batched, deterministic=False)
        return jax.tree.map(lambda a: a[0], actions)


    key = jax.random.PRNGKey(1)
    states = rollout_states(env, policy, key, params, num_steps=env.episode_length)
    frame = lambda s: render(env, s, params, dpi=60)  # [H, W, 3] uint8
    gif = animate(states, frame, os.path.join(workdir, "tag.gif"), fps=10)
    display(Image(filename=str(gif)))
    """),
    md("""
    ## Load the checkpoint back and evaluate

    Checkpoints hold the whole runner state (parameters, optimiser states, environment
    state, RNG). `Checkpointer.restore` needs only its structure, which
    `jax.eval_shape(trainer.init, key)` gives without computing anything.
    """),
    code("""
    from jaxdrive.checkpoint import Checkpointer

    with Checkpointer(os.path.join(workdir, "checkpoints")) as ckpt:
        print("checkpoints after iterations", ckpt.all_steps())
        target = jax.eval_shape(trainer.init, jax.random.PRNGKey(0))
        restored, meta = ckpt.restore(target)
    print("metadata", {k: meta[k] for k in ("iteration", "env_steps", "config_hash")})
    trained, loaded = trainer.get_params(runner_state), trainer.get_params(restored)
    same = all(jax.tree.leaves(jax.tree.map(np.array_equal, trained, loaded)))
    print("restored parameters equal the trained ones:", same)
    """),
    code("""
    episodes = 8 if SMALL else 64
    untrained = trainer.get_params(trainer.init(jax.random.PRNGKey(0)))
    results = {}
    for name, p in [("before training", untrained), ("after training", loaded)]:
        key = jax.random.PRNGKey(2)
        res = common.evaluate_policy(env, params, trainer, p, key, episodes=episodes)
        results[name] = {g: round(r["mean"], 2) for g, r in res["returns"].items()}
        print(f"{name:>15}: mean return per agent {results[name]}")
    """),
    md("""
    `experiments.evaluate.evaluate(workdir)` does the same from the run folder alone
    (it rebuilds the env and trainer from `config.json`); from a shell:
    `python -m experiments.evaluate --workdir=<run folder> --episodes=64 --animation=tag.gif`.
    """),
    code("""
    from experiments.evaluate import evaluate

    result = evaluate(workdir, episodes=episodes)
    """),
]
