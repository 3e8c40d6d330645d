"""Writes the tutorial notebooks of ``experiments/notebooks`` from the cell sources below.

    python experiments/notebooks/build_notebooks.py          # (re)write the .ipynb files
    python experiments/notebooks/build_notebooks.py --check  # exit 1 when one is stale

Each notebook is a list of cells made by `md` (markdown) and `code`. The files hold no
outputs and fixed cell ids (``<notebook>-<index>``), so a rebuild gives the same bytes;
``tests/test_notebooks.py`` checks that and executes every notebook at tiny sizes
(``JAXDRIVE_NOTEBOOK_SMALL=1``). Code cells must stay ``ruff format``-clean: ruff checks
the notebooks with the rest of the repository.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import textwrap

import nbformat

__all__ = ["NOTEBOOKS", "build", "main", "render"]

HERE = pathlib.Path(__file__).resolve().parent

Cell = tuple[str, str]  # (kind, source)


def md(text: str) -> Cell:
    """A markdown cell (text dedented and stripped)."""
    return ("markdown", textwrap.dedent(text).strip())


def code(text: str) -> Cell:
    """A code cell (text dedented and stripped)."""
    return ("code", textwrap.dedent(text).strip())


SMALL_CELL = """
import os

# The test suite sets JAXDRIVE_NOTEBOOK_SMALL=1 to run this notebook at tiny sizes.
SMALL = os.environ.get("JAXDRIVE_NOTEBOOK_SMALL") == "1"
"""

# ---------------------------------------------------------------------------------------
# 01 · Quick start
# ---------------------------------------------------------------------------------------
QUICKSTART = [
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
    automatically inside `step` (under a `lax.cond`, so steps where nothing ends pay
    nothing for it).
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

# ---------------------------------------------------------------------------------------
# 02 · A custom environment
# ---------------------------------------------------------------------------------------
CUSTOM_ENV = [
    md("""
    # 02 · Your own multi-agent environment, from scratch to a trained policy

    This is the path a new game takes into jaxdrive. We write **Ring Gather**: on a ring
    of `C` cells, *walkers* (step left, stay or step right) and *jumpers* (choose a
    direction and a stride of one or two cells) gather food. A food item is eaten when an
    agent lands on its cell, and grows again at a random cell. Each pick-up pays the
    agents on that cell, and a share of it (`team_weight`) goes to the whole team.

    The steps: **1** numbers and state, **2** the environment class, **3** try it,
    **4** register it, **5** run the conformance check, **6** a random baseline,
    **7** train both groups with PPO, **8** evaluate. The same steps for a file in the
    repository are in `docs/adding_an_environment.md`.
    """),
    code(
        SMALL_CELL
        + """
import dataclasses
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import ml_collections
import numpy as np
from flax import struct

import algorithms
import jaxdrive
from jaxdrive import Box, Discrete, MultiDiscrete, TimeStep

print("JAX on", jax.devices())
"""
    ),
    md("""
    ## 1 · Numbers and state

    * **`EnvParams`**: the numbers a user may change or vmap over (rewards, speeds). A
      `flax.struct.dataclass` subclass of `jaxdrive.EnvParams` with defaults.
    * **State**: everything that changes within an episode, as fixed-shape arrays, with
      each field's shape in a comment. Dimension letters: `W` walkers, `J` jumpers,
      `A = W + J` agents, `F` food items, `C` cells, `E` steps per episode.
    """),
    code("""
    @struct.dataclass
    class GatherParams(jaxdrive.EnvParams):
        food_reward: float = 1.0  # value of one food item, split among the agents on its cell
        team_weight: float = 0.5  # share of every pick-up paid to the whole team instead


    @struct.dataclass
    class GatherState:
        pos: jax.Array  # [A] int32, the cell of every agent (walkers first, then jumpers)
        food: jax.Array  # [F] int32, the cell of every food item
        t: jax.Array  # [] int32, steps taken this episode
    """),
    md("""
    ## 2 · The environment

    An environment subclasses `jaxdrive.Env`. Its **static configuration** (what fixes
    shapes) is the fields of a frozen dataclass; it declares its **groups**, their agent
    counts and **spaces** (of one agent), its default params, and two functions:

    * `reset_env(key, params) -> (state, TimeStep)`; `TimeStep.restart(obs, extras=...)`
      builds the first one (zero reward, nothing done, everybody active);
    * `step_env(key, state, actions, params) -> (state, TimeStep)`, where `actions` has
      already been checked against the spaces: `{g: [A_g, *action_shape]}`.

    Per-agent logic is written **for one agent** (`observe_one`, `move_one`) and
    `jax.vmap`ped over the agents. `extras` must have the same structure after reset and
    step. The episode ends after `E` steps: a time limit, so agents are `truncated`
    (learners bootstrap from the last observation), not `terminated`. `global_state`, a flat
    view of the whole state, lets centralised critics (MAPPO) work with the game.
    """),
    code("""
    @dataclasses.dataclass(frozen=True)
    class RingGather(jaxdrive.Env):
        \"\"\"Walkers and jumpers gather food on a ring of `num_cells` cells.\"\"\"

        num_walkers: int = 2
        num_jumpers: int = 2
        num_food: int = 3
        num_cells: int = 16
        episode_length: int = 32

        def __post_init__(self):
            for name in ("num_walkers", "num_jumpers", "num_food", "episode_length"):
                if getattr(self, name) < 1:
                    raise ValueError(f"RingGather: {name} must be >= 1, got {getattr(self, name)}")
            if self.num_cells < 3:
                raise ValueError(f"RingGather: num_cells must be >= 3, got {self.num_cells}")

        # ----- static description -----
        @property
        def groups(self):
            return ("walker", "jumper")

        def num_agents(self, group):
            return {"walker": self.num_walkers, "jumper": self.num_jumpers}[group]

        def observation_space(self, group):
            return Box(-1.0, 1.0, (self.num_food + 1,))  # food offsets, then time

        def action_space(self, group):
            # walker: 0 left, 1 stay, 2 right; jumper: [direction, stride 1 or 2]
            return Discrete(3) if group == "walker" else MultiDiscrete([3, 2])

        @property
        def default_params(self):
            return GatherParams()

        # ----- one agent -----
        def observe_one(self, pos, food, t):
            \"\"\"One agent's observation [F + 1]: offsets to the food, nearest first; t/E.\"\"\"
            half = self.num_cells // 2
            offset = (food - pos + half) % self.num_cells - half  # [F] in [-C/2, C/2)
            nearest_first = offset[jnp.argsort(jnp.abs(offset))]
            time = jnp.minimum(t / self.episode_length, 1.0)[None]
            return jnp.concatenate([nearest_first / half, time]).astype(jnp.float32)

        def move_one(self, pos, delta):
            return (pos + delta) % self.num_cells

        def observe(self, state):
            one = jax.vmap(self.observe_one, in_axes=(0, None, None))  # over agents
            obs = one(state.pos, state.food, state.t)  # [A, F + 1]
            return {"walker": obs[: self.num_walkers], "jumper": obs[self.num_walkers :]}

        # ----- dynamics -----
        def reset_env(self, key, params):
            k_pos, k_food = jax.random.split(key)
            num = self.num_walkers + self.num_jumpers
            state = GatherState(
                pos=jax.random.randint(k_pos, (num,), 0, self.num_cells),
                food=jax.random.randint(k_food, (self.num_food,), 0, self.num_cells),
                t=jnp.zeros((), jnp.int32),
            )
            extras = {"food_eaten": jnp.zeros((), jnp.int32)}
            return state, TimeStep.restart(self.observe(state), extras=extras)

        def step_env(self, key, state, actions, params):
            walk = actions["walker"] - 1  # [W] in {-1, 0, 1}
            jumper = actions["jumper"]  # [J, 2]
            jump = (jumper[:, 0] - 1) * (jumper[:, 1] + 1)  # [J] in {-2, ..., 2}
            pos = jax.vmap(self.move_one)(state.pos, jnp.concatenate([walk, jump]))
            on = pos[:, None] == state.food[None, :]  # [A, F]: agent on food item
            count = on.sum(axis=0)  # [F]
            eaten = count > 0  # [F]
            own = (on / jnp.maximum(count, 1)).sum(axis=1)  # [A]: own share of pick-ups
            team = eaten.sum() / pos.shape[0]
            w = params.team_weight
            reward = (params.food_reward * ((1.0 - w) * own + w * team)).astype(jnp.float32)
            regrown = jax.random.randint(key, (self.num_food,), 0, self.num_cells)
            state = GatherState(pos=pos, food=jnp.where(eaten, regrown, state.food), t=state.t + 1)
            done = state.t >= self.episode_length
            per_group = {"walker": reward[: self.num_walkers], "jumper": reward[self.num_walkers :]}
            ts = TimeStep(
                obs=self.observe(state),
                reward=per_group,
                terminated={g: jnp.zeros(r.shape, bool) for g, r in per_group.items()},
                truncated={g: jnp.full(r.shape, done) for g, r in per_group.items()},
                active={g: jnp.ones(r.shape, bool) for g, r in per_group.items()},
                done=done,
                extras={"food_eaten": eaten.sum().astype(jnp.int32)},
            )
            return state, ts

        def global_state(self, state, params):
            \"\"\"[A + F + 1] float32: agent cells / C, food cells / C, t / E.\"\"\"
            parts = [state.pos / self.num_cells, state.food / self.num_cells]
            parts.append(state.t[None] / self.episode_length)
            return jnp.concatenate(parts).astype(jnp.float32)
    """),
    md("## 3 · Try it"),
    code("""
    env = RingGather()
    key = jax.random.key(0)
    state, ts = env.reset(key, env.default_params)
    actions = env.sample_actions(jax.random.key(1))
    state, ts = env.step(jax.random.key(2), state, actions, env.default_params)
    print(env)
    print("actions", actions)
    print("obs    ", jax.tree.map(jnp.shape, ts.obs))
    print("reward ", ts.reward, " food eaten", ts.extras["food_eaten"])
    """),
    md("""
    ## 4 · Register it and make it by name

    `jaxdrive.register(name, EnvClass)` makes the env available to `jaxdrive.make`, the
    experiment scripts and configs. `make` splits the overrides: constructor fields go to
    the class, `GatherParams` fields into `params`, and any other name is an error.
    """),
    code("""
    jaxdrive.register("ring_gather", RingGather, overwrite=True)  # overwrite: re-runs are fine
    env, params = jaxdrive.make("ring_gather", num_cells=16, team_weight=0.5)
    print(env, params)
    try:
        jaxdrive.make("ring_gather", num_cell=16)
    except ValueError as e:
        print("ValueError:", e)
    """),
    md("""
    ## 5 · The conformance check

    `jaxdrive.testing.check_env` is the check every registered environment passes in the
    test suite: reset and step under `jit`, `vmap` and `scan`, shapes and dtypes against
    the spaces, the same `TimeStep` structure after reset and step, no retracing,
    determinism, `done` by `episode_length`, and bad actions raising `ValueError`. In the
    repository it goes into `tests/environments/test_<your_env>.py`, next to a test that
    compares the dynamics with an independent reference.
    """),
    code("""
    report = jaxdrive.testing.check_env(env, params)
    print("check_env passed:", report)
    """),
    md("""
    ## 6 · A random baseline

    One compiled rollout of random actions; episodes restart automatically every `E` steps,
    so the summed reward over `K·E` steps divided by `K` is the return of one episode.
    """),
    code("""
    E, K = env.episode_length, 4
    num_envs = 64 if SMALL else 256
    out = jaxdrive.rollout(env, jaxdrive.random_policy(env), key, params, num_envs, E * K)
    random_return = {g: float(out.timesteps.reward[g].sum(axis=0).mean()) / K for g in env.groups}
    rounded = {g: round(r, 2) for g, r in random_return.items()}
    print("random policy, return per agent and episode:", rounded)
    """),
    md("""
    ## 7 · Train with PPO

    Training is configured with an `ml_collections.ConfigDict`, like the files in
    `experiments/configs/`:

    * `env_name`, `env_kwargs`: what `jaxdrive.make` builds;
    * `num_envs` × `num_steps`: the rollout of one iteration, `total_env_steps` the length
      of the run;
    * `algo`: the PPO hyper-parameters (see `algorithms.ppo.ALGO_DEFAULTS`; unset keys
      take those defaults, unknown keys are an error);
    * `policies`: one entry per policy, with the `groups` it acts for (agents of a group
      share the policy's parameters) and per-policy overrides such as `lr`. The two groups
      have different action spaces, so they get a policy each.

    `algorithms.make_train(config, env, params)` returns a `Trainer`: calling it,
    `trainer(key)`, runs all iterations as one pure function that `jax.jit` compiles
    into one program.
    """),
    code("""
    ITERATIONS = 12 if SMALL else 40
    config = ml_collections.ConfigDict(
        dict(
            env_name="ring_gather",
            env_kwargs=dict(num_cells=16, team_weight=0.5),
            algorithm="ppo",
            seed=0,
            num_envs=8 if SMALL else 16,
            num_steps=32,
            total_env_steps=(8 if SMALL else 16) * 32 * ITERATIONS,
            algo=dict(gamma=0.9, gae_lambda=0.9, num_epochs=4, num_minibatches=4, ent_coef=0.01),
            policies=dict(
                walker=dict(groups=["walker"], lr=3e-3, hidden_sizes=(32, 32)),
                jumper=dict(groups=["jumper"], lr=3e-3, hidden_sizes=(32, 32)),
            ),
        )
    )
    trainer = algorithms.make_train(config, env, params)
    print(trainer.num_iterations, "iterations of", trainer.env_steps_per_iteration, "env steps")
    """),
    code("""
    train = jax.jit(trainer)
    t0 = time.perf_counter()
    runner_state, metrics = jax.block_until_ready(train(jax.random.PRNGKey(config.seed)))
    print(f"trained in {time.perf_counter() - t0:.1f} s (compile included)")
    print(sorted(metrics))
    """),
    md("""
    `metrics` maps names to `[num_iterations]` arrays: mean episode returns per group,
    losses, entropies and gradient norms per policy. The returns climb well above the
    random baseline (dashed):
    """),
    code("""
    steps = np.asarray(metrics["env_steps"])
    fig, ax = plt.subplots(figsize=(7, 4))
    for g, colour in zip(env.groups, ["tab:blue", "tab:orange"], strict=True):
        ax.plot(steps, metrics[f"episode_return/{g}"], color=colour, label=f"{g} (PPO)")
        ax.axhline(random_return[g], color=colour, ls="--", label=f"{g} (random)")
    ax.set_xlabel("env steps")
    ax.set_ylabel("return per agent and episode")
    ax.legend()
    plt.show()

    final = {g: float(np.mean(metrics[f"episode_return/{g}"][-3:])) for g in env.groups}
    for g in env.groups:
        print(f"{g}: random {random_return[g]:.2f} -> trained {final[g]:.2f}")
    print("return improved over random:", all(final[g] > random_return[g] for g in env.groups))
    """),
    md("""
    ## 8 · Evaluate the trained policies

    `trainer.get_params(runner_state)` gives each policy's parameters and `trainer.act`
    turns observations into actions. `experiments.common.evaluate_policy` plays whole
    episodes in parallel on the device with them.
    """),
    code("""
    from experiments.common import evaluate_policy

    result = evaluate_policy(
        env, params, trainer, trainer.get_params(runner_state), jax.random.PRNGKey(1), episodes=64
    )
    print({g: round(r["mean"], 2) for g, r in result["returns"].items()})
    """),
    md("""
    ## Where next

    * Move the classes to `environments/ring_gather/env.py` and register them by import
      path in `jaxdrive/registry.py` (`"ring_gather": "environments.ring_gather.env:RingGather"`),
      so that `import jaxdrive` stays light.
    * Add `tests/environments/test_ring_gather.py` with `check_env` and a reference test.
    * Write `experiments/configs/ring_gather.py` with a `get_config(preset)` and train with
      `python -m experiments.train --config=experiments/configs/ring_gather.py`.
    """),
]

# ---------------------------------------------------------------------------------------
# 03 · Training Tag
# ---------------------------------------------------------------------------------------
TAG_TRAINING = [
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

    `train_loop(trainer, seed, workdir, iterations_per_chunk=K)` compiles `K` iterations
    into one program, runs it, then (on the host) logs the chunk's metrics, checks for
    NaNs and saves a checkpoint, and calls it again. `on_chunk` sees each chunk's metrics.
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
    ended = np.array([r["metrics"]["episodes_done"] > 0 for r in records])
    panels = [
        ("episode_return/{}", "return per agent"),
        ("loss/{}/value", "value loss"),
        ("loss/{}/entropy", "entropy"),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.5))
    for ax, (name, title) in zip(axes, panels, strict=True):
        for g in env.groups:
            values = np.array([r["metrics"][name.format(g)] for r in records], dtype=float)
            keep = ended if name.startswith("episode") else np.ones_like(ended)
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

# ---------------------------------------------------------------------------------------
# 04 · Scaling
# ---------------------------------------------------------------------------------------
SCALING = [
    md("""
    # 04 · Scaling: many seeds at once, devices, benchmarks

    A whole training run is one pure function of its key, so `jax.vmap` runs many seeds
    side by side in one program: one compile, one launch, all seeds sharing the device.
    Then: which devices JAX sees, the plan for several devices, and the benchmark suite.
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
    ## Several devices (coming)

    The next step spreads one run's environment batch over a device mesh (`shard_map`
    with a named axis; gradients and statistics averaged with `lax.pmean`), with
    `jax.distributed.initialize` for several hosts: the same program, results equal to
    the single-device run up to floating-point tolerance.

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
    from Python: `run_suite`, which returns one record per measurement. The Pallas
    neighbour-search kernels of Tag run on GPUs; on a CPU they run in the slow
    interpreter, so only the plain-JAX path is timed there.
    """),
    code("""
    from experiments.benchmarks.run import run_suite

    impls = ["jax", "pallas"] if ON_GPU else ["jax"]
    num_steps, repeats = (10, 1) if SMALL else (100, 5)
    records = run_suite("quick", num_steps=num_steps, repeats=repeats, impls=impls)
    print(len(records), "measurements; fields:", sorted(records[0]))
    """),
]

NOTEBOOKS: dict[str, list[Cell]] = {
    "01_quickstart": QUICKSTART,
    "02_custom_env": CUSTOM_ENV,
    "03_tag_training": TAG_TRAINING,
    "04_scaling": SCALING,
}


def build(name: str) -> nbformat.NotebookNode:
    """The notebook ``name`` (a key of `NOTEBOOKS`): no outputs, fixed cell ids."""
    if name not in NOTEBOOKS:
        raise ValueError(f"unknown notebook {name!r}; known: {sorted(NOTEBOOKS)}")
    cells = []
    for i, (kind, source) in enumerate(NOTEBOOKS[name]):
        cid = f"{name}-{i}"
        if kind == "code":
            cells.append(nbformat.v4.new_code_cell(source, id=cid))
        else:
            cells.append(nbformat.v4.new_markdown_cell(source, id=cid))
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    }
    nbformat.validate(nb)
    return nb


def render(name: str) -> str:
    """The file text of notebook ``name``, as written to ``<name>.ipynb``."""
    return nbformat.writes(build(name)) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Writes (or with ``--check`` compares) every notebook; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a notebook is stale")
    parser.add_argument("--out", default=str(HERE), help="folder to write into")
    args = parser.parse_args(argv)
    stale = []
    for name in NOTEBOOKS:
        path = pathlib.Path(args.out) / f"{name}.ipynb"
        text = render(name)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf8") != text:
                stale.append(str(path))
        else:
            path.write_text(text, encoding="utf8")
            print("wrote", path)
    if stale:
        print("stale notebooks (run experiments/notebooks/build_notebooks.py):", *stale)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
