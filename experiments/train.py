"""Trains a config into a run folder.

    python -m experiments.train --config=experiments/configs/tag_continuous.py \\
        --config.num_envs=1000 --workdir=runs/tag

Flags: ``--config`` (an ml_collections config file, ``path[:preset]``, with
``--config.<key>=value`` overrides), ``--workdir`` (default
``runs/<env_name>-<timestamp>``), ``--seed`` (overrides ``config.seed``), ``--resume``
(default true: continue from the workdir's newest checkpoint that verifies),
``--progress`` (progress bar), ``--allow_config_change`` (resume although the config
differs from the run's ``config.json``), ``--animation`` (write ``animation.gif`` where
the env has a renderer; default ``config.run.animate``, else true).

Scale-out flags: ``--num_devices`` (overrides ``config.num_devices``: shard the env batch
over that many devices; ``0`` = all), ``--coordinator_address``/``--num_processes``/
``--process_id`` (multi-host: ``jax.distributed.initialize``, also read from
``JAX_COORDINATOR_ADDRESS``/``JAX_NUM_PROCESSES``/``JAX_PROCESS_ID``; every host runs the
same command, only process 0 writes logs), ``--coordinator_timeout`` (seconds), and
``--autoscale`` (pick the largest ``num_envs`` whose compiled chunk fits the device
memory, `jaxdrive.autoscale`; ``--autoscale_budget_mib`` sets the budget on a CPU).

Compilation: ``--compilation_cache`` (default true) keeps compiled programs in JAX's
persistent compilation cache, so the same config started again (a resume, a new seed,
another run folder) loads its programs instead of compiling them;
``--compilation_cache_dir`` chooses the folder (default ``$JAX_COMPILATION_CACHE_DIR``,
else ``$JAXDRIVE_CACHE_DIR``, else ``$XDG_CACHE_HOME/jaxdrive/xla`` or
``~/.cache/jaxdrive/xla``); a folder that cannot be written is a one-line warning and a
run without the cache (`experiments.common.setup_compilation_cache`). With
``--program_store`` (default true) its subfolder ``programs``
keeps the init, chunk and evaluation executables under a key of the config (any seed), the
source and the installed packages (`jaxdrive.program_store`): the same config started
again loads them without tracing or lowering. The init and chunk
programs compile ahead of time, side by side; the log says how long the chunk took and
whether it came from the cache, and the first progress line comes after one iteration
(`jaxdrive.loop`). The program of the evaluation episodes and the animation (one
rollout gives both) compiles while training runs.

The run folder layout is described in `experiments.common`. Its rules:

* **Validate, then write.** The config is checked (env and trainer built) and the
  folder read (``config.json``, the checkpoint's config hash, ``--resume``) before
  anything is created or written; a refused invocation leaves no trace.
* **One process per folder.** Process 0 holds `jaxdrive.runlock.RunLock`; a second
  command on the same folder exits with status 2 naming the holder's pid and host.
* **A different config needs its own folder** (or ``--allow_config_change``); a finished
  run re-invoked says so and exits 0 without touching its files (``make train`` derives
  the folder from its arguments, so new arguments start a new run).
* **The files agree with the checkpoint** the run resumes from: see `jaxdrive.loop`.
* **Errors are one line.** Bad input and file-system failures print
  ``error: <path or flag>: <cause>`` and exit with status 2. A run whose loss or
  parameters become NaN/Inf stops with `jaxdrive.loop.TrainingDivergedError` (exit
  status 1); its last good checkpoint stays in place.
* **Ctrl-C and SIGTERM stop at a checkpoint.** The first SIGINT or SIGTERM stops
  training after the running chunk, checkpoints there, writes the summary and exits
  with status 130 or 143; the same command resumes. A second signal stops at once, as
  it would without the handler (`jaxdrive.signals.StopRequest`; single-process runs).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import jax
from absl import app, flags, logging

from experiments import common
from jaxdrive.checkpoint import Checkpointer, config_hash, step_folders
from jaxdrive.logging import plot_curves, read_metrics
from jaxdrive.loop import TrainingDivergedError, chunk_size, program_material, train_loop
from jaxdrive.program_store import ProgramStore
from jaxdrive.runfolder import CHECKPOINT_DIR, plain_config, resume_point
from jaxdrive.runlock import RunLock
from jaxdrive.signals import StopRequest, run_stoppable

__all__ = ["apply_scaling", "main", "run"]


def _check_workdir(
    config: Any, workdir: str, chash: str | None, total: int, *, resume: bool, allow_change: bool
) -> tuple[list[str], bool]:
    """Reads ``workdir`` (nothing is written) and refuses what must not run: a file,
    a run of another config (by ``config.json`` and by the checkpoint's config hash,
    unless ``allow_change``), checkpoints without ``resume``, a checkpoint past the end.
    Returns the differences from the run's ``config.json`` (allowed ones) and whether
    the newest checkpoint is the run's last iteration."""
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        raise ValueError(f"{workdir}: --workdir is a file, not a run folder")
    path = os.path.join(workdir, common.CONFIG_FILE)
    diffs: list[str] = []
    if os.path.exists(path):  # a damaged file is named, even with nothing to resume
        saved = common.load_config(path)
        if step_folders(os.path.join(workdir, CHECKPOINT_DIR)):
            diffs = common.config_diff(saved, config)
    if diffs and not allow_change:
        shown = "\n  ".join(diffs[:20]) + ("\n  ..." if len(diffs) > 20 else "")
        raise ValueError(
            f"--workdir {workdir} holds a run with a different config:\n  {shown}\n"
            "use a fresh --workdir for the new config, or pass --allow_config_change "
            "to resume this run with it"
        )
    point = resume_point(workdir, chash, total, resume=resume, check_config=not allow_change)
    finished = point is not None and int(point.get("iteration", -1)) == total
    if finished:  # only if that checkpoint verifies (else the loop falls back past it)
        try:
            with Checkpointer(os.path.join(workdir, CHECKPOINT_DIR)) as ckpt:
                ckpt.verify(int(point.get("step", total)))
        except Exception:
            finished = False
    return diffs, finished


def _announce_rounding(config: Any, trainer: Any) -> None:
    """Says once when ``total_env_steps`` is not a whole number of iterations."""
    per_iter = int(config["num_envs"]) * int(config["num_steps"])
    total = int(config["total_env_steps"])
    if total % per_iter and jax.process_index() == 0:
        print(
            f"note: total_env_steps={total:,} is not a multiple of num_envs*num_steps="
            f"{per_iter:,}: training {trainer.num_iterations} iterations = "
            f"{trainer.num_iterations * per_iter:,} env steps",
            file=sys.stderr,
            flush=True,
        )


def run(
    config: Any,
    workdir: str | None = None,
    *,
    resume: bool = True,
    progress: bool = True,
    allow_config_change: bool = False,
    animation: bool | None = None,
    program_store: str | os.PathLike | None = None,
    stop: StopRequest | None = None,
) -> dict[str, Any]:
    """Trains ``config`` into ``workdir``; returns the summary written to summary.json.
    With ``stop`` (a `jaxdrive.signals.StopRequest`), a requested stop ends training
    after the running chunk, with a checkpoint, and no animation (the summary's
    ``stopped_by`` names the signal).
    With ``program_store`` (a folder), the init, chunk and evaluation programs of a
    config run before are loaded from it instead of being built (`jaxdrive.program_store`).

    The config is validated (the env and trainer are built) and the run folder
    checked before anything is written or created; process 0 then holds the folder's
    `jaxdrive.runlock.RunLock`. A finished run says so and returns its summary
    (``"finished": True``) without touching the folder's files.

    Raises ``ValueError`` for a bad config or a workdir holding another run,
    ``OSError`` for files that cannot be written, `jaxdrive.runlock.RunLockedError`
    when another process uses the workdir and `TrainingDivergedError` when training
    diverges.
    """
    t0 = time.perf_counter()
    common.quiet_orbax()
    common.check_config(config)
    env, env_params, trainer = common.build(config)
    common.run_settings(config)  # checked before the folder is made
    workdir = workdir or common.default_workdir(config)
    primary = jax.process_index() == 0
    chash = config_hash(plain_config(trainer.config))  # as train_loop computes it
    total = trainer.num_iterations
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        raise ValueError(f"{workdir}: --workdir is a file, not a run folder")
    if primary and not os.path.isdir(workdir):
        os.makedirs(workdir, exist_ok=True)  # new: nothing to check (a racing twin: lock)
    with RunLock(workdir, enabled=primary):
        diffs, finished = _check_workdir(
            config, workdir, chash, total, resume=resume, allow_change=allow_config_change
        )
        if finished:  # its last checkpoint verifies: nothing to compile, nothing to write
            if primary:
                print(
                    f"{workdir}: this run is finished ({total}/{total} iterations); nothing "
                    "to do (its files are unchanged). Evaluate it with `python -m "
                    f"experiments.evaluate --workdir={workdir}`, or pass another --workdir "
                    "for a new run.",
                    flush=True,
                )
            return {"workdir": os.path.abspath(workdir), "finished": True, "iterations": total}
        _announce_rounding(config, trainer)
        with common.run_config_written(config, workdir, primary=primary, diffs=diffs):
            return _train(
                config, workdir, env, env_params, trainer, t0,
                progress=progress, allow_config_change=allow_config_change, animation=animation,
                program_store=program_store, stop=stop,
            )  # fmt: skip


def _train(
    config, workdir, env, env_params, trainer, t0, *, progress, allow_config_change, animation,
    program_store, stop,
) -> dict[str, Any]:  # fmt: skip
    """`run` after the checks: the training loop, then plots, animation and summary."""
    primary = jax.process_index() == 0
    logging.info("run folder %s; devices %s", workdir, common.describe_devices())
    rs = common.run_settings(config)
    ipc = chunk_size(trainer.num_iterations, int(rs["iterations_per_chunk"]))  # the loop's
    logging.info(
        "%s on %s: %d iterations of %d env steps, chunks of %d",
        config["algorithm"], config["env_name"], trainer.num_iterations,
        trainer.env_steps_per_iteration, ipc,
    )  # fmt: skip

    if animation is None:
        animation = rs["animate"] if rs["animate"] is not None else True
    can_act = trainer.get_params is not None and trainer.act is not None
    animate = bool(animation) and can_act and common.has_renderer(env)  # GIF: process 0
    gif_path = os.path.join(workdir, "animation.gif")
    anim_steps = int(rs["animation_steps"])
    eval_every = int(rs["eval_every_chunks"] or 0) if can_act else 0
    # one program plays the evaluation episodes and records the animation's states
    eval_kw = dict(
        episodes=int(rs["eval_num_envs"]), deterministic=bool(rs["eval_deterministic"]),
        animation_steps=anim_steps if animate else 0,
    )  # fmt: skip
    anim_kw = dict(episodes=1, deterministic=True, max_steps=anim_steps)  # render_rollout's
    gif: list[str | None] = []

    store = ProgramStore(program_store) if program_store else None

    def compile_ahead(abstract_state: Any) -> None:
        """Starts compiling the evaluation / animation program while training compiles."""
        if not (eval_every or animate):
            return
        params = jax.eval_shape(trainer.get_params, abstract_state)
        kw = dict(eval_kw) if eval_every else {**anim_kw, "animation_steps": anim_steps}
        if store is not None:
            kw.update(program_store=store, material=program_material(trainer))
        common.compile_evaluation(env, env_params, trainer, params, **kw)

    on_chunk = None
    eval_path = os.path.join(workdir, "eval.jsonl")
    if eval_every > 0:
        trimmed = []

        def on_chunk(info):  # periodic evaluation episodes -> eval.jsonl
            if not trimmed and primary:  # records past the restored checkpoint go
                trimmed.append(common.trim_jsonl(eval_path, info.start_iteration))
            last = info.end_iteration == trainer.num_iterations
            end = info.end_iteration
            if (end % ipc or (end // ipc) % eval_every) and not last:
                return False
            res = common.evaluate_policy(
                env, env_params, trainer, trainer.get_params(info.runner_state),
                jax.random.PRNGKey(end),
                animation=gif_path if last and animate and primary else None,
                **eval_kw,
            )  # fmt: skip
            if "animation" in res:
                gif.append(res.pop("animation"))
            res = {"iteration": end, "env_steps": int(info.env_steps[-1]), **res}
            if primary:
                with open(eval_path, "a") as f:
                    f.write(json.dumps(res) + "\n")
            logging.info("eval at iteration %d: %s", end, res["returns"])
            return False

    def chunk_done(info):  # evaluation; a requested stop ends training here
        stopping = stop is not None and stop.requested
        return bool(on_chunk(info) if on_chunk else False) or stopping

    state, hist = train_loop(
        trainer,
        int(config["seed"]),
        workdir,
        iterations_per_chunk=ipc,
        checkpoint_every_chunks=int(rs["checkpoint_every_chunks"]),
        keep_checkpoints=int(rs["keep_checkpoints"]),
        progress=progress,
        on_chunk=chunk_done,
        check_config=not allow_config_change,
        metadata={"env_name": config["env_name"], "algorithm": config["algorithm"]},
        compile_ahead=compile_ahead,
        program_store=store,
    )
    plots = plot_curves(workdir) if primary else []
    stopped = stop is not None and stop.requested
    if animate and primary and not gif and not stopped:  # no evaluation recorded it
        params, key = trainer.get_params(state), jax.random.PRNGKey(1)
        kw = dict(num_steps=anim_steps, deterministic=True)
        gif.append(common.render_rollout(env, env_params, trainer, params, key, gif_path, **kw))
    gif = gif[0] if gif else None

    records = read_metrics(workdir) if primary else []
    # the last iteration in which an episode ended (the others have no returns)
    ended = [r for r in records if any(k.startswith("episode_return") for k in r["metrics"])]
    last = ended[-1]["metrics"] if ended else {}
    final_returns = {k: v for k, v in last.items() if k.startswith("episode_return")}
    wall = time.perf_counter() - t0
    summary = {
        "workdir": os.path.abspath(workdir),
        "devices": common.describe_devices(),
        "iterations": int(records[-1]["iteration"]) if records else hist.start_iteration,
        "num_iterations": trainer.num_iterations,
        "env_steps": int(records[-1]["env_steps"]) if records else 0,
        "resumed_from": hist.resumed_from,
        "session_env_steps": hist.env_steps_done,
        "finished": len(records) > 0 and records[-1]["iteration"] == trainer.num_iterations,
        "wall_seconds": wall,
        "compile_seconds": hist.compile_seconds,
        "train_seconds": hist.train_seconds,
        "env_steps_per_second": hist.env_steps_done / wall if wall > 0 else None,
        "env_steps_per_second_excl_compile": hist.env_steps_per_second(),
        "final_returns": final_returns,
        "plots": plots,
        "animation": gif,
        "stopped_by": None,
    }
    if stopped and not summary["finished"]:  # a stop asked for after the last chunk: none
        summary["stopped_by"] = stop.name
    if primary:
        common.write_json(os.path.join(workdir, "summary.json"), summary)
        _print_summary(summary)
    return summary


def apply_scaling(
    config: Any, num_devices: Any = None, autoscale: bool = False, budget_mib: float | None = None
) -> Any:
    """``config`` with ``num_devices`` set (``None``: unchanged) and, with ``autoscale``,
    ``num_envs`` chosen by `jaxdrive.autoscale.autoscale` (its table is logged) within
    ``budget_mib`` MiB (``None``: the device's budget). Raises ``ValueError`` naming the
    flag for a bad ``num_devices``, a ``budget_mib`` that is not positive, or one given
    without ``autoscale``."""
    if num_devices is not None:
        value = str(num_devices).strip()
        if value.lower() != "all":
            try:
                value = int(value)
            except ValueError:
                raise ValueError(
                    f"--num_devices={num_devices}: expected an integer (0: every device) or 'all'"
                ) from None
        if hasattr(config, "unlocked"):  # a locked ConfigDict gains the key
            with config.unlocked():
                config["num_devices"] = value
        else:
            config["num_devices"] = value
    if budget_mib is not None and not autoscale:
        raise ValueError(f"--autoscale_budget_mib={budget_mib}: only used with --autoscale")
    if autoscale:
        from jaxdrive.autoscale import autoscale as run_autoscale

        if budget_mib is not None and not budget_mib > 0:
            raise ValueError(f"--autoscale_budget_mib={budget_mib}: expected a positive number")
        budget = None if budget_mib is None else int(budget_mib * 2**20)
        res = run_autoscale(
            config,
            make_trainer=lambda c: common.build(c)[2],
            memory_budget_bytes=budget,
            log=logging.info,
        )
        if jax.process_index() == 0:
            print(res.table(), flush=True)
        config = res.config
    return config


def _print_summary(s: dict[str, Any]) -> None:
    def fmt(x):
        return "-" if x is None or x != x else f"{x:,.0f}"

    lines = [
        f"run folder   {s['workdir']}",
        f"devices      {s['devices']}",
        f"iterations   {s['iterations']}/{s['num_iterations']}  env steps {s['env_steps']:,}"
        + (f"  (resumed from {s['resumed_from']})" if s["resumed_from"] is not None else ""),
        f"wall time    {s['wall_seconds']:.1f} s (compile {s['compile_seconds']:.1f} s, "
        f"train {s['train_seconds']:.1f} s)",
        f"throughput   {fmt(s['env_steps_per_second'])} env steps/s overall, "
        f"{fmt(s['env_steps_per_second_excl_compile'])} excluding compile",
        "final return " + (
            "  ".join(f"{k.split('/', 1)[-1]}={v:.4g}" for k, v in s["final_returns"].items()
                      if v is not None) or "-"
        ),
    ]  # fmt: skip
    print("\n".join(lines), flush=True)


def _define_flags() -> None:
    from ml_collections import config_flags

    config_flags.DEFINE_config_file(
        "config", None, "config file, e.g. experiments/configs/cartpole.py[:preset]",
        lock_config=True,
    )  # fmt: skip
    flags.DEFINE_string("workdir", None, "run folder (default runs/<env_name>-<timestamp>)")
    flags.DEFINE_integer("seed", None, "overrides config.seed")
    flags.DEFINE_bool("resume", True, "continue from the workdir's latest checkpoint")
    flags.DEFINE_bool("progress", True, "show a progress bar")
    flags.DEFINE_bool(
        "allow_config_change", False, "resume even if the config differs from config.json"
    )
    flags.DEFINE_bool(
        "animation", None, "write animation.gif (default: config.run.animate, else true)"
    )
    flags.DEFINE_string(
        "num_devices", None, "devices to shard the env batch over (0 or 'all': every device)"
    )
    flags.DEFINE_string("coordinator_address", None, "multi-host: host:port of process 0")
    flags.DEFINE_integer("num_processes", None, "multi-host: number of processes")
    flags.DEFINE_integer("process_id", None, "multi-host: this process's index")
    flags.DEFINE_integer("coordinator_timeout", 300, "multi-host: seconds to wait for peers")
    flags.DEFINE_bool("autoscale", False, "choose the largest num_envs that fits in memory")
    flags.DEFINE_float(
        "autoscale_budget_mib", None, "with --autoscale: memory budget (default: 0.9 of the device)"
    )
    common.define_compilation_cache_flags()
    flags.DEFINE_bool(
        "program_store", True,
        "keep the init, chunk and evaluation executables in the cache folder's programs/ "
        "and load them when the same config starts again (needs --compilation_cache)",
    )  # fmt: skip
    flags.mark_flag_as_required("config")


def main(argv: list[str]) -> None:
    """The absl entry point (flags defined by `_define_flags`)."""
    common.refuse_extra_args(argv)
    FLAGS = flags.FLAGS
    config = FLAGS.config
    if FLAGS.seed is not None:
        config.seed = FLAGS.seed
    cache = common.compilation_cache_from_flags()  # before anything is compiled

    def go() -> None:
        from jaxdrive import distributed

        distributed.initialize(
            FLAGS.coordinator_address,
            FLAGS.num_processes,
            FLAGS.process_id,
            timeout_s=FLAGS.coordinator_timeout,
        )
        scaled = apply_scaling(
            config, FLAGS.num_devices, FLAGS.autoscale, FLAGS.autoscale_budget_mib
        )
        store = os.path.join(cache, "programs") if cache and FLAGS.program_store else None
        run_stoppable(
            run,
            scaled,
            FLAGS.workdir,
            resume=FLAGS.resume,
            progress=FLAGS.progress,
            allow_config_change=FLAGS.allow_config_change,
            animation=FLAGS.animation,
            program_store=store,
        )

    try:
        common.exit_on_error(go)
    except TrainingDivergedError as e:
        logging.error("training diverged: %s (the last good checkpoint is kept)", e)
        print(f"training diverged: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    _define_flags()
    app.run(main, flags_parser=common.parse_flags)
