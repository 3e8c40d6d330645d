"""The SMAX rows of ``--suite=marl_learning``: win rate and return against env steps and
wall time, several seeds in one program.

Runs (`SMAX_RUNS`; SMAX through the JaxMARL adapter, ``jaxdrive.make("jaxmarl:smax:<map>")``):

* ``mappo_smax``: recurrent MAPPO on ``3s5z`` (`experiments.configs.smax`, JaxMARL's
  published recurrent-MAPPO settings), 10M env steps, target win rate 0.9;
* ``mappo_ff_smax``, ``mappo_ff_2s3z``: the same with feed-forward actor and critic
  (preset ``ff``) on ``3s5z`` and ``2s3z``;
* ``qmix_smax``: QMIX on ``3s5z`` (`experiments.configs.qlearning`, JaxMARL's
  ``ql_rnn_smax.yaml`` settings and 10M-step budget); its target is JaxMARL's own QMIX
  at the same budget, measured beside it, so the record holds no fixed target;
* ``mappo_27m_vs_30m`` and ``mappo_27m_vs_30m_mava`` (not run by default): recurrent
  MAPPO on ``27m_vs_30m`` with JaxMARL's and with Mava's settings, 20M env steps, target
  win rate 0.7.

Each run is one compiled program (``jax.vmap`` over ``num_seeds`` seeds, ``C``
iterations as one scan; the seeds' initial states are built one by one and stacked)
called ``K / C`` times, timed from the start, compile included;
``budget_s`` can stop a run early (the record says how far it got). The win rate of
iterations ``a..b`` is the fraction of the episodes that ended in them that were won
(the trainers' ``win_rate`` weighted by ``episodes_done``); the final win rate and
return, per seed, are those of the last ``_WINDOW`` iterations; ``greedy_win_rates``, per
seed, that of its final policy's deterministic episodes (after the timed run). The curve
has points at the ends of calls (at most ``_CURVE_POINTS``, evenly spaced), each the
seeds' mean over the ``_WINDOW`` iterations before it, at its measured wall time. Time
to target: the first iteration at which that windowed mean reaches the target (its wall
time interpolated within its call).
"""

from __future__ import annotations

import json
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import algorithms
import jaxdrive
from experiments.benchmarks.qlearning import QLEARNING_RUNS, qlearning_records
from experiments.benchmarks.training import load_config
from experiments.policy_runs import evaluate_policy

__all__ = [
    "DEFAULT_MARL_RUNS",
    "MARL_RUNS",
    "SMAX_RUNS",
    "marl_learning_records",
    "smax_records",
    "smax_run",
    "windowed_rate",
]

#: ``(name, config file, preset, target win rate or None)`` of every run.
SMAX_RUNS = (
    ("mappo_smax", "smax", "3s5z", 0.9),
    ("mappo_ff_smax", "smax", "3s5z,ff", 0.9),
    ("mappo_ff_2s3z", "smax", "2s3z,ff", 0.9),
    ("qmix_smax", "qlearning", "qmix_smax", None),
    ("mappo_27m_vs_30m", "smax", "27m_vs_30m", 0.7),
    ("mappo_27m_vs_30m_mava", "smax", "27m_vs_30m,mava", 0.7),
)
#: The runs of the suite when none are named.
DEFAULT_SMAX_RUNS = ("mappo_smax", "mappo_ff_smax", "mappo_ff_2s3z", "qmix_smax")
#: Every run of ``--suite=marl_learning``: the Q-learning rows, then the SMAX rows.
MARL_RUNS = tuple(r[0] for r in QLEARNING_RUNS) + tuple(r[0] for r in SMAX_RUNS)
DEFAULT_MARL_RUNS = tuple(r[0] for r in QLEARNING_RUNS) + DEFAULT_SMAX_RUNS
_CURVE_POINTS = 20
_WINDOW = 5
_EVAL_EPISODES = 512  # greedy test episodes per seed (JaxMARL's TEST_NUM_ENVS)


def windowed_rate(value: np.ndarray, done: np.ndarray, window: int) -> np.ndarray:
    """``[S, K]``: at iteration ``k`` the mean of ``value`` (a per-iteration mean over
    the episodes that ended in it) over the episodes that ended in iterations
    ``k - window + 1 .. k`` (weights ``done [S, K]``, their counts); NaN where none did."""
    done = np.asarray(done, np.float64)
    v = np.nan_to_num(np.asarray(value, np.float64)) * done

    def in_window(x: np.ndarray) -> np.ndarray:  # sums over the last `window` iterations
        c = np.cumsum(x, -1)
        return c - np.concatenate([np.zeros_like(c[:, :window]), c[:, :-window]], -1)

    num, den = in_window(v), in_window(done)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.maximum(den, 1e-12), np.nan)


def _json_float(x: Any) -> float | None:
    """``x`` as a float rounded to 4 digits, ``None`` for NaN (no episode yet)."""
    return None if not np.isfinite(x) else round(float(x), 4)


def _seed_mean(x: np.ndarray) -> float:
    """The mean over seeds of ``x [S]`` ignoring NaN (NaN when every seed is NaN)."""
    return float(np.nanmean(x)) if np.isfinite(x).any() else float("nan")


def _core(config: Any) -> str:
    """The first policy's core: ``mlp``, ``gru`` or ``lstm`` (Q-learning: ``gru`` where
    its agents have a GRU)."""
    p = config.policies[next(iter(config.policies))]
    if "core" in p:
        return str(p.core)
    return "gru" if p.get("gru_size", 0) else "mlp"


def _chunk_size(num_iterations: int) -> int:
    """``C``: the largest divisor of ``K = num_iterations`` not above ``K / _CURVE_POINTS``
    (rounded up), so the run is ``K / C`` calls of one compiled ``C``-iteration chunk."""
    cap = max(-(-num_iterations // _CURVE_POINTS), 1)
    return max(d for d in range(1, cap + 1) if num_iterations % d == 0)


def _curve_iterations(num_calls: int, C: int) -> list[int]:
    """The iterations of the curve: the ends of ``num_calls`` calls of ``C`` iterations,
    at most ``_CURVE_POINTS`` of them, evenly spaced, the last included."""
    n = min(num_calls, _CURVE_POINTS)
    return [C * round(num_calls * (i + 1) / n) for i in range(n)]


def smax_run(
    name: str,
    config: Any,
    num_seeds: int,
    target: float | None,
    budget_s: float = 0.0,
    eval_episodes: int = _EVAL_EPISODES,
) -> dict[str, Any]:
    """Trains ``config`` on ``num_seeds`` vmapped seeds; the record of the module
    docstring. The iterations run as calls of one compiled chunk (`_chunk_size`); with
    ``budget_s > 0`` no chunk starts that would end (at the last chunk's pace) after
    ``budget_s`` seconds from the start, compile included (``completed`` says whether
    every iteration ran). After training (untimed), each seed's final policy plays
    ``eval_episodes`` deterministic (greedy) episodes (`evaluate_policy`):
    ``greedy_win_rates`` (JaxMARL's test metric; ``eval_episodes=0``: none)."""
    env, params = jaxdrive.make(config.env_name, **dict(config.env_kwargs))
    trainer = algorithms.make_train(config, env, params)
    K, per_iter = trainer.num_iterations, trainer.env_steps_per_iteration
    C = _chunk_size(K)
    keys = jax.random.split(jax.random.PRNGKey(int(config.seed)), num_seeds)
    t0 = time.perf_counter()
    init = jax.jit(trainer.init)  # per seed, then stacked (seeds' states, axis 0)
    rs = jax.tree.map(lambda *x: jnp.stack(x), *[init(k) for k in keys])
    step = jax.jit(jax.vmap(lambda r: trainer.chunk(r, C)), donate_argnums=0)
    step = step.lower(rs).compile()
    rs = jax.block_until_ready(rs)
    compile_s = time.perf_counter() - t0  # init (compile and run) and the chunk's compile
    parts, ends = [], [compile_s]  # per chunk: metrics {name: [S, C]}; wall time at its end
    while len(parts) * C < K:
        rs, m = step(rs)
        parts.append(jax.device_get(m))
        ends.append(time.perf_counter() - t0)
        if budget_s > 0 and 2 * ends[-1] - ends[-2] > budget_s:
            break
    greedy = []
    for i in range(num_seeds if eval_episodes > 0 else 0):
        seed_params = trainer.get_params(jax.tree.map(lambda x, i=i: x[i], rs))
        res = evaluate_policy(
            env, params, trainer, seed_params, jax.random.PRNGKey(1000 + i),
            episodes=eval_episodes,
        )  # fmt: skip
        greedy.append(_json_float(res.get("win_rate", float("nan"))))
    m = {k: np.concatenate([p[k] for p in parts], axis=1) for k in parts[0]}
    done = np.asarray(m["episodes_done"])  # [S, k_done]
    win = windowed_rate(m["win_rate"], done, _WINDOW)  # [S, k_done]
    ret = windowed_rate(m[f"episode_return/{env.groups[0]}"], done, _WINDOW)
    k_done = len(parts) * C
    train_s = ends[-1] - compile_s

    def at(k: int) -> dict[str, Any]:  # after iteration k (1-based)
        j = (k - 1) // C  # its chunk; the chunk's iterations take equal time
        wall = ends[j] + (ends[j + 1] - ends[j]) * (k - j * C) / C
        return {
            "env_steps": k * per_iter,
            "wall_s": round(wall, 2),
            "win_rate": _json_float(_seed_mean(win[:, k - 1])),
            "return": _json_float(_seed_mean(ret[:, k - 1])),
        }

    ttt = None
    if target is not None:
        with np.errstate(invalid="ignore"):
            hit = np.flatnonzero(np.nan_to_num(np.nanmean(win, 0), nan=-1.0) >= target)
        ttt = at(int(hit[0]) + 1) if hit.size else None
    final_win = win[:, -1]
    return {
        "bench": "marl_learning",
        "name": name,
        "env": config.env_name,
        "algorithm": config.algorithm,
        "core": _core(config),
        "num_seeds": num_seeds,
        "num_envs": int(config.num_envs),
        "num_steps": int(config.num_steps),
        "total_env_steps": K * per_iter,
        "env_steps_done": k_done * per_iter,
        "completed": k_done == K,
        "compile_s": round(compile_s, 2),
        "train_s": round(train_s, 2),
        "wall_s_incl_compile": round(ends[-1], 2),
        "env_steps_per_s": round(k_done * per_iter * num_seeds / max(train_s, 1e-9)),
        "episodes": int(done.sum()),
        "final_win_rates": [_json_float(x) for x in final_win],
        "final_win_rate": _json_float(_seed_mean(final_win)),
        "final_returns": [_json_float(x) for x in ret[:, -1]],
        "eval_episodes": eval_episodes,
        "greedy_win_rates": greedy,
        "target_win_rate": target,
        "reached": None if target is None else ttt is not None,
        "time_to_target": ttt,
        "curve": [at(k) for k in _curve_iterations(k_done // C, C)],
    }


def smax_records(
    names: tuple[str, ...],
    num_seeds: int,
    env_steps: int = 0,
    tiny: bool = False,
    budget_s: float = 0.0,
    info: dict[str, Any] | None = None,
    sink: Any = None,
) -> list[dict[str, Any]]:
    """The records of the `SMAX_RUNS` in ``names``, printed as they finish;
    ``env_steps > 0`` replaces every run's budget, ``tiny`` applies each config's
    ``tiny`` preset (tests and quick CPU runs), ``budget_s > 0`` caps each run's wall
    time (`smax_run`); ``info`` and ``sink`` as in `qlearning_records`."""
    records = []
    for name, cfg, preset, target in SMAX_RUNS:
        if name not in names:
            continue
        config = load_config(cfg, f"{preset},tiny" if tiny else preset)
        if env_steps > 0:
            config.total_env_steps = int(env_steps)
        rec = smax_run(name, config, num_seeds, target, budget_s, 8 if tiny else _EVAL_EPISODES)
        print(
            f"marl_learning {name:<16} win rate {rec['final_win_rates']} "
            f"(greedy {rec['greedy_win_rates']}) "
            f"(target {target}, reached at {rec['time_to_target']}) in "
            f"{rec['wall_s_incl_compile']:.1f} s (compile {rec['compile_s']:.1f} s), "
            f"{rec['total_env_steps']:,} env steps × {num_seeds} seeds",
            flush=True,
        )
        rec.update(info or {})
        print(f"marl_learning_json {json.dumps(rec)}", flush=True)
        records.append(rec)
        if sink is not None:
            sink.add(rec)
    return records


def marl_learning_records(
    runs: tuple[str, ...],
    num_seeds: int,
    spread_env_steps: int,
    smax_seeds: int,
    smax_env_steps: int = 0,
    tiny: bool = False,
    smax_budget_s: float = 0.0,
    sink: Any = None,
) -> list[dict[str, Any]]:
    """``--suite=marl_learning``: the Q-learning rows (`qlearning_records`, PQN CartPole
    on ``num_seeds`` seeds, the MPE runs for ``spread_env_steps``) and the SMAX rows
    (`smax_records`, ``smax_seeds`` seeds) named in ``runs``; an unknown name raises
    ``ValueError`` naming it and the known ones; ``tiny`` and ``smax_budget_s`` (each
    SMAX run's wall-time cap) as in `smax_records`; every record carries the device
    (`experiments.benchmarks.timing.device_info`) and goes to ``sink.add`` when finished."""
    from experiments.benchmarks.timing import device_info

    unknown = [r for r in runs if r not in MARL_RUNS]
    if unknown:
        raise ValueError(f"--marl_runs: unknown run(s) {unknown}; known: {list(MARL_RUNS)}")
    q_names = tuple(r[0] for r in QLEARNING_RUNS if r[0] in runs)
    info = device_info()
    records = qlearning_records(num_seeds, spread_env_steps, q_names, info, sink) if q_names else []
    return records + smax_records(
        tuple(runs), smax_seeds, smax_env_steps, tiny, smax_budget_s, info, sink
    )
