"""Trains a self-play league (`algorithms.population.make_league`) into a run folder.

    python -m experiments.league --config=experiments/configs/tag_continuous.py:advnorm \\
        --workdir=runs/tag-league --league_sampling=prioritized

The config is an on-policy config with two opposed policies (``--league_sides``,
default ``tagger,runner``). The sides train in turns of ``--turn_iterations``
iterations, each against a snapshot drawn from the other side's pool
(``--league_pool`` entries) by ``--league_sampling`` (``latest``, ``uniform`` or
``prioritized``), until ``config.total_env_steps`` are spent (at least two turns). The
league settings are written into the saved config (``config.league``), so a resume
with other settings needs ``--allow_config_change``. Run folder::

    config.json        the config, with its league section
    league.jsonl       one record per turn: the side that learnt, the opponent's pool
                       entry, env steps, the learning side's mean episode return per
                       group over the turn, the opponent entry's running score
    checkpoints/<t>/   the league state (both sides, both pools) after turn t
    held_out.json      each side's final policy against held-out opponents (the
                       opposing pool's oldest entry, a random initialisation, the
                       opponent's latest state): deterministic episode returns by group
    summary.json       timing and the number of turns

A run resumes from its newest checkpoint that verifies and continues exactly as the
uninterrupted run would (``--resume``, default true). Bad input (config, flags, a
folder of another run) is one ``error: ...`` line and exit status 2, before anything
is written. The first SIGINT (Ctrl-C) or SIGTERM stops the run after the running turn
with a checkpoint (exit status 130 or 143; the same command resumes). Flags also:
``--seed``, ``--eval_episodes`` and the compilation-cache
flags of `experiments.train`.
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
from jaxdrive.checkpoint import Checkpointer, placed
from jaxdrive.runfolder import CHECKPOINT_DIR
from jaxdrive.runlock import RunLock
from jaxdrive.signals import StopRequest, run_stoppable

__all__ = ["LEAGUE_FILE", "main", "run"]

LEAGUE_FILE = "league.jsonl"
HELD_OUT_FILE = "held_out.json"


def _with_league(config: Any, sides: tuple[str, str], pool: int, sampling: str, turn: int):
    """``config`` with its ``league`` section set (a copy)."""
    import ml_collections

    c = ml_collections.ConfigDict(common.config_to_dict(config))
    c.league = ml_collections.ConfigDict(
        {"sides": list(sides), "pool_size": pool, "sampling": sampling, "turn_iterations": turn}
    )
    return c


def _build(config: Any) -> Any:
    """The `League` of ``config`` (``ValueError`` for a bad one: `make_league` checks the
    sides, pool size and sampling)."""
    import jaxdrive
    from algorithms.population import make_league

    common.check_config(config)
    lg = config.league
    k = lg.turn_iterations
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"config.league.turn_iterations must be an integer >= 1, got {k!r}")
    env, env_params = jaxdrive.make(config.env_name, **dict(config.get("env_kwargs") or {}))
    base = {k: v for k, v in common.config_to_dict(config).items() if k != "league"}
    return make_league(
        base,
        env,
        env_params,
        sides=tuple(lg.sides),
        pool_size=lg.pool_size,
        sampling=lg.sampling,
    )


def _turn_record(league: Any, side: str, state: Any, metrics: dict, opponent: int) -> dict:
    """The ``league.jsonl`` record of the turn that produced ``state``."""
    m = jax.device_get(metrics)
    ended = np.asarray(m["episodes_done"]) > 0
    rec: dict[str, Any] = {"turn": int(state.turn), "side": side, "opponent_entry": opponent}
    for g in league.groups[side]:
        r = np.asarray(m[f"episode_return/{g}"])
        rec[f"return/{g}"] = float(r[ended].mean()) if ended.any() else None
    score = float(jax.device_get(state.pools[league.other(side)].score)[opponent])
    rec["opponent_score"] = score if np.isfinite(score) else None
    return rec


def run(
    config: Any,
    workdir: str | None = None,
    *,
    resume: bool = True,
    allow_config_change: bool = False,
    eval_episodes: int = 16,
    stop: StopRequest | None = None,
) -> dict[str, Any]:
    """Trains the league of ``config`` (with its ``league`` section) into ``workdir``;
    returns the summary. ``ValueError`` for a bad config or a folder of another run
    (before writing anything), ``OSError`` for files that cannot be written. With
    ``stop`` (a `jaxdrive.signals.StopRequest`), a requested stop ends training after
    the running turn, with a checkpoint and without the held-out evaluation."""
    from experiments.population import evaluate_league

    t0 = time.perf_counter()
    common.quiet_orbax()
    if "league" not in config:
        raise ValueError("config has no league section (experiments.league sets it from flags)")
    league = _build(config)
    workdir = workdir or common.default_workdir(config).replace(
        config["env_name"], f"{config['env_name']}-league"
    )
    common.check_run_folder(config, workdir, resume, allow_config_change)
    os.makedirs(workdir, exist_ok=True)
    with RunLock(workdir), common.run_config_written(config, workdir):
        k = int(config.league.turn_iterations)
        trainer = league.trainers[league.sides[0]]
        per_turn = k * trainer.env_steps_per_iteration
        turns = max(2, trainer.num_iterations // k)
        rs = common.run_settings(config)
        every = int(rs["checkpoint_every_chunks"])
        state = placed(jax.jit(league.init)(jax.random.key(int(config.seed))))
        ckpt = Checkpointer(
            os.path.join(workdir, CHECKPOINT_DIR), max_to_keep=int(rs["keep_checkpoints"])
        )
        start = 0
        if ckpt.all_steps():
            res = ckpt.restore_newest(state)
            state, start = res.state, int(res.metadata["turn"])
            logging.info("resumed from turn %d", start)
            if start >= turns:  # its summary and held-out evaluation stay as they are
                ckpt.close()
                return common.finished_run(workdir, turns, "turns")
        path = os.path.join(workdir, LEAGUE_FILE)
        common.trim_jsonl(path, start, key="turn")
        programs = {
            s: jax.jit(lambda st, s=s: league.chunk(st, k, s)) for s in league.sides
        }  # fmt: skip
        t_train = time.perf_counter()
        done = start
        for t in range(start, turns):
            side, opponent = league.side_of(state), int(state.opponent)
            state, metrics = programs[side](state)
            rec = _turn_record(league, side, state, metrics, opponent)
            rec.update(env_steps=(t + 1) * per_turn, elapsed_s=time.perf_counter() - t_train)
            with open(path, "a") as f:
                f.write(json.dumps(rec) + "\n")
            stopping = stop is not None and stop.requested
            if (t + 1) % every == 0 or t + 1 == turns or stopping:
                ckpt.save(t + 1, state, {"turn": t + 1})
            logging.info("turn %d/%d (%s): %s", t + 1, turns, side, rec)
            done = t + 1
            if stopping:
                break
        ckpt.close()
        if done == turns:
            held = evaluate_league(league, state, jax.random.key(int(config.seed) + 1),
                                   episodes=eval_episodes)  # fmt: skip
            common.write_json(os.path.join(workdir, HELD_OUT_FILE), jax.device_get(held))
        wall = time.perf_counter() - t0
        summary = {
            "workdir": os.path.abspath(workdir),
            "devices": common.describe_devices(),
            "turns": turns,
            "turns_done": done,
            "resumed_from": start or None,
            "env_steps": turns * per_turn,
            "wall_seconds": wall,
            "league": common.config_to_dict(config.league),
            "stopped_by": stop.name if done < turns and stop is not None else None,
        }
        common.write_json(os.path.join(workdir, "summary.json"), summary)
    print(f"run folder   {summary['workdir']}\nturns        {turns}", flush=True)
    return summary


def _define_flags() -> None:
    from ml_collections import config_flags

    config_flags.DEFINE_config_file(
        "config", None, "config file, e.g. experiments/configs/tag_continuous.py:advnorm",
        lock_config=True,
    )  # fmt: skip
    common.define_run_folder_flags("runs/<env_name>-league-<timestamp>")
    flags.DEFINE_list("league_sides", ["tagger", "runner"], "the two opposed policies")
    flags.DEFINE_integer("league_pool", 8, "snapshots in each side's pool")
    flags.DEFINE_string("league_sampling", "prioritized", "latest, uniform or prioritized")
    flags.DEFINE_integer("turn_iterations", 10, "iterations of each turn")
    flags.DEFINE_integer("eval_episodes", 16, "held-out evaluation episodes per opponent")
    common.define_compilation_cache_flags()
    flags.mark_flag_as_required("config")


def main(argv: list[str]) -> None:
    """The absl entry point."""
    common.refuse_extra_args(argv)
    FLAGS = flags.FLAGS
    common.compilation_cache_from_flags()

    def go() -> None:
        config = FLAGS.config
        if FLAGS.seed is not None:
            config.seed = FLAGS.seed
        from algorithms.population.league import SAMPLING

        if FLAGS.league_sampling not in SAMPLING:
            raise ValueError(
                f"--league_sampling={FLAGS.league_sampling}: must be one of {list(SAMPLING)}"
            )
        policies = list(config.policies) if config is not None and "policies" in config else []
        sides = FLAGS.league_sides
        if len(sides) != 2 or sides[0] == sides[1] or any(s not in policies for s in sides):
            raise ValueError(
                f"--league_sides={','.join(sides)}: must name two policies of the config's "
                f"{policies}"
            )
        for name in ("league_pool", "turn_iterations", "eval_episodes"):
            if getattr(FLAGS, name) < 1:
                raise ValueError(f"--{name}={getattr(FLAGS, name)}: must be >= 1")
        config = _with_league(
            config, tuple(FLAGS.league_sides), FLAGS.league_pool, FLAGS.league_sampling,
            FLAGS.turn_iterations,
        )  # fmt: skip
        run_stoppable(
            run,
            config,
            FLAGS.workdir,
            unit="turn",
            resume=FLAGS.resume,
            allow_config_change=FLAGS.allow_config_change,
            eval_episodes=FLAGS.eval_episodes,
        )

    common.exit_on_error(go)


if __name__ == "__main__":
    _define_flags()
    app.run(main, flags_parser=common.parse_flags)
