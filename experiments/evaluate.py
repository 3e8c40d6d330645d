"""Evaluates the newest verified checkpoint of a run folder.

    python -m experiments.evaluate --workdir=runs/tag --episodes=32 --animation=tag.gif

Loads ``<workdir>/config.json`` (refused when it differs from the checkpoint's config,
unless ``--allow_config_change``), rebuilds the env and trainer, restores the newest
checkpoint that restores and verifies (or ``--step``), plays ``--episodes`` episodes in
parallel on the device (deterministic actions unless ``--nodeterministic``), prints the
mean return per group, then writes ``<workdir>/eval.json``; ``--animation=path.gif``
also animates the first of them (envs with a renderer; the same rollout). Bad input
and file-system errors are one ``error: <path>: <cause>`` line, exit status 2.

Compiled programs are kept in JAX's persistent compilation cache, as for
`experiments.train` (``--compilation_cache``, ``--compilation_cache_dir``; see
`experiments.common.setup_compilation_cache`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import jax
from absl import app, flags, logging

from experiments import common
from jaxdrive.checkpoint import Checkpointer, config_hash, read_metadata, step_folders
from jaxdrive.runfolder import CHECKPOINT_DIR, plain_config

__all__ = ["evaluate", "main"]


def _restore(ckpt_dir: str, trainer: Any, step: int | None) -> tuple[Any, dict[str, Any]]:
    """The state and metadata of checkpoint ``step``, or of the newest one that restores
    and verifies (skipped newer ones are named in a warning)."""
    target = jax.eval_shape(trainer.init, jax.random.PRNGKey(0))  # shapes: nothing compiled
    with Checkpointer(ckpt_dir, max_to_keep=None) as ckpt:
        if step is not None:
            try:
                return ckpt.restore(target, step)
            except FileNotFoundError as e:
                raise ValueError(str(e)) from None
            except Exception as e:
                raise ValueError(
                    f"{os.path.join(ckpt_dir, str(step))}: does not restore ({e}); "
                    "evaluate another --step"
                ) from None
        got = ckpt.restore_newest(target)
    for s, why in got.skipped:
        logging.warning("checkpoint %d in %s skipped: %s", s, ckpt_dir, why)
    if got.skipped:
        print(f"note: evaluating checkpoint {got.step}, the newest that restores and "
              f"verifies (skipped {[s for s, _ in got.skipped]})", file=sys.stderr)  # fmt: skip
    return got.state, got.metadata


def _check_hash(workdir: str, ckpt_dir: str, step: int | None, chash: str, allow: bool) -> None:
    """Refuses a ``config.json`` edited since the checkpoint was written."""
    steps = step_folders(ckpt_dir) if step is None else [step]
    for s in reversed(steps):
        try:
            saved = read_metadata(ckpt_dir, s).get("config_hash")
        except (OSError, ValueError):
            continue  # damaged: restore skips it and says so
        if saved is None or saved == chash:
            return
        text = (
            f"{os.path.join(workdir, common.CONFIG_FILE)}: does not match checkpoint {s} "
            f"(config hash {chash} != {saved}): it was edited after training"
        )
        if not allow:
            raise ValueError(
                f"{text}; restore it, or pass --allow_config_change to evaluate with it"
            )
        logging.warning("%s; evaluating with it anyway (--allow_config_change)", text)
        print(f"warning: {text}; evaluating with it anyway", file=sys.stderr)
        return


def evaluate(
    workdir: str,
    *,
    episodes: int = 16,
    deterministic: bool = True,
    seed: int = 0,
    step: int | None = None,
    max_steps: int | None = None,
    animation: str | None = None,
    animation_steps: int = 200,
    allow_config_change: bool = False,
) -> dict[str, Any]:
    """Evaluates checkpoint ``step`` (default: the newest that restores and verifies)
    of the run in ``workdir``.

    Prints, then writes to ``<workdir>/eval.json``, the `common.evaluate_policy`
    result plus ``step``, ``env_steps`` and ``animation``; returns it. Raises
    ``ValueError`` (naming the path) when ``workdir`` is not a run folder, has no (such)
    checkpoint, or its ``config.json`` differs from the checkpoint's config (unless
    ``allow_config_change``: then a warning), and ``OSError`` when ``eval.json`` cannot
    be written (after the result is printed).
    """
    common.quiet_orbax()
    config = common.load_config(workdir)
    ckpt_dir = os.path.join(workdir, CHECKPOINT_DIR)
    if not step_folders(ckpt_dir):
        raise ValueError(
            f"{workdir}: no checkpoints in {ckpt_dir}: train first (experiments.train)"
        )
    env, env_params, trainer = common.build(config)
    chash = config_hash(plain_config(trainer.config))  # as jaxdrive.loop computes it
    _check_hash(workdir, ckpt_dir, step, chash, allow_config_change)
    logging.info("evaluating %s on %s", workdir, common.describe_devices())
    if trainer.get_params is None or trainer.act is None:
        raise ValueError(f"the {config['algorithm']} trainer has no get_params/act to evaluate")
    state, meta = _restore(ckpt_dir, trainer, step)
    params = trainer.get_params(state)
    primary = jax.process_index() == 0
    # one program plays the episodes and records the first one for the animation
    result = common.evaluate_policy(
        env, env_params, trainer, params, jax.random.PRNGKey(seed),
        episodes=episodes, deterministic=deterministic, max_steps=max_steps,
        animation=animation if primary else None,
        animation_steps=animation_steps if animation else 0,
    )  # fmt: skip
    result = {"step": int(meta["iteration"]), "env_steps": meta.get("env_steps"), **result}
    result["animation"] = result.get("animation")
    if primary:
        rets = "  ".join(
            f"{g}={r['mean']:.4g} ± {r['std']:.3g}" for g, r in result["returns"].items()
        )
        if "win_rate" in result:  # envs that say whether an episode was won (SMAX)
            rets += f", win rate {result['win_rate']:.1%}"
        print(
            f"checkpoint {result['step']} ({result['env_steps']} env steps), "
            f"{episodes} {'deterministic' if deterministic else 'sampled'} episodes, "
            f"mean length {result['episode_length']:.1f}: return {rets}",
            flush=True,
        )
    if primary:
        common.write_json(os.path.join(workdir, "eval.json"), result)
    return result


def _define_flags() -> None:
    flags.DEFINE_string("workdir", None, "run folder written by experiments.train")
    flags.DEFINE_integer("episodes", 16, "episodes, played in parallel")
    flags.DEFINE_bool("deterministic", True, "act with each policy's mode (else sample)")
    flags.DEFINE_integer("seed", 0, "evaluation seed")
    flags.DEFINE_integer("step", None, "checkpoint step (default: the latest)")
    flags.DEFINE_integer("max_steps", None, "step cap per episode (default: episode length)")
    flags.DEFINE_string("animation", None, "write an animation of one episode here (.gif)")
    flags.DEFINE_integer("animation_steps", 200, "steps of the animated episode at most")
    flags.DEFINE_bool(
        "allow_config_change", False,
        "evaluate although config.json differs from the checkpoint's config (warns)",
    )  # fmt: skip
    common.define_compilation_cache_flags()
    flags.mark_flag_as_required("workdir")


def main(argv: list[str]) -> None:
    """The absl entry point."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    F = flags.FLAGS
    common.compilation_cache_from_flags()  # before anything is compiled
    common.exit_on_error(
        evaluate,
        F.workdir,
        episodes=F.episodes,
        deterministic=F.deterministic,
        seed=F.seed,
        step=F.step,
        max_steps=F.max_steps,
        animation=F.animation,
        animation_steps=F.animation_steps,
        allow_config_change=F.allow_config_change,
    )


if __name__ == "__main__":
    _define_flags()
    app.run(main, flags_parser=common.parse_flags)
