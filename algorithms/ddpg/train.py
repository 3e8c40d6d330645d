"""DDPG (deterministic policy gradient with replay and target networks) as one program.

``make_train(config, env, env_params) -> Trainer`` (see `jaxdrive.training`), built on
the off-policy skeleton `algorithms.common.off_policy` (rollout into the device replay
buffer, ``updates_per_iteration`` gradient steps per iteration, one jitted ``update``).
DDPG's parts:

* acting: the actor ``μ(s)`` plus Gaussian or Ornstein–Uhlenbeck noise (uniform random
  actions until ``learning_starts`` env steps);
* a gradient step: critic on the TD target ``r + γ (1 − terminated) Q'(s', μ'(s'))``,
  actor on ``−Q(s, μ(s))`` (with the new critic), then Polyak updates of both target
  networks.

Policies serve groups (parameter sharing within a policy; the groups of a policy need
the same observation shape and the same `Box` action space). Each policy has its own
networks, optimisers, learning rates and buffer, and may override any ``config.algo``
key for itself (e.g. ``policies.runner.noise_scale = 0.3``); a ``frozen`` policy acts
deterministically and never learns (it keeps no buffer).

Metrics (float32 scalars per iteration): ``loss/<policy>/actor``,
``loss/<policy>/critic`` (means over the iteration's gradient steps; 0 before learning
starts), ``q_mean`` (mean ``Q(s, a)`` on the sampled batches, averaged over learning
policies; ``q_mean/<policy>`` too when there are several), ``episode_return/<group>``
(mean over the group's agents and over the episodes that ended in this iteration; it
keeps the last value when none ended, NaN before the first), ``episodes_done`` (episodes
ended in this iteration) and ``env_steps`` (env steps so far).

Dimension letters: ``T`` steps per iteration, ``N`` envs, ``A_g`` agents of group
``g``, ``A_p`` agents served by policy ``p`` (summed over its groups), ``O`` one
agent's observation shape, ``D`` its action size, ``C`` buffer capacity.

Example:
    >>> import jax, jaxdrive
    >>> from algorithms.ddpg import default_config, make_train
    >>> config = default_config()
    >>> config.num_envs, config.num_steps, config.total_env_steps = 2, 4, 16
    >>> config.algo.batch_size, config.algo.learning_starts = 8, 8
    >>> config.policies.agent.hidden_sizes = (16,)
    >>> trainer = make_train(config, *jaxdrive.make("Pendulum-v1"))
    >>> state, metrics = jax.jit(trainer)(jax.random.key(0))
    >>> metrics["env_steps"].tolist()
    [8.0, 16.0]
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
from algorithms.common.config_rules import DDPG_RULES
from algorithms.common.networks import DeterministicActor, QNetwork
from algorithms.ddpg import buffer as rb
from algorithms.ddpg import losses
from jaxdrive.training import Trainer

__all__ = [
    "ALGO_DEFAULTS",
    "HPARAM_KEYS",
    "POLICY_DEFAULTS",
    "RUN_DEFAULTS",
    "PolicyState",
    "RunnerState",
    "default_config",
    "from_env_action",
    "make_train",
    "to_env_action",
]

#: ``config.algo`` keys and defaults. A policy's config may override any of them for
#: that policy only (e.g. ``policies.runner.noise_scale = 0.3``).
ALGO_DEFAULTS: dict[str, Any] = {
    **op.REPLAY_DEFAULTS,  # gamma, tau, buffer_size, batch_size, learning_starts, ...
    "noise": "gaussian",  # exploration noise: "gaussian" | "ou"
    "noise_scale": 0.1,  # noise multiplier, in normalised action units ([-1, 1])
    "ou_theta": 0.15,  # OU mean reversion per step
    "ou_sigma": 0.2,  # OU step standard deviation
}
#: Keys of one policy's config (besides `ALGO_DEFAULTS` overrides) and their defaults.
POLICY_DEFAULTS: dict[str, Any] = {
    "groups": None,  # env groups this policy acts for (parameter sharing); required
    "actor_lr": 1e-3,  # Adam learning rate of the actor
    "critic_lr": 1e-3,  # Adam learning rate of the critic
    "hidden_sizes": (256, 256),  # MLP layers of actor and critic
    "activation": "relu",  # one of algorithms.common.layers.ACTIVATIONS
    "frozen": False,  # act (without noise) but never learn
}
#: DDPG's host-loop defaults, over `algorithms.common.config.RUN_DEFAULTS`: its
#: iterations are short (a few env steps each), so a chunk holds more of them.
RUN_DEFAULTS: dict[str, Any] = {"iterations_per_chunk": 100}
#: Hyper-parameters kept in each policy's state (``PolicyState.hparams``) and read from
#: there, so that members of a population (`algorithms.population`) may differ in them.
HPARAM_KEYS = ("actor_lr", "critic_lr", "gamma", "tau", "noise_scale")

RunnerState = op.RunnerState
to_env_action = op.to_env_action
from_env_action = op.from_env_action


def default_config() -> ml_collections.ConfigDict:
    """A complete DDPG config (Pendulum-v1, one policy ``"agent"``, 8 steps per
    iteration) to start from."""
    return op.default_config("ddpg")


@struct.dataclass
class PolicyState:
    """One policy's learnable state (parameter pytrees and optax states)."""

    actor: Any  # actor params
    critic: Any  # critic params
    target_actor: Any  # Polyak-averaged copy of `actor`
    target_critic: Any  # Polyak-averaged copy of `critic`
    actor_opt: Any  # optax state of the actor's optimiser
    critic_opt: Any  # optax state of the critic's optimiser
    hparams: dict[str, jax.Array]  # {name: [] float32} of HPARAM_KEYS (may vary per member)


@dataclasses.dataclass(frozen=True, eq=False)
class _Nets:
    actor: DeterministicActor  # normalised output, in [-1, 1]
    critic: QNetwork
    max_grad_norm: float

    def txs(self, hparams: dict[str, jax.Array]) -> tuple[Any, Any]:
        """The actor's and the critic's optimisers at ``hparams``' learning rates (traced
        values allowed; the optimiser states' structure does not depend on them)."""
        mgn = self.max_grad_norm
        return op.optimizer(hparams["actor_lr"], mgn), op.optimizer(hparams["critic_lr"], mgn)


def _build(p: op.OffPolicy) -> _Nets:
    hp = p.hp
    return _Nets(
        actor=op.deterministic_actor(p),
        critic=QNetwork(hp["hidden_sizes"], hp["activation"]),
        max_grad_norm=hp["max_grad_norm"],
    )


def _init_policy(key: jax.Array, p: op.OffPolicy) -> PolicyState:
    """Fresh actor and critic parameters (targets equal to them), optimiser states, and
    the config's `HPARAM_KEYS` values."""
    actor, critic = op.init_networks(key, p)
    hparams = {k: jnp.asarray(p.hp[k], jnp.float32) for k in HPARAM_KEYS}
    actor_tx, critic_tx = p.nets.txs(hparams)
    return PolicyState(
        actor=actor,
        critic=critic,
        target_actor=actor,
        target_critic=critic,
        actor_opt=actor_tx.init(actor),
        critic_opt=critic_tx.init(critic),
        hparams=hparams,
    )


def _gradient_step(p: op.OffPolicy, ps: PolicyState, buf: rb.ReplayBuffer, key: jax.Array):
    """Critic step, actor step (on the new critic), then Polyak target updates."""
    mu, q = functools.partial(op.actor_apply, p), functools.partial(op.critic_apply, p)
    hp = ps.hparams
    actor_tx, critic_tx = p.nets.txs(hp)
    batch = rb.sample(buf, key, p.hp["batch_size"])
    (c_loss, q_mean), c_grads = jax.value_and_grad(losses.critic_loss, has_aux=True)(
        ps.critic, ps.target_actor, ps.target_critic, batch, hp["gamma"], mu, q
    )
    upd, critic_opt = critic_tx.update(c_grads, ps.critic_opt, ps.critic)
    critic = optax.apply_updates(ps.critic, upd)
    a_loss, a_grads = jax.value_and_grad(losses.actor_loss)(ps.actor, critic, batch, mu, q)
    upd, actor_opt = actor_tx.update(a_grads, ps.actor_opt, ps.actor)
    actor = optax.apply_updates(ps.actor, upd)
    tau = hp["tau"]
    new = ps.replace(
        actor=actor,
        critic=critic,
        target_actor=losses.soft_update(ps.target_actor, actor, tau),
        target_critic=losses.soft_update(ps.target_critic, critic, tau),
        actor_opt=actor_opt,
        critic_opt=critic_opt,
    )
    return new, {"actor": a_loss, "critic": c_loss, "q_mean": q_mean}


_DDPG = op.OffPolicyAlgorithm(
    name="ddpg",
    label="DDPG",
    algo_defaults=ALGO_DEFAULTS,
    policy_defaults=POLICY_DEFAULTS,
    rules=DDPG_RULES,
    build=_build,
    init_policy=_init_policy,
    explore=op.deterministic_explore,
    mean_action=op.actor_apply,
    sample_action=op.deterministic_act,
    gradient_step=_gradient_step,
)


def make_train(config: Any, env: Any = None, env_params: Any = None) -> Trainer:
    """Builds the DDPG `Trainer` for ``env`` (``jaxdrive.make(config.env_name)`` if None).

    Raises ``ValueError`` for unknown config keys, bad values, ``batch_size >
    buffer_size``, groups without a policy, or non-`Box` action spaces.
    """
    return op.make_off_policy_trainer(config, env, env_params, _DDPG)
