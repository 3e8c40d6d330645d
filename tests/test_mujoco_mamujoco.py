"""MaMuJoCo partitions against Gymnasium-Robotics' ``mamujoco_v1`` from the same state.

Gymnasium-Robotics steps its env; its MuJoCo data goes to the device (`mjx.put_data`,
with the ``cfrc_ext`` its step computed) and our per-agent observations are read from
it: they must equal its ``_get_obs_agent`` for every agent (float32 rounding). The
action split, groups and spaces are compared directly. One slow test compiles a
partition's MJX step and compares a whole transition.
"""

from __future__ import annotations

import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mujoco import mjx

import jaxdrive
from environments.mujoco.base import MujocoState, PhysicsData
from environments.mujoco.mamujoco import PARTITIONS, MaMuJoCo
from environments.mujoco.reference import quiet_mujoco_warnings

mamujoco_v1 = pytest.importorskip("gymnasium_robotics").mamujoco_v1

REGISTERED = {
    "MaMuJoCo-Ant-2x4": ("Ant", "2x4"),
    "MaMuJoCo-Ant-4x2": ("Ant", "4x2"),
    "MaMuJoCo-HalfCheetah-6x1": ("HalfCheetah", "6x1"),
    "MaMuJoCo-Humanoid-9|8": ("Humanoid", "9|8"),
    "MaMuJoCo-Walker2d-2x3": ("Walker2d", "2x3"),
}


def _reference(scenario, conf, steps=4, seed=0, **kwargs):
    with quiet_mujoco_warnings():
        ref = mamujoco_v1.parallel_env(scenario, conf, agent_obsk=1, **kwargs)
    ref.reset(seed=seed)
    for _ in range(steps):
        ref.step({a: ref.action_space(a).sample() for a in ref.possible_agents})
    return ref


def _by_agent(env, per_group):
    """``{g: [A_g, ...]}`` -> the list of per-agent rows in agent order."""
    return [row for g in env.groups for row in np.asarray(per_group[g])]


@pytest.mark.parametrize("name", sorted(REGISTERED))
def test_registered_partitions(name):
    env, params = jaxdrive.make(name)
    assert (env.scenario, env.agent_conf) == REGISTERED[name]
    assert env.name == name
    assert params == env.single_agent_env.default_params


@pytest.mark.parametrize("scenario,conf", sorted(PARTITIONS))
def test_local_observations_and_action_split(scenario, conf):
    env = MaMuJoCo(scenario, conf, model="gymnasium")
    ref = _reference(scenario, conf)
    agents = ref.possible_agents
    assert sum(env.num_agents(g) for g in env.groups) == len(agents)
    same = len({ref.observation_space(a).shape + ref.action_space(a).shape for a in agents})
    assert (env.groups == ("agents",)) == (same == 1)
    single = ref.single_agent_env.unwrapped
    state = MujocoState(
        data=PhysicsData.of(mjx.put_data(single.model, single.data)),
        cfrc_ext=jnp.asarray(single.data.cfrc_ext, jnp.float32),
        time=jnp.zeros((), jnp.int32),
    )
    params = env.default_params
    ours = _by_agent(env, env.observations(state, params))
    for i, a in enumerate(agents):
        assert ours[i].shape == ref.observation_space(a).shape
        np.testing.assert_allclose(ours[i], ref._get_obs_agent(i), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(env.global_state(state, params), ref.state(), rtol=1e-5, atol=1e-5)
    acts = {a: ref.action_space(a).sample() for a in agents}
    grouped, i = {}, 0
    for g in env.groups:
        n = env.num_agents(g)
        grouped[g] = jnp.asarray(np.stack([acts[agents[i + j]] for j in range(n)]))
        assert env.action_space(g).shape == ref.action_space(agents[i]).shape
        i += n
    np.testing.assert_allclose(
        env.global_action(grouped), ref.map_local_actions_to_global_action(acts), rtol=1e-6
    )


def test_bad_partition():
    with pytest.raises(ValueError, match="unknown"):
        MaMuJoCo("Ant", "3x3")
    with pytest.raises(ValueError, match="agent_obsk"):
        MaMuJoCo("Ant", "4x2", agent_obsk=-1)


@pytest.mark.slow
def test_walker_partition_step_matches_reference():
    """One compiled MJX step of ``Walker2d 2x3`` (the ``"mjx"`` model, which the
    reference loads as its ``xml_file``) from the reference's state: every agent's
    observation, the shared reward and termination."""
    env = MaMuJoCo("Walker2d", "2x3")
    with tempfile.NamedTemporaryFile("w", suffix=".xml") as f:
        f.write(env.single_agent_env.model_xml())
        f.flush()
        ref = _reference("Walker2d", "2x3", xml_file=f.name)
    single = ref.single_agent_env.unwrapped
    state = jax.jit(env.single_agent_env.state_from)(single.data.qpos, single.data.qvel)
    import mujoco

    qpos, qvel = single.data.qpos.copy(), single.data.qvel.copy()
    mujoco.mj_resetData(single.model, single.data)
    single.set_state(qpos, qvel)
    acts = {a: ref.action_space(a).sample() for a in ref.possible_agents}
    obs, rew, term, _, _ = ref.step(acts)
    grouped = {"agents": jnp.asarray(np.stack([acts[a] for a in ref.possible_agents]))}
    _, ts = jax.jit(env.step)(jax.random.key(0), state, grouped, env.default_params)
    for i, a in enumerate(ref.possible_agents):
        np.testing.assert_allclose(ts.obs["agents"][i], obs[a], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(ts.reward["agents"][i], rew[a], rtol=1e-4, atol=1e-4)
        assert bool(ts.terminated["agents"][i]) == term[a]
