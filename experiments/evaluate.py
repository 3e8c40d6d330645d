"""Evaluates the newest verified checkpoint of a run folder.

    python -m experiments.evaluate --workdir=runs/tag --episodes=32 --animation=tag.gif

Loads ``<workdir>/config.json`` (refused when it differs from the checkpoint's config,
unless ``--allow_config_change``), rebuilds the env and trainer, restores the newest
checkpoint that restores and verifies (or ``--step``), plays ``--episodes`` episodes in
parallel on the device (deterministic actions unless ``--nodeterministic``), prints the
mean return per group, then writes ``<workdir>/eval.json``; ``--animation=path.gif``
also animates the first of them (envs with a renderer; the same rollout). A population
run folder (`experiments.population`) is evaluated member by member (``--member=i``: one
member), with a line per member and the mean over them. Bad input
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
import numpy as np
from absl import app, flags, logging

from experiments import common
from jaxdrive.checkpoint import Checkpointer, config_hash, read_metadata, step_folders
from jaxdrive.runfolder import CHECKPOINT_DIR, plain_config

__all__ = ["evaluate", "main"]


def _restore(
    ckpt_dir: str, init: Any, step: int | None, one_device: bool = False
) -> tuple[Any, dict[str, Any]]:
    """The state (of ``init``'s structure) and metadata of checkpoint ``step``, or of the
    newest one that restores and verifies (skipped newer ones are named in a warning).
    ``one_device``: onto this process's first device, whatever the devices that saved
    it (a population's members may have been split over several)."""
    target = jax.eval_shape(init, jax.random.PRNGKey(0))  # shapes: nothing compiled
    if one_device:
        dev = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        target = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=dev), target
        )
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
    member: int | None = None,
) -> dict[str, Any]:
    """Evaluates checkpoint ``step`` (default: the newest that restores and verifies)
    of the run in ``workdir``.

    Prints, then writes to ``<workdir>/eval.json``, the `common.evaluate_policy`
    result plus ``step``, ``env_steps`` and ``animation``; returns it. A population run
    folder (`experiments.population`) evaluates each member (or only ``member``) with
    the same key: the result holds ``members`` (index → that member's result) and, over
    them, ``mean_returns`` (group → mean of the members' mean returns) and
    ``win_rate`` (mean, envs that report wins); the animation is of the first member
    evaluated. Raises ``ValueError`` (naming the path) when ``workdir`` is not a run
    folder, has no (such) checkpoint or member, or its ``config.json`` differs from the
    checkpoint's config (unless ``allow_config_change``: then a warning), or
    ``animation`` cannot be written, and
    ``OSError`` when ``eval.json`` cannot be written (after the result is printed).
    """
    common.quiet_orbax()
    if max_steps is not None and (isinstance(max_steps, bool) or int(max_steps) < 1):
        raise ValueError(f"max_steps (--max_steps) must be an integer >= 1, got {max_steps!r}")
    if animation is not None:
        _check_animation_path(animation)
    config = common.load_config(workdir)
    ckpt_dir = os.path.join(workdir, CHECKPOINT_DIR)
    if not step_folders(ckpt_dir):
        raise ValueError(
            f"{workdir}: no checkpoints in {ckpt_dir}: train first (experiments.train)"
        )
    pop = None
    if "population" in config:
        from experiments import population

        with config.unlocked():
            config.population.num_devices = 1  # members are evaluated one after another
        pop = population.build(config)
        env, env_params, trainer = pop.env, pop.env_params, pop.trainer
        chash, init = population.config_digest(pop.config), pop.init
        members = list(range(pop.size)) if member is None else [member]
        if not all(0 <= i < pop.size for i in members):
            raise ValueError(f"--member={member}: {workdir} has members 0..{pop.size - 1}")
    elif member is not None:
        raise ValueError(f"--member={member}: {workdir} is not a population run folder")
    else:
        env, env_params, trainer = common.build(config)
        chash = config_hash(plain_config(trainer.config))  # as jaxdrive.loop computes it
        init, members = trainer.init, [None]
    _check_hash(workdir, ckpt_dir, step, chash, allow_config_change)
    logging.info("evaluating %s on %s", workdir, common.describe_devices())
    if trainer.get_params is None or trainer.act is None:
        raise ValueError(f"the {config['algorithm']} trainer has no get_params/act to evaluate")
    state, meta = _restore(ckpt_dir, init, step, one_device=pop is not None)
    primary = jax.process_index() == 0
    results = []
    for n, i in enumerate(members):
        runner = state if i is None else pop.member(state, i)
        record = animation if primary and n == 0 else None
        # one program plays the episodes and records the first one for the animation
        r = common.evaluate_policy(
            env, env_params, trainer, trainer.get_params(runner), jax.random.PRNGKey(seed),
            episodes=episodes, deterministic=deterministic, max_steps=max_steps,
            animation=record, animation_steps=animation_steps if record else 0,
        )  # fmt: skip
        if primary and i is not None:
            print(f"member {i}: {_line(r)}", flush=True)
        results.append(r)
    head = {"step": int(meta["iteration"]), "env_steps": meta.get("env_steps")}
    if pop is None:
        result = {**head, **results[0], "animation": results[0].get("animation")}
    else:
        result = {
            **head,
            **_over_members(members, results),
            "animation": results[0].get("animation"),
        }
    if primary:
        what = (
            f"checkpoint {result['step']} ({result['env_steps']} env steps), {episodes} "
            f"{'deterministic' if deterministic else 'sampled'} episodes"
        )
        if pop is None:
            print(f"{what}, {_line(result)}", flush=True)
        else:
            print(
                f"{what} per member, over {len(members)} member(s): {_mean_line(result)}",
                flush=True,
            )
        common.write_json(os.path.join(workdir, "eval.json"), result)
    return result


def _line(r: dict[str, Any]) -> str:
    rets = "  ".join(f"{g}={x['mean']:.4g} ± {x['std']:.3g}" for g, x in r["returns"].items())
    if "win_rate" in r:  # envs that say whether an episode was won (SMAX)
        rets += f", win rate {r['win_rate']:.1%}"
    return f"mean length {r['episode_length']:.1f}: return {rets}"


def _over_members(members: list[int], results: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"members": {str(i): r for i, r in zip(members, results, strict=True)}}
    out["mean_returns"] = {
        g: float(np.mean([r["returns"][g]["mean"] for r in results])) for g in results[0]["returns"]
    }
    if "win_rate" in results[0]:
        out["win_rate"] = float(np.mean([r["win_rate"] for r in results]))
    return out


def _check_animation_path(path: str) -> None:
    """Raises ``ValueError`` (naming ``--animation``) when ``path`` cannot be written as
    an animation: no ``.gif``/``.mp4`` suffix, or what `common.check_output_path` refuses
    (folders that do not exist yet are made when it is written)."""
    if os.path.splitext(path)[1].lower() not in (".gif", ".mp4"):
        raise ValueError(f"--animation={path}: the file name must end in .gif or .mp4")
    common.check_output_path(path, "--animation", make_folders=True)


def _mean_line(result: dict[str, Any]) -> str:
    line = "mean return " + "  ".join(f"{g}={v:.4g}" for g, v in result["mean_returns"].items())
    if "win_rate" in result:
        line += f", mean win rate {result['win_rate']:.1%}"
    return line


def _define_flags() -> None:
    flags.DEFINE_string("workdir", None, "run folder written by experiments.train")
    flags.DEFINE_integer("episodes", 16, "episodes, played in parallel")
    flags.DEFINE_bool("deterministic", True, "act with each policy's mode (else sample)")
    flags.DEFINE_integer("seed", 0, "evaluation seed")
    flags.DEFINE_integer("step", None, "checkpoint step (default: the latest)")
    flags.DEFINE_integer("max_steps", None, "step cap per episode (default: episode length)")
    flags.DEFINE_string("animation", None, "write an animation of one episode here (.gif)")
    flags.DEFINE_integer("animation_steps", 200, "steps of the animated episode at most")
    flags.DEFINE_integer("member", None, "population run folders: this member only (default: all)")
    flags.DEFINE_bool(
        "allow_config_change", False,
        "evaluate although config.json differs from the checkpoint's config (warns)",
    )  # fmt: skip
    common.define_compilation_cache_flags()
    flags.mark_flag_as_required("workdir")


def main(argv: list[str]) -> None:
    """The absl entry point."""
    common.refuse_extra_args(argv)
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
        member=F.member,
    )


if __name__ == "__main__":
    _define_flags()
    app.run(main, flags_parser=common.parse_flags)
