"""PQN: parallel Q-learning with Q(λ) returns, no replay and no target network.

Gallici et al. 2024, "Simplifying Deep Temporal Difference Learning". ``make_train(config,
env, env_params) -> Trainer`` (see `jaxdrive.training`). One iteration, one pure
function that jits as a whole:

1. **Collect**: a `lax.scan` of ``T = num_steps`` steps of ``N = num_envs`` envs
   (auto-reset); each policy's feed-forward `algorithms.qlearning.networks.
   AgentQNetwork` (LayerNorm before every activation by default; shared by the agents of
   its groups) acts ε-greedily over the allowed actions (`TimeStep.action_mask`), ε
   linear in env steps. The observation each step led to before any reset is kept, so
   truncated episodes bootstrap from it.
2. **Targets**: Q(λ) returns along the rollout with the same (pre-update) network:
   ``G_t = r_t + γ_t ((1 − λ) max_a Q(s'_t, a) + λ G_{t+1})``, cut where an episode
   ended and at the last step (`algorithms.qlearning.targets.lambda_returns`), the max
   over allowed actions; ``γ_t = 0`` where the agent's next state is terminal.
3. **Learn**: ``num_epochs`` passes over ``num_minibatches`` shuffled minibatches of the
   ``T·N·A_p`` samples (nested `lax.scan`), loss ``½ (Q(s_t, a_t) − G_t)²`` averaged over
   active agents, global-norm clipping, Adam. A ``frozen`` policy acts greedily and
   never learns.

One device only (``num_devices = 1``). Metrics: ``episode_return/<group>``,
``episodes_done``, ``env_steps``, ``epsilon``, ``loss/<policy>``, ``q_mean`` (mean
``Q(s_t, a_t)`` of the rollout over learning policies); ``win_rate`` where the env gives
``extras["won"]`` (SMAX).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

import jaxdrive
from algorithms.common import config as cfg
from algorithms.common.config_rules import integer
from algorithms.common.multi_policy import PolicyMap
from algorithms.qlearning import agents as ag
from algorithms.qlearning import targets as tg
from jaxdrive.training import Trainer
from jaxdrive.types import TimeStep

__all__ = [
    "ALGO_DEFAULTS",
    "POLICY_DEFAULTS",
    "PolicyState",
    "RunnerState",
    "default_config",
    "make_train",
]

#: ``config.algo`` keys and defaults (purejaxql's CartPole settings); a policy's config
#: may override any of them for itself.
ALGO_DEFAULTS: dict[str, Any] = {
    "gamma": 0.99,  # discount
    "td_lambda": 0.65,  # λ of the Q(λ) returns (0: one-step targets)
    "num_epochs": 4,  # passes over the rollout per iteration
    "num_minibatches": 16,  # minibatches per pass (must divide T·N·A_p)
    "eps_start": 1.0,  # ε at the start
    "eps_finish": 0.05,  # ε after the decay
    "eps_decay": 0.2,  # fraction of total_env_steps over which ε decays linearly
    "lr_schedule": "linear",  # "constant" | "linear" (to 0 over the run's updates)
    "max_grad_norm": 10.0,  # global-norm gradient clipping (0: off)
    "reward_scale": 1.0,  # rewards are multiplied by this before learning
}
#: Keys of one policy's config (besides `ALGO_DEFAULTS` overrides) and their defaults.
POLICY_DEFAULTS: dict[str, Any] = {
    "groups": None,  # env groups this policy acts for (parameter sharing); required
    "lr": 1e-4,  # Adam learning rate
    "hidden_sizes": (128, 128),  # MLP torso
    "activation": "relu",  # one of algorithms.common.layers.ACTIVATIONS
    "layer_norm": True,  # LayerNorm before each activation (PQN's stabiliser)
    "agent_id": False,  # one-hot agent index (within the policy) in the input
    "frozen": False,  # act greedily but never learn
}

_RULES = {**ag.Q_RULES, "num_epochs": integer(1), "num_minibatches": integer(1)}


def default_config(env_name: str = "CartPole-v1") -> Any:
    """A complete PQN config on ``env_name`` (one policy ``"agent"``)."""
    return cfg.base_config("pqn", env_name)


@struct.dataclass
class PolicyState:
    """One policy's parameters and optimiser state."""

    params: Any  # {"agent": flax variables}
    opt: Any  # optax state (EmptyState for a frozen policy)


@struct.dataclass
class RunnerState:
    """Everything a run carries between iterations (checkpointable as is)."""

    policies: dict[str, PolicyState]  # {policy: PolicyState}
    env_state: Any  # batched env state, leaves [N, ...]
    timestep: TimeStep  # last timestep, leaves [N, ...]
    last_return: dict[str, jax.Array]  # {g: []} float32 last episodes' mean return (0: none)
    returns_seen: jax.Array  # [] bool, an episode has ended (last_return holds its mean)
    key: jax.Array  # uint32[2] raw PRNG key
    iteration: jax.Array  # [] int32 iterations done


def _q_loss(p: ag.QPolicy, params, mb: dict[str, jax.Array]):
    """``½ (Q(s, a) − G)²`` over the active samples of ``mb`` (leaves ``[M, ...]``)."""
    _, q = p.net.apply(params["agent"], jnp.zeros((*mb["x"].shape[:-1], 0)), mb["x"])
    q_taken = jnp.take_along_axis(q, mb["action"][..., None], axis=-1)[..., 0]
    w = mb["active"]
    loss = 0.5 * jnp.sum(w * (q_taken - mb["target"]) ** 2) / jnp.maximum(jnp.sum(w), 1.0)
    return loss


def make_train(config: Any, env: Any = None, env_params: Any = None) -> Trainer:
    """Builds the PQN `Trainer` for ``env`` (``jaxdrive.make(config.env_name)`` if None).

    Raises ``ValueError`` for unknown keys, bad values, non-`Discrete` actions,
    ``num_minibatches`` not dividing ``T·N·A_p``, or ``num_devices > 1``.
    """
    run = cfg.resolve_run(
        config,
        env,
        env_params,
        algorithm="pqn",
        algo_defaults=ALGO_DEFAULTS,
        policy_defaults=POLICY_DEFAULTS,
        rules=_RULES,
    )
    ag.check_single_device(run.num_devices, "pqn")
    env, env_params = run.env, run.env_params
    N, T = run.num_envs, run.num_steps
    pols = {n: ag.q_policy(s, env, "pqn", last_action=False) for n, s in run.policies.items()}
    txs = {}
    for n, p in pols.items():
        hp = p.hp
        samples = T * N * p.num_agents
        if samples % hp["num_minibatches"]:
            raise ValueError(
                f"policy {n!r}: num_minibatches={hp['num_minibatches']} must divide the "
                f"{samples} samples of an iteration (num_steps·num_envs·agents)"
            )
        if not p.frozen:
            steps = run.num_iterations * hp["num_epochs"] * hp["num_minibatches"]
            txs[n] = ag.optimizer(hp, steps)
    stats_env = jaxdrive.wrappers.EpisodeStats(env)
    pmap = PolicyMap({p.name: p.groups for p in pols.values()}, env.agent_counts)
    eps_fn = {n: ag.epsilon_schedule(p.hp, run.num_iterations * N * T) for n, p in pols.items()}

    def q_values(p: ag.QPolicy, params, x: jax.Array) -> jax.Array:
        return p.net.apply(params["agent"], jnp.zeros((*x.shape[:-1], 0)), x)[1]

    def init(key: jax.Array) -> RunnerState:
        key = jax.random.wrap_key_data(ag.as_raw_key(key))
        key, k_env, k_pol = jax.random.split(key, 3)
        policies = {}
        for (n, p), k in zip(pols.items(), jax.random.split(k_pol, len(pols)), strict=True):
            params = {"agent": ag.init_params(p, k)}
            opt = txs[n].init(params) if n in txs else optax.EmptyState()
            policies[n] = PolicyState(params, opt)
        env_state, ts = jax.vmap(stats_env.reset, in_axes=(0, None))(
            jax.random.split(k_env, N), env_params
        )
        return RunnerState(
            policies=policies,
            env_state=env_state,
            timestep=ts,
            last_return={g: jnp.zeros((), jnp.float32) for g in env.groups},
            returns_seen=jnp.zeros((), bool),
            key=jax.random.key_data(key),
            iteration=jnp.zeros((), jnp.int32),
        )

    def rollout(rs: RunnerState, key: jax.Array, env_steps: jax.Array):
        """``T`` steps; returns the new env carry and per-policy ``[T, N, A_p, ...]``."""
        eps = {n: eps_fn[n](env_steps) for n in pols}

        def step(carry, k):
            env_state, ts = carry
            k_env, *k_pol = jax.random.split(k, 1 + len(pols))
            obs_p = pmap.to_policy(ts.obs, axis=1)
            mask_p = None if ts.action_mask is None else pmap.to_policy(ts.action_mask, axis=1)
            active_p = pmap.to_policy(ts.active, axis=1)
            actions, out = {}, {}
            for (n, p), kp in zip(pols.items(), k_pol, strict=True):
                x = p.inputs(p.flat(obs_p[n], 1), None)  # [N, A, I]
                mask = None if mask_p is None else mask_p[n]
                q = q_values(p, rs.policies[n].params, x)
                a = tg.epsilon_greedy(kp, q, 0.0 if p.frozen else eps[n], mask)
                actions[n] = a
                q_taken = jnp.take_along_axis(q, a[..., None], axis=-1)[..., 0]
                out[n] = {"x": x, "action": a, "q": q_taken, "active": active_p[n]}
            env_state, nts, final = ag.env_step(
                stats_env, env_params, k_env, env_state, pmap.to_groups(actions, axis=1), False
            )
            fin_p = pmap.to_policy(final["obs"], axis=1)
            fin_mask = final["action_mask"]
            fin_mask = None if fin_mask is None else pmap.to_policy(fin_mask, axis=1)
            rew_p = pmap.to_policy(nts.reward, axis=1)
            term_p = pmap.to_policy(nts.terminated, axis=1)
            for n, p in pols.items():
                x_next = p.inputs(p.flat(fin_p[n], 1), None)
                q_next = q_values(p, rs.policies[n].params, x_next)
                m = None if fin_mask is None else fin_mask[n]
                out[n].update(
                    next_value=tg.bootstrap_value(q_next, None, m),
                    reward=rew_p[n].astype(jnp.float32),
                    terminated=term_p[n].astype(jnp.float32),
                    done=jnp.broadcast_to(nts.done[:, None], term_p[n].shape),
                )
            ep = {"done": nts.done, "episode_return": nts.extras["episode_return"]}
            if "won" in nts.extras:  # envs that say whether an episode was won (SMAX)
                ep["won"] = nts.extras["won"]
            return (env_state, nts), (out, ep)

        return jax.lax.scan(step, (rs.env_state, rs.timestep), jax.random.split(key, T))

    def learn(n: str, ps: PolicyState, tr: dict[str, jax.Array], key: jax.Array):
        p, hp = pols[n], pols[n].hp
        disc = hp["gamma"] * (1.0 - tr["terminated"])
        reward = tr["reward"] * hp["reward_scale"]
        target = tg.lambda_returns(reward, disc, tr["next_value"], tr["done"], hp["td_lambda"])
        data = {
            "x": tr["x"],
            "action": tr["action"],
            "target": target,
            "active": tr["active"].astype(jnp.float32),
        }
        data = {k: v.reshape(-1, *v.shape[3:]) for k, v in data.items()}  # [M, ...]
        n_mb = hp["num_minibatches"]

        def mb_step(ps: PolicyState, mb):
            loss, grads = jax.value_and_grad(lambda prm: _q_loss(p, prm, mb))(ps.params)
            updates, opt = txs[n].update(grads, ps.opt, ps.params)
            return PolicyState(optax.apply_updates(ps.params, updates), opt), loss

        def epoch(ps: PolicyState, k):
            perm = jax.random.permutation(k, data["action"].shape[0])
            mbs = jax.tree.map(lambda v: v[perm].reshape(n_mb, -1, *v.shape[1:]), data)
            return jax.lax.scan(mb_step, ps, mbs)

        ps, losses = jax.lax.scan(epoch, ps, jax.random.split(key, hp["num_epochs"]))
        return ps, jnp.mean(losses)

    def update(rs: RunnerState) -> tuple[RunnerState, dict[str, jax.Array]]:
        key = jax.random.wrap_key_data(rs.key)
        key, k_roll, k_learn = jax.random.split(key, 3)
        env_steps = rs.iteration.astype(jnp.float32) * float(N * T)  # int32 overflows at 2^31
        (env_state, ts), (traj, ep) = rollout(rs, k_roll, env_steps)
        policies = dict(rs.policies)
        metrics, last_return, seen = ag.episode_metrics(
            env.groups, ep["done"], ep["episode_return"], rs.last_return, rs.returns_seen,
            ep.get("won"),
        )  # fmt: skip
        losses, q = {}, []
        for n, k in zip(txs, jax.random.split(k_learn, max(len(txs), 1)), strict=False):
            policies[n], losses[n] = learn(n, rs.policies[n], traj[n], k)
            q.append(jnp.mean(traj[n]["q"]))
        iteration = rs.iteration + 1
        eps = eps_fn[next(iter(pols))](env_steps)
        metrics = ag.finish_metrics(metrics, losses, q, eps, iteration, N * T)
        new = RunnerState(
            policies=policies,
            env_state=env_state,
            timestep=ts,
            last_return=last_return,
            returns_seen=seen,
            key=jax.random.key_data(key),
            iteration=iteration,
        )
        return new, metrics

    return ag.make_trainer(config, run, pols, init, update)
