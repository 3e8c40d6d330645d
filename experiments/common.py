"""Helpers shared by the experiment scripts (`experiments.train`, `experiments.evaluate`):
run-folder config files, building env + trainer from a config, evaluation episodes on
the device, and rollout animations.

Run folder (``workdir``)::

    run.lock           the advisory lock of the process writing the folder
    config.json        the resolved config of the run
    metrics.jsonl      one record per training iteration (jaxdrive.logging)
    tb/                TensorBoard event files
    checkpoints/<n>/   orbax checkpoints after n iterations
    returns.png, losses.png   learning curves
    summary.json       the last training session's timing and final returns
    eval.json          written by experiments.evaluate
    eval.jsonl         periodic evaluations during training (run.eval_every_chunks)
    *.discarded-<k>, checkpoints.discarded/   records and damaged checkpoints moved
                       aside when a run resumed (see jaxdrive.loop)
    animation.gif      an episode of the trained policies (envs with a renderer)
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

import jax
from absl import logging

from algorithms.common.config import RUN_DEFAULTS, TOP_LEVEL_DEFAULTS, config_to_dict
from experiments.cli import error_line, exit_on_error, parse_flags, refuse_extra_args
from experiments.policy_runs import (
    animate_states,
    compile_evaluation,
    evaluate_policy,
    find_renderer,
    has_renderer,
    render_rollout,
)

__all__ = [
    "CONFIG_FILE",
    "animate_states",
    "build",
    "check_config",
    "check_output_path",
    "compilation_cache_from_flags",
    "compile_evaluation",
    "config_diff",
    "default_cache_dir",
    "default_workdir",
    "define_compilation_cache_flags",
    "describe_devices",
    "error_line",
    "evaluate_policy",
    "exit_on_error",
    "find_renderer",
    "has_renderer",
    "known_problem",
    "load_config",
    "parse_flags",
    "quiet_orbax",
    "refuse_extra_args",
    "render_rollout",
    "run_settings",
    "save_config",
    "setup_compilation_cache",
    "trim_jsonl",
    "write_json",
    "write_text",
]

CONFIG_FILE = "config.json"
REQUIRED_KEYS = ("env_name", "algorithm", "seed")


# ----- flags ------------------------------------------------------------------------------
# ----- persistent compilation cache ----------------------------------------------------
#: Fixed: programs compiling faster than this, or smaller, are not worth a cache entry.
_CACHE_MIN_COMPILE_SECS, _CACHE_MIN_ENTRY_BYTES = 1.0, 16 * 1024


def default_cache_dir() -> str:
    """The user's compilation cache folder: ``$JAXDRIVE_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/jaxdrive/xla``, else ``~/.cache/jaxdrive/xla``."""
    if os.environ.get("JAXDRIVE_CACHE_DIR"):
        return os.environ["JAXDRIVE_CACHE_DIR"]
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "jaxdrive", "xla")


def setup_compilation_cache(enabled: bool = True, cache_dir: str | None = None) -> str | None:
    """Turns on JAX's persistent compilation cache (before anything is compiled);
    returns its folder, or ``None`` when it is off.

    The folder is ``cache_dir``, else an explicitly set ``JAX_COMPILATION_CACHE_DIR``
    (``jax_compilation_cache_dir``), else `default_cache_dir`. ``enabled=False`` (or
    ``JAX_ENABLE_COMPILATION_CACHE=false``) turns it off: nothing is read or written.
    A folder that cannot be created or written gives one ``warning:`` line on stderr
    and no cache, never a failed run. Only programs compiling in at least 1 s with an
    executable of at least 16 KiB are stored, unless
    ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` / ``..._MIN_ENTRY_SIZE_BYTES`` say
    otherwise. JAX's cache key covers the program, the jax version, the device kind,
    the XLA flags and the folder's own path (a moved folder starts cold), so an entry
    is never used for another setting.
    """
    import sys
    import tempfile

    if not enabled or not jax.config.jax_enable_compilation_cache:
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    path = cache_dir or jax.config.jax_compilation_cache_dir or default_cache_dir()
    path = os.path.abspath(os.path.expanduser(os.fspath(path)))
    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=path)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        cause = e.strerror or str(e)
        print(
            f"warning: compilation cache {path}: {cause}; running without it "
            "(--compilation_cache_dir=<folder> chooses another)",
            file=sys.stderr,
            flush=True,
        )
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", _CACHE_MIN_COMPILE_SECS)
    if "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES" not in os.environ:
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", _CACHE_MIN_ENTRY_BYTES)
    return path


def define_compilation_cache_flags() -> None:
    """Defines ``--compilation_cache`` and ``--compilation_cache_dir`` (read by
    `compilation_cache_from_flags`) as flags of the main module (``--helpshort``)."""
    import sys

    from absl import flags

    flags.DEFINE_bool(
        "compilation_cache", True,
        "keep compiled programs in a persistent cache folder, so that a second run of "
        "the same config starts without compiling (false: neither read nor write it)",
        module_name=sys.argv[0],
    )  # fmt: skip
    flags.DEFINE_string(
        "compilation_cache_dir", None,
        "the compilation cache folder (default: $JAX_COMPILATION_CACHE_DIR, else "
        "$JAXDRIVE_CACHE_DIR, else $XDG_CACHE_HOME/jaxdrive/xla or ~/.cache/jaxdrive/xla)",
        module_name=sys.argv[0],
    )  # fmt: skip


def define_run_folder_flags(workdir_default: str) -> None:
    """Defines the run-folder flags of `experiments.population` and `experiments.league`:
    ``--workdir`` (default ``workdir_default``), ``--seed``, ``--resume`` and
    ``--allow_config_change``, as flags of the main module."""
    import sys

    from absl import flags

    kw = {"module_name": sys.argv[0]}
    flags.DEFINE_string("workdir", None, f"run folder (default {workdir_default})", **kw)
    flags.DEFINE_integer("seed", None, "overrides config.seed", **kw)
    flags.DEFINE_bool("resume", True, "continue from the workdir's latest checkpoint", **kw)
    flags.DEFINE_bool("allow_config_change", False, "resume although the config differs", **kw)


def check_run_folder(
    config: Any, workdir: str, resume: bool, allow_change: bool, elastic: tuple[str, ...] = ()
) -> None:
    """Refuses (``ValueError``) a ``workdir`` that is a file, one holding checkpoints
    without ``resume``, and one whose saved config differs from ``config`` (keys starting
    with one of ``elastic`` aside) without ``allow_change``, and a bad ``config.run``
    (`run_settings`)."""
    from jaxdrive.checkpoint import Checkpointer
    from jaxdrive.runfolder import CHECKPOINT_DIR

    run_settings(config)

    if os.path.exists(workdir) and not os.path.isdir(workdir):
        raise ValueError(f"{workdir}: --workdir is a file, not a run folder")
    ckpts = os.path.join(workdir, CHECKPOINT_DIR)
    has_ckpt = os.path.isdir(ckpts) and bool(Checkpointer(ckpts).all_steps())
    if has_ckpt and not resume:
        raise ValueError(f"{workdir}: holds checkpoints; pass --resume or a fresh --workdir")
    path = os.path.join(workdir, CONFIG_FILE)
    if has_ckpt and os.path.exists(path):
        diffs = [d for d in config_diff(load_config(path), config) if not d.startswith(elastic)]
        if diffs and not allow_change:
            raise ValueError(
                f"--workdir {workdir} holds a run with a different config: {'; '.join(diffs[:10])}"
                "; use a fresh --workdir, or --allow_config_change to resume with it"
            )


def finished_run(workdir: str, done: int, unit: str) -> dict[str, Any]:
    """Says that the run in ``workdir`` is finished (``done`` ``unit`` of ``done``) and
    returns its ``summary.json`` (or ``{"finished": True}``), its files unchanged."""
    print(
        f"{workdir}: this run is finished ({done}/{done} {unit}); nothing to do (its "
        "files are unchanged); pass another --workdir for a new run.",
        flush=True,
    )
    path = os.path.join(workdir, "summary.json")
    try:
        with open(path) as f:
            summary = json.load(f)
    except (OSError, ValueError):
        summary = {}
    return {**(summary if isinstance(summary, dict) else {}), "finished": True}


def compilation_cache_from_flags() -> str | None:
    """`setup_compilation_cache` as the flags of `define_compilation_cache_flags` say."""
    from absl import flags

    return setup_compilation_cache(
        flags.FLAGS.compilation_cache, flags.FLAGS.compilation_cache_dir or None
    )


# ----- configs ----------------------------------------------------------------------------
def check_config(config: Any) -> None:
    """Raises ``ValueError`` when ``config`` lacks a key every script needs."""
    if config is None:
        raise ValueError("no config given: pass --config=experiments/configs/<env>.py")
    missing = [k for k in REQUIRED_KEYS if k not in config]
    if missing:
        raise ValueError(f"config is missing the key(s) {missing} (required: {REQUIRED_KEYS})")


def save_config(config: Any, path: str | os.PathLike) -> dict[str, Any]:
    """Writes ``config`` resolved to plain JSON at ``path``; returns that dict."""
    d = config_to_dict(config)
    write_text(path, json.dumps(d, indent=2, sort_keys=True) + "\n")
    return d


@contextlib.contextmanager
def run_config_written(
    config: Any, workdir: str, *, primary: bool = True, diffs: list[str] | tuple[str, ...] = ()
) -> Iterator[None]:
    """Writes ``workdir/config.json`` for the run that the block is; a file there that
    differs is kept as ``config.<YYYYmmdd-HHMMSS>.json`` (``diffs`` logged). If a resume
    (the folder held checkpoints) raises before the folder holds a checkpoint it did not
    hold before (its checkpoints cannot take the config: a change of the state's
    structure, say), that file is put back: a refused resume leaves its folder as it was.
    Only ``primary`` (the process that writes the folder) writes."""
    from jaxdrive.checkpoint import step_folders
    from jaxdrive.runfolder import CHECKPOINT_DIR

    path = os.path.join(workdir, CONFIG_FILE)
    if not primary or (
        os.path.exists(path) and config_to_dict(load_config(path)) == config_to_dict(config)
    ):  # another process writes the folder, or the same config: the file stays as it is
        yield
        return
    kept, ckpts = None, os.path.join(workdir, CHECKPOINT_DIR)
    before = set(step_folders(ckpts))
    if os.path.exists(path):
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        kept = os.path.join(workdir, f"config.{stamp}.json")
        os.replace(path, kept)
        if diffs:
            logging.warning("config changed on resume (old one kept): %s", "; ".join(diffs))
    save_config(config, path)
    try:
        yield
    except BaseException:
        if kept is not None and before and not set(step_folders(ckpts)) - before:
            os.replace(kept, path)  # nothing was saved under the new config
        raise


def load_config(workdir_or_path: str | os.PathLike) -> Any:
    """The ``ml_collections.ConfigDict`` of a run folder's ``config.json`` (or a path).

    Raises ``ValueError`` naming the path when it is missing, not a run folder, or
    not a JSON object.
    """
    import ml_collections

    path = os.fspath(workdir_or_path)
    if os.path.isdir(path):
        path = os.path.join(path, CONFIG_FILE)
    elif os.path.exists(path) and not path.endswith(".json"):
        raise ValueError(f"{path}: not a run folder (a file); --workdir must be a run folder")
    if not os.path.isfile(path):
        raise ValueError(
            f"{path}: no {CONFIG_FILE} here; --workdir must be a run folder written by "
            "experiments.train"
        )
    try:
        with open(path) as f:
            data = json.load(f)
    except ValueError as e:
        raise ValueError(f"{path}: not valid JSON ({e}); restore it from a copy") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: holds a JSON {type(data).__name__}, not a config object")
    return ml_collections.ConfigDict(data)


def config_diff(
    old: Any, new: Any, *, ignore: tuple[str, ...] = ("run", "num_devices", "partitioner")
) -> list[str]:
    """Human-readable differences ``"algo.lr: 0.001 -> 0.0003"`` between two configs,
    leaving out the top-level keys ``ignore`` (``run``: host-loop settings;
    ``num_devices``, ``partitioner``: a run may resume on other devices)."""
    a, b = config_to_dict(old) or {}, config_to_dict(new) or {}
    out: list[str] = []

    def walk(x: Any, y: Any, prefix: str) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y)):
                if not prefix and k in ignore:
                    continue
                name = f"{prefix}.{k}" if prefix else k
                if k not in x:
                    out.append(f"{name}: (absent) -> {y[k]!r}")
                elif k not in y:
                    out.append(f"{name}: {x[k]!r} -> (absent)")
                else:
                    walk(x[k], y[k], name)
        elif x != y:
            out.append(f"{prefix}: {x!r} -> {y!r}")

    walk(a, b, "")
    return out


def default_workdir(config: Any, root: str = "runs") -> str:
    """``runs/<env_name>-<YYYYmmdd-HHMMSS>``."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join(root, f"{config['env_name']}-{stamp}")


def run_settings(config: Any) -> dict[str, Any]:
    """``config.run`` (``iterations_per_chunk``, ``checkpoint_every_chunks``,
    ``keep_checkpoints``, ``eval_every_chunks``, ``eval_num_envs``,
    ``eval_deterministic``, ``animate``, ``animation_steps``) over the defaults; a value
    of the wrong kind raises ``ValueError`` naming ``config.run.<key>`` (the scripts
    call it before they create a run folder)."""
    run = config_to_dict(config["run"]) if config.get("run") else {}
    if not isinstance(run, dict):
        raise ValueError(f"config.run must be a dict of host-loop settings, got {run!r}")
    rs = {**RUN_DEFAULTS, **run}
    for key, low in _RUN_INT_MINIMA.items():
        v = rs[key]
        if v is None and key == "eval_every_chunks":
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"config.run.{key} must be an integer >= {low}, got {v!r}")
    for key in ("eval_deterministic", "animate"):
        if not isinstance(rs[key], bool) and not (key == "animate" and rs[key] is None):
            raise ValueError(f"config.run.{key} must be true or false, got {rs[key]!r}")
    return rs


#: The least value of each integer key of ``config.run`` (`run_settings`).
_RUN_INT_MINIMA = dict(
    iterations_per_chunk=1, checkpoint_every_chunks=1, keep_checkpoints=1,
    eval_every_chunks=0, eval_num_envs=1, animation_steps=1,
)  # fmt: skip


def build(config: Any) -> tuple[Any, Any, Any]:
    """``(env, env_params, trainer)`` for ``config``: ``jaxdrive.make(env_name,
    **env_kwargs)`` then ``algorithms.make_train(config, env, env_params)``."""
    import algorithms
    import jaxdrive

    check_config(config)
    kwargs = config_to_dict(config["env_kwargs"]) if "env_kwargs" in config else {}
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise ValueError(f"config.env_kwargs must map env options to values, got {kwargs!r}")
    env, env_params = jaxdrive.make(config["env_name"], **(kwargs or {}))
    trainer = algorithms.make_train(config, env, env_params)
    from jaxdrive.distributed import resolve_num_devices

    problem = known_problem(
        env,
        resolve_num_devices(config.get("num_devices", 1)),
        jax.default_backend(),
        config.get("partitioner", TOP_LEVEL_DEFAULTS["partitioner"]),
    )
    if problem:
        logging.warning(problem)
    return env, env_params, trainer


def known_problem(
    env: Any, num_devices: int, backend: str, partitioner: str = "shard_map"
) -> str | None:
    """A warning for a set-up known to crash outside jaxdrive (``None`` if none): MuJoCo
    envs sharded over several GPUs in ``shard_map``, whose PPO program XLA's GPU
    compiler (jax 0.11.2) dies compiling, without a Python error."""
    if (
        num_devices > 1
        and backend == "gpu"
        and partitioner == "shard_map"
        and type(env).__module__.startswith("environments.mujoco")
    ):
        return (
            f"{type(env).__name__} on {num_devices} GPUs with config.partitioner="
            "'shard_map': XLA's GPU compiler is known to crash (segmentation fault) "
            "compiling this program with jax 0.11.2; use config.partitioner='auto' (the "
            "experiments/configs locomotion presets do), see docs/continuous_control.md."
        )
    return None


def describe_devices() -> str:
    """``"gpu: 1 × NVIDIA H100 ..."``: the backend and devices jax found."""
    devs = jax.devices()
    kinds = sorted({getattr(d, "device_kind", str(d)) for d in devs})
    procs = f"process {jax.process_index()} of {jax.process_count()}"
    return f"{jax.default_backend()}: {len(devs)} × {', '.join(kinds)} ({procs})"


def quiet_orbax() -> None:
    """Hides orbax-checkpoint's INFO lines (several per save) and its worker threads'
    error reports (`_OrbaxInfoFilter`) from absl logging, and
    the "exception ignored" reports of orbax's abandoned read coroutines ("Event loop
    is closed" after a clean error, reads of a damaged checkpoint that was then
    skipped): the error that matters is reported once, by the command."""
    import sys

    absl_logger = logging.get_absl_logger()
    if not any(isinstance(f, _OrbaxInfoFilter) for f in absl_logger.filters):
        absl_logger.addFilter(_OrbaxInfoFilter())
    if not getattr(sys.unraisablehook, "_jaxdrive", False):
        previous = sys.unraisablehook

        def hook(unraisable: Any) -> None:
            text = f"{unraisable.object!r} {unraisable.exc_value!r}"
            if "coroutine" in text or "Event loop is closed" in text:
                return
            previous(unraisable)

        hook._jaxdrive = True  # type: ignore[attr-defined]
        sys.unraisablehook = hook


class _OrbaxInfoFilter:
    """Drops orbax's INFO records and the ERROR records (with tracebacks) its worker
    threads log for a failed write or read: the command reports that failure itself, as
    one line naming the path (`jaxdrive.checkpoint`)."""

    def filter(self, record: Any) -> bool:
        if f"{os.sep}orbax{os.sep}" not in record.pathname:
            return True
        return record.levelno == 30 or record.levelno >= 50


def trim_jsonl(path: str | os.PathLike, max_iteration: int, key: str = "iteration") -> int:
    """Moves the records of the JSONL file ``path`` whose ``key`` exceeds
    ``max_iteration`` (or that do not parse) to ``<path>.discarded-<k>`` and rewrites it;
    returns how many moved. For ``eval.jsonl`` when a run resumes from a checkpoint."""
    path = os.fspath(path)
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        lines = [ln for ln in f.read().splitlines() if ln.strip()]
    keep, drop = [], []
    for line in lines:
        try:
            ok = int(json.loads(line)[key]) <= max_iteration
        except (ValueError, KeyError, TypeError):
            ok = False
        (keep if ok else drop).append(line)
    if drop:
        k = 1
        while os.path.exists(f"{path}.discarded-{k}"):
            k += 1
        write_text(f"{path}.discarded-{k}", "\n".join(drop) + "\n")
        write_text(path, "".join(line + "\n" for line in keep))
    return len(drop)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Writes ``text`` to ``path`` atomically (temp file, then rename); an ``OSError``
    names the file it could not write."""
    path = os.fspath(path)
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            try:
                os.remove(tmp)
            except OSError:
                pass
        raise OSError(e.errno, e.strerror or str(e), e.filename or path) from None


def write_json(path: str | os.PathLike, data: Mapping[str, Any]) -> None:
    """Writes ``data`` as indented JSON (atomically: temp file then rename)."""
    write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def check_output_path(
    path: str | os.PathLike, flag: str = "--out", *, make_folders: bool = False
) -> str:
    """Checks, before any work, that a result can be written to ``path``: its folder
    exists and is writable and ``path`` is not a folder. With ``make_folders`` (the
    writer makes missing folders) a folder that does not exist yet passes where the
    nearest one that exists is a writable folder. Returns ``path``; raises
    ``ValueError`` naming ``flag``, the path and the cause. For command-line outputs
    such as ``experiments/benchmarks/run.py --out`` (then `write_text`/`write_json`)."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ValueError(f"{flag}={path}: is a folder, not a file")
    while make_folders and not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        what = "is a file, not a folder" if os.path.exists(folder) else "does not exist"
        raise ValueError(f"{flag}={path}: its folder {folder} {what}")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise ValueError(f"{flag}={path}: not writable (permission denied)")
    return path
