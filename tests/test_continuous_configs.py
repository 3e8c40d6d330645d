"""The locomotion and MaMuJoCo experiment configs are complete and valid for their
algorithm: each preset builds its trainer against a stand-in env with the real env's
group, observation and action sizes (the MJX envs live in environments/mujoco)."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import pytest
from flax import struct

import algorithms
from experiments.configs import locomotion, mamujoco
from jaxdrive import Box, Env, EnvParams, TimeStep

#: Gymnasium v5 sizes: (observation, action, action bound)
SIZES = {
    "Humanoid-v5": (348, 17, 0.4),
    "Ant-v5": (105, 8, 1.0),
    "HalfCheetah-v5": (17, 6, 1.0),
    "Hopper-v5": (11, 3, 1.0),
    "Walker2d-v5": (17, 6, 1.0),
}


@struct.dataclass
class _Params(EnvParams):
    pass


@dataclasses.dataclass(frozen=True)
class StandIn(Env):
    """A Box env of the given sizes: ``group`` with ``agents`` agents; ``global_state``
    of ``state_size`` features (the single-agent observation, for MaMuJoCo)."""

    env_name: str
    obs_size: int
    act_size: int
    bound: float = 1.0
    group: str = "agent"
    agents: int = 1
    state_size: int = 1

    @property
    def name(self):
        return self.env_name

    @property
    def groups(self):
        return (self.group,)

    def num_agents(self, group):
        return self.agents

    def observation_space(self, group):
        return Box(-jnp.inf, jnp.inf, (self.obs_size,))

    def action_space(self, group):
        return Box(-self.bound, self.bound, (self.act_size,))

    @property
    def default_params(self):
        return _Params()

    @property
    def episode_length(self):
        return 1000

    def reset_env(self, key, params):
        obs = {self.group: jnp.zeros((self.agents, self.obs_size))}
        return jnp.zeros(()), TimeStep.restart(obs)

    def step_env(self, key, state, actions, params):
        obs = {self.group: jnp.zeros((self.agents, self.obs_size))}
        return state, TimeStep.restart(obs)

    def global_state(self, state, params):
        return jnp.zeros((self.state_size,))


@pytest.mark.parametrize(
    "preset",
    [*locomotion.ENVS, *(f"{e},{a}" for e in ("humanoid", "hopper") for a in ("sac", "td3")),
     "ant,tiny", "walker2d,td3,tiny"],
)  # fmt: skip
def test_locomotion_presets_build(preset):
    c = locomotion.get_config(preset)
    obs, act, bound = SIZES[c.env_name]
    trainer = algorithms.make_train(c, StandIn(c.env_name, obs, act, bound))
    assert trainer.num_iterations >= 2
    if c.algorithm == "ppo" and "tiny" not in preset:
        b = locomotion.BRAX_PPO[preset]
        assert c.num_envs == b.get("envs", 2048) and c.algo.normalize_obs
        assert c.policies.agent.action_head == "tanh_gaussian_state_std"
        # Brax's layout: unroll_length * batch_size * num_minibatches / num_envs steps
        assert c.num_steps * c.num_envs == b["unroll"] * b["batch"] * b["mb"]
    assert "action_repeat" not in c.env_kwargs
    if preset == "walker2d":  # Hopper's layout, gamma 0.997, reward scale 5
        assert (c.num_steps, c.algo.gamma, c.algo.reward_scale) == (80, 0.997, 5.0)
    if preset == "humanoid":
        assert (c.algo.gamma, c.algo.reward_scale, c.algo.ent_coef) == (0.97, 0.1, 1e-3)
        # Brax's samples per update from 10,240 envs × 32 steps (Brax: 2,048 × 160)
        assert (c.num_envs, c.num_steps) == (10_240, 32)
        assert (c.algo.num_minibatches, c.algo.num_epochs) == (32, 8)


@pytest.mark.parametrize("preset", ["", "ippo", "tiny", "ippo,tiny"])
def test_mamujoco_presets_build(preset):
    c = mamujoco.get_config(preset)
    assert c.env_name == "MaMuJoCo-Ant-4x2" and c.algorithm == "ppo"
    assert c.algo.centralized_critic == ("ippo" not in preset)
    assert c.policies.agents.agent_ids
    env = StandIn(c.env_name, 54, 2, group="agents", agents=4, state_size=105)
    trainer = algorithms.make_train(c, env)
    assert trainer.num_iterations >= 2


def test_bad_presets():
    with pytest.raises(ValueError, match="one env"):
        locomotion.get_config("ant,hopper")
    with pytest.raises(ValueError, match="one of sac/td3"):
        locomotion.get_config("sac,td3")
    with pytest.raises(ValueError, match="unknown config preset"):
        locomotion.get_config("cheetah")


@pytest.mark.parametrize("alg", ["sac", "td3"])
def test_pendulum_benchmark_configs_build(alg):
    from experiments.benchmarks.locomotion_learning import pendulum_config

    c = pendulum_config(alg)
    trainer = algorithms.make_train(c, None)  # Pendulum-v1 from the registry
    assert trainer.num_iterations == 20_000 // 64 and trainer.env_steps_per_iteration == 64


def test_locomotion_presets_for_two_gpus_and_suite_overrides():
    """``two_gpus`` doubles the envs and halves the steps (the same samples per update)
    on 2 devices partitioned by XLA; the learning suite's ``--learn_overrides`` parse
    ``key=value`` with Python literals and refuse anything else."""
    from experiments.benchmarks.locomotion_learning import _override
    from experiments.configs import locomotion

    one, two = locomotion.get_config("humanoid"), locomotion.get_config("humanoid,two_gpus")
    assert (two.num_devices, two.partitioner) == (2, "auto")
    assert (two.num_envs, two.num_steps) == (2 * one.num_envs, one.num_steps // 2)
    with pytest.raises(ValueError, match="two_gpus preset is for PPO"):
        locomotion.get_config("hopper,sac,two_gpus")
    assert _override("num_envs=4096") == ("num_envs", 4096)
    assert _override("algo.ent_coef=1e-3") == ("algo.ent_coef", 1e-3)
    assert _override("policies.agent.activation=relu") == ("policies.agent.activation", "relu")
    with pytest.raises(ValueError, match="is not key=value"):
        _override("num_envs")
