"""The Q-learning rows of ``--suite=marl_learning``: return against wall time.

Runs (configs of `experiments.configs.qlearning`):

* ``pqn_cartpole``: PQN on CartPole-v1 (``num_seeds`` vmapped seeds), target 475;
* ``vdn_spread``, ``qmix_spread``, ``iql_spread``: MPE ``simple_spread`` for
  ``spread_env_steps`` env steps (one seed each), target −40 (JaxMARL's VDN reaches
  about −35 to −40 on its published curves). Their returns are in JaxMARL's MPE units:
  JaxMARL's ``MPELogWrapper`` logs every agent's reward times the number of agents, so
  the per-agent mean return here is multiplied by the 3 agents (``return_scale``).
  Skipped, with a record saying why, when the ``MPE_simple_spread_v3`` env is not
  registered.

Each run is one compiled program (``jax.vmap`` over seeds) timed from the first call,
compile included. The record holds the final return (mean over the episodes of the
last five iterations with episodes, as the ``learning`` suite computes it) and a
return-vs-wall-time curve of ``_CURVE_POINTS`` points: the iterations of one program
take equal time, so iteration ``k`` of ``K`` is placed at ``k/K`` of the training time
(compile excluded).
"""

from __future__ import annotations

import time
from typing import Any

import jax
import numpy as np

import algorithms
import jaxdrive
from experiments.benchmarks.training import load_config

__all__ = ["QLEARNING_RUNS", "qlearning_records"]

#: ``(name, config preset, target return)`` of every run.
QLEARNING_RUNS = (
    ("pqn_cartpole", "pqn_cartpole", 475.0),
    ("vdn_spread", "vdn_spread", -40.0),
    ("qmix_spread", "qmix_spread", -40.0),
    ("iql_spread", "iql_spread", -40.0),
)
_CURVE_POINTS = 20
_SPREAD_ENV = "MPE_simple_spread_v3"


def _mean_return(metrics: dict[str, np.ndarray], group: str, last: int = 5) -> np.ndarray:
    """``[S]`` per seed: the mean return of the episodes that ended in the last ``last``
    iterations with any (weighted by ``episodes_done``); NaN before the first episode."""
    done = np.asarray(metrics["episodes_done"], np.float64)  # [S, K]
    rank = np.flip(np.cumsum(np.flip(done > 0, -1), -1), -1)
    w = np.where((done > 0) & (rank <= last), done, 0.0)
    ret = np.nan_to_num(np.asarray(metrics[f"episode_return/{group}"], np.float64))
    return np.where(w.sum(-1) > 0, (ret * w).sum(-1) / np.maximum(w.sum(-1), 1.0), np.nan)


def _json_float(x: Any) -> float | None:
    """``x`` as a float, ``None`` for NaN (no episode yet): strict JSON."""
    return None if not np.isfinite(x) else float(x)


def _run(name: str, config: Any, num_seeds: int, target: float) -> dict[str, Any]:
    env, params = jaxdrive.make(config.env_name, **dict(config.env_kwargs))
    trainer = algorithms.make_train(config, env, params)
    keys = jax.random.split(jax.random.PRNGKey(int(config.seed)), num_seeds)
    t0 = time.perf_counter()
    program = jax.jit(jax.vmap(trainer)).lower(keys).compile()
    compile_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    _, metrics = jax.block_until_ready(program(keys))
    train_s = time.perf_counter() - t1
    metrics = jax.device_get(metrics)
    group = env.groups[0]
    scale = float(env.num_agents(group)) if config.env_name == _SPREAD_ENV else 1.0
    K = trainer.num_iterations
    points = sorted({max(round(K * (i + 1) / _CURVE_POINTS), 1) for i in range(_CURVE_POINTS)})
    curve = []
    for k in points:
        part = {m: np.asarray(v)[:, :k] for m, v in metrics.items()}
        curve.append(
            {
                "env_steps": k * trainer.env_steps_per_iteration,
                "wall_s": round(compile_s + train_s * k / K, 2),
                "return": _json_float(scale * np.mean(_mean_return(part, group))),
            }
        )
    final = scale * _mean_return(metrics, group)
    return {
        "bench": "marl_learning",
        "name": name,
        "env": config.env_name,
        "algorithm": config.algorithm,
        "num_seeds": num_seeds,
        "total_env_steps": K * trainer.env_steps_per_iteration,
        "compile_s": round(compile_s, 2),
        "train_s": round(train_s, 2),
        "wall_s_incl_compile": round(compile_s + train_s, 2),
        "final_returns": [_json_float(x) for x in final],
        "return_scale": scale,
        "target": target,
        "reached": bool(np.nanmean(final) >= target) if np.isfinite(final).any() else False,
        "curve": curve,
    }


def qlearning_records(
    num_seeds: int,
    spread_env_steps: int,
    names: tuple[str, ...] | None = None,
    info: dict[str, Any] | None = None,
    sink: Any = None,
) -> list[dict[str, Any]]:
    """The records of `QLEARNING_RUNS` (those in ``names`` when given), printed as they
    finish, with ``info`` (the device, `experiments.benchmarks.timing.device_info`)
    added, each given to ``sink.add`` (`experiments.benchmarks.run.RecordSink`) then."""
    records = []
    for name, preset, target in QLEARNING_RUNS:
        if names is not None and name not in names:
            continue
        config = load_config("qlearning", preset)
        seeds = num_seeds
        if config.env_name == _SPREAD_ENV:
            seeds = 1
            config.total_env_steps = int(spread_env_steps)
            if _SPREAD_ENV not in jaxdrive.registered_envs():
                rec = {"bench": "marl_learning", "name": name, "skipped": f"{_SPREAD_ENV} "
                       "is not a registered env (the MPE package is not installed)"}  # fmt: skip
                print(f"marl_learning {name:<13} skipped: {rec['skipped']}", flush=True)
                records.append(rec)
                continue
        rec = _run(name, config, seeds, target)
        print(
            f"marl_learning {name:<13} returns {rec['final_returns']} "
            f"(target {target:g}) in {rec['wall_s_incl_compile']:.1f} s "
            f"(compile {rec['compile_s']:.1f} s), {rec['total_env_steps']:,} env steps",
            flush=True,
        )
        rec.update(info or {})
        records.append(rec)
        if sink is not None:
            sink.add(rec)
    return records
