"""PPO for continuous control: the state-dependent-σ tanh-Gaussian head, ``reward_scale``,
observation statistics pooled over devices (forced CPU devices, in a subprocess) and
saved in checkpoints (exact resume)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import jaxdrive
from algorithms.common.config import base_config
from algorithms.common.networks import ActionSpec, ActorCritic
from algorithms.ppo import make_train
from jaxdrive.checkpoint import Checkpointer
from jaxdrive.spaces import Box
from jaxdrive.wrappers import Wrapper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_state_std_head_outputs_mean_and_softplus_sigma():
    space = Box(-2.0, 2.0, (3,))
    spec = ActionSpec.from_space(space, "tanh_gaussian_state_std")
    assert spec.num_outputs == 6 and spec.action_shape == (3,)
    net = ActorCritic(spec, hidden_sizes=(8,))
    x = jax.random.normal(jax.random.key(0), (5, 4))
    params = jax.jit(net.init)(jax.random.key(1), x)
    assert "log_std" not in params["params"]["actor_head"]  # σ comes from the layer
    dist, value, h = jax.jit(
        lambda p: (*net.apply(p, x), net.apply(p, x, method=lambda m, o: m.actor_torso(o)))
    )(params)
    head = params["params"]["actor_head"]["mean"]
    out = np.asarray(h @ head["kernel"] + head["bias"], np.float64)
    np.testing.assert_allclose(dist.mean, out[:, :3], rtol=1e-5, atol=1e-6)
    sigma = np.log1p(np.exp(out[:, 3:])) + 1e-3
    np.testing.assert_allclose(np.exp(dist.log_std), sigma, rtol=1e-5)
    a = dist.to_env(dist.sample(jax.random.key(2)))
    assert a.shape == (5, 3) and bool(space.contains(a)) and value.shape == (5,)
    with pytest.raises(ValueError, match="needs finite Box bounds"):
        ActionSpec.from_space(Box(-np.inf, np.inf, (2,)), "tanh_gaussian_state_std")


class HalfReward(Wrapper):
    """The wrapped env with every reward halved."""

    def step_env(self, key, state, actions, params):
        state, ts = self._env.step(key, state, actions, params)
        return state, ts.replace(reward={g: 0.5 * r for g, r in ts.reward.items()})


def _config(reward_scale: float):
    c = base_config("ppo", "Pendulum-v1")
    c.num_envs, c.num_steps, c.total_env_steps = 4, 16, 4 * 16 * 3
    c.algo.update(num_epochs=2, num_minibatches=2, normalize_obs=True, reward_scale=reward_scale)
    c.policies.agent.update(hidden_sizes=(16,), action_head="tanh_gaussian_state_std")
    return c


@pytest.fixture(scope="module")
def scaled():
    """PPO on Pendulum-v1 with reward_scale 0.5, normalised observations and the
    state-std head: its jitted update and the states after 0..3 iterations."""
    env, params = jaxdrive.make("Pendulum-v1")
    trainer = make_train(_config(0.5), env, params)
    update = jax.jit(trainer.update)
    states = [jax.jit(trainer.init)(jax.random.key(0))]
    for _ in range(3):
        states.append(update(states[-1])[0])
    return dict(env=env, params=params, trainer=trainer, update=update, states=states)


def test_reward_scale_equals_scaled_env_rewards(scaled):
    """reward_scale = 0.5 learns as the unscaled trainer on an env whose rewards are
    halved (the same actions, values and updates), while returns stay the env's own."""
    env, params = scaled["env"], scaled["params"]
    other = make_train(_config(1.0), HalfReward(env), params)
    rs = jax.jit(other.init)(jax.random.key(0))
    rs = jax.jit(other.update)(rs)[0]
    got = scaled["states"][1].policies["agent"]
    want = rs.policies["agent"]
    for a, b in zip(jax.tree.leaves(got.params), jax.tree.leaves(want.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_obs_norm_is_checkpointed_and_resumes_exactly(scaled, tmp_path):
    states, update = scaled["states"], scaled["update"]
    rms = states[1].policies["agent"].obs_norm
    assert float(rms.count) > 4 * 16 and not np.allclose(rms.mean, 0.0)
    with Checkpointer(tmp_path / "ck") as ckpt:
        ckpt.save(1, states[1], {"iteration": 1})
        rs, _ = ckpt.restore(jax.eval_shape(scaled["trainer"].init, jax.random.key(0)))
    rs = jax.tree.map(np.asarray, rs)  # host arrays: the compiled update serves them as is
    jaxdrive.testing.assert_trees_equal(rs.policies["agent"].obs_norm, rms, "obs_norm")
    for _ in range(2):
        rs, _ = update(rs)
    jaxdrive.testing.assert_trees_equal(rs, states[3], "resumed")


_SHARDED = textwrap.dedent(
    """
    import os, sys, json
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import PartitionSpec as P
    from algorithms.common.normalization import RunningMeanStd
    from jaxdrive.distributed import DEVICE_AXIS, make_mesh, shard_map

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(3.0, 2.0, (64, 5)), jnp.float32)
    mask = jnp.asarray(rng.uniform(size=64) < 0.7)
    rms = RunningMeanStd.create((5,)).update(x[:8] * 0.5)  # some history first

    def f(rms, x, mask):
        return rms.update(x, mask, DEVICE_AXIS)

    sharded = shard_map(f, mesh=make_mesh(4), in_specs=(P(), P(DEVICE_AXIS), P(DEVICE_AXIS)),
                        out_specs=P())
    got = jax.jit(sharded)(rms, x, mask)
    want = jax.jit(lambda r, x, m: r.update(x, m))(rms, x, mask)
    err = max(float(jnp.max(jnp.abs(a - b) / (jnp.abs(b) + 1e-6)))
              for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)))
    print(json.dumps({"devices": jax.device_count(), "err": err, "count": float(got.count)}))
    """
)


def test_obs_statistics_pooled_over_devices_equal_unsharded():
    """`RunningMeanStd.update` with the device axis, rows split over 4 forced CPU devices
    (masked rows left out), gives the statistics of one update on all rows."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "-c", _SHARDED], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    import json

    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["devices"] == 4 and res["err"] < 1e-5
