"""IQL, VDN and QMIX with recurrent agents and a sequence replay, as one program.

``make_train(config, env, env_params) -> Trainer`` (see `jaxdrive.training`); the
algorithm is ``config.algorithm``: ``"iql"`` (independent Q per agent on its own reward),
``"vdn"`` (``Q_tot = Σ_a Q_a`` on the team reward) or ``"qmix"`` (a monotonic mixing
network over the env's ``global_state``, `networks.QMixer`). One iteration, one pure
function that jits as a whole:

1. **Collect**: a `lax.scan` of ``T = num_steps`` steps of ``N = num_envs`` envs
   (auto-reset). Each policy's `networks.AgentQNetwork` (shared by the agents of its
   groups) reads ``[obs, one-hot last action, one-hot agent index]`` and carries its GRU
   state across iterations (zeroed where an episode starts); actions are ε-greedy over
   the allowed actions (`TimeStep.action_mask`), ε linear in env steps.
2. **Store**: every env's ``T`` steps become one sequence in the policy's device replay
   (`replay`, a ring buffer of ``buffer_size`` sequences): observations, the
   observation each step led to before any reset (``next_obs``: truncated episodes
   bootstrap from it), actions, last actions, rewards, terminal flags, episode ends and
   starts, the action masks of ``next_obs``, global states (QMIX) and the hidden state
   the sequence started from (R2D2's stored state). ``num_steps = 1`` with
   ``gru_size = 0`` is a plain transition replay (DQN).
3. **Learn** (once ``learning_starts`` env steps are done and ``batch_size`` sequences
   are stored, under a `lax.cond`): ``updates_per_iteration`` gradient steps on
   ``batch_size`` sequences drawn uniformly. Online and target networks are unrolled
   over each sequence from its stored state (`networks.unroll`), plus one step to each
   step's ``next_obs`` (`networks.next_q`); the bootstrap is double-Q (online argmax,
   target value; ``double_q=False``: target max), over allowed actions, mixed by the
   target mixer; targets are Q(λ) returns along the sequence (`targets.lambda_returns`,
   ``td_lambda = 0``: one-step), cut where episodes end. Loss: the mean squared TD error
   over steps (IQL: over active agents), global-norm clipping, Adam. Target networks
   (agent and mixer) move to the online ones by ``tau`` every ``target_update_interval``
   gradient steps (``tau = 1``: a hard copy).

Rewards: IQL uses each agent's own reward; VDN and QMIX the team reward, the mean over
the policy's agents. The team's next state is terminal where the episode ended and no
agent was truncated. VDN and QMIX mix the agents of one policy: list the cooperative
groups in one policy (``policies.team.groups = ["a", "b"]``); a ``frozen`` policy acts
greedily and never learns (no buffer). One device only (``num_devices = 1``).

Metrics: ``episode_return/<group>``, ``episodes_done``, ``env_steps``, ``epsilon``,
``loss/<policy>``, ``q_mean`` (mean chosen Q-value on the sampled batches; 0 before
learning starts); ``win_rate`` where the env gives ``extras["won"]`` (SMAX).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

import jaxdrive
from algorithms.common import config as cfg
from algorithms.common.config_rules import flag, integer, number
from algorithms.common.multi_policy import PolicyMap
from algorithms.qlearning import agents as ag
from algorithms.qlearning import replay as rp
from algorithms.qlearning import targets as tg
from algorithms.qlearning.networks import QMixer, next_q, unroll, vdn_mix
from jaxdrive.training import Trainer
from jaxdrive.types import TimeStep

__all__ = [
    "ALGORITHMS",
    "ALGO_DEFAULTS",
    "POLICY_DEFAULTS",
    "RUN_DEFAULTS",
    "PolicyState",
    "RunnerState",
    "default_config",
    "make_train",
]

#: The algorithm names this trainer serves.
ALGORITHMS = ("iql", "vdn", "qmix")

#: ``config.algo`` keys and defaults (JaxMARL's recurrent Q-learning MPE settings where
#: they have one); a policy's config may override any of them for itself.
ALGO_DEFAULTS: dict[str, Any] = {
    "gamma": 0.99,  # discount
    "td_lambda": 0.0,  # Q(λ) targets along the sequence (0: one-step)
    "double_q": True,  # online argmax, target evaluation
    "buffer_size": 5_000,  # replay capacity, in sequences of num_steps steps
    "batch_size": 32,  # sequences per gradient step
    "learning_starts": 10_000,  # env steps before the first gradient step
    "updates_per_iteration": 1,  # gradient steps per iteration
    "target_update_interval": 200,  # gradient steps between target updates
    "tau": 1.0,  # target ← tau·online + (1 − tau)·target at each update (1: copy)
    "eps_start": 1.0,  # ε at the start
    "eps_finish": 0.05,  # ε after the decay
    "eps_decay": 0.1,  # fraction of total_env_steps over which ε decays linearly
    "lr_schedule": "constant",  # "constant" | "linear" (to 0 over the run's updates)
    "max_grad_norm": 25.0,  # global-norm gradient clipping (0: off)
    "reward_scale": 1.0,  # rewards are multiplied by this before learning
    "mixer_embed_dim": 32,  # QMIX mixer embedding E
    "mixer_hypernet_hidden": 128,  # QMIX hypernetworks' hidden size
    "mixer_init_scale": 0.001,  # orthogonal-init gain of the QMIX mixer
}
#: Keys of one policy's config (besides `ALGO_DEFAULTS` overrides) and their defaults.
POLICY_DEFAULTS: dict[str, Any] = {
    "groups": None,  # env groups this policy acts for (parameter sharing); required
    "lr": 0.005,  # Adam learning rate
    "hidden_sizes": (64,),  # MLP torso before the GRU
    "gru_size": 64,  # GRU hidden size (0: feed-forward Q-network)
    "activation": "relu",  # one of algorithms.common.layers.ACTIVATIONS
    "layer_norm": False,  # LayerNorm in the torso
    "agent_id": True,  # one-hot agent index (within the policy) in the input
    "last_action": True,  # one-hot last action in the input
    "frozen": False,  # act greedily but never learn
}
#: Host-loop defaults over `algorithms.common.config.RUN_DEFAULTS`.
RUN_DEFAULTS: dict[str, Any] = {"iterations_per_chunk": 100}

_RULES = {
    **ag.Q_RULES,
    "double_q": flag,
    "buffer_size": integer(1),
    "batch_size": integer(1),
    "learning_starts": integer(0),
    "updates_per_iteration": integer(1),
    "target_update_interval": integer(1),
    "tau": number(0.0, 1.0, lo_open=True),
    "mixer_embed_dim": integer(1),
    "mixer_hypernet_hidden": integer(1),
    "mixer_init_scale": number(0.0, lo_open=True),
    "last_action": flag,
}


def default_config(algorithm: str = "iql", env_name: str = "CartPole-v1") -> Any:
    """A complete config of ``algorithm`` on ``env_name`` (one policy ``"agent"``)."""
    return cfg.base_config(algorithm, env_name)


# ----------------------------------------------------------------------------------------
@struct.dataclass
class PolicyState:
    """One learning (or frozen) policy's parameters, target copy and optimiser state."""

    params: Any  # {"agent": flax variables, "mixer": flax variables (VDN: absent)}
    target: Any  # the target copy of `params`
    opt: Any  # optax state
    grad_steps: jax.Array  # [] int32, gradient steps taken


@struct.dataclass
class RunnerState:
    """Everything a run carries between iterations (checkpointable as is)."""

    policies: dict[str, PolicyState]  # {policy: PolicyState}
    buffers: dict[str, rp.Replay]  # {learning policy: replay, leaves [C, T, ...]}
    env_state: Any  # batched env state, leaves [N, ...]
    timestep: TimeStep  # last timestep, leaves [N, ...]
    carry: dict[str, jax.Array]  # {policy: [N, A_p, H]} float32 GRU state after the last step
    prev_action: dict[str, jax.Array]  # {policy: [N, A_p]} int32 last actions
    first: jax.Array  # [N] bool, the current observation starts an episode
    last_return: dict[str, jax.Array]  # {g: []} float32 last episodes' mean return (0: none)
    returns_seen: jax.Array  # [] bool, an episode has ended (last_return holds its mean)
    key: jax.Array  # uint32[2] raw PRNG key
    iteration: jax.Array  # [] int32 iterations done


@dataclasses.dataclass(frozen=True, eq=False)
class _Learner:
    """A learning policy's extras: mixer and optimiser."""

    p: ag.QPolicy
    mixer: Any  # QMixer | None
    tx: optax.GradientTransformation


# ----------------------------------------------------------------------------------------
def _loss(lr: _Learner, mix: str, params, target, batch, gamma: float):
    """The TD loss of one batch of sequences (leaves ``[T, B, ...]``); returns
    ``(loss, mean chosen Q)``."""
    p, hp = lr.p, lr.p.hp
    T, B, A = batch["action"].shape
    x = p.inputs(batch["obs"], batch["prev_action"])  # [T, B, A, I]
    x_next = p.inputs(batch["next_obs"], batch["action"])
    first = jnp.broadcast_to(batch["first"][:, :, None], (T, B, A)).reshape(T, B * A)
    carry0 = batch["carry0"].reshape(B * A, -1)

    def qs(agent_params):
        h, q = unroll(p.net, agent_params, carry0, x.reshape(T, B * A, -1), first)
        qn = next_q(p.net, agent_params, h, x_next.reshape(T, B * A, -1))
        return q.reshape(T, B, A, -1), qn.reshape(T, B, A, -1)

    _, qn_target = qs(target["agent"])
    q, qn_online = qs(params["agent"])
    select = jax.lax.stop_gradient(qn_online) if hp["double_q"] else None
    v_next = tg.bootstrap_value(qn_target, select, batch.get("next_mask"))  # [T, B, A]
    q_taken = jnp.take_along_axis(q, batch["action"][..., None], axis=-1)[..., 0]
    reward = batch["reward"] * hp["reward_scale"]
    done = batch["done"]  # [T, B]
    if mix == "iql":
        disc = gamma * (1.0 - batch["terminated"])
        g = tg.lambda_returns(
            reward, disc, v_next, jnp.broadcast_to(done[..., None], disc.shape), hp["td_lambda"]
        )
        pred, w = q_taken, batch["active"]
    else:
        if mix == "vdn":
            pred, v_tot = vdn_mix(q_taken), vdn_mix(v_next)
        else:
            pred = lr.mixer.apply(params["mixer"], q_taken, batch["state"])
            v_tot = lr.mixer.apply(target["mixer"], v_next, batch["next_state"])
        disc = gamma * (1.0 - batch["team_terminal"])
        g = tg.lambda_returns(jnp.mean(reward, -1), disc, v_tot, done, hp["td_lambda"])
        w = jnp.any(batch["active"] > 0, axis=-1).astype(jnp.float32)
    err = pred - jax.lax.stop_gradient(g)
    loss = jnp.sum(w * err**2) / jnp.maximum(jnp.sum(w), 1.0)
    return loss, jnp.mean(q_taken)


def _gradient_step(lr: _Learner, mix: str, ps: PolicyState, buf: rp.Replay, key: jax.Array):
    hp = lr.p.hp
    batch = rp.sample(buf, key, hp["batch_size"])
    batch = {k: v if k == "carry0" else jnp.swapaxes(v, 0, 1) for k, v in batch.items()}
    (loss, q_mean), grads = jax.value_and_grad(_loss, argnums=2, has_aux=True)(
        lr, mix, ps.params, ps.target, batch, hp["gamma"]
    )
    updates, opt = lr.tx.update(grads, ps.opt, ps.params)
    params = optax.apply_updates(ps.params, updates)
    steps = ps.grad_steps + 1
    moved = optax.incremental_update(params, ps.target, hp["tau"])
    update_now = steps % hp["target_update_interval"] == 0
    target = jax.tree.map(lambda a, b: jnp.where(update_now, a, b), moved, ps.target)
    return PolicyState(params, target, opt, steps), {"loss": loss, "q_mean": q_mean}


def _learn(lr: _Learner, mix: str, ps: PolicyState, buf: rp.Replay, key, env_steps):
    hp = lr.p.hp
    ready = (env_steps >= float(hp["learning_starts"])) & (buf.size >= hp["batch_size"])

    def run(ps, key):
        keys = jax.random.split(key, hp["updates_per_iteration"])
        ps, stats = jax.lax.scan(lambda c, k: _gradient_step(lr, mix, c, buf, k), ps, keys)
        return ps, jax.tree.map(jnp.mean, stats)

    def skip(ps, key):
        zero = jnp.zeros((), jnp.float32)
        return ps, {"loss": zero, "q_mean": zero}

    return jax.lax.cond(ready, run, skip, ps, key)


# ----------------------------------------------------------------------------------------
def _resolve(config: Any, env: Any, env_params: Any):
    if "algorithm" not in cfg.as_dict(config) or config["algorithm"] not in ALGORITHMS:
        got = cfg.as_dict(config).get("algorithm")
        raise ValueError(f"config.algorithm must be one of {list(ALGORITHMS)}, got {got!r}")
    mix = config["algorithm"]
    run = cfg.resolve_run(
        config,
        env,
        env_params,
        algorithm=mix,
        algo_defaults=ALGO_DEFAULTS,
        policy_defaults=POLICY_DEFAULTS,
        rules=_RULES,
    )
    ag.check_single_device(run.num_devices, mix)
    pols = {n: ag.q_policy(s, run.env, mix, s.hp["last_action"]) for n, s in run.policies.items()}
    gs_size = ag.global_state_size(run.env, run.env_params) if mix == "qmix" else 0
    learners = {}
    updates = run.num_iterations
    for p in pols.values():
        if p.frozen:
            continue
        hp = p.hp
        if hp["batch_size"] > hp["buffer_size"]:
            raise ValueError(
                f"policy {p.name!r}: batch_size={hp['batch_size']} exceeds "
                f"buffer_size={hp['buffer_size']} (both count sequences)"
            )
        mixer = None
        if mix == "qmix":
            mixer = QMixer(
                hp["mixer_embed_dim"], hp["mixer_hypernet_hidden"], hp["mixer_init_scale"]
            )
        tx = ag.optimizer(hp, updates * hp["updates_per_iteration"])
        learners[p.name] = _Learner(p, mixer, tx)
    return run, mix, pols, learners, gs_size


def make_train(config: Any, env: Any = None, env_params: Any = None) -> Trainer:
    """Builds the IQL/VDN/QMIX `Trainer` (``config.algorithm``) for ``env``
    (``jaxdrive.make(config.env_name)`` if None).

    Raises ``ValueError`` for unknown keys, bad values, non-`Discrete` actions, QMIX on
    an env without ``global_state``, ``batch_size > buffer_size`` or ``num_devices > 1``.
    """
    run, mix, pols, learners, gs_size = _resolve(config, env, env_params)
    env, env_params = run.env, run.env_params
    N, T = run.num_envs, run.num_steps
    stats_env = jaxdrive.wrappers.EpisodeStats(env)
    pmap = PolicyMap({p.name: p.groups for p in pols.values()}, env.agent_counts)
    need_gs = mix == "qmix"
    eps_fn = {n: ag.epsilon_schedule(p.hp, run.num_iterations * N * T) for n, p in pols.items()}
    _, ts0 = jax.eval_shape(lambda k: env.reset(k, env_params), jax.random.key(0))
    has_masks = ts0.action_mask is not None

    def sequence_item(p: ag.QPolicy) -> dict[str, jax.Array]:
        """One stored sequence's zeros (leaves [T, ...]): the replay's layout."""
        A, O = p.num_agents, p.obs_size
        f32 = lambda *s: jnp.zeros((T, *s), jnp.float32)
        item = {
            "obs": f32(A, O),
            "next_obs": f32(A, O),
            "action": jnp.zeros((T, A), jnp.int32),
            "prev_action": jnp.zeros((T, A), jnp.int32),
            "reward": f32(A),
            "terminated": f32(A),
            "team_terminal": f32(),
            "active": f32(A),
            "done": jnp.zeros((T,), bool),
            "first": jnp.zeros((T,), bool),
            "carry0": jnp.zeros((A, p.carry_size), jnp.float32),  # [A, H], no T axis
        }
        if has_masks:  # the masks of next_obs (for the bootstrap's argmax/max)
            item["next_mask"] = jnp.zeros((T, A, p.num_actions), bool)
        if need_gs:
            item["state"] = f32(gs_size)
            item["next_state"] = f32(gs_size)
        return item

    # ---- init ---------------------------------------------------------------------
    def init(key: jax.Array) -> RunnerState:
        key = jax.random.wrap_key_data(ag.as_raw_key(key))
        key, k_env, k_pol = jax.random.split(key, 3)
        policies = {}
        for (n, p), k in zip(pols.items(), jax.random.split(k_pol, len(pols)), strict=True):
            k_agent, k_mix = jax.random.split(k)
            params = {"agent": ag.init_params(p, k_agent)}
            lr = learners.get(n)
            if lr is not None and lr.mixer is not None:
                q0 = jnp.zeros((1, p.num_agents), jnp.float32)
                params["mixer"] = lr.mixer.init(k_mix, q0, jnp.zeros((1, gs_size), jnp.float32))
            opt = lr.tx.init(params) if lr is not None else optax.EmptyState()
            policies[n] = PolicyState(params, params, opt, jnp.zeros((), jnp.int32))
        buffers = {
            n: rp.init(sequence_item(lr.p), lr.p.hp["buffer_size"]) for n, lr in learners.items()
        }
        env_state, ts = jax.vmap(stats_env.reset, in_axes=(0, None))(
            jax.random.split(k_env, N), env_params
        )
        return RunnerState(
            policies=policies,
            buffers=buffers,
            env_state=env_state,
            timestep=ts,
            carry={
                n: jnp.zeros((N, p.num_agents, p.carry_size), jnp.float32) for n, p in pols.items()
            },
            prev_action={n: jnp.full((N, p.num_agents), -1, jnp.int32) for n, p in pols.items()},
            first=jnp.ones((N,), bool),
            last_return={g: jnp.zeros((), jnp.float32) for g in env.groups},
            returns_seen=jnp.zeros((), bool),
            key=jax.random.key_data(key),
            iteration=jnp.zeros((), jnp.int32),
        )

    # ---- collect ------------------------------------------------------------------
    def rollout(rs: RunnerState, key: jax.Array, env_steps: jax.Array):
        """``T`` steps; returns the new carry and ``[T, N, ...]`` arrays per policy."""
        eps = {n: eps_fn[n](env_steps) for n in pols}

        def step(carry, k):
            env_state, ts, h, prev, first = carry
            k_env, *k_pol = jax.random.split(k, 1 + len(pols))
            obs_p = pmap.to_policy(ts.obs, axis=1)
            mask_p = None if ts.action_mask is None else pmap.to_policy(ts.action_mask, axis=1)
            actions, out, new_h, new_prev = {}, {}, {}, {}
            gs = None
            if need_gs:
                gs = jax.vmap(stats_env.global_state, in_axes=(0, None))(env_state, env_params)
                gs = gs.reshape(N, -1).astype(jnp.float32)
            for (n, p), kp in zip(pols.items(), k_pol, strict=True):
                obs = p.flat(obs_p[n], 1)  # [N, A, O]
                pa = jnp.where(first[:, None], -1, prev[n])
                h_in = jnp.where(first[:, None, None], 0.0, h[n])
                new_h[n], q = p.net.apply(rs.policies[n].params["agent"], h_in, p.inputs(obs, pa))
                mask = None if mask_p is None else mask_p[n]
                a = tg.epsilon_greedy(kp, q, 0.0 if p.frozen else eps[n], mask)
                actions[n], new_prev[n] = a, a
                out[n] = {
                    "obs": obs,
                    "action": a,
                    "prev_action": pa,
                    "first": first,
                    "active": pmap.to_policy(ts.active, axis=1)[n].astype(jnp.float32),
                }
                if gs is not None:
                    out[n]["state"] = gs
            env_state, nts, final = ag.env_step(
                stats_env, env_params, k_env, env_state, pmap.to_groups(actions, axis=1), need_gs
            )
            fin_obs = pmap.to_policy(final["obs"], axis=1)
            truncated = jnp.any(jnp.stack([jnp.any(t, -1) for t in nts.truncated.values()]), 0)
            for n, p in pols.items():
                out[n].update(
                    next_obs=p.flat(fin_obs[n], 1),
                    reward=pmap.to_policy(nts.reward, axis=1)[n].astype(jnp.float32),
                    terminated=pmap.to_policy(nts.terminated, axis=1)[n].astype(jnp.float32),
                    team_terminal=(nts.done & ~truncated).astype(jnp.float32),
                    done=nts.done,
                )
                if final["action_mask"] is not None:
                    out[n]["next_mask"] = pmap.to_policy(final["action_mask"], axis=1)[n]
                if need_gs:
                    out[n]["next_state"] = final["global_state"]
            ep = {"done": nts.done, "episode_return": nts.extras["episode_return"]}
            if "won" in nts.extras:  # envs that say whether an episode was won (SMAX)
                ep["won"] = nts.extras["won"]
            return (env_state, nts, new_h, new_prev, nts.done), (out, ep)

        carry0 = (rs.env_state, rs.timestep, rs.carry, rs.prev_action, rs.first)
        return jax.lax.scan(step, carry0, jax.random.split(key, T))

    # ---- one iteration ------------------------------------------------------------
    def update(rs: RunnerState) -> tuple[RunnerState, dict[str, jax.Array]]:
        key = jax.random.wrap_key_data(rs.key)
        key, k_roll, k_learn = jax.random.split(key, 3)
        env_steps = rs.iteration.astype(jnp.float32) * float(N * T)  # int32 overflows at 2^31
        (env_state, ts, h, prev, first), (traj, ep) = rollout(rs, k_roll, env_steps)
        policies, buffers, stats = dict(rs.policies), {}, {}
        lkeys = jax.random.split(k_learn, max(len(learners), 1))
        for (n, lr), k in zip(learners.items(), lkeys, strict=False):
            seq = {f: jnp.swapaxes(v, 0, 1) for f, v in traj[n].items()}  # [N, T, ...]
            seq["carry0"] = jnp.where(rs.first[:, None, None], 0.0, rs.carry[n])
            buffers[n] = rp.add(rs.buffers[n], seq)
            policies[n], stats[n] = _learn(
                lr, mix, rs.policies[n], buffers[n], k, env_steps + N * T
            )
        metrics, last_return, seen = ag.episode_metrics(
            env.groups, ep["done"], ep["episode_return"], rs.last_return, rs.returns_seen,
            ep.get("won"),
        )  # fmt: skip
        iteration = rs.iteration + 1
        metrics = ag.finish_metrics(
            metrics,
            {n: st["loss"] for n, st in stats.items()},
            [st["q_mean"] for st in stats.values()],
            eps_fn[next(iter(pols))](env_steps),
            iteration,
            N * T,
        )
        new = RunnerState(
            policies=policies,
            buffers=buffers,
            env_state=env_state,
            timestep=ts,
            carry=h,
            prev_action=prev,
            first=first,
            last_return=last_return,
            returns_seen=seen,
            key=jax.random.key_data(key),
            iteration=iteration,
        )
        return new, metrics

    return ag.make_trainer(config, run, pols, init, update)
