"""IQL/VDN/QMIX trainers: learning (DQN on CartPole, VDN with action masks), QMIX on a
multi-group env with a global state, determinism, no retrace, config errors, and the
experiment config through `experiments.train`."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import algorithms
from algorithms.common.config import base_config
from experiments import train as train_script
from experiments.configs import qlearning as ql_configs
from jaxdrive.logging import read_metrics
from tests.toy_envs import Counter, MaskedChoice


def _last_quarter_mean(x) -> float:
    x = np.asarray(x)
    return float(np.nanmean(x[-max(len(x) // 4, 1) :]))


@pytest.fixture(scope="module")
def dqn_run(tmp_path_factory):
    """The ``dqn_cartpole`` preset (IQL with one agent, feed-forward: DQN), shortened,
    trained through `experiments.train.run` with a greedy evaluation at the end:
    ``(metrics records, eval records)``."""
    c = ql_configs.get_config("dqn_cartpole")
    c.total_env_steps = 40_000
    c.run.iterations_per_chunk = c.total_env_steps // (c.num_envs * c.num_steps)
    c.run.update(eval_every_chunks=1, eval_num_envs=8, animate=False)
    wd = tmp_path_factory.mktemp("dqn")
    summary = train_script.run(c, str(wd), progress=False, animation=False)
    assert summary["finished"]
    with open(wd / "eval.jsonl") as f:
        evals = [json.loads(line) for line in f]
    return read_metrics(wd), evals


def test_dqn_learns_cartpole_through_the_train_script(dqn_run):
    records, evals = dqn_run
    ret = np.array([r["metrics"].get("episode_return/agent", np.nan) for r in records])
    assert _last_quarter_mean(ret) > 150.0, ret[::50]  # random play: ~22
    assert records[-1]["metrics"]["epsilon"] == pytest.approx(0.05)
    assert np.all(np.isfinite([r["metrics"]["loss/agent"] for r in records]))
    assert evals[-1]["returns"]["agent"]["mean"] > 150.0, evals  # greedy `act`


def _masked_config(algorithm: str):
    c = base_config(algorithm, "masked_choice")
    c.num_envs, c.num_steps, c.total_env_steps = 8, 4, 8 * 4 * 150
    c.algo.update(
        buffer_size=64,
        batch_size=8,
        learning_starts=256,
        target_update_interval=10,
        eps_decay=0.5,
        gamma=0.5,
        td_lambda=0.5,
    )
    c.policies.agent.update(hidden_sizes=(32,), gru_size=16, lr=3e-3)
    return c


@pytest.fixture(scope="module")
def vdn_masked():
    """VDN on `MaskedChoice` (2 agents, action masks): trainer, compiled train, metrics."""
    env = MaskedChoice(agents=2, num_choices=4, length=4)
    trainer = algorithms.make_train(_masked_config("vdn"), env, env.default_params)
    train = jax.jit(trainer)
    rs, metrics = train(jax.random.key(1))
    return trainer, train, jax.device_get(metrics), rs


def test_vdn_learns_with_action_masks_and_never_takes_a_masked_action(vdn_masked):
    _, _, m, _ = vdn_masked
    ret = m["episode_return/agent"]
    finite = ret[np.isfinite(ret)]
    # each of 4 steps pays 1 for the right action; a masked action would pay 1000
    assert finite.max() <= 4.0 + 1e-6
    assert finite[:5].mean() < 2.0  # ε-random start: about 4/3
    assert _last_quarter_mean(ret) > 3.0, ret[::10]


def test_same_seed_same_numbers_and_no_retrace(vdn_masked):
    _, train, m, _ = vdn_masked
    _, again = train(jax.random.key(1))
    for k in m:
        np.testing.assert_array_equal(m[k], np.asarray(again[k]), err_msg=k)
    _, other = train(jax.random.key(2))
    assert not np.array_equal(m["loss/agent"], np.asarray(other["loss/agent"]))
    assert train._cache_size() == 1  # three calls, one trace


def test_past_two_to_the_31_env_steps_epsilon_stays_low_and_learning_goes_on(vdn_masked):
    """Env steps are counted in float32: an int32 count wraps negative past 2^31 (ε back
    at its start, learning stopped)."""
    trainer, _, _, rs = vdn_masked
    far = rs.replace(iteration=jnp.asarray(2**31 // (8 * 4) + 10, jnp.int32))
    _, m = jax.jit(trainer.update)(far)
    assert float(m["epsilon"]) == pytest.approx(0.05)
    assert float(m["loss/agent"]) > 0.0


def test_recurrent_act_carries_the_gru_state_and_last_actions(vdn_masked):
    trainer, _, _, rs = vdn_masked
    env = MaskedChoice(agents=2, num_choices=4, length=4)
    params = trainer.get_params(rs)
    act = jax.jit(trainer.act)
    step = jax.jit(jax.vmap(env.step))
    state, ts = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.key(3), 5))
    carry = {"agent": {"h": jnp.zeros((5, 2, 16)), "prev": jnp.full((5, 2), -1, jnp.int32)}}
    stateless = act(params, jax.random.key(0), ts.obs, action_mask=ts.action_mask)
    a, carry = act(params, jax.random.key(0), ts.obs, action_mask=ts.action_mask, carry=carry)
    np.testing.assert_array_equal(a["agent"], stateless["agent"])  # zero carry = stateless
    for t in range(3):
        state, ts = step(jax.random.split(jax.random.key(t), 5), state, a)
        a, carry = act(params, jax.random.key(0), ts.obs, action_mask=ts.action_mask,
                       carry=carry)  # fmt: skip
        np.testing.assert_array_equal(carry["agent"]["prev"], a["agent"])
        phase = np.argmax(np.asarray(ts.obs["agent"]), -1)
        assert not np.any(np.asarray(a["agent"]) == phase)  # the masked action
    assert float(jnp.abs(carry["agent"]["h"]).sum()) > 0


def test_qmix_trains_on_groups_with_a_global_state():
    env = Counter(num_red=2, num_blue=3, length=5)
    for algorithm in ("qmix",):
        c = base_config(algorithm, "counter", policies={"team": ["red", "blue"]})
        c.num_envs, c.num_steps, c.total_env_steps = 2, 5, 2 * 5 * 4
        c.algo.update(buffer_size=4, batch_size=2, learning_starts=0, target_update_interval=1)
        c.algo.update(mixer_embed_dim=4, mixer_hypernet_hidden=8)
        c.policies.team.update(hidden_sizes=(8,), gru_size=0)  # the VDN test has a GRU
        trainer = algorithms.make_train(c, env, env.default_params)
        rs, m = jax.jit(trainer)(jax.random.key(0))
        assert np.all(np.asarray(m["loss/team"]) > 0), algorithm
        assert set(rs.policies["team"].params) == (
            {"agent", "mixer"} if algorithm == "qmix" else {"agent"}
        )
        assert int(rs.policies["team"].grad_steps) == 4
        assert rs.buffers["team"].data["obs"].shape == (4, 5, 5, 2)  # [C, T, A_p, O]
        if algorithm == "qmix":
            assert rs.buffers["team"].data["state"].shape == (4, 5, 6)


@pytest.mark.parametrize(
    ("algorithm", "env_name", "change", "message"),
    [
        ("iql", "Pendulum-v1", {}, "needs Discrete actions"),
        ("vdn", "CartPole-v1", {"algo.batch_size": 64, "algo.buffer_size": 8}, "exceeds"),
        ("qmix", "CartPole-v1", {"num_devices": 2}, "num_devices"),
        ("vdn", "CartPole-v1", {"algo.td_lambda": 1.5}, "config.algo.td_lambda"),
        ("qmix", "CartPole-v1", {"policies.agent.gru_size": -1}, "gru_size"),
    ],
)
def test_bad_configs_are_refused_by_name(algorithm, env_name, change, message):
    c = base_config(algorithm, env_name)
    for k, v in change.items():
        node = c
        *path, last = k.split(".")
        for p in path:
            node = node[p]
        node[last] = v
    with pytest.raises(ValueError, match=message):
        algorithms.make_train(c, None)


def test_every_experiment_preset_is_a_complete_config():
    with pytest.raises(ValueError, match="choose one experiment preset"):
        ql_configs.get_config("vdn_spread,qmix_spread")
    for preset in ql_configs.EXPERIMENTS:  # the MPE and SMAX ones included
        cfg = ql_configs.get_config(f"{preset},tiny")
        assert cfg.algorithm in algorithms.ALGORITHMS
        assert cfg.total_env_steps == cfg.num_envs * cfg.num_steps * 4
