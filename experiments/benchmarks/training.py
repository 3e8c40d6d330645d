"""Training benchmarks: end-to-end throughput and learning targets.

Throughput: a compiled chunk of ``K`` whole iterations (rollout + learning) is called
once to compile, then ``repeats`` times; env steps/s = K · N · T / median seconds.
Learning: full training runs (``jax.vmap`` over seeds where asked) timed from the
first call (compile included), with the final episode returns, summarised over seeds
as `seed_summary` (mean, interquartile mean and its 95% bootstrap interval, as
``rliable`` reports them), and the curve of the seeds' mean return per iteration, from
which `time_to_return` reads when a return is first reached.
"""

from __future__ import annotations

import functools
import importlib
import statistics
import time
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import algorithms
import jaxdrive
from experiments.benchmarks.timing import peak_memory_bytes, profile_call, time_compiled
from jaxdrive import aot

__all__ = [
    "evaluate_tag_tagging",
    "evaluate_tag_tagging_seeds",
    "learning_run",
    "load_config",
    "seed_summary",
    "set_dotted",
    "time_to_return",
    "time_training",
]


def load_config(name: str, preset: str = "", **overrides: Any):
    """``experiments/configs/<name>.py``'s config with ``preset`` and dotted overrides."""
    config = importlib.import_module(f"experiments.configs.{name}").get_config(preset)
    for dotted, value in overrides.items():
        set_dotted(config, dotted, value)
    return config


def set_dotted(config, dotted: str, value: Any) -> None:
    """``config.a.b.c = value`` for ``dotted = "a.b.c"``."""
    node = config
    *path, last = dotted.split(".")
    for part in path:
        node = node[part]
    node[last] = value


def _build(config):
    env, params = jaxdrive.make(config.env_name, **dict(config.env_kwargs))
    return env, params, algorithms.make_train(config, env, params)


def time_training(
    config,
    iterations: int = 5,
    repeats: int = 3,
    profile_dir: str | None = None,
    num_seeds: int = 1,
) -> dict[str, Any]:
    """Training throughput of ``config`` (see the module docstring); with
    ``profile_dir``, one extra call is traced there (`jax.profiler`); ``num_seeds > 1``
    vmaps the chunk over that many seeds (as the learning suites run them) and counts
    every seed's env steps."""
    env, _, trainer = _build(config)
    # the state is donated, as the training loop donates it (an off-policy replay
    # buffer is then updated in place instead of copied by every call)
    one = lambda rs: trainer.chunk(rs, iterations)
    init = jax.jit(trainer.init)
    if num_seeds > 1:
        one, init = jax.vmap(one), jax.jit(jax.vmap(trainer.init))
    chunk = jax.jit(one, donate_argnums=0)
    keys = jax.random.split(jax.random.PRNGKey(0), num_seeds)
    rs = jax.block_until_ready(init(keys if num_seeds > 1 else keys[0]))
    t0 = time.perf_counter()
    compiled = chunk.lower(rs).compile()
    compile_s = time.perf_counter() - t0
    state = {"rs": rs}

    def call():
        state["rs"], metrics = compiled(state["rs"])
        return metrics

    _, times = time_compiled(call, repeats)
    profile_call(call, profile_dir)
    med = statistics.median(times)
    steps = iterations * trainer.env_steps_per_iteration * num_seeds
    return {
        "env": config.env_name,
        "algorithm": config.algorithm,
        "num_envs": config.num_envs,
        "num_steps": config.num_steps,
        "num_devices": config.get("num_devices", 1),  # the env batch is sharded over these
        "num_seeds": num_seeds,
        "num_agents": env.total_agents,
        "iterations_timed": iterations,
        "compile_s": round(compile_s, 2),
        "seconds_median": med,
        "env_steps_per_s": steps / med,
        "agent_steps_per_s": steps * env.total_agents / med,
        "peak_memory_bytes": peak_memory_bytes(),
        **({"_hlo": compiled.as_text()} if profile_dir else {}),
    }


def _final_returns(metrics: dict[str, jax.Array], last: int) -> dict[str, np.ndarray]:
    """Mean return of the episodes that ended in the last ``last`` iterations in which
    any episode ended, each iteration's mean weighted by its ``episodes_done``."""
    done = np.asarray(metrics["episodes_done"], np.float64)  # [..., K]
    # rank iterations with episodes from the end; keep the last `last` of them
    rank = np.flip(np.cumsum(np.flip(done > 0, -1), -1), -1)
    weight = np.where((done > 0) & (rank <= last), done, 0.0)
    out = {}
    for name, values in metrics.items():
        if name.startswith("episode_return/"):
            v = np.nan_to_num(np.asarray(values, np.float64))
            out[name] = (v * weight).sum(-1) / np.maximum(weight.sum(-1), 1)
    return out


def seed_summary(values: Any, resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Summary of one score per seed ``values [S]``: ``n``, ``mean``, ``iqm`` (the mean
    of the middle half: the lowest and highest ``⌊S/4⌋`` scores dropped) and ``iqm_ci95``,
    the 2.5th and 97.5th percentiles of the IQM over ``resamples`` bootstrap resamples of
    the seeds (with replacement)."""
    v = np.asarray(values, np.float64).ravel()
    if v.size == 0:
        raise ValueError("seed_summary needs at least one score")

    def iqm(x: np.ndarray) -> np.ndarray:  # x: [..., S]
        x = np.sort(x, axis=-1)
        cut = x.shape[-1] // 4
        return x[..., cut : x.shape[-1] - cut].mean(-1)

    idx = np.random.default_rng(seed).integers(0, v.size, (resamples, v.size))
    boot = iqm(v[idx])
    return {
        "n": int(v.size),
        "mean": float(v.mean()),
        "iqm": float(iqm(v)),
        "iqm_ci95": [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))],
    }


def time_to_return(
    curve: Any, target: float, compile_s: float, run_s: float, window: int = 5
) -> float | None:
    """Seconds until the mean-over-seeds return ``curve [K]`` (per iteration; NaN where
    no episode ended) first reaches ``target``, averaged over ``window`` iterations: the
    compile time plus that iteration's share of the run time (iterations take equal
    time); ``None`` if never."""
    c = np.asarray(curve, np.float64)
    k = c.size
    ok = np.isfinite(c)
    filled = np.where(ok, c, 0.0)
    sums = np.convolve(filled, np.ones(window), "full")[:k]
    counts = np.convolve(ok.astype(np.float64), np.ones(window), "full")[:k]
    smooth = np.where(counts > 0, sums / np.maximum(counts, 1), -np.inf)
    hit = np.nonzero(smooth >= target)[0]
    return None if hit.size == 0 else round(compile_s + run_s * (hit[0] + 1) / k, 2)


def learning_run(config, num_seeds: int = 1, last: int = 5) -> dict[str, Any]:
    """Trains ``config`` on ``num_seeds`` vmapped seeds; returns final returns per seed
    (mean over the last ``last`` iterations) and their `seed_summary`, wall time
    including compile (and the compile time alone), and each group's curve: the mean
    over seeds of the per-iteration mean episode return (``[K]``, NaN where no episode
    ended). The init program and the run (every iteration in one scan) compile side by
    side (`jaxdrive.aot`), as the experiment scripts compile theirs."""
    env, _, trainer = _build(config)
    keys = jax.random.split(jax.random.PRNGKey(int(config.seed)), num_seeds)
    t0 = time.perf_counter()
    init = aot.compile_async(jax.jit(jax.vmap(trainer.init)), keys)
    run = aot.compile_async(
        jax.jit(jax.vmap(lambda rs: trainer.chunk(rs, trainer.num_iterations))), init.out_info
    )
    init_program, run_program = init.result()[0], run.result()[0]
    compile_s = time.perf_counter() - t0
    rs, metrics = jax.block_until_ready(run_program(init_program(keys)))
    wall = time.perf_counter() - t0
    returns = _final_returns(metrics, last)
    best = {k: np.asarray(v).tolist() for k, v in returns.items()}
    done = np.asarray(metrics["episodes_done"], np.float64)  # [S, K]
    curves = {}
    for name, values in metrics.items():
        if name.startswith("episode_return/"):
            v = np.where(done > 0, np.asarray(values, np.float64), np.nan)
            with warnings.catch_warnings():  # iterations in which no seed ended one
                warnings.simplefilter("ignore", RuntimeWarning)
                curves[name] = np.nanmean(v.reshape(-1, v.shape[-1]), axis=0)
    return {
        "env": config.env_name,
        "algorithm": config.algorithm,
        "num_seeds": num_seeds,
        "total_env_steps": trainer.num_iterations * trainer.env_steps_per_iteration,
        "wall_s_incl_compile": round(wall, 2),
        "compile_s": round(compile_s, 2),
        "final_returns": best,
        "summary": {k: seed_summary(v) for k, v in returns.items()},
        "_curves": curves,
        "_runner_state": rs,
        "_trainer": trainer,
        "_env": env,
    }


def evaluate_tag_tagging_seeds(
    env, env_params, trainer, runner_state, num_seeds: int, num_envs: int = 64
) -> dict[str, Any]:
    """`evaluate_tag_tagging` for each of ``num_seeds`` vmapped runs in ``runner_state``
    (leading seed axis): one seed's dict as it is, several as ``per_seed`` with the mean
    and the smallest trained/random ratio."""
    params = trainer.get_params(runner_state)
    per_seed = [
        evaluate_tag_tagging(
            env, env_params, trainer, jax.tree.map(lambda x, i=i: x[i], params), num_envs
        )
        for i in range(num_seeds)
    ]
    if num_seeds == 1:
        return per_seed[0]
    ratios = [t["ratio"] for t in per_seed]
    return {
        "per_seed": per_seed,
        "ratio_mean": float(np.mean(ratios)),
        "ratio_min": float(np.min(ratios)),
    }


@functools.lru_cache(maxsize=8)
def _tagging_program(env, trainer, num_envs: int):
    """One jitted program ``(params_by_policy, env_params, key) -> (trained, random)``:
    the mean runners tagged per episode of ``num_envs`` envs with the trained taggers and
    with uniformly random ones (the same key for both). Cached per env, trainer and
    size, so evaluating several seeds or checkpoints compiles once."""
    venv = jaxdrive.vectorize(env, num_envs, auto_reset=False)
    steps = env.episode_length

    def episode(params_by_policy, env_params, key, random_taggers: bool):
        k0, k1 = jax.random.split(key)
        state, ts = venv.reset(k0, env_params)

        def body(carry, k):
            state, ts, tags = carry
            ka, kr, ke = jax.random.split(k, 3)
            actions = trainer.act(params_by_policy, ka, ts.obs)
            if random_taggers:
                rnd = jax.vmap(env.sample_actions)(jax.random.split(kr, num_envs))
                actions = {**actions, "tagger": rnd["tagger"]}
            live = ~ts.done
            state, ts = venv.step(ke, state, actions, env_params)
            tags = tags + jnp.where(live, ts.extras["num_tags"], 0)
            return (state, ts, tags), None

        init = (state, ts, jnp.zeros((num_envs,), jnp.int32))
        (_, _, tags), _ = jax.lax.scan(body, init, jax.random.split(k1, steps))
        return jnp.mean(tags.astype(jnp.float32))

    def both(params_by_policy, env_params, key):
        return (
            episode(params_by_policy, env_params, key, False),
            episode(params_by_policy, env_params, key, True),
        )

    return jax.jit(both)


def evaluate_tag_tagging(
    env, env_params, trainer, params_by_policy, num_envs: int = 64, seed: int = 0
) -> dict[str, float]:
    """Runners tagged per episode (one full episode of ``num_envs`` envs), with trained
    taggers and with uniformly random taggers, both against the trained runners."""
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    program = _tagging_program(env, trainer, int(num_envs))
    trained, rand = program(params_by_policy, env_params, jax.random.PRNGKey(seed))
    trained, rand = float(trained), float(rand)
    return {
        "tags_per_episode_trained_taggers": trained,
        "tags_per_episode_random_taggers": rand,
        "ratio": trained / max(rand, 1e-9),
    }
