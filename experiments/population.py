"""Trains a population (`algorithms.population`) into a run folder.

    python -m experiments.population --config=experiments/configs/population.py:cartpole \\
        --workdir=runs/pbt-cartpole

Flags: ``--config`` (``path[:preset]`` with ``--config.<key>=value`` overrides, e.g.
``--config.population.size=8``), ``--workdir`` (default ``runs/<env>-pop-<timestamp>``),
``--seed``, ``--resume`` (default true), ``--allow_config_change``, ``--num_devices``
(overrides ``config.population.num_devices``: the member axis is split over that many
devices; ``0`` = all) and the compilation-cache flags of `experiments.train`.

The host loop runs chunks of ``config.run.iterations_per_chunk`` iterations of every
member (one compiled program), updates the members' scores, runs a selection round
every ``population.pbt.interval_chunks`` chunks (PBT or tournament, one jitted
function), logs and checkpoints. Run folder::

    config.json               the config
    members/<i>/metrics.jsonl member i's metrics per iteration (and hparams/<slot>)
    members/<i>/tb/           its TensorBoard events (one TensorBoard run per member)
    population.jsonl          one record per selection round: scores, parents,
                              hyper-parameters, leaderboard scores
    leaderboard.json          the leaderboard's entries (score, env steps, member,
                              round, hyper-parameters), best first
    leaderboard.png           member and leaderboard scores over env steps
    checkpoints/<n>/          the population state after n iterations
    summary.json              the session's timing and final scores

**Resume and elasticity.** A run resumes from its newest checkpoint that verifies and
continues exactly as the uninterrupted run would. It may resume on another number of
devices (``--num_devices``; members are re-split, the numbers do not change where the
count divides ``size``). The number of members may change at a resume
(``--config.population.size=P'`` with ``--allow_config_change``): the members are ranked
by their last score, the ``min(P, P')`` best are kept in their old order, and each new
member ``j`` copies the ``(j mod P)``-th best old member (learner state, envs,
hyper-parameters) and then explores its hyper-parameters as a PBT copy does, with its
own PRNG key.

Bad input (config, flags, a folder of another run) is one ``error: ...`` line and exit
status 2, before anything is written. The first SIGINT (Ctrl-C) or SIGTERM stops the
run after the running chunk with a checkpoint (exit status 130 or 143; the same
command resumes), as in `experiments.train`.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import jax
import numpy as np
from absl import app, flags, logging

from experiments import common
from jaxdrive.checkpoint import Checkpointer, config_hash, placed
from jaxdrive.logging import MetricsLogger
from jaxdrive.loop import chunk_size
from jaxdrive.runfolder import CHECKPOINT_DIR, plain_config
from jaxdrive.runlock import RunLock
from jaxdrive.signals import StopRequest, run_stoppable

__all__ = ["build", "config_digest", "evaluate_league", "main", "run", "write_leaderboard"]

POP_FILE = "population.jsonl"
LEADERBOARD_FILE = "leaderboard.json"
#: Keys of the config that may change at a resume without --allow_config_change.
_ELASTIC = ("population.num_devices",)


def _set(config: Any, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = config
    for p in parents:
        node = node[p]
    if hasattr(config, "unlocked"):
        with config.unlocked():
            node[last] = value
    else:
        node[last] = value


def build(config: Any) -> Any:
    """The `Population` of ``config`` (``ValueError`` for a bad config)."""
    import algorithms

    common.check_config(config)
    if "population" not in config:
        raise ValueError(
            "config has no population section: use experiments/configs/population.py "
            "or add config.population (see algorithms.population.config)"
        )
    return algorithms.make_population_train(config)


def config_digest(config: Any) -> str | None:
    """The config hash a population checkpoint records (``population.num_devices``
    left out: the member axis may be re-split at a resume)."""
    d = plain_config(config)
    d = json.loads(json.dumps(d, default=str))
    d.get("population", {}).pop("num_devices", None)
    return config_hash(d)


def _restore(pop: Any, ckpt: Checkpointer, state0: Any, allow_change: bool) -> tuple[Any, int]:
    """The newest checkpoint into ``state0``'s structure and shardings (any device
    count); a checkpoint of another size is resized by the module's rule."""
    meta = ckpt.restore_metadata()
    old_p = int(meta.get("members", pop.size))
    if meta.get("config_hash") not in (None, config_digest(pop.config)) and not allow_change:
        raise ValueError(
            f"{ckpt.directory}: the checkpoint was written by another config; use a fresh "
            "--workdir or --allow_config_change"
        )
    if old_p == pop.size:
        res = ckpt.restore_newest(state0)
        return res.state, int(res.metadata["iteration"])
    from algorithms.population.resize import resize, resized_target

    target = resized_target(pop, state0, old_p)
    res = ckpt.restore_newest(target)
    logging.warning("population resized from %d to %d members at resume", old_p, pop.size)
    return resize(pop, res.state, state0), int(res.metadata["iteration"])


def write_leaderboard(pop: Any, state: Any, workdir: str) -> list[str]:
    """``leaderboard.json`` (the entries) and ``leaderboard.png`` (scores over env
    steps, from ``population.jsonl``); returns the paths written."""
    out = []
    lb = state.leaderboard
    if lb is not None:
        lb = jax.device_get(lb)
        entries = []
        for r in range(int(np.sum(lb.valid))):
            hp = {
                s.label: float(np.asarray(lb.snapshots[s.policy].hparams[s.name])[r])
                for s in pop.slots
            }
            entries.append(
                {
                    "rank": r,
                    "score": float(lb.score[r]),
                    "env_steps": int(lb.env_steps[r]),
                    "member": int(lb.member[r]),
                    "generation": int(lb.generation[r]),
                    "hparams": hp,
                }
            )
        path = os.path.join(workdir, LEADERBOARD_FILE)
        common.write_json(path, {"size": int(lb.score.shape[0]), "entries": entries})
        out.append(path)
    rounds = _read_rounds(os.path.join(workdir, POP_FILE))
    if rounds:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        x = np.asarray([r["env_steps"] for r in rounds], float)
        scores = np.asarray([[np.nan if v is None else v for v in r["scores"]] for r in rounds])
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot(x, scores, ".", color="0.6", ms=3)
        ax.plot([], [], ".", color="0.6", label="members")
        if rounds[0].get("leaderboard"):
            best = [
                max((v for v in r["leaderboard"] if v is not None), default=np.nan) for r in rounds
            ]
            ax.plot(x, best, "-", color="C3", label="leaderboard best")
        ax.plot(
            x,
            np.nanmedian(np.where(np.isnan(scores), -np.inf, scores), 1),
            "-",
            label="member median",
        )
        ax.set_xlabel("env steps per member")
        ax.set_ylabel(pop.spec.score)
        ax.legend()
        fig.tight_layout()
        path = os.path.join(workdir, "leaderboard.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        out.append(path)
    return out


def evaluate_league(
    league: Any, state: Any, key: jax.Array, *, episodes: int = 16
) -> dict[str, dict[str, Any]]:
    """Each side's live policy against its held-out opponents (the opposing pool's
    oldest entry, a random initialisation, the opponent's latest state;
    `algorithms.population.League.held_out`): ``{side: {opponent: returns by group}}``
    of `experiments.common.evaluate_policy` (deterministic, ``episodes`` episodes)."""
    import jaxdrive

    c = league.trainers[league.sides[0]].config
    env, env_params = jaxdrive.make(c["env_name"], **dict(c.get("env_kwargs") or {}))
    k_held, k_eval = jax.random.split(key)
    out: dict[str, dict[str, Any]] = {}
    for side, sets in jax.jit(league.held_out)(state, k_held).items():
        trainer = league.trainers[side]
        out[side] = {
            name: common.evaluate_policy(
                env, env_params, trainer, params, k_eval, episodes=episodes
            )["returns"]
            for name, params in sets.items()
        }
    return out


def _read_rounds(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _round_record(pop: Any, state: Any, iteration: int) -> dict[str, Any]:
    st = jax.device_get((state.scores, state.parent, pop.hparams(state.members)))
    scores, parent, hp = st

    def fl(v):
        return [None if not np.isfinite(x) else float(x) for x in np.asarray(v)]

    rec = {
        "iteration": iteration,
        "env_steps": iteration * pop.trainer.env_steps_per_iteration,
        "generation": int(state.generation),
        "scores": fl(scores),
        "parent": [int(p) for p in parent],
        "hparams": {s.label: fl(hp[:, h]) for h, s in enumerate(pop.slots)},
    }
    if state.leaderboard is not None:
        lb = jax.device_get(state.leaderboard)
        rec["leaderboard"] = fl(np.where(lb.valid, lb.score, np.nan))
    return rec


def run(
    config: Any,
    workdir: str | None = None,
    *,
    resume: bool = True,
    allow_config_change: bool = False,
    stop: StopRequest | None = None,
) -> dict[str, Any]:
    """Trains the population of ``config`` into ``workdir``; returns the summary.
    With ``stop`` (a `jaxdrive.signals.StopRequest`), a requested stop ends training
    after the running chunk, with a checkpoint (the summary's ``stopped_by``).

    Raises ``ValueError`` for a bad config or a folder of another run (before writing
    anything), ``OSError`` for files that cannot be written.
    """
    t0 = time.perf_counter()
    common.quiet_orbax()
    pop = build(config)
    workdir = workdir or common.default_workdir(config).replace(
        config["env_name"], f"{config['env_name']}-pop"
    )
    common.check_run_folder(config, workdir, resume, allow_config_change, _ELASTIC)
    os.makedirs(workdir, exist_ok=True)
    with RunLock(workdir), common.run_config_written(config, workdir):
        return _train(pop, config, workdir, t0, allow_config_change, stop)


def _train(
    pop: Any,
    config: Any,
    workdir: str,
    t0: float,
    allow_change: bool,
    stop: StopRequest | None = None,
) -> dict:
    rs = common.run_settings(config)
    total = pop.trainer.num_iterations
    k = chunk_size(total, int(rs["iterations_per_chunk"]))
    every = int(rs["checkpoint_every_chunks"])
    key = jax.random.key(int(config["seed"]))
    init = jax.jit(pop.init)
    state = placed(init(key))  # resumed or not, the programs lower alike
    start = 0
    ckpt = Checkpointer(
        os.path.join(workdir, CHECKPOINT_DIR), max_to_keep=int(rs["keep_checkpoints"])
    )
    if ckpt.all_steps():
        state, start = _restore(pop, ckpt, state, allow_change)
        logging.info("resumed from iteration %d", start)
        if start >= total:  # its summary, leaderboard and logs stay as they are
            ckpt.close()
            return common.finished_run(workdir, total, "iterations")
    loggers = [MetricsLogger(os.path.join(workdir, "members", f"{i:03d}")) for i in range(pop.size)]
    per_iter = pop.trainer.env_steps_per_iteration
    for lg in loggers:
        lg.reconcile(start, start * per_iter)
    common.trim_jsonl(os.path.join(workdir, POP_FILE), start)
    chunk = jax.jit(lambda s: _scored_chunk(pop, s, k))
    select = jax.jit(pop.select)
    compile_s, t_train = 0.0, time.perf_counter()
    it = start
    while it < total:
        n = min(k, total - it)
        tc = time.perf_counter()
        state, metrics = (chunk if n == k else jax.jit(lambda s: _scored_chunk(pop, s, n)))(state)
        hp = np.asarray(jax.device_get(pop.hparams(state.members)))  # those of the chunk
        due = ((it + n) // k) % pop.spec.interval_chunks == 0 or it + n == total
        if due:
            state = select(state)
        m = jax.device_get(metrics)
        if it == start:
            compile_s = time.perf_counter() - tc
        its = np.arange(it + 1, it + n + 1)
        for i, lg in enumerate(loggers):
            row = {name: v[i] for name, v in m.items()}
            row.update(
                {f"hparams/{s.label}": np.full(n, hp[i, h]) for h, s in enumerate(pop.slots)}
            )
            lg.log_chunk(its, its * per_iter, row, elapsed=time.perf_counter() - t_train)
        it += n
        if due:
            with open(os.path.join(workdir, POP_FILE), "a") as f:
                f.write(json.dumps(_round_record(pop, state, it)) + "\n")
        stopping = stop is not None and stop.requested
        if (it // k) % every == 0 or it == total or stopping:
            ckpt.save(it, state, _meta(pop, state, it))
        logging.info("iteration %d/%d: scores %s", it, total, np.round(np.asarray(state.scores), 2))
        if stopping:
            break
    for lg in loggers:
        lg.close()
    ckpt.close()
    plots = write_leaderboard(pop, state, workdir)
    wall = time.perf_counter() - t0
    steps = (it - start) * per_iter * pop.size
    summary = {
        "workdir": os.path.abspath(workdir),
        "devices": common.describe_devices(),
        "members": pop.size,
        "iterations": it,
        "num_iterations": total,
        "resumed_from": start or None,
        "wall_seconds": wall,
        "compile_seconds": compile_s,
        "env_steps_per_second": steps / wall if wall > 0 else None,
        "final_scores": [
            None if not np.isfinite(s) else float(s) for s in np.asarray(state.scores)
        ],
        "plots": plots,
        "stopped_by": stop.name if stop is not None and stop.requested and it < total else None,
    }
    common.write_json(os.path.join(workdir, "summary.json"), summary)
    print(
        f"run folder   {summary['workdir']}\nmembers      {pop.size} on {summary['devices']}\n"
        f"iterations   {it}/{total}\nfinal scores {summary['final_scores']}",
        flush=True,
    )
    return summary


def _scored_chunk(pop: Any, state: Any, n: int) -> tuple[Any, dict]:
    """``n`` iterations of every member, then their scores: one program."""
    state, metrics = pop.chunk(state, n)
    return pop.score(state, metrics), metrics


def _meta(pop: Any, state: Any, it: int) -> dict[str, Any]:
    return {
        "iteration": it,
        "env_steps": it * pop.trainer.env_steps_per_iteration,
        "members": pop.size,
        "generation": int(state.generation),
        "config_hash": config_digest(pop.config),
    }


def _define_flags() -> None:
    from ml_collections import config_flags

    config_flags.DEFINE_config_file(
        "config", None, "config file, e.g. experiments/configs/population.py:cartpole",
        lock_config=True,
    )  # fmt: skip
    common.define_run_folder_flags("runs/<env_name>-pop-<timestamp>")
    flags.DEFINE_string(
        "num_devices", None, "devices the members are split over (0 or 'all': every device)"
    )
    common.define_compilation_cache_flags()
    flags.mark_flag_as_required("config")


def _num_devices(value: str) -> int:
    v = value.strip().lower()
    if v in ("0", "all"):
        return len(jax.devices())
    try:
        return int(v)
    except ValueError:
        raise ValueError(
            f"--num_devices={value}: expected an integer (0: every device) or 'all'"
        ) from None


def main(argv: list[str]) -> None:
    """The absl entry point."""
    common.refuse_extra_args(argv)
    FLAGS = flags.FLAGS
    config = FLAGS.config
    if FLAGS.seed is not None:
        config.seed = FLAGS.seed
    common.compilation_cache_from_flags()

    def go() -> None:
        if FLAGS.num_devices is not None and "population" in config:
            _set(config, "population.num_devices", _num_devices(FLAGS.num_devices))
        run_stoppable(
            run,
            config,
            FLAGS.workdir,
            resume=FLAGS.resume,
            allow_config_change=FLAGS.allow_config_change,
        )

    common.exit_on_error(go)


if __name__ == "__main__":
    _define_flags()
    app.run(main, flags_parser=common.parse_flags)
