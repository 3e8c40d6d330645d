"""The on-policy rollout: ``T`` steps of this device's ``NL`` envs as one `lax.scan`.

Each policy acts for the agents of its groups (concatenated on the agent axis, parameter
sharing); the trajectory holds, per policy, ``[T, NL, A_p, ...]`` observations (padded to
``O_pad``), raw actions, behaviour log-probs, values, rewards, the ``active`` mask of the
observation acted on, terminated flags, episode ends and ``V(final_obs)`` for truncation
bootstraps; where the env gives action masks, also the ``[T, NL, A_p, K]`` mask the
action was sampled under (the learner's log-probs and entropies use it). Recurrent
policies act from their carry (`PolicyState.carry`), which is set to zeros after each step
where the agent's episode ended; ``traj[p]["carry0"]`` is the carry at the rollout's start
(the learner re-runs the sequences from it) and ``traj["_carry"][p]`` the carry after the
last step. Every per-env random draw uses ``fold_in(key, global env index)``, so the
numbers do not depend on the device count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from algorithms.common.networks import cast_kernels, joint_head_params, mask_actions
from algorithms.common.on_policy_setup import OnPolicySetup, RunnerState
from algorithms.common.recurrent import reset_carry
from jaxdrive.types import TimeStep
from jaxdrive.wrappers import merge_reset, reset_fields, select_tree

__all__ = ["env_step", "rollout"]


def env_step(
    setup: OnPolicySetup, key: jax.Array, ids: jax.Array, env_state: Any, actions: Any
) -> tuple[Any, TimeStep, Callable[[], Any]]:
    """Steps this device's envs with per-env keys, auto-resetting finished ones (as
    `jaxdrive.vectorize` does). Returns ``(state, ts, final_obs)``: ``final_obs()`` gives
    the observations before the reset (call it only under a branch taken when some env
    is done: with ``fast_reset`` it rebuilds them)."""
    stats_env, env_params = setup.stats_env, setup.env_params

    def reset_one(key: jax.Array):
        state, ts = stats_env.reset(key, env_params)
        if setup.fast_reset:
            return state, ts
        return state, ts.replace(extras={**ts.extras, "final_obs": ts.obs})

    keys = jax.vmap(jax.random.split)(setup.env_keys(key, ids))  # [NL, 2]
    state, ts = jax.vmap(stats_env.step, in_axes=(0, 0, 0, None))(
        keys[:, 0], env_state, actions, env_params
    )
    if setup.fast_reset:
        r_state, r_ts = jax.vmap(reset_one)(keys[:, 1])
        final_state = state
        state = jax.vmap(select_tree)(ts.done, r_state, state)
        fields = jax.vmap(reset_fields)(ts.done, r_ts, ts)  # active, action_mask
        observe = jax.vmap(stats_env.observations, in_axes=(0, None))
        ts = ts.replace(obs=observe(state, env_params), **fields)
        return state, ts, lambda: observe(final_state, env_params)

    def with_reset(operand):
        state, ts = operand
        r_state, r_ts = jax.vmap(reset_one)(keys[:, 1])
        return jax.vmap(lambda d, s, t, rs, rt: merge_reset(d, s, t, rs, rt, True))(
            ts.done, state, ts, r_state, r_ts
        )

    def without_reset(operand):
        state, ts = operand
        return state, ts.replace(extras={**ts.extras, "final_obs": ts.obs})

    state, ts = jax.lax.cond(jnp.any(ts.done), with_reset, without_reset, (state, ts))
    return state, ts, lambda: ts.extras["final_obs"]


def rollout(setup: OnPolicySetup, rs: RunnerState, key: jax.Array) -> tuple[Any, ...]:
    """``T`` steps from ``rs``. Returns ``(env_state, ts, traj, stats, last_values, gs)``:
    ``traj[p]`` the policy's ``[T, NL, A_p, ...]`` arrays (``traj["_gs"]``: ``[T, NL, C]``
    global states with a centralised critic), ``stats`` per-step episode sums ``[T]``,
    ``last_values[p]`` ``[NL, A_p]`` values of the last observation (the bootstrap)."""
    env, pmap, names = setup.env, setup.pmap, setup.names
    pols, setups = rs.policies, setup.policies
    need_gs, nl = setup.need_gs, setup.num_local_envs
    # kernels cast to the compute dtype once per rollout (XLA does not hoist the
    # network's casts out of the loop), and a shared torso's joint head built once
    act_params = {
        p: cast_kernels(pols[p].params, jnp.dtype(setups[p].hp["compute_dtype"])) for p in names
    }
    joints = {
        p: joint_head_params(act_params[p], setups[p].action_spec)
        if setups[p].hp["shared_torso"] and not setups[p].recurrent
        else None
        for p in names
    }
    ids = setup.env_ids()
    rec = tuple(p for p in names if setups[p].recurrent)

    def step(carry, k):
        env_state, ts, hc = carry  # hc: {p: recurrent policy p's carry, leaves [NL, A_p, S]}
        k_env, *k_pol = jax.random.split(k, 1 + len(names))
        gs = setup.global_state(env_state) if need_gs else None  # [NL, C]
        gs_b = None if gs is None else gs[:, None, :]
        obs_p = pmap.to_policy(ts.obs, axis=1)
        active_p = pmap.to_policy(ts.active, axis=1)
        masks = None if ts.action_mask is None else pmap.to_policy(ts.action_mask, axis=1)
        out, env_actions, hc_next = {}, {}, {}
        for p, kp in zip(names, k_pol, strict=True):
            ps = setups[p]
            obs = ps.flat_obs(obs_p[p], 2)  # [NL, A_p, O_pad]
            x, c = ps.inputs(pols[p], obs, gs_b)
            mask = None if masks is None else masks[p]  # [NL, A_p, K] bool

            def act_one(x, c, m, k, h, p=p):  # one env: x [A_p, O_pad], c [A_p, C + O] or None
                net = setups[p].net
                if h is None:
                    dist, value = net.apply(act_params[p], x, c, joints[p], method="act")
                else:  # recurrent: h {core: [A_p, S]}
                    h, dist, value = net.apply(act_params[p], h, x, c, method="step")
                dist = mask_actions(dist, m, setups[p].action_spec)
                raw = dist.sample(k)
                return raw, dist.log_prob(raw), value, dist.to_env(raw), h

            raw, logp, value, env_actions[p], hc_next[p] = jax.vmap(act_one)(
                x, c, mask, setup.env_keys(kp, ids), hc.get(p)
            )
            out[p] = {
                "obs": obs.astype(ps.obs_dtype),
                "action": raw,
                "logp": logp,
                "value": value,
                "active": active_p[p],
            }
            if mask is not None:
                out[p]["action_mask"] = mask
        env_state, nts, final_obs = env_step(
            setup, k_env, ids, env_state, pmap.to_groups(env_actions, axis=1)
        )

        def final_values(_):
            final_p = pmap.to_policy(final_obs(), axis=1)
            vals = {}
            for p in names:
                x, c = setups[p].inputs(pols[p], setups[p].flat_obs(final_p[p], 2), gs_b)
                if p in rec:  # the carry after this step, before its reset
                    vals[p] = setups[p].net.apply(
                        act_params[p], hc_next[p], x, c, method="value_step"
                    )
                else:
                    vals[p] = setups[p].net.apply(act_params[p], x, c, method="value")
            return vals

        def no_values(_):
            return {p: jnp.zeros((nl, setups[p].spec.num_agents), jnp.float32) for p in names}

        fv = jax.lax.cond(jnp.any(nts.done), final_values, no_values, None)
        rew_p = pmap.to_policy(nts.reward, axis=1)
        term_p = pmap.to_policy(nts.terminated, axis=1)
        trunc_p = pmap.to_policy(nts.truncated, axis=1)
        for p in names:
            out[p].update(
                reward=rew_p[p].astype(jnp.float32),
                terminated=term_p[p],
                ends=term_p[p] | trunc_p[p] | nts.done[:, None],
                final_value=fv[p],
            )
        done_f = nts.done.astype(jnp.float32)  # [NL]
        stats = {
            "episodes_done": jnp.sum(done_f),
            "episode_length": jnp.sum(done_f * nts.extras["episode_length"]),
        }
        for g in env.groups:
            ret = jnp.mean(nts.extras["episode_return"][g], axis=-1)
            stats[f"episode_return/{g}"] = jnp.sum(done_f * ret)
        if "won" in nts.extras:  # envs that say whether an episode was won (SMAX)
            stats["episodes_won"] = jnp.sum(done_f * nts.extras["won"].astype(jnp.float32))
        if need_gs:
            out["_gs"] = gs
        hc = {p: reset_carry(hc_next[p], out[p]["ends"]) for p in rec}
        return (env_state, nts, hc), (out, stats)

    hc0 = {p: pols[p].carry for p in rec}
    (env_state, ts, hc), (traj, stats) = jax.lax.scan(
        step, (rs.env_state, rs.timestep, hc0), jax.random.split(key, setup.run.num_steps)
    )
    for p in rec:
        traj[p]["carry0"] = hc0[p]
    if rec:
        traj["_carry"] = hc
    # Values of the observation after the last step, for the bootstrap.
    gs = setup.global_state(env_state) if need_gs else None
    obs_p = pmap.to_policy(ts.obs, axis=1)
    last_values = {}
    for p in names:
        gs_last = None if gs is None else gs[:, None]
        x, c = setups[p].inputs(pols[p], setups[p].flat_obs(obs_p[p], 2), gs_last)
        if p in rec:
            last_values[p] = setups[p].net.apply(act_params[p], hc[p], x, c, method="value_step")
        else:
            last_values[p] = setups[p].net.apply(act_params[p], x, c, method="value")
    return env_state, ts, traj, stats, last_values, gs
