"""Learning minibatches padded with masked-out rows (for aligned GEMMs) update exactly as
unpadded ones, for A2C (whole batch) and PPO (shuffled minibatches); recurrent PPO's
padded sequence minibatches: `tests/test_recurrent.py`."""

import jax
import numpy as np
import pytest

import algorithms
import jaxdrive
from algorithms.common import on_policy_learn
from experiments.configs import tag_continuous

FAST = {"xla_backend_optimization_level": 0}


def test_row_multiple():
    assert on_policy_learn.row_multiple(10) == 1
    assert on_policy_learn.row_multiple(64 * 8) == 8
    assert on_policy_learn.row_multiple(2_500_000) == 4096


def test_pad_minibatch_rows(monkeypatch):
    mbs = {
        "obs": np.ones((2, 5, 3), np.float32),
        "mask": np.ones((2, 5), bool),
        "action": np.ones((2, 5, 2), np.int32),
    }
    monkeypatch.setattr(on_policy_learn, "row_multiple", lambda rows: 4)
    out = on_policy_learn.pad_minibatch_rows(mbs)
    assert out["obs"].shape == (2, 8, 3) and out["action"].shape == (2, 8, 2)
    assert out["mask"].shape == (2, 8)
    assert np.all(np.asarray(out["mask"][:, :5])) and not np.any(np.asarray(out["mask"][:, 5:]))
    assert np.all(np.asarray(out["obs"][:, 5:]) == 0)


@pytest.mark.parametrize("preset", ["tiny,a2c", "tiny"])
def test_padded_minibatches_train_alike(preset, monkeypatch):
    c = tag_continuous.get_config(preset)
    c.algo.normalize_advantages = True  # the masked mean/std must ignore the pad too
    env, params = jaxdrive.make(c.env_name, **c.env_kwargs)
    out = {}
    for name, mult in (("plain", 1), ("padded", 64)):
        monkeypatch.setattr(on_policy_learn, "row_multiple", lambda rows, m=mult: m)
        trainer = algorithms.make_train(c, env, params)
        rs, m = jax.jit(trainer, compiler_options=FAST)(jax.random.PRNGKey(0))
        out[name] = jax.device_get((trainer.get_params(rs), m))
    for x, y in zip(jax.tree.leaves(out["plain"]), jax.tree.leaves(out["padded"]), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=1e-6)
