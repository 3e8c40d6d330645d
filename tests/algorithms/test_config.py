"""Run-config validation (`algorithms.common.config`): every bad value is a
``ValueError`` naming the key where it was set, raised before anything is compiled."""

from __future__ import annotations

import pytest

import algorithms
from algorithms.common import config as cfg
from experiments.configs import cartpole, pendulum


@pytest.mark.parametrize(
    ("section", "key", "value", "message"),
    [
        ("algo", "clip_eps", -0.1, r"config.algo.clip_eps must be >= 0, got -0.1"),
        ("algo", "value_clip_eps", -1.0, r"config.algo.value_clip_eps must be >= 0"),
        ("algo", "gamma", 1.5, r"config.algo.gamma must lie in \[0, 1\], got 1.5"),
        ("algo", "gae_lambda", float("nan"), r"config.algo.gae_lambda must lie in \[0, 1\]"),
        ("algo", "num_epochs", 0, r"config.algo.num_epochs must be a positive integer"),
        ("algo", "num_minibatches", 2.0, r"config.algo.num_minibatches must be a positive int"),
        ("algo", "vf_coef", -0.5, r"config.algo.vf_coef must be >= 0"),
        ("algo", "ent_coef", float("inf"), r"config.algo.ent_coef must be >= 0, got inf"),
        ("algo", "max_grad_norm", -1.0, r"config.algo.max_grad_norm must be >= 0"),
        ("algo", "adam_eps", -1e-5, r"config.algo.adam_eps must be > 0"),
        ("algo", "normalize_obs", "yes", r"config.algo.normalize_obs must be True or False"),
        ("algo", "lr_schedule", "cosine", r"config.algo.lr_schedule must be one of"),
        ("agent", "lr", -1.0, r"config.policies.agent.lr must be > 0, got -1.0"),
        ("agent", "lr", "fast", r"config.policies.agent.lr must be a number, got 'fast'"),
        ("agent", "hidden_sizes", (0,), r"config.policies.agent.hidden_sizes entries must be a p"),
        ("agent", "hidden_sizes", (64, -1), r"hidden_sizes entries must be a positive integer"),
        ("agent", "hidden_sizes", (), r"config.policies.agent.hidden_sizes must list at least"),
        ("agent", "input_pad_multiple", 0, r"input_pad_multiple must be a positive integer"),
        ("agent", "compute_dtype", "float16", r"agent.compute_dtype must be one of"),
        ("agent", "clip_eps", -0.2, r"config.policies.agent.clip_eps must be >= 0"),
    ],
)
def test_on_policy_bad_values_name_their_key(section, key, value, message):
    c = cartpole.get_config("tiny").to_dict()  # a dict: values of any type
    (c["algo"] if section == "algo" else c["policies"]["agent"])[key] = value
    with pytest.raises(ValueError, match=message):
        algorithms.make_train(c, None)


@pytest.mark.parametrize(
    ("section", "key", "value", "message"),
    [
        ("algo", "tau", 0.0, r"config.algo.tau must lie in \(0, 1\], got 0.0"),
        ("algo", "buffer_size", 0, r"config.algo.buffer_size must be a positive integer"),
        ("algo", "learning_starts", -1, r"learning_starts must be a non-negative integer"),
        ("algo", "noise", "pink", r"config.algo.noise must be one of \['gaussian', 'ou'\]"),
        ("algo", "max_grad_norm", -1.0, r"config.algo.max_grad_norm must be >= 0"),
        ("agent", "actor_lr", -1e-3, r"config.policies.agent.actor_lr must be > 0"),
        ("agent", "hidden_sizes", (0,), r"config.policies.agent.hidden_sizes entries must be"),
        ("agent", "activation", "sigmoidish", r"agent.activation must be one of .*sigmoidish"),
    ],
)
def test_ddpg_bad_values_name_their_key(section, key, value, message):
    c = pendulum.get_config("tiny").to_dict()
    (c["algo"] if section == "algo" else c["policies"]["agent"])[key] = value
    with pytest.raises(ValueError, match=message):
        algorithms.make_train(c, None)


def test_top_level_and_keys():
    c = cartpole.get_config("tiny").to_dict()
    c["seed"] = "zero"
    with pytest.raises(ValueError, match="config.seed must be an integer"):
        algorithms.make_train(c, None)
    c["seed"] = 10**20
    with pytest.raises(ValueError, match="config.seed must fit in 64 bits, got 1000"):
        algorithms.make_train(c, None)
    c = cartpole.get_config("tiny")
    c.num_steps = 0
    with pytest.raises(ValueError, match="config.num_steps must be a positive integer, got 0"):
        algorithms.make_train(c, None)
    with pytest.raises(ValueError, match=r"unknown config key\(s\) \['b'\] in x; allowed: \['a'\]"):
        cfg.check_config_keys({"a": 1, "b": 2}, {"a"}, "x")
    with pytest.raises(ValueError, match=r"\['b'\] in x: why"):
        cfg.check_config_keys({"a": 1, "b": 2}, {"a"}, "x", hints={"b": "why"})
    # a value set in config.algo but overridden by the policy is named where it was set
    c = cartpole.get_config("tiny")
    c.policies.agent.gamma = 2.0
    with pytest.raises(ValueError, match=r"config.policies.agent.gamma must lie in"):
        algorithms.make_train(c, None)
