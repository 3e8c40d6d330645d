"""What the Q-learning trainers (IQL/VDN/QMIX and PQN) share: the static description
of a Q-policy, the env step that keeps the pre-reset observation, ε and learning-rate
schedules, episode metrics and the `Trainer.act` of greedy/ε-greedy Q-policies.

Dimension letters: ``N`` envs, ``A_p`` agents of policy ``p`` (its groups'
agents concatenated, parameter sharing), ``O`` one agent's flat observation size,
``I`` its network input size, ``n`` actions, ``S`` global-state features.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from algorithms.common.config import PolicySpec
from algorithms.common.config_rules import (
    COMMON_RULES,
    choice,
    flag,
    integer,
    max_grad_norm_or_off,
    number,
)
from algorithms.common.layers import flat_obs_size
from algorithms.common.multi_policy import PolicyMap
from algorithms.common.schedules import SCHEDULES, make_schedule
from algorithms.qlearning import targets as tg
from algorithms.qlearning.networks import AgentQNetwork, agent_inputs
from jaxdrive.spaces import Discrete
from jaxdrive.training import Trainer
from jaxdrive.types import TimeStep
from jaxdrive.wrappers import reset_fields, select_tree

__all__ = [
    "Q_RULES",
    "QPolicy",
    "as_raw_key",
    "check_single_device",
    "env_step",
    "episode_metrics",
    "epsilon_schedule",
    "finish_metrics",
    "global_state_size",
    "init_params",
    "make_act",
    "make_init_carry",
    "make_trainer",
    "optimizer",
    "q_policy",
]

#: Env batches up to this size reset by selection in `env_step` (`jaxdrive.VecEnv`'s
#: default threshold).
_SELECT_RESET_MAX_ENVS = 2048

#: Value rules shared by the Q-learning trainers' hyper-parameters.
Q_RULES = {
    **COMMON_RULES,
    "lr": number(0.0, lo_open=True),
    "lr_schedule": choice(lambda: SCHEDULES),
    "max_grad_norm": max_grad_norm_or_off,  # 0 or None: no clipping
    "eps_start": number(0.0, 1.0),
    "eps_finish": number(0.0, 1.0),
    "eps_decay": number(0.0, 1.0),
    "td_lambda": number(0.0, 1.0),
    "reward_scale": number(),
    "gru_size": integer(0),
    "layer_norm": flag,
    "agent_id": flag,
}


@dataclasses.dataclass(frozen=True, eq=False)
class QPolicy:
    """One Q-policy's static facts: its groups, sizes, network and settings."""

    name: str
    groups: tuple[str, ...]
    num_agents: int  # A_p
    obs_size: int  # O
    num_actions: int  # n
    hp: dict[str, Any]
    net: AgentQNetwork
    last_action: bool  # the input holds the one-hot last action

    @property
    def frozen(self) -> bool:
        return bool(self.hp["frozen"])

    @property
    def carry_size(self) -> int:
        """``H``: the GRU size; 1 for a feed-forward network (a dummy carry: checkpoints
        cannot hold zero-size arrays)."""
        return max(int(self.hp.get("gru_size", 0)), 1)

    def flat(self, obs: jax.Array, lead: int) -> jax.Array:
        """``[*lead, A_p, *O_shape] -> [*lead, A_p, O]`` float32."""
        return obs.reshape(*obs.shape[: lead + 1], self.obs_size).astype(jnp.float32)

    def inputs(self, obs: jax.Array, prev_action: jax.Array | None) -> jax.Array:
        """Network inputs ``[..., A_p, I]`` from flat ``obs [..., A_p, O]`` (`agent_inputs`)."""
        prev = prev_action if self.last_action else None
        return agent_inputs(obs, prev, self.num_actions, self.hp["agent_id"])

    def input_size(self) -> int:
        extra = self.num_actions if self.last_action else 0
        return self.obs_size + extra + (self.num_agents if self.hp["agent_id"] else 0)


def q_policy(spec: PolicySpec, env: Any, algorithm: str, last_action: bool) -> QPolicy:
    """The `QPolicy` of ``spec``; ``ValueError`` unless its actions are `Discrete`."""
    space = spec.action_space
    if not isinstance(space, Discrete):
        raise ValueError(
            f"{algorithm} needs Discrete actions: group {spec.groups[0]!r} of {env.name} has "
            f"action space {space} (use PPO/A2C, or DDPG for Box actions)"
        )
    hp = spec.hp
    net = AgentQNetwork(
        num_actions=int(space.n),
        hidden_sizes=tuple(hp["hidden_sizes"]),
        gru_size=int(hp.get("gru_size", 0)),
        activation=hp["activation"],
        layer_norm=bool(hp["layer_norm"]),
    )
    return QPolicy(
        name=spec.name,
        groups=spec.groups,
        num_agents=spec.num_agents,
        obs_size=flat_obs_size(spec.obs_space),
        num_actions=int(space.n),
        hp=hp,
        net=net,
        last_action=last_action,
    )


def optimizer(hp: Mapping[str, Any], num_updates: int) -> optax.GradientTransformation:
    """Adam at ``hp["lr"]`` (constant, or linear to 0 over ``num_updates`` gradient steps
    with ``lr_schedule="linear"``), after global-norm clipping at ``max_grad_norm`` (> 0)."""
    lr = make_schedule(hp["lr_schedule"], hp["lr"], 0.0, num_updates)
    adam = optax.adam(lr)
    if hp["max_grad_norm"] > 0:
        return optax.chain(optax.clip_by_global_norm(hp["max_grad_norm"]), adam)
    return adam


def epsilon_schedule(hp: Mapping[str, Any], total_env_steps: int) -> optax.Schedule:
    """ε as a function of env steps: ``eps_start`` linearly to ``eps_finish`` over the
    first ``eps_decay`` fraction of ``total_env_steps``, then held."""
    steps = max(int(hp["eps_decay"] * total_env_steps), 1)
    return optax.linear_schedule(hp["eps_start"], hp["eps_finish"], steps)


def env_step(
    stats_env: Any,
    env_params: Any,
    key: jax.Array,
    env_state: Any,
    actions: dict[str, jax.Array],
    need_gs: bool,
) -> tuple[Any, TimeStep, dict[str, Any]]:
    """Steps ``N`` envs (``stats_env``: an `EpisodeStats`-wrapped env) and resets those
    whose episode ended. Returns ``(state, ts, final)``: ``final`` holds what the
    transition's next state was before any reset: ``"obs"`` ``{g: [N, A_g, ...]}``,
    ``"action_mask"`` (or None) and, with ``need_gs``, ``"global_state"`` ``[N, S]``.

    Up to 2048 envs, a reset is computed for every env and selected
    where the episode ended (as `jaxdrive.VecEnv` does at small batches: cheaper than
    the branch's device-to-host read of its predicate on a GPU); above, the resets run
    under a `lax.cond` on "any episode ended". The results are the same."""
    n = jax.tree.leaves(env_state)[0].shape[0]
    keys = jax.random.split(key, (2, n))
    state, ts = jax.vmap(stats_env.step, in_axes=(0, 0, 0, None))(
        keys[0], env_state, actions, env_params
    )
    final = {"obs": ts.obs, "action_mask": ts.action_mask}
    if need_gs:
        gs = jax.vmap(stats_env.global_state, in_axes=(0, None))(state, env_params)
        final["global_state"] = gs.reshape(n, -1).astype(jnp.float32)

    def with_reset(operand):
        state, ts = operand
        r_state, r_ts = jax.vmap(stats_env.reset, in_axes=(0, None))(keys[1], env_params)

        def merge(d, s, t, rs, rt):
            fields = reset_fields(d, rt, t)
            return select_tree(d, rs, s), t.replace(obs=select_tree(d, rt.obs, t.obs), **fields)

        return jax.vmap(merge)(ts.done, state, ts, r_state, r_ts)

    if n <= _SELECT_RESET_MAX_ENVS:
        return (*with_reset((state, ts)), final)
    state, ts = jax.lax.cond(jnp.any(ts.done), with_reset, lambda op: op, (state, ts))
    return state, ts, final


def episode_metrics(
    groups: tuple[str, ...],
    done: jax.Array,
    episode_return: Mapping[str, jax.Array],
    last_return: Mapping[str, jax.Array],
    seen: jax.Array,
    won: jax.Array | None = None,
) -> tuple[dict[str, jax.Array], dict[str, jax.Array], jax.Array]:
    """``(metrics, last_return, seen)``: per group the mean return (over its agents and
    the episodes that ended: ``done [T, N]``, ``episode_return {g: [T, N, A_g]}``),
    keeping ``last_return[g]`` when none ended, NaN in the metrics until the first
    episode ends (``seen``, ``[]`` bool: one has; the state itself stays finite); plus
    ``episodes_done``, and ``win_rate`` (the fraction of the ended episodes won, 0 when
    none ended) where ``won [T, N]`` (the env's ``extras["won"]``) is given."""
    done = done.astype(jnp.float32)
    n_done = jnp.sum(done)
    seen = seen | (n_done > 0)
    metrics, new_last = {}, {}
    if won is not None:
        metrics["win_rate"] = jnp.sum(done * won.astype(jnp.float32)) / jnp.maximum(n_done, 1.0)
    for g in groups:
        ret = jnp.mean(episode_return[g], axis=-1)
        mean_ret = jnp.sum(ret * done) / jnp.maximum(n_done, 1.0)
        new_last[g] = jnp.where(n_done > 0, mean_ret, last_return[g])
        metrics[f"episode_return/{g}"] = jnp.where(seen, new_last[g], jnp.nan)
    metrics["episodes_done"] = n_done
    return metrics, new_last, seen


def finish_metrics(
    metrics: dict[str, jax.Array],
    losses: Mapping[str, jax.Array],
    q_means: list[jax.Array],
    epsilon: jax.Array,
    iteration: jax.Array,
    steps_per_iteration: int,
) -> dict[str, jax.Array]:
    """``metrics`` plus ``loss/<policy>``, ``q_mean`` (mean of ``q_means``; 0 without
    any), ``epsilon`` and ``env_steps`` (after ``iteration`` iterations), all float32."""
    metrics = dict(metrics)
    for name, loss in losses.items():
        metrics[f"loss/{name}"] = loss
    metrics["q_mean"] = jnp.mean(jnp.stack(q_means)) if q_means else jnp.zeros(())
    metrics["epsilon"] = epsilon
    metrics["env_steps"] = iteration.astype(jnp.float32) * float(steps_per_iteration)
    return {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}


def make_trainer(
    config: Any, run: Any, pols: Mapping[str, QPolicy], init: Any, update: Any
) -> Trainer:
    """The `Trainer` of a Q-learning program: ``get_params(rs)`` gives every policy's
    ``rs.policies[p].params`` (``{"agent": ...[, "mixer": ...]}``), ``act`` is `make_act`'s
    (`make_init_carry` builds the ``carry`` its recurrent acting takes)."""

    def get_params(rs: Any) -> dict[str, Any]:
        return {n: ps.params for n, ps in rs.policies.items()}

    return Trainer(
        init=init,
        update=update,
        num_iterations=run.num_iterations,
        env_steps_per_iteration=run.num_envs * run.num_steps,
        config=config,
        get_params=get_params,
        act=make_act(pols, run.env),
        init_carry=(
            make_init_carry(pols)
            if any(p.hp.get("gru_size", 0) > 0 for p in pols.values())
            else None
        ),
    )


def make_init_carry(pols: Mapping[str, QPolicy]):
    """``init_carry(lead_shape) -> carry`` for `make_act`'s recurrent acting: per policy
    ``{"h": [*lead, A_p, H] zeros, "prev": [*lead, A_p] int32 -1}`` (no last action)."""

    def init_carry(lead_shape: tuple[int, ...]) -> dict[str, dict[str, jax.Array]]:
        lead = tuple(lead_shape)
        return {
            n: {
                "h": jnp.zeros((*lead, p.num_agents, p.carry_size), jnp.float32),
                "prev": jnp.full((*lead, p.num_agents), -1, jnp.int32),
            }
            for n, p in pols.items()
        }

    return init_carry


def make_act(pols: Mapping[str, QPolicy], env: Any):
    """`Trainer.act` for Q-policies: ``(params_by_policy, key, obs {g: [..., A_g, *O]},
    deterministic=True, action_mask=None, carry=None) -> {g: [..., A_g]}`` int32 actions,
    or ``(actions, carry')`` when ``carry`` is given.

    Greedy over the allowed actions when ``deterministic``, else ε-greedy with each
    policy's final ``eps_finish``. ``carry`` (from `make_init_carry`, leading shape
    ``[...]``) holds each policy's GRU state and last actions, as in training; without it a
    recurrent policy acts from a zero hidden state and no last action.
    ``params_by_policy[p]``: `get_params`'s ``{"agent": params, ...}``.
    """
    pmap = PolicyMap({p.name: p.groups for p in pols.values()}, env.agent_counts)
    init_carry = make_init_carry(pols)

    def act(
        params_by_policy: Mapping[str, Any],
        key: jax.Array,
        obs: Mapping[str, jax.Array],
        deterministic: bool = True,
        action_mask: Mapping[str, jax.Array] | None = None,
        carry: Mapping[str, Any] | None = None,
    ) -> Any:
        if not isinstance(obs, Mapping):
            obs = {env.groups[0]: obs}
        if jnp.asarray(key).dtype == jnp.uint32:
            key = jax.random.wrap_key_data(key)
        first = env.groups[0]
        lead = obs[first].ndim - 1 - len(env.observation_space(first).shape)
        obs_p = pmap.to_policy(obs, axis=lead)
        mask_p = None if action_mask is None else pmap.to_policy(action_mask, axis=lead)
        state = init_carry(obs[first].shape[:lead]) if carry is None else carry
        out, new_state = {}, {}
        for (name, p), k in zip(pols.items(), jax.random.split(key, len(pols)), strict=True):
            x = p.inputs(p.flat(obs_p[name], lead), state[name]["prev"])
            params = params_by_policy[name]
            if isinstance(params, Mapping) and "agent" in params:
                params = params["agent"]
            h, q = p.net.apply(params, state[name]["h"], x)
            mask = None if mask_p is None else mask_p[name]
            eps = 0.0 if deterministic else p.hp["eps_finish"]
            out[name] = tg.epsilon_greedy(k, q, eps, mask)
            new_state[name] = {"h": h, "prev": out[name]}
        actions = pmap.to_groups(out, axis=lead)
        return actions if carry is None else (actions, new_state)

    return act


def check_single_device(num_devices: int, algorithm: str) -> None:
    """``ValueError`` for ``num_devices > 1`` (the Q-learning trainers run on one device)."""
    if num_devices != 1:
        raise ValueError(
            f"{algorithm} runs on one device (config.num_devices={num_devices}); use "
            "num_devices=1, or PPO/A2C for data-parallel training"
        )


def as_raw_key(key: jax.Array) -> jax.Array:
    """A ``uint32[2]`` raw key from a typed or raw key."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key)
    return jnp.asarray(key)


def init_params(p: QPolicy, key: jax.Array) -> Any:
    """Fresh parameters of ``p.net`` (inputs ``[1, I]``)."""
    carry = jnp.zeros((1, p.carry_size), jnp.float32)
    return p.net.init(key, carry, jnp.zeros((1, p.input_size()), jnp.float32))


def global_state_size(env: Any, env_params: Any) -> int:
    """``S``: the flat size of ``env.global_state``; ``ValueError`` if the env has none."""
    try:
        shape = jax.eval_shape(
            lambda k: env.global_state(env.reset(k, env_params)[0], env_params),
            jax.random.key(0),
        )
    except NotImplementedError as e:
        raise ValueError(f"qmix needs env.global_state, which {env.name} lacks: {e}") from None
    return int(np.prod(shape.shape, dtype=np.int64))
