"""Recurrent PPO over several devices: 1 and 2 forced CPU devices (a subprocess, since
``XLA_FLAGS`` must be set before jax starts) give the same parameters, carries and
metrics; the carries are sharded with the env batch.

    python tests/test_recurrent_distributed.py OUT.json   # the subprocess
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTOL = 1e-4


def _run(out: str) -> None:
    """The subprocess: 2 iterations of recurrent PPO (GRU actor, LSTM critic, 2
    minibatches of sequences) on 1 and on 2 devices; writes the differences."""
    sys.path.insert(0, ROOT)
    import jax
    import numpy as np

    import algorithms
    from tests.test_recurrent import ENV, memory_config

    res, ref = {"devices": jax.device_count()}, None
    for d in (1, 2):
        c = memory_config("gru", iters=2)
        c.policies.agent.critic_core = "lstm"
        c.num_devices = d
        tr = algorithms.make_train(c, ENV, ENV.default_params)
        rs, m = jax.jit(lambda r, tr=tr: tr.chunk(r, 2))(tr.init(jax.random.PRNGKey(3)))
        host = jax.tree.map(lambda x: np.asarray(x, np.float64), jax.device_get((rs.policies, m)))
        res[f"shards_D{d}"] = len(rs.policies["agent"].carry["actor"].addressable_shards)
        if ref is None:
            ref = host
            continue
        errs = jax.tree.map(
            lambda a, b: float(np.max(np.abs(a - b) / (np.abs(b) + 1e-3))), host, ref
        )
        res[f"max_rel_D{d}"] = max(jax.tree.leaves(errs))
    with open(out, "w") as f:
        json.dump(res, f)


def test_recurrent_ppo_same_on_2_devices(tmp_path):
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2"
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), str(out)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["devices"] == 2
    assert res["shards_D1"] == 1 and res["shards_D2"] == 2  # the carries are split
    assert res["max_rel_D2"] < RTOL


if __name__ == "__main__":
    _run(sys.argv[1])
