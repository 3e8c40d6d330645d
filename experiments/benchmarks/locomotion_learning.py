"""Continuous-control learning benchmarks: MuJoCo locomotion (``--suite=locomotion_learning``)
and the SAC/TD3 Pendulum runs of ``--suite=learning``.

**Locomotion**: for each env of ``--learn_envs`` that the registry knows, each
algorithm of ``--learn_algos`` and each of ``--learn_seeds`` seeds, a training
run of `experiments.configs.locomotion` (``mamujoco_ant``: `experiments.configs.mamujoco`)
in compiled chunks, stopped at the run's env steps or ``--learn_budget_s`` seconds.
After every ``--learn_eval_every`` chunks the policy plays ``--learn_eval_episodes``
(≥ 32) deterministic episodes (`experiments.common.evaluate_policy`; 3 by default: an
evaluation's 1000 serial steps take longer than a chunk of training): a curve of mean
evaluation return against env steps and wall time *including compile and evaluation*,
and the first wall time at which the return reaches each of ``THRESHOLDS``. When ``brax``
is importable, Brax's own PPO trainer runs on its MJX humanoid in the same process with
the anchor's settings (Brax's training notebook: 2048 envs, unroll 10, batch 1024 × 32
minibatches, 8 updates per batch, γ 0.97, reward scaling 0.1), its curve read from
its progress callback (Brax's evaluation: 128 envs, stochastic actions, its defaults).

One JSON record per run (``bench="locomotion_learning"``; its ``startup`` gives the
init and chunk programs, when every program was ready and
when the first chunk ended, and each curve point its evaluation's seconds) and one for
Brax's (``bench="brax_ppo"``).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import flags

__all__ = [
    "ENV_PRESETS",
    "TARGETS",
    "THRESHOLDS",
    "brax_ppo_curve",
    "learning_curve",
    "pendulum_config",
    "run_locomotion_learning_suite",
]

FLAGS = flags.FLAGS
flags.DEFINE_list(
    "learn_envs",
    ["humanoid", "ant", "half_cheetah", "hopper", "walker2d", "mamujoco_ant"],
    "envs of --suite=locomotion_learning (presets of experiments/configs/locomotion.py, "
    "and mamujoco_ant)",
)
flags.DEFINE_list("learn_algos", ["ppo", "sac"], "algorithms: ppo, sac, td3")
flags.DEFINE_integer("learn_seeds", 3, "seeds per env and algorithm", lower_bound=1)
flags.DEFINE_integer(
    "learn_first_seed",
    0,
    "the first seed (seeds first_seed .. first_seed + seeds - 1)",
    lower_bound=0,
)
flags.DEFINE_float("learn_budget_s", 300.0, "wall seconds per run (compile included)")
flags.DEFINE_integer("learn_eval_every", 3, "chunks between evaluations", lower_bound=1)
flags.DEFINE_integer(
    "learn_eval_episodes", 128, "deterministic evaluation episodes", lower_bound=32
)
flags.DEFINE_integer(
    "learn_num_devices", 1, "devices each run's env batch is sharded over", lower_bound=1
)
flags.DEFINE_list(
    "learn_overrides",
    [],
    "dotted config overrides of every run, e.g. num_envs=4096,num_steps=80 (Python literals)",
)
flags.DEFINE_bool("brax_anchor", True, "also run Brax's PPO on its humanoid when importable")
flags.DEFINE_integer("brax_timesteps", 30_000_000, "env steps of the Brax PPO run")
flags.DEFINE_integer("brax_evals", 6, "evaluations of the Brax PPO run")

#: env preset -> (config module, preset of it)
ENV_PRESETS = {
    "humanoid": ("locomotion", "humanoid"),
    "ant": ("locomotion", "ant"),
    "half_cheetah": ("locomotion", "half_cheetah"),
    "hopper": ("locomotion", "hopper"),
    "walker2d": ("locomotion", "walker2d"),
    "mamujoco_ant": ("mamujoco", ""),
}
#: The return each env's run should reach (issue targets).
TARGETS = {
    "humanoid": 6000.0,
    "ant": 5000.0,
    "half_cheetah": 5000.0,
    "hopper": 3000.0,
    "walker2d": 4000.0,
    "mamujoco_ant": 5000.0,
}
#: Returns whose first crossing time each record reports.
THRESHOLDS = (1000.0, 3000.0, 4000.0, 5000.0, 6000.0)


def pendulum_config(algorithm: str) -> ml_collections.ConfigDict:
    """SAC or TD3 on Pendulum-v1 for ``--suite=learning`` (target −200): 16 envs × 4
    steps per iteration, one gradient step per env step on batches of 256, learning
    rates 1e-3 (critics 2e-3), 2,000 random steps first, 20,000 env steps in all."""
    from algorithms.common.config import base_config

    c = base_config(algorithm, "Pendulum-v1")
    c.num_envs, c.num_steps, c.total_env_steps = 16, 4, 20_000
    c.algo.update(learning_starts=2_000, updates_per_iteration=64)
    c.policies.agent.update(actor_lr=1e-3, critic_lr=2e-3)
    if algorithm == "sac":
        c.policies.agent.alpha_lr = 1e-3
    return c


def _config(env: str, algorithm: str, seed: int) -> ml_collections.ConfigDict:
    from experiments.benchmarks.training import load_config

    module, preset = ENV_PRESETS[env]
    if algorithm != "ppo":
        if module != "locomotion":
            raise ValueError(f"{env}: only PPO (MAPPO) runs on the multi-agent env")
        preset = f"{preset},{algorithm}"
    overrides = dict(_override(o) for o in FLAGS.learn_overrides)
    return load_config(module, preset, seed=seed, num_devices=FLAGS.learn_num_devices, **overrides)


def _override(text: str) -> tuple[str, Any]:
    """``"a.b=3"`` -> ``("a.b", 3)`` (the value a Python literal, else the string)."""
    import ast

    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"--learn_overrides: {text!r} is not key=value")
    try:
        return key.strip(), ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key.strip(), value


def _first_crossings(curve: list[dict[str, Any]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for t in THRESHOLDS:
        hit = [p["wall_s"] for p in curve if p["eval_return"] >= t]
        out[f"{t:g}"] = hit[0] if hit else None
    return out


def learning_curve(
    config: Any, *, budget_s: float, eval_every: int = 1, eval_episodes: int = 32
) -> dict[str, Any]:
    """Trains ``config`` (seed ``config.seed``) in chunks of ``config.run.
    iterations_per_chunk`` iterations until its env steps or ``budget_s`` seconds are
    spent, evaluating every ``eval_every`` chunks; see the module docstring. The init
    and chunk programs are the training loop's (`jaxdrive.loop_programs`); they and the
    evaluation program compile side by side before the first chunk runs."""
    import algorithms
    import jaxdrive
    from experiments.common import compile_evaluation, evaluate_policy
    from jaxdrive import aot
    from jaxdrive.loop_programs import programs_for

    t0 = time.perf_counter()
    env, env_params = jaxdrive.make(config.env_name, **dict(config.env_kwargs))
    trainer = algorithms.make_train(config, env, env_params)
    k = max(1, min(int(config.run.iterations_per_chunk), trainer.num_iterations))
    programs = programs_for(trainer, k)  # the training loop's init and chunk programs
    key = jax.random.PRNGKey(int(config.seed))
    state_info = programs.start(key)
    params_info = jax.eval_shape(trainer.get_params, state_info)
    compile_evaluation(env, env_params, trainer, params_info, episodes=eval_episodes)
    rs = programs.init(key)
    chunk, chunk_info = programs.chunk(rs)
    aot.wait_pending()  # the evaluation's compile ends before the first chunk runs
    startup = {
        "init": dataclasses.asdict(programs.init_info),
        "chunk": dataclasses.asdict(chunk_info),
        "programs_ready_s": round(time.perf_counter() - t0, 2),
    }
    n = np.int32(k)
    eval_key = jax.random.PRNGKey(int(config.seed) + 10_000)
    group = env.groups[0]
    curve: list[dict[str, Any]] = []
    done_iters, chunks, train_return = 0, 0, float("nan")
    while done_iters + k <= trainer.num_iterations and time.perf_counter() - t0 < budget_s:
        rs, metrics, _ = chunk(rs, n)
        done_iters, chunks = done_iters + k, chunks + 1
        last = jax.device_get(metrics[f"episode_return/{group}"][-1])
        train_return = float(last)
        startup.setdefault("first_chunk_end_s", round(time.perf_counter() - t0, 2))
        ending = done_iters + k > trainer.num_iterations or time.perf_counter() - t0 >= budget_s
        if chunks % eval_every and not ending:
            continue
        t_eval = time.perf_counter()
        ev = evaluate_policy(
            env, env_params, trainer, trainer.get_params(rs), eval_key, episodes=eval_episodes
        )
        t_eval = time.perf_counter() - t_eval
        curve.append(
            {
                "env_steps": done_iters * trainer.env_steps_per_iteration,
                "wall_s": round(time.perf_counter() - t0, 2),
                "eval_return": ev["returns"][group]["mean"],
                "eval_return_std": ev["returns"][group]["std"],
                "eval_nonfinite": ev["nonfinite"],
                "train_return": train_return,
                "eval_s": round(t_eval, 2),
            }
        )
        print(f"  {config.env_name} {config.algorithm} seed {config.seed}: {curve[-1]}", flush=True)
    best = max((p["eval_return"] for p in curve), default=float("nan"))
    return {
        "env": config.env_name,
        "algorithm": config.algorithm,
        "seed": int(config.seed),
        "num_envs": int(config.num_envs),
        "eval_episodes": eval_episodes,
        "wall_s_total": round(time.perf_counter() - t0, 2),
        "env_steps": done_iters * trainer.env_steps_per_iteration,
        "final_eval_return": curve[-1]["eval_return"] if curve else float("nan"),
        "best_eval_return": best,
        "first_wall_s_at_return": _first_crossings(curve),
        "startup": startup,
        "curve": curve,
    }


def _shim_removed_jax_apis() -> None:
    """Brax's PPO trainer calls ``jax.device_put_replicated``/``device_put_sharded``,
    which newer JAX releases dropped; where they are missing, define them with their old
    meaning (a new leading axis with one copy, or one shard, per device)."""
    if not hasattr(jax, "device_put_replicated"):

        def device_put_replicated(x, devices):
            return jax.tree.map(lambda a: jnp.stack([jnp.asarray(a)] * len(devices)), x)

        jax.device_put_replicated = device_put_replicated
    if not hasattr(jax, "device_put_sharded"):

        def device_put_sharded(shards, devices):
            del devices
            return jax.tree.map(lambda *a: jnp.stack(a), *shards)

        jax.device_put_sharded = device_put_sharded


def brax_ppo_curve(num_timesteps: int, num_evals: int, seed: int = 0) -> dict[str, Any] | None:
    """Brax's PPO on its MJX ``humanoid`` with the anchor's settings (module docstring);
    ``None`` when ``brax`` is not importable. Wall time from before the call (compile
    included)."""
    try:
        from brax import envs
        from brax.training.agents.ppo import train as brax_ppo
    except ImportError:
        return None
    _shim_removed_jax_apis()
    curve: list[dict[str, Any]] = []
    t0 = time.perf_counter()

    def progress(step, metrics):
        ret = float(metrics.get("eval/episode_reward", float("nan")))
        curve.append(
            {"env_steps": int(step), "wall_s": round(time.perf_counter() - t0, 2),
             "eval_return": ret}
        )  # fmt: skip
        print(f"  brax ppo humanoid: {curve[-1]}", flush=True)

    brax_ppo.train(
        environment=envs.get_environment("humanoid", backend="mjx"),
        num_timesteps=num_timesteps,
        num_evals=num_evals,
        reward_scaling=0.1,
        episode_length=1000,
        normalize_observations=True,
        action_repeat=1,
        unroll_length=10,
        num_minibatches=32,
        num_updates_per_batch=8,
        discounting=0.97,
        learning_rate=3e-4,
        entropy_cost=1e-3,
        num_envs=2048,
        batch_size=1024,
        seed=seed,
        progress_fn=progress,
    )
    return {
        "env": "brax:humanoid (mjx)",
        "algorithm": "brax_ppo",
        "seed": seed,
        "num_timesteps": num_timesteps,
        "wall_s_total": round(time.perf_counter() - t0, 2),
        "final_eval_return": curve[-1]["eval_return"] if curve else float("nan"),
        "first_wall_s_at_return": _first_crossings(curve),
        "curve": curve,
    }


def _registered(name: str) -> bool:
    import jaxdrive

    try:
        jaxdrive.make(name)
    except (KeyError, ValueError, ImportError) as e:
        print(f"  skipping {name}: {e}", flush=True)
        return False
    return True


def run_locomotion_learning_suite(sink: Any = None) -> list[dict[str, Any]]:
    """The ``--suite=locomotion_learning`` records (see the module docstring), each also
    given to ``sink.add`` (`experiments.benchmarks.run.RecordSink`) when finished."""
    from experiments.benchmarks.timing import device_info

    info = device_info()
    records = []
    unknown = [e for e in FLAGS.learn_envs if e not in ENV_PRESETS]
    if unknown:
        raise ValueError(f"--learn_envs: unknown {unknown}; known: {list(ENV_PRESETS)}")
    if FLAGS.brax_anchor:
        rec = brax_ppo_curve(FLAGS.brax_timesteps, FLAGS.brax_evals)
        if rec is None:
            print("  brax is not importable: no Brax PPO anchor run", flush=True)
        else:
            records.append({"bench": "brax_ppo", **rec, **info})
            if sink is not None:
                sink.add(records[-1])
    for env in FLAGS.learn_envs:
        for algorithm in FLAGS.learn_algos:
            if algorithm != "ppo" and ENV_PRESETS[env][0] != "locomotion":
                continue
            config = _config(env, algorithm, 0)
            if not _registered(config.env_name):
                break
            for seed in range(FLAGS.learn_first_seed, FLAGS.learn_first_seed + FLAGS.learn_seeds):
                rec = learning_curve(
                    _config(env, algorithm, seed),
                    budget_s=FLAGS.learn_budget_s,
                    eval_every=FLAGS.learn_eval_every,
                    eval_episodes=FLAGS.learn_eval_episodes,
                )
                rec.update(bench="locomotion_learning", name=env, target=TARGETS[env], **info)
                rec["train_devices"] = FLAGS.learn_num_devices
                if FLAGS.learn_overrides:
                    rec["overrides"] = list(FLAGS.learn_overrides)
                records.append(rec)
                if sink is not None:
                    sink.add(rec)
    return records
