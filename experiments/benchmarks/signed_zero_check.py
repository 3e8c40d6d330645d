"""Which side writes −0: the vectorized Tag step's acceleration by XLA and by the batched
kernel (``python -m experiments.benchmarks.signed_zero_check``, GPU)."""

from __future__ import annotations

import jax
import numpy as np

import jaxdrive
from experiments.benchmarks.run import make_tag


def main() -> None:
    out = {}
    for impl in ("xla", "vector"):
        env, params = make_tag(10, 100, False, 10, "pallas", step_impl=impl)
        venv = jaxdrive.vectorize(env, 1000)
        s, ts = jax.jit(venv.reset)(jax.random.key(0), params)
        a = jaxdrive.random_policy(env)(jax.random.key(1), ts.obs)
        s, _ = jax.jit(venv.step)(jax.random.key(2), s, a, params)
        out[impl] = np.asarray(s.acceleration)
    x, v = out["xla"], out["vector"]
    zero = (x == 0) & (v == 0)
    for name, arr in out.items():
        neg = int(np.sum(zero & np.signbit(arr)))
        print(f"{name}: {int(zero.sum())} zero accelerations, {neg} of them -0")


if __name__ == "__main__":
    main()
