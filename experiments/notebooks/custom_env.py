"""Cells of tutorial notebook 02: a new multi-agent game, from scratch to a trained policy."""

from __future__ import annotations

from experiments.notebooks.cells import SMALL_CELL, Cell, code, md

__all__ = ["CELLS"]

CELLS: list[Cell] = [
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

    Training is configured with an `ml_collections.ConfigDict`. As the files in
    `experiments/configs/` do, it sets only what differs from the algorithm's defaults
    (`algorithms.common.config.base_config("ppo")` lists every key with its default):

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
