"""Agent-ID inputs: `jaxdrive.agent_ids` (features, the `AgentIDs` wrapper on two groups
and on an env with `Env.observations` and action masks) and the on-policy policy key
``agent_ids`` (the features a policy's network reads)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import algorithms
import jaxdrive
from algorithms.common.config import base_config, resolve_run
from algorithms.common.on_policy import POLICY_DEFAULTS, POLICY_RULES
from algorithms.common.on_policy_setup import build_setup
from algorithms.ppo.losses import ppo_loss
from jaxdrive.agent_ids import AgentIDs, agent_id_features
from jaxdrive.spaces import Box
from tests.toy_envs import Counter, MaskedChoiceObs


def test_features():
    f = agent_id_features((2, 3))
    np.testing.assert_array_equal(f, np.concatenate([np.eye(3)[:2], np.eye(3)]))
    g = agent_id_features((2, 3), group_ids=True)
    assert g.shape == (5, 5)
    np.testing.assert_array_equal(g[:, 3:], [[1, 0], [1, 0], [0, 1], [0, 1], [0, 1]])
    with pytest.raises(ValueError, match="counts must be positive"):
        agent_id_features((2, 0))


@pytest.mark.parametrize("group_ids", [False, True])
def test_wrapper(group_ids):
    env = AgentIDs(Counter(), group_ids=group_ids)
    f = 3 + (2 if group_ids else 0)
    assert env.num_features == f
    for g in env.groups:  # equal spaces stay equal (one policy may serve both groups)
        assert env.observation_space(g) == env.observation_space("red")
        assert env.observation_space(g).shape == (2 + f,)
    _, ts = env.reset(jax.random.key(0))
    _, ts1 = env.step(jax.random.key(1), _, env.sample_actions(jax.random.key(2)))
    want = agent_id_features((2, 3), group_ids)
    for o in (ts.obs, ts1.obs):
        np.testing.assert_array_equal(o["red"][:, 2:], want[:2])
        np.testing.assert_array_equal(o["blue"][:, 2:], want[2:])


def test_wrapper_with_observations_and_masks():
    """An env with `Env.observations` (auto-reset by select) and action masks."""
    env = AgentIDs(MaskedChoiceObs())
    assert env.has_observations and env.reset_by_select
    venv = jaxdrive.vectorize(env, 3, auto_reset=True)
    step = jax.jit(venv.step)
    state, ts = venv.reset(jax.random.key(0))
    space = env.observation_space("agent")
    assert space.shape == (6,) and bool(jnp.all(space.contains(ts.obs["agent"])))
    for _ in range(5):  # through an auto-reset (select: `observations` of the new states)
        state, ts = step(jax.random.key(1), state, {"agent": jnp.zeros((3, 2), jnp.int32)})
        assert ts.action_mask["agent"].shape == (3, 2, 4)
    np.testing.assert_array_equal(ts.obs["agent"][..., 4:], np.broadcast_to(np.eye(2), (3, 2, 2)))
    np.testing.assert_array_equal(jax.vmap(env.observations, (0, None))(state, None)["agent"],
                                  ts.obs["agent"])  # fmt: skip


def test_wrapper_refuses_non_flat_observations():
    class Image(Counter):
        def observation_space(self, group):
            return Box(0.0, 1.0, (2, 2))

    with pytest.raises(ValueError, match="group 'red''s observations must be a 1-D Box"):
        AgentIDs(Image())


def test_policy_key_appends_features():
    """``agent_ids=True``: a policy serving both groups reads its agents' one-hot index
    within their group and the group's one-hot after the observation."""
    env = Counter()
    c = base_config("ppo", "counter", policies={"shared": ["red", "blue"]})
    c.policies.shared.agent_ids = True
    run = resolve_run(c, env, None, algorithm="ppo", algo_defaults=algorithms.ppo.ALGO_DEFAULTS,
                      policy_defaults=POLICY_DEFAULTS, rules=POLICY_RULES)  # fmt: skip
    ps = build_setup(run, ppo_loss, False).policies["shared"]
    assert ps.obs_size == 2 + 3 + 2
    obs = jnp.arange(4 * 5 * 2, dtype=jnp.float32).reshape(4, 5, 2)
    x = ps.flat_obs(obs, 2)
    np.testing.assert_array_equal(x[..., :2], obs)
    np.testing.assert_array_equal(
        x[..., 2:7], np.broadcast_to(agent_id_features((2, 3), True), (4, 5, 5))
    )
    trainer = algorithms.make_train(c, env, env.default_params)
    params = jax.eval_shape(lambda k: trainer.get_params(trainer.init(k)), jax.random.PRNGKey(0))
    kernel = params["shared"]["params"]["params"]["actor_torso"]["dense_0"]["kernel"]
    assert kernel.shape[0] == 7
    obs_g = {"red": obs[:, :2], "blue": obs[:, 2:]}
    a = jax.eval_shape(trainer.act, params, jax.random.key(0), obs_g)
    assert a["red"].shape == (4, 2) and a["blue"].shape == (4, 3)
