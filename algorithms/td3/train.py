"""TD3 (twin delayed deep deterministic policy gradient) as one jitted program.

``make_train(config, env, env_params) -> Trainer`` (see `jaxdrive.training`), built on
the off-policy skeleton `algorithms.common.off_policy` like DDPG, whose exploration it
shares (``μ(s)`` plus Gaussian or Ornstein–Uhlenbeck noise, uniform random actions until
``learning_starts`` env steps). TD3's gradient step (`algorithms.td3.losses`):

* twin critics regress on ``r + γ (1 − terminated) min_k Q'_k(s', a')`` with the target
  actor's action smoothed, ``a' = clip(μ'(s') + clip(ε, ±noise_clip), ±1)``,
  ``ε ~ N(0, target_noise²)``;
* every ``policy_delay``-th gradient step (counted per policy, from 1), the actor steps
  on ``−Q_1(s, μ(s))`` with the new critics and both target networks move by Polyak
  averaging (rate ``tau``); the other steps leave actor and targets unchanged.

Metrics: those of `algorithms.common.off_policy` with ``loss/<policy>/actor`` (the actor
loss at every step, whether or not it was applied) and ``loss/<policy>/critic``.

Example:
    >>> import jax, jaxdrive
    >>> from algorithms import td3
    >>> c = td3.default_config()
    >>> c.num_envs, c.num_steps, c.total_env_steps = 2, 4, 24
    >>> c.algo.update(batch_size=8, learning_starts=8, updates_per_iteration=3)
    >>> c.policies.agent.hidden_sizes = (16,)
    >>> state, _ = jax.jit(td3.make_train(c, *jaxdrive.make("Pendulum-v1")))(jax.random.key(0))
    >>> int(state.policies["agent"].steps)  # 3 iterations of 3 gradient steps
    9
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct

from algorithms.common import off_policy as op
from algorithms.common.config_rules import DDPG_RULES, Rule, integer, number
from algorithms.common.networks import DeterministicActor
from algorithms.ddpg import buffer as rb
from algorithms.ddpg import losses as dl
from algorithms.ddpg.train import ALGO_DEFAULTS as _DDPG_ALGO_DEFAULTS
from algorithms.td3 import losses
from jaxdrive.training import Trainer

__all__ = [
    "ALGO_DEFAULTS",
    "POLICY_DEFAULTS",
    "RUN_DEFAULTS",
    "TD3_RULES",
    "PolicyState",
    "default_config",
    "make_train",
]

#: ``config.algo`` keys and defaults: DDPG's (its exploration noise included) and the
#: three TD3 settings. Each may be overridden per policy.
ALGO_DEFAULTS: dict[str, Any] = {
    **_DDPG_ALGO_DEFAULTS,
    "policy_delay": 2,  # critic steps per actor (and target) step
    "target_noise": 0.2,  # std of the target policy smoothing noise (normalised units)
    "noise_clip": 0.5,  # its clip
    "reward_scale": 1.0,  # rewards multiplied by this in learning (Brax's reward_scaling)
}
#: Keys of one policy's config (besides `ALGO_DEFAULTS` overrides) and their defaults.
POLICY_DEFAULTS: dict[str, Any] = {
    "groups": None,  # env groups this policy acts for (parameter sharing); required
    "actor_lr": 3e-4,  # Adam learning rate of the actor
    "critic_lr": 3e-4,  # Adam learning rate of the twin critics
    "hidden_sizes": (256, 256),  # MLP layers of actor and critics
    "activation": "relu",  # one of algorithms.common.layers.ACTIVATIONS
    "frozen": False,  # act (without noise) but never learn
}
#: Host-loop defaults over `algorithms.common.config.RUN_DEFAULTS` (short iterations).
RUN_DEFAULTS: dict[str, Any] = {"iterations_per_chunk": 100}

#: Value rules of the TD3 hyper-parameters (policy keys and ``algo`` keys).
TD3_RULES: dict[str, Rule] = {
    **DDPG_RULES,
    "policy_delay": integer(1),
    "target_noise": number(0.0),
    "noise_clip": number(0.0),
    "reward_scale": number(0.0, lo_open=True),
}


def default_config() -> ml_collections.ConfigDict:
    """A complete TD3 config (Pendulum-v1, one policy ``"agent"``, 8 steps per
    iteration) to start from."""
    return op.default_config("td3")


@struct.dataclass
class PolicyState:
    """One policy's learnable state (parameter pytrees, optax states, a step count)."""

    actor: Any  # actor params
    critic: Any  # twin-critic params (leaves with a leading axis of 2)
    target_actor: Any  # Polyak-averaged copy of `actor`
    target_critic: Any  # Polyak-averaged copy of `critic`
    actor_opt: Any  # optax state of the actor's optimiser
    critic_opt: Any  # optax state of the critics' optimiser
    steps: jax.Array  # [] int32, gradient steps taken


@dataclasses.dataclass(frozen=True, eq=False)
class _Nets:
    actor: DeterministicActor  # normalised output, in [-1, 1]
    critic: op.TwinQNetwork
    actor_tx: optax.GradientTransformation
    critic_tx: optax.GradientTransformation


def _build(p: op.OffPolicy) -> _Nets:
    hp = p.hp
    return _Nets(
        actor=op.deterministic_actor(p),
        critic=op.TwinQNetwork(hp["hidden_sizes"], hp["activation"]),
        actor_tx=op.optimizer(hp["actor_lr"], hp["max_grad_norm"]),
        critic_tx=op.optimizer(hp["critic_lr"], hp["max_grad_norm"]),
    )


def _q1(p: op.OffPolicy, params: Any, obs: jax.Array, action: jax.Array) -> jax.Array:
    """The first critic: ``([..., *O], [..., D]) -> [...]``."""
    return op.critic_apply(p, params, obs, action)[0]


def _init_policy(key: jax.Array, p: op.OffPolicy) -> PolicyState:
    """Fresh actor and critics (targets equal to them), optimiser states, 0 steps."""
    actor, critic = op.init_networks(key, p)
    return PolicyState(
        actor=actor,
        critic=critic,
        target_actor=actor,
        target_critic=critic,
        actor_opt=p.nets.actor_tx.init(actor),
        critic_opt=p.nets.critic_tx.init(critic),
        steps=jnp.zeros((), jnp.int32),
    )


def _gradient_step(p: op.OffPolicy, ps: PolicyState, buf: rb.ReplayBuffer, key: jax.Array):
    """A critic step; every ``policy_delay``-th step also an actor step and the targets."""
    nets, hp = p.nets, p.hp
    mu, q, q1 = (functools.partial(f, p) for f in (op.actor_apply, op.critic_apply, _q1))
    k_batch, k_smooth = jax.random.split(key)
    batch = op.scaled_rewards(rb.sample(buf, k_batch, hp["batch_size"]), hp["reward_scale"])
    (c_loss, q_mean), c_grads = jax.value_and_grad(losses.critic_loss, has_aux=True)(
        ps.critic,
        ps.target_actor,
        ps.target_critic,
        batch,
        k_smooth,
        hp["gamma"],
        hp["target_noise"],
        hp["noise_clip"],
        mu,
        q,
    )
    upd, critic_opt = nets.critic_tx.update(c_grads, ps.critic_opt, ps.critic)
    critic = optax.apply_updates(ps.critic, upd)
    steps = ps.steps + 1

    def delayed(_):
        a_loss, a_grads = jax.value_and_grad(dl.actor_loss)(ps.actor, critic, batch, mu, q1)
        upd, actor_opt = nets.actor_tx.update(a_grads, ps.actor_opt, ps.actor)
        actor = optax.apply_updates(ps.actor, upd)
        t_actor = dl.soft_update(ps.target_actor, actor, hp["tau"])
        t_critic = dl.soft_update(ps.target_critic, critic, hp["tau"])
        return actor, actor_opt, t_actor, t_critic, a_loss

    def wait(_):
        a_loss = dl.actor_loss(ps.actor, critic, batch, mu, q1)
        return ps.actor, ps.actor_opt, ps.target_actor, ps.target_critic, a_loss

    actor, actor_opt, t_actor, t_critic, a_loss = jax.lax.cond(
        steps % hp["policy_delay"] == 0, delayed, wait, None
    )
    new = PolicyState(
        actor=actor,
        critic=critic,
        target_actor=t_actor,
        target_critic=t_critic,
        actor_opt=actor_opt,
        critic_opt=critic_opt,
        steps=steps,
    )
    return new, {"actor": a_loss, "critic": c_loss, "q_mean": q_mean}


_TD3 = op.OffPolicyAlgorithm(
    name="td3",
    label="TD3",
    algo_defaults=ALGO_DEFAULTS,
    policy_defaults=POLICY_DEFAULTS,
    rules=TD3_RULES,
    build=_build,
    init_policy=_init_policy,
    explore=op.deterministic_explore,
    mean_action=op.actor_apply,
    sample_action=op.deterministic_act,
    gradient_step=_gradient_step,
)


def make_train(config: Any, env: Any = None, env_params: Any = None) -> Trainer:
    """Builds the TD3 `Trainer` for ``env`` (``jaxdrive.make(config.env_name)`` if None).

    Raises ``ValueError`` for unknown config keys, bad values, ``batch_size >
    buffer_size``, groups without a policy, non-`Box` or unbounded action spaces, or
    several devices.
    """
    return op.make_off_policy_trainer(config, env, env_params, _TD3)
