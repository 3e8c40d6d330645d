"""Evaluates the latest checkpoint of a run folder.

    python -m experiments.evaluate --workdir=runs/tag --episodes=32 --animation=tag.gif

Loads ``<workdir>/config.json``, rebuilds the env and trainer, restores the latest
checkpoint (or ``--step``), plays ``--episodes`` episodes in parallel on the device
(deterministic actions unless ``--nodeterministic``), prints the mean return per group
and writes ``<workdir>/eval.json``; ``--animation=path.gif`` also animates one episode
(envs with a renderer).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import jax
from absl import app, flags, logging

from experiments import common
from jaxdrive.checkpoint import Checkpointer
from jaxdrive.loop import CHECKPOINT_DIR

__all__ = ["evaluate", "main"]


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
) -> dict[str, Any]:
    """Evaluates checkpoint ``step`` (default: the latest) of the run in ``workdir``.

    Returns (and writes to ``<workdir>/eval.json``) the `common.evaluate_policy`
    result plus ``step``, ``env_steps`` and ``animation``. Raises ``ValueError`` when
    ``workdir`` is not a run folder or has no (such) checkpoint.
    """
    common.quiet_orbax()
    config = common.load_config(workdir)
    ckpt_dir = os.path.join(workdir, CHECKPOINT_DIR)
    if not os.path.isdir(ckpt_dir):
        raise ValueError(f"no checkpoints in {workdir}: train first (experiments.train)")
    logging.info("evaluating %s on %s", workdir, common.describe_devices())
    env, env_params, trainer = common.build(config)
    if trainer.get_params is None or trainer.act is None:
        raise ValueError(f"the {config['algorithm']} trainer has no get_params/act to evaluate")
    with Checkpointer(ckpt_dir, max_to_keep=None) as ckpt:
        try:
            target = jax.jit(trainer.init)(jax.random.PRNGKey(0))
            state, meta = ckpt.restore(target, step)
        except FileNotFoundError as e:
            raise ValueError(str(e)) from e
    params = trainer.get_params(state)
    key_eval, key_anim = jax.random.split(jax.random.PRNGKey(seed))
    result = common.evaluate_policy(
        env, env_params, trainer, params, key_eval,
        episodes=episodes, deterministic=deterministic, max_steps=max_steps,
    )  # fmt: skip
    result = {"step": int(meta["iteration"]), "env_steps": meta.get("env_steps"), **result}
    result["animation"] = None
    if animation:
        result["animation"] = common.render_rollout(
            env, env_params, trainer, params, key_anim, animation,
            num_steps=animation_steps, deterministic=deterministic,
        )  # fmt: skip
    if jax.process_index() == 0:
        common.write_json(os.path.join(workdir, "eval.json"), result)
        rets = "  ".join(
            f"{g}={r['mean']:.4g} ± {r['std']:.3g}" for g, r in result["returns"].items()
        )
        print(
            f"checkpoint {result['step']} ({result['env_steps']} env steps), "
            f"{episodes} {'deterministic' if deterministic else 'sampled'} episodes, "
            f"mean length {result['episode_length']:.1f}: return {rets}",
            flush=True,
        )
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
    flags.mark_flag_as_required("workdir")


def main(argv: list[str]) -> None:
    """The absl entry point."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    F = flags.FLAGS
    try:
        evaluate(
            F.workdir,
            episodes=F.episodes,
            deterministic=F.deterministic,
            seed=F.seed,
            step=F.step,
            max_steps=F.max_steps,
            animation=F.animation,
            animation_steps=F.animation_steps,
        )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    _define_flags()
    app.run(main, flags_parser=common.parse_flags)
