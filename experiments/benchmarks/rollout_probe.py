"""A/B of two acting-path layouts on Tag A2C training throughput (1000 envs × (10+100),
25 steps, fc 256×256, shared torso), in one process:

* ``joint``: the rollout computes a shared torso's policy and value heads in one GEMM
  (`ActorCritic.act`) instead of the two GEMMs the bfloat16 learning pass uses;
* ``lse``: a sampled action's log-prob as ``logit[x] − logsumexp(logits)`` instead of
  picking from the whole log-softmax.

``base`` undoes both (the program before them), ``both`` is today's code. Parameters and
results are the same up to float rounding; only the compiled program differs.
``python -m experiments.benchmarks.rollout_probe [--variants=...] [--dtypes=...]``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from absl import app, flags

from algorithms.common import networks
from experiments.benchmarks.training import tag_a2c_throughput

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the probe's flags (only when run as a program: other probes and the
    benchmark command use some of the same names)."""
    flags.DEFINE_list("variants", ["base", "joint", "lse", "both"], "layouts to time")
    flags.DEFINE_list("dtypes", ["bfloat16"], "policies' compute_dtype values")
    flags.DEFINE_integer("repeats", 5, "timed calls per variant (median reported)")


_ACT = networks.ActorCritic.act
_LP = {c: c.log_prob for c in (networks.Categorical, networks.MultiCategorical)}


def _old_categorical_lp(self, x):
    return networks._pick(self._log_probs(), x)


def _old_multi_lp(self, x):
    return jnp.sum(networks._pick(self._log_probs(), x), axis=-1)


def _set(variant: str) -> None:
    joint = variant in ("joint", "both")
    lse = variant in ("lse", "both")
    networks.ActorCritic.act = _ACT if joint else (lambda self, o, c=None, j=None: self(o, c))
    networks.Categorical.log_prob = _LP[networks.Categorical] if lse else _old_categorical_lp
    networks.MultiCategorical.log_prob = _LP[networks.MultiCategorical] if lse else _old_multi_lp


def main(argv: list[str]) -> None:
    del argv
    print(f"device {jax.devices()[0].device_kind}, jax {jax.__version__}", flush=True)
    for dt in FLAGS.dtypes:
        for variant in FLAGS.variants:
            _set(variant)
            rate = tag_a2c_throughput(dt, FLAGS.repeats)
            print(f"rollout {dt:<9} {variant:<6} {rate:>12,.0f} env steps/s", flush=True)
    _set("both")


if __name__ == "__main__":
    define_flags()
    app.run(main)
