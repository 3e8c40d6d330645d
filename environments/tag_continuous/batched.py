"""`TagContinuous.vector_step`: a batch's step and auto-reset by one kernel
(`kernels.batched_step`), then the observations of the new states.

Used with the kernels (``backend="pallas"``, or ``"auto"`` on a GPU) up to
`TagKernelConfig.batched_step_up_to` agents per env, for `jaxdrive.vectorize`'s step with
shared params and no reset pool. The kernel also writes what the observation path would
otherwise rebuild from the new state in XLA: the observations' time ``t/E``, the writer's
agent-major feature table (partial observation), and, for the brute-force search when
its padded rows fit one env's lanes, the search's padded positions. The values equal
`jax.vmap` of `TagContinuous.step_env` and `reset_env` (see `kernels.batched_step`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from environments.tag_continuous import observations
from environments.tag_continuous.params import TagContinuousParams, TagState, validate_params
from jaxdrive.env import check_actions
from jaxdrive.types import TimeStep

if TYPE_CHECKING:
    from environments.tag_continuous.env import TagContinuous

__all__ = ["search_padding", "vector_step"]


def search_padding(env: TagContinuous) -> tuple[int, int] | None:
    """``(MQ, MC)`` when the batched kernel also writes the brute-force search's padded
    positions: partial observation by the kernels' brute-force search, both lengths
    within one env's lanes. Otherwise ``None``."""
    if env.use_full_observation or not env.uses_kernels or env.search_method != "brute":
        return None
    from environments.tag_continuous.kernels import batched_step, search

    m = env.num_agents_total
    mq, mc = search.brute_padding(m, env.interpret)
    return (mq, mc) if max(mq, mc) <= batched_step.lanes(m) else None


def _reset_inputs(env: TagContinuous, reset_keys, step_key) -> dict[str, jax.Array | None]:
    """The reset's randomness for the kernel: the step key's data (the kernel derives each
    env's reset key and draws), else the reset keys' data (it draws), else, for keys it
    cannot reproduce (not threefry), the uniforms drawn here."""
    from environments.tag_continuous.kernels.threefry import key_data_for_uniforms

    out = {"reset_uniforms": None, "reset_key_data": None, "step_key_data": None}
    if reset_keys is None:
        return out
    if step_key is not None:
        parent = key_data_for_uniforms(step_key)
        if parent is not None and parent.shape == (2,):  # one key
            out["step_key_data"] = parent
            return out
    out["reset_key_data"] = key_data_for_uniforms(reset_keys)
    if out["reset_key_data"] is None:
        out["reset_uniforms"] = jax.vmap(env.reset_uniforms)(reset_keys)
    return out


def vector_step(
    env: TagContinuous,
    reset_keys: jax.Array | None,
    state: TagState,
    actions: dict[str, jax.Array],
    params: TagContinuousParams,
    step_key: jax.Array | None = None,
) -> tuple[TagState, TimeStep] | None:
    """The batch's step (and auto-reset with ``reset_keys``) by the kernel, then the
    observations; ``None`` where the kernel is not used (see `jaxdrive.Env.vector_step`)."""
    m = env.num_agents_total
    if not env.uses_kernels or m > env.kernel_config.batched_step_up_to:
        return None
    from environments.tag_continuous.kernels import batched_step, search

    validate_params(params)
    actions = jax.vmap(functools.partial(check_actions, env))(actions)
    p = jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), params)
    padding = search_padding(env)
    reset = _reset_inputs(env, reset_keys, step_key)
    out = batched_step.tag_vector_step(
        [getattr(p, name) for name in batched_step.RAW_PARAMS],
        state.x, state.y, state.speed, state.direction, state.acceleration, state.in_game,
        state.t, actions["tagger"], actions["runner"], reset.pop("reset_uniforms"), **reset,
        tagger_ids=env.tagger_ids, num_acceleration_levels=env.num_acceleration_levels,
        num_turn_levels=env.num_turn_levels, episode_length=env.episode_length,
        runner_exits_game_after_tagged=env.runner_exits_game_after_tagged,
        search_padding=padding, feature_table=not env.use_full_observation,
        interpret=env.interpret,
    )  # fmt: skip
    new = TagState(
        x=out.x, y=out.y, speed=out.speed, direction=out.direction,
        acceleration=out.acceleration, in_game=out.in_game, t=out.t,
    )  # fmt: skip
    if env.use_full_observation:
        obs = jax.vmap(env.observations, in_axes=(0, None))(new, params)
    elif padding is None:  # the search in XLA's program, the kernel's table and time

        def observe_table(state, table, time):
            return observations.observe_nearest(env, state, params, time=time, table=table)

        obs = jax.vmap(observe_table)(new, out.table, out.time)
    else:  # from the kernel's search inputs, table and time
        k = env.num_other_agents_observed
        lists = search.brute_lists_padded(*out.search, m, k, interpret=env.interpret)

        def observe(state, lists, table, time):
            return observations.observe_knn_groups(
                env, state, params, lists, None, table=table, time=time
            )

        obs = jax.vmap(observe)(new, lists, out.table, out.time)

    def groups(pair):
        return dict(zip(("tagger", "runner"), pair, strict=True))

    ts = TimeStep(
        obs=obs,
        reward=groups(out.reward),
        terminated=groups(out.terminated),
        truncated=groups(out.truncated),
        active=groups(out.active),
        done=out.done,
        extras={"num_runners_left": out.runners_left, "num_tags": out.num_tags},
    )
    return new, ts
