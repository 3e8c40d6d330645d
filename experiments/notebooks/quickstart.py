"""Cells of tutorial notebook 01 (quick start): environments, batches, compiled rollouts."""

from __future__ import annotations

from experiments.notebooks.cells import SMALL_CELL, Cell, code, md

__all__ = ["CELLS"]

CELLS: list[Cell] = [
    md("""
    # 01 · Quick start: environments, batches of thousands, compiled rollouts

    A jaxdrive environment is a pair of pure functions, `reset` and `step`, that `jax.jit`,
    `jax.vmap` and `jax.lax.scan` can transform. This notebook makes the multi-agent
    **TagContinuous** game (taggers chase runners on a square), steps it by hand, runs
    thousands of copies at once, compiles a whole rollout into one program, times it and
    draws it.

    It runs in about a minute on a CPU. JAX uses a GPU when it finds one (install the
    CUDA build, e.g. `pip install 'jax[cuda12]'`); the sizes below grow on a GPU.
    """),
    code(
        SMALL_CELL
        + """
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import jaxdrive

ON_GPU = jax.default_backend() == "gpu"
NUM_ENVS = 64 if SMALL else (16_384 if ON_GPU else 2_048)
NUM_STEPS = 10 if SMALL else 100
print("JAX", jax.__version__, "on", jax.devices())
"""
    ),
    md("""
    ## Make an environment

    `jaxdrive.make(name, **overrides)` builds a registered environment and returns it with
    its parameters. Overrides are either **constructor options** (static: agent counts,
    observation sizes, episode length; they fix array shapes) or fields of the env's
    **`EnvParams`** (numbers such as distances and rewards, passed to every call, so they
    can change without recompiling and can even be vmapped over).

    Agents come in **groups**; here `tagger` and `runner`. Each group has its own
    observation and action space, which describe *one* agent.
    """),
    code("""
    print(jaxdrive.registered_envs())
    env, params = jaxdrive.make(
        "tag_continuous",
        num_taggers=2,  # static options ...
        num_runners=8,
        episode_length=100,
        num_other_agents_observed=3,
        grid_length=5.0,  # ... and numbers, which land in `params`
        tagging_distance=0.05,
    )
    print(env)
    for g in env.groups:
        print(f"{g}: {env.num_agents(g)} agents")
        print("   observation", env.observation_space(g), "action", env.action_space(g))
    """),
    md("""
    ## Reset and step

    `reset(key, params) -> (state, ts)` and `step(key, state, actions, params) -> (state, ts)`.
    All randomness comes from the key, so the same inputs always give the same outputs.
    The `TimeStep` `ts` holds per-group dicts with the **agent axis first**: `ts.obs[g]` is
    `[A_g, *obs_shape]`, `ts.reward[g]`, `ts.terminated[g]`, `ts.truncated[g]` and
    `ts.active[g]` are `[A_g]`; `ts.done` says the episode ended; `ts.extras` holds
    env-specific values (Tag counts the runners tagged this step).
    """),
    code("""
    key = jax.random.key(0)
    k_reset, k_act, k_step = jax.random.split(key, 3)
    state, ts = env.reset(k_reset, params)
    actions = env.sample_actions(k_act)  # {group: [A_g, 2]} int32
    state, ts = env.step(k_step, state, actions, params)
    print("obs     ", jax.tree.map(jnp.shape, ts.obs))
    print("actions ", jax.tree.map(jnp.shape, actions))
    print("reward  ", ts.reward)
    print("done    ", ts.done, " extras", ts.extras)
    """),
    md("Actions are checked against the action spaces; a mistake raises a `ValueError`:"),
    code("""
    try:
        env.step(k_step, state, {"tagger": actions["tagger"]}, params)
    except ValueError as e:
        print("ValueError:", e)
    """),
    md("""
    Numbers live in `params`, a pytree: a jitted `step` takes new values without
    recompiling. Here a huge tagging distance tags every runner near a tagger at once.
    """),
    code("""
    step = jax.jit(env.step)
    wide = params.replace(tagging_distance=0.5)
    for name, p in [("default", params), ("wide", wide)]:
        _, ts_p = step(k_step, state, actions, p)  # one compiled function for both
        print(f"tagging distance {name}: {int(ts_p.extras['num_tags'])} runners tagged")
    """),
    md("""
    ## Thousands of environments at once

    `jaxdrive.vectorize(env, num_envs)` batches environments with `jax.vmap`: every array
    gains a leading env axis, `ts.obs[g]: [N, A_g, *obs_shape]`. Finished episodes restart
    automatically inside `step`: Tag draws a fresh start for every env and keeps it where
    an episode ended, then builds the observations once.

    How an environment computes is part of the environment: `TagContinuous` takes
    `backend="auto"` (Pallas kernels on a GPU, plain JAX elsewhere), `"xla"` (the
    plain-JAX reference) or `"pallas"`, e.g.
    `jaxdrive.make("tag_continuous", num_runners=8, backend="xla")`. Two envs that differ
    in it compile two programs.
    """),
    code("""
    venv = jaxdrive.vectorize(env, num_envs=NUM_ENVS)
    reset_all = jax.jit(venv.reset)
    step_all = jax.jit(venv.step)
    sample_all = jax.jit(jax.vmap(env.sample_actions))

    vstate, vts = reset_all(k_reset, params)
    vactions = sample_all(jax.random.split(k_act, NUM_ENVS))
    vstate, vts = step_all(k_step, vstate, vactions, params)
    print("obs", jax.tree.map(jnp.shape, vts.obs), " done", vts.done.shape)
    """),
    md("""
    ## A whole rollout as one compiled program

    `jaxdrive.rollout(env, policy_fn, key, params, num_envs, num_steps)` resets `num_envs`
    environments and steps them `num_steps` times in one `lax.scan`, jitted: no Python in
    the loop and no copies to the host. A policy is any function
    `(key, obs {g: [N, A_g, ...]}) -> actions {g: [N, A_g, ...]}`.

    The first call compiles; later calls with new keys reuse the program. JAX runs
    asynchronously, so timings wait for the result with `jax.block_until_ready`.
    """),
    code("""
    policy = jaxdrive.random_policy(env)
    t0 = time.perf_counter()
    out = jaxdrive.rollout(env, policy, key, params, num_envs=NUM_ENVS, num_steps=NUM_STEPS)
    jax.block_until_ready(out)
    print(f"first call, compile included: {time.perf_counter() - t0:.2f} s")

    times = []
    for i in range(3):
        t0 = time.perf_counter()
        k = jax.random.key(i + 1)
        out = jaxdrive.rollout(env, policy, k, params, num_envs=NUM_ENVS, num_steps=NUM_STEPS)
        jax.block_until_ready(out)
        times.append(time.perf_counter() - t0)
    best = min(times)
    env_steps = NUM_ENVS * NUM_STEPS
    print(f"{NUM_ENVS} envs x {NUM_STEPS} steps in {best * 1e3:.1f} ms (compile excluded):")
    agent_steps = env_steps * env.total_agents
    print(f"  {env_steps / best:,.0f} env steps/s, {agent_steps / best:,.0f} agent steps/s")
    print("rewards of the taggers, [T, N, A]:", out.timesteps.reward["tagger"].shape)
    """),
    md("""
    Your own policy is a plain function. This one drives every agent straight ahead at
    full acceleration (it shows how to write a policy, not how to play);
    `extras["num_tags"]` counts the runners caught.
    """),
    code("""
    TOP = env.action_space("tagger").nvec[0] - 1  # index of the largest acceleration


    def full_speed(key, obs):
        n = obs["tagger"].shape[0]
        action = jnp.array([TOP, 0], jnp.int32)  # [acceleration index, turn index (no-op)]
        return {g: jnp.tile(action, (n, env.num_agents(g), 1)) for g in env.groups}


    fast = jaxdrive.rollout(env, full_speed, key, params, num_envs=NUM_ENVS, num_steps=NUM_STEPS)
    for name, o in [("random", out), ("full speed", fast)]:
        tags = float(o.timesteps.extras["num_tags"].sum()) / NUM_ENVS
        print(f"{name:>10}: {tags:.2f} runners tagged per env in {NUM_STEPS} steps")
    """),
    md("""
    ## Render

    `environments.tag_continuous.render.render(env, state, params)` draws one state as an
    RGB array (`[H, W, 3]` uint8), and `jaxdrive.render.rollout_states` plays one episode
    (random actions when the policy is `None`) and returns its states on the host.
    """),
    code("""
    from environments.tag_continuous.render import render
    from jaxdrive.render import rollout_states

    states = rollout_states(env, None, jax.random.key(7), params, num_steps=20 if SMALL else 100)
    picks = np.linspace(0, len(states) - 1, 4).astype(int)
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.6))
    for ax, i in zip(axes, picks, strict=True):
        ax.imshow(render(env, states[i], params))
        ax.set_axis_off()
    fig.tight_layout()
    plt.show()
    """),
    md("""
    Next: [02 · your own environment](02_custom_env.ipynb),
    [03 · training Tag](03_tag_training.ipynb), [04 · scaling](04_scaling.ipynb).
    """),
]
