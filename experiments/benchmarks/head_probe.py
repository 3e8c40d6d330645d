"""A/B of the shared-torso heads' GEMM layout on Tag A2C training throughput (1000 envs ×
(10+100), 25 steps, fc 256×256), float32 and bfloat16, in one process:

* ``separate``: the policy heads ``[256, 42]`` and the value head ``[256, 1]`` as two GEMMs;
* ``fused``: one GEMM ``[256, 43]``;
* ``fused<N>``: one GEMM whose output is zero-padded to a multiple of ``N`` columns.

Parameters and results are the same in every layout (the padding columns are constants);
only the compiled program differs. ``python -m experiments.benchmarks.head_probe``.
"""

from __future__ import annotations

import jax.numpy as jnp
from absl import app, flags

from algorithms.common import networks
from experiments.benchmarks.training import tag_a2c_throughput

FLAGS = flags.FLAGS
flags.DEFINE_list("variants", ["separate", "fused", "fused8", "fused16"], "layouts to time")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "policies' compute_dtype values")
flags.DEFINE_integer("repeats", 5, "timed calls per layout (median reported)")

_ORIGINAL_CALL = networks.ActorCritic.__call__


def _layout_call(variant: str):
    """An ``ActorCritic.__call__`` for shared torsos computing the heads as ``variant``."""
    # "fused" is the unpadded joint GEMM (multiple 1): spelled out here, because
    # `ActorCritic.__call__` itself now picks the layout by compute dtype.
    multiple = int(variant.removeprefix("fused") or 1) if variant.startswith("fused") else 0

    def call(self, obs, critic_obs=None):
        if not self.shared_torso:
            return _ORIGINAL_CALL(self, obs, critic_obs)
        h = self.torso(obs)
        kernel, bias = self.value_head(h.shape[-1])
        if variant == "separate":
            return self.actor_head(h), networks._affine(h, kernel, bias, self.compute_dtype)[..., 0]
        width = self.spec.num_outputs + 1
        pad = -width % multiple
        kernel = jnp.pad(kernel, ((0, 0), (0, pad)))
        bias = jnp.pad(bias, (0, pad))
        dist, value = self.actor_head(h, (kernel, bias))
        return dist, value[..., 0]

    return call


def main(argv: list[str]) -> None:
    del argv
    for dt in FLAGS.dtypes:
        for variant in FLAGS.variants:
            networks.ActorCritic.__call__ = _layout_call(variant)
            rate = tag_a2c_throughput(dt, FLAGS.repeats)
            print(f"heads {dt:<9} {variant:<9} {rate:>12,.0f} env steps/s", flush=True)
    networks.ActorCritic.__call__ = _ORIGINAL_CALL


if __name__ == "__main__":
    app.run(main)
