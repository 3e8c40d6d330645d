"""SAC (soft actor-critic, twin critics, learned temperature) as one jitted program.

``make_train(config, env, env_params) -> Trainer`` (see `jaxdrive.training`), built on
the off-policy skeleton `algorithms.common.off_policy`: each iteration runs ``T`` steps
of ``N`` envs into the device replay buffer, then ``updates_per_iteration`` gradient
steps per learning policy (the update-to-data ratio is ``updates_per_iteration / (N·T)``
gradient steps per env step), all in one jitted ``update``. SAC's parts:

* acting: ``a = tanh(u)``, ``u ~ N(μ(s), σ(s)²)`` from `SquashedGaussianActor` (uniform
  random actions until ``learning_starts`` env steps); ``act(deterministic=True)``
  gives ``tanh(μ(s))``;
* a gradient step (`algorithms.sac.losses`): the twin critics on the soft TD target
  with the target critics, the actor on ``α log π − min Q`` with the new critics, the
  temperature ``log α`` on ``−log α (log π + H̄)`` (``autotune``; the target entropy
  ``H̄`` is ``target_entropy``, ``−D`` when ``None``), then Polyak updates of the target
  critics (rate ``tau``).

Multi-policy, multi-group, ``frozen`` policies and per-policy overrides work as in DDPG.
Metrics: those of `algorithms.common.off_policy` with ``loss/<policy>/actor``,
``loss/<policy>/critic``, ``loss/<policy>/alpha`` (the temperature used),
``loss/<policy>/alpha_loss`` and ``loss/<policy>/entropy`` (``−mean log π``).

Example:
    >>> import jax, jaxdrive
    >>> from algorithms.sac import default_config, make_train
    >>> config = default_config()
    >>> config.num_envs, config.num_steps, config.total_env_steps = 2, 4, 16
    >>> config.algo.update(batch_size=8, learning_starts=8)
    >>> config.policies.agent.hidden_sizes = (16,)
    >>> trainer = make_train(config, *jaxdrive.make("Pendulum-v1"))
    >>> state, metrics = jax.jit(trainer)(jax.random.key(0))
    >>> sorted(k.split("/")[-1] for k in metrics if k.startswith("loss/"))
    ['actor', 'alpha', 'alpha_loss', 'critic', 'entropy']
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct

from algorithms.common import off_policy as op
from algorithms.common.config_rules import Rule, flag, number
from algorithms.ddpg import buffer as rb
from algorithms.ddpg import losses as dl
from algorithms.sac import losses
from algorithms.sac.networks import SquashedGaussianActor
from jaxdrive.training import Trainer

__all__ = [
    "ALGO_DEFAULTS",
    "POLICY_DEFAULTS",
    "RUN_DEFAULTS",
    "SAC_RULES",
    "PolicyState",
    "default_config",
    "make_train",
]

#: ``config.algo`` keys and defaults (each may be overridden per policy).
ALGO_DEFAULTS: dict[str, Any] = {
    **op.REPLAY_DEFAULTS,  # gamma, tau, buffer_size, batch_size, learning_starts, ...
    "reward_scale": 1.0,  # rewards multiplied by this in learning (Brax's reward_scaling)
    "alpha_init": 1.0,  # initial temperature α
    "autotune": True,  # learn log α towards the target entropy (False: α fixed)
    "target_entropy": None,  # H̄ (nats); None: −D, the negated action size
}
#: Keys of one policy's config (besides `ALGO_DEFAULTS` overrides) and their defaults.
POLICY_DEFAULTS: dict[str, Any] = {
    "groups": None,  # env groups this policy acts for (parameter sharing); required
    "actor_lr": 3e-4,  # Adam learning rate of the actor
    "critic_lr": 3e-4,  # Adam learning rate of the twin critics
    "alpha_lr": 3e-4,  # Adam learning rate of log α
    "hidden_sizes": (256, 256),  # MLP layers of actor and critics
    "activation": "relu",  # one of algorithms.common.layers.ACTIVATIONS
    "frozen": False,  # act deterministically but never learn
}
#: Host-loop defaults over `algorithms.common.config.RUN_DEFAULTS` (short iterations).
RUN_DEFAULTS: dict[str, Any] = {"iterations_per_chunk": 100}


def _entropy_rule(v: Any, name: str) -> float | None:
    return None if v is None else number()(v, name)


#: Value rules of the SAC hyper-parameters (policy keys and ``algo`` keys).
SAC_RULES: dict[str, Rule] = {
    **op.REPLAY_RULES,
    "reward_scale": number(0.0, lo_open=True),
    "alpha_init": number(0.0, lo_open=True),
    "autotune": flag,
    "target_entropy": _entropy_rule,
    "alpha_lr": number(0.0, lo_open=True),
}


def default_config() -> ml_collections.ConfigDict:
    """A complete SAC config (Pendulum-v1, one policy ``"agent"``, 8 steps per
    iteration) to start from."""
    return op.default_config("sac")


@struct.dataclass
class PolicyState:
    """One policy's learnable state (parameter pytrees and optax states)."""

    actor: Any  # actor params
    critic: Any  # twin-critic params (leaves with a leading axis of 2)
    target_critic: Any  # Polyak-averaged copy of `critic`
    log_alpha: jax.Array  # [] float32, log of the temperature α
    actor_opt: Any  # optax state of the actor's optimiser
    critic_opt: Any  # optax state of the critics' optimiser
    alpha_opt: Any  # optax state of log α's optimiser


@dataclasses.dataclass(frozen=True, eq=False)
class _Nets:
    actor: SquashedGaussianActor
    critic: op.TwinQNetwork
    actor_tx: optax.GradientTransformation
    critic_tx: optax.GradientTransformation
    alpha_tx: optax.GradientTransformation
    target_entropy: float


def _build(p: op.OffPolicy) -> _Nets:
    hp = p.hp
    h = hp["target_entropy"]
    return _Nets(
        actor=SquashedGaussianActor(p.action_dim, hp["hidden_sizes"], hp["activation"]),
        critic=op.TwinQNetwork(hp["hidden_sizes"], hp["activation"]),
        actor_tx=op.optimizer(hp["actor_lr"], hp["max_grad_norm"]),
        critic_tx=op.optimizer(hp["critic_lr"], hp["max_grad_norm"]),
        alpha_tx=optax.adam(hp["alpha_lr"]),
        target_entropy=-float(p.action_dim) if h is None else float(h),
    )


def _init_policy(key: jax.Array, p: op.OffPolicy) -> PolicyState:
    """Fresh actor and critics (targets equal to them), ``log α = log alpha_init``."""
    actor, critic = op.init_networks(key, p)
    log_alpha = jnp.asarray(math.log(p.hp["alpha_init"]), jnp.float32)
    return PolicyState(
        actor=actor,
        critic=critic,
        target_critic=critic,
        log_alpha=log_alpha,
        actor_opt=p.nets.actor_tx.init(actor),
        critic_opt=p.nets.critic_tx.init(critic),
        alpha_opt=p.nets.alpha_tx.init(log_alpha),
    )


def _mean_action(p: op.OffPolicy, params: Any, obs: jax.Array) -> jax.Array:
    """``tanh(μ(s))``: ``[..., *O] -> [..., D]``."""
    dist = op.actor_apply(p, params, obs)
    return dist.to_env(dist.mode())


def _sample_action(p: op.OffPolicy, params: Any, key: jax.Array, obs: jax.Array) -> jax.Array:
    return losses.sample_action(op.actor_apply(p, params, obs), key)[0]


def _explore(p: op.OffPolicy, ps: PolicyState, key, obs, noise):
    return _sample_action(p, ps.actor, key, obs), noise


def _gradient_step(p: op.OffPolicy, ps: PolicyState, buf: rb.ReplayBuffer, key: jax.Array):
    """Critics, actor (on the new critics), temperature, then the target critics."""
    nets, hp = p.nets, p.hp
    dist, q = functools.partial(op.actor_apply, p), functools.partial(op.critic_apply, p)
    k_batch, k_next, k_pi = jax.random.split(key, 3)
    batch = op.scaled_rewards(rb.sample(buf, k_batch, hp["batch_size"]), hp["reward_scale"])
    alpha = jnp.exp(ps.log_alpha)
    (c_loss, q_mean), c_grads = jax.value_and_grad(losses.critic_loss, has_aux=True)(
        ps.critic, ps.target_critic, ps.actor, alpha, batch, k_next, hp["gamma"], dist, q
    )
    upd, critic_opt = nets.critic_tx.update(c_grads, ps.critic_opt, ps.critic)
    critic = optax.apply_updates(ps.critic, upd)
    (a_loss, logp), a_grads = jax.value_and_grad(losses.actor_loss, has_aux=True)(
        ps.actor, critic, alpha, batch, k_pi, dist, q
    )
    upd, actor_opt = nets.actor_tx.update(a_grads, ps.actor_opt, ps.actor)
    actor = optax.apply_updates(ps.actor, upd)
    t_loss, t_grad = jax.value_and_grad(losses.temperature_loss)(
        ps.log_alpha, logp, nets.target_entropy, batch.active
    )
    log_alpha, alpha_opt = ps.log_alpha, ps.alpha_opt
    if hp["autotune"]:
        upd, alpha_opt = nets.alpha_tx.update(t_grad, ps.alpha_opt, ps.log_alpha)
        log_alpha = optax.apply_updates(ps.log_alpha, upd)
    new = PolicyState(
        actor=actor,
        critic=critic,
        target_critic=dl.soft_update(ps.target_critic, critic, hp["tau"]),
        log_alpha=log_alpha,
        actor_opt=actor_opt,
        critic_opt=critic_opt,
        alpha_opt=alpha_opt,
    )
    stats = {
        "actor": a_loss,
        "critic": c_loss,
        "alpha": alpha,
        "alpha_loss": t_loss,
        "entropy": -dl.weighted_mean(logp, batch.active),
        "q_mean": q_mean,
    }
    return new, stats


_SAC = op.OffPolicyAlgorithm(
    name="sac",
    label="SAC",
    algo_defaults=ALGO_DEFAULTS,
    policy_defaults=POLICY_DEFAULTS,
    rules=SAC_RULES,
    build=_build,
    init_policy=_init_policy,
    explore=_explore,
    mean_action=_mean_action,
    sample_action=_sample_action,
    gradient_step=_gradient_step,
)


def make_train(config: Any, env: Any = None, env_params: Any = None) -> Trainer:
    """Builds the SAC `Trainer` for ``env`` (``jaxdrive.make(config.env_name)`` if None).

    Raises ``ValueError`` for unknown config keys, bad values, ``batch_size >
    buffer_size``, groups without a policy, non-`Box` or unbounded action spaces, or
    several devices.
    """
    return op.make_off_policy_trainer(config, env, env_params, _SAC)
