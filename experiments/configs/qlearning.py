"""The Q-learning family (PQN, IQL/DQN, VDN, QMIX) on CartPole, MPE and SMAX.

One experiment preset, plus ``tiny`` (a few iterations of tiny networks, for tests
and quick CPU runs): ``--config=experiments/configs/qlearning.py:qmix_spread,tiny``.

* ``pqn_cartpole`` (the default): PQN on CartPole-v1 with purejaxql's settings (32 envs ×
  64 steps, 4 epochs × 16 minibatches, λ = 0.95, two 256-unit LayerNorm layers, lr 1e-4
  decaying linearly, ε 1 → 0.2 over the first 20%, rewards × 0.1).
* ``dqn_cartpole``: IQL with one agent and a feed-forward network is DQN (double Q, hard
  target copies), here on 4-step sequences with Q(λ = 0.5) targets.
* ``iql_spread``, ``vdn_spread``, ``qmix_spread``: MPE ``simple_spread`` (3 agents,
  one shared GRU policy with agent IDs) with JaxMARL's recurrent Q-learning MPE settings
  (``ql_rnn_mpe.yaml``: 8 envs × one 25-step episode per iteration, replay of 5000
  episodes, batches of 32, γ = 0.9, lr 0.005 decaying linearly, hard target copies
  every 200 updates, ε 1 → 0.05 over the first 10%, mixer 32/128).
* ``qmix_smax``: QMIX on SMAX ``3s5z`` through the JaxMARL adapter with JaxMARL's SMAX
  settings (``ql_rnn_smax.yaml``: 16 envs × 128 steps, 512-unit GRU agents, 8 updates
  per iteration, lr 5e-5, targets copied every 10 iterations, γ = 0.99, rewards × 10).
"""

from __future__ import annotations

import ml_collections

from algorithms.common.config import base_config, parse_presets

EXPERIMENTS = (
    "pqn_cartpole",
    "dqn_cartpole",
    "iql_spread",
    "vdn_spread",
    "qmix_spread",
    "qmix_smax",
)
PRESETS = (*EXPERIMENTS, "tiny")


def _pqn_cartpole() -> ml_collections.ConfigDict:
    c = base_config("pqn", "CartPole-v1")
    c.num_envs, c.num_steps, c.total_env_steps = 32, 64, 500_000
    c.algo.update(td_lambda=0.95, eps_finish=0.2, reward_scale=0.1)
    c.policies.agent.update(lr=1e-4, hidden_sizes=(256, 256))
    return c


def _dqn_cartpole() -> ml_collections.ConfigDict:
    c = base_config("iql", "CartPole-v1")
    c.num_envs, c.num_steps, c.total_env_steps = 8, 4, 100_000
    c.algo.update(
        td_lambda=0.5,
        buffer_size=2_500,
        batch_size=32,
        learning_starts=1_000,
        target_update_interval=50,
        eps_decay=0.2,
        max_grad_norm=10.0,
    )
    c.policies.agent.update(
        lr=1e-3, hidden_sizes=(64, 64), gru_size=0, agent_id=False, last_action=False
    )
    c.run.iterations_per_chunk = 500
    return c


def _spread(algorithm: str) -> ml_collections.ConfigDict:
    c = base_config(algorithm, "MPE_simple_spread_v3")
    c.num_envs, c.num_steps, c.total_env_steps = 8, 25, 10_000_000
    c.algo.update(gamma=0.9, lr_schedule="linear", mixer_hypernet_hidden=128)
    c.policies.agent.update(last_action=False)
    c.run.iterations_per_chunk = 500
    return c


def _qmix_smax() -> ml_collections.ConfigDict:
    c = base_config("qmix", "jaxmarl:smax:3s5z", policies={"ally": ["ally"]})
    c.num_envs, c.num_steps, c.total_env_steps = 16, 128, 10_000_000
    c.algo.update(
        updates_per_iteration=8,
        target_update_interval=80,  # JaxMARL's 10 iterations of 8 updates
        max_grad_norm=10.0,
        reward_scale=10.0,
        mixer_embed_dim=64,
        mixer_hypernet_hidden=256,
    )
    c.policies.ally.update(lr=5e-5, hidden_sizes=(512,), gru_size=512, last_action=False)
    c.run.iterations_per_chunk = 20
    return c


def _tiny(c: ml_collections.ConfigDict) -> None:
    """A few iterations of tiny networks (the experiment's algorithm and env kept; SMAX:
    6-step battles)."""
    c.num_envs = 4
    c.num_steps = min(int(c.num_steps), 8)
    c.total_env_steps = c.num_envs * c.num_steps * 4
    c.run.iterations_per_chunk = 2
    c.run.animate = False
    if c.env_name.startswith("jaxmarl:smax:"):
        c.env_kwargs = ml_collections.ConfigDict({"max_steps": 6})  # episodes end in the run
    if c.algorithm == "pqn":
        c.algo.num_minibatches = 2
        c.algo.num_epochs = 2
    else:
        c.algo.update(buffer_size=8, batch_size=4, learning_starts=0, updates_per_iteration=1)
        c.algo.target_update_interval = 2
    for p in c.policies.keys():
        c.policies[p].hidden_sizes = (16,)
        if "gru_size" in c.policies[p] and c.policies[p].gru_size:
            c.policies[p].gru_size = 8


_BUILDERS = {
    "pqn_cartpole": _pqn_cartpole,
    "dqn_cartpole": _dqn_cartpole,
    "iql_spread": lambda: _spread("iql"),
    "vdn_spread": lambda: _spread("vdn"),
    "qmix_spread": lambda: _spread("qmix"),
    "qmix_smax": _qmix_smax,
}


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The run config of one experiment preset (default ``pqn_cartpole``), with
    ``tiny`` applied when named."""
    presets = parse_presets(preset, PRESETS)
    chosen = [p for p in presets if p in EXPERIMENTS]
    if len(chosen) > 1:
        raise ValueError(f"choose one experiment preset of {list(EXPERIMENTS)}, got {chosen}")
    c = _BUILDERS[chosen[0] if chosen else "pqn_cartpole"]()
    if "tiny" in presets:
        _tiny(c)
    return c
