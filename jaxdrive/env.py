"""The functional multi-agent environment contract.

An `Env` is a small immutable object holding *static* configuration (what fixes
array shapes). Numbers a user may vary or vmap over live in an `EnvParams` pytree
passed to every call. Two pure functions do the work::

    state, ts = env.reset(key, params)
    state, ts = env.step(key, state, actions, params)

Agents come in groups; per group ``g`` every array has the agent axis first:
``ts.obs[g]: [A_g, *O_g]``, ``actions[g]: [A_g, *act_shape_g]``. Both functions jit,
vmap and scan. Subclasses implement `reset_env` and `step_env`; the public `reset`
and `step` fill in default params and check the actions' structure, shape and dtype
when tracing (and their values when called eagerly, outside `jit`).
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Generic, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from jaxdrive.spaces import Space
from jaxdrive.types import EnvParams, TimeStep

__all__ = ["Env", "check_actions"]

StateT = TypeVar("StateT")
ParamsT = TypeVar("ParamsT", bound=EnvParams)


class Env(abc.ABC, Generic[StateT, ParamsT]):
    """Base class of every jaxdrive environment (see the module docstring)."""

    # ----- static description (override) ---------------------------------------------
    @property
    @abc.abstractmethod
    def groups(self) -> tuple[str, ...]:
        """Group names, in a fixed order (e.g. ``("tagger", "runner")``)."""

    @abc.abstractmethod
    def num_agents(self, group: str) -> int:
        """Number of agents ``A_g`` in ``group``."""

    @abc.abstractmethod
    def observation_space(self, group: str) -> Space:
        """Space of one agent's observation in ``group``."""

    @abc.abstractmethod
    def action_space(self, group: str) -> Space:
        """Space of one agent's action in ``group``."""

    @property
    @abc.abstractmethod
    def default_params(self) -> ParamsT:
        """The default `EnvParams` of this environment."""

    @property
    def episode_length(self) -> int | None:
        """The static cap on an episode's steps (``None`` when there is none)."""
        return None

    @property
    def name(self) -> str:
        return type(self).__name__

    # ----- dynamics (override) --------------------------------------------------------
    @abc.abstractmethod
    def reset_env(self, key: jax.Array, params: ParamsT) -> tuple[StateT, TimeStep]:
        """Draws a start state; returns ``(state, first TimeStep)``."""

    @abc.abstractmethod
    def step_env(
        self, key: jax.Array, state: StateT, actions: dict[str, jax.Array], params: ParamsT
    ) -> tuple[StateT, TimeStep]:
        """One transition for all agents; ``actions`` already checked and cast."""

    def global_state(self, state: StateT, params: ParamsT) -> jax.Array:
        """A flat ``[D]`` float32 view of the whole state, for centralised critics."""
        raise NotImplementedError(f"{self.name} does not provide a global state")

    def observations(self, state: StateT, params: ParamsT) -> dict[str, jax.Array]:
        """Optional: ``{g: [A_g, *O_g]}``, the observation that `reset`/`step` return in
        ``ts.obs`` for ``state`` (a function of the state alone).

        Envs whose observations are costly implement it: `jaxdrive.vectorize` then
        auto-resets the *state* and builds each step's observations once, from the
        merged state, instead of branching on "any env done" (neither the step's nor
        the reset's own observations are then computed).
        """
        raise NotImplementedError(f"{self.name} does not implement observations()")

    @property
    def has_observations(self) -> bool:
        """Whether `observations` is implemented (see there)."""
        return type(self).observations is not Env.observations

    @property
    def reset_by_select(self) -> bool:
        """Whether auto-reset should reset every env and select (`observations` needed)
        rather than branch on "any env done". Default: when `observations` exists. Envs
        whose step is cheap and whose episodes rarely end together may prefer the
        branch, which skips the reset on steps where no episode ends (classic control)."""
        return self.has_observations

    def vector_step(
        self,
        reset_keys: jax.Array | None,
        state: StateT,
        actions: dict[str, jax.Array],
        params: ParamsT,
        *,
        step_key: jax.Array | None = None,
    ) -> tuple[StateT, TimeStep] | None:
        """Optional: the step of a batch of ``N`` envs with shared ``params`` (every leaf of
        ``state`` and ``actions`` with a leading env axis), then, when ``reset_keys [N]``
        is given, each finished env reset from its key and selected in, with the
        observations of the resulting states: exactly what `jaxdrive.vectorize`'s ``step``
        computes by `jax.vmap` (``keep_final_obs`` off, no reset pool), but in fewer
        kernels. ``step_key``: the key ``reset_keys`` were split from
        (`jaxdrive.vector.split_step_key`), for an env that derives them itself (in a
        kernel, say). ``None`` (the default) lets `vectorize` do it by `jax.vmap`.
        Wrappers inherit this default, so a wrapper's own step is never skipped."""
        del reset_keys, state, actions, params, step_key
        return None

    # ----- public API -----------------------------------------------------------------
    @property
    def agent_counts(self) -> dict[str, int]:
        return {g: self.num_agents(g) for g in self.groups}

    @property
    def total_agents(self) -> int:
        return sum(self.agent_counts.values())

    def reset(self, key: jax.Array, params: ParamsT | None = None) -> tuple[StateT, TimeStep]:
        """Starts an episode. ``key``: a PRNG key; ``params`` default to `default_params`."""
        if params is None:
            params = self.default_params
        return self.reset_env(key, params)

    def step(
        self,
        key: jax.Array,
        state: StateT,
        actions: Any,
        params: ParamsT | None = None,
    ) -> tuple[StateT, TimeStep]:
        """Steps every agent once. ``actions``: ``{g: [A_g, *act_shape_g]}``.

        Single-group envs also accept the bare array for their one group.
        """
        if params is None:
            params = self.default_params
        actions = check_actions(self, actions)
        return self.step_env(key, state, actions, params)

    def make_params(self, **overrides: Any) -> ParamsT:
        """`default_params` with ``overrides`` (its field names), checked by `check_params`.

        Unknown field names and invalid values raise ``ValueError`` naming the field.
        `jaxdrive.make` builds its params through this method; envs with rules of their
        own override it (or `check_params`)."""
        defaults = self.default_params
        names = [f.name for f in dataclasses.fields(defaults)]
        unknown = sorted(k for k in overrides if k not in names)
        if unknown:
            raise ValueError(
                f"{self.name}: unknown {type(defaults).__name__} field(s) {unknown}; "
                f"fields: {names}"
            )
        return self.check_params(defaults.replace(**overrides) if overrides else defaults)

    def check_params(self, params: ParamsT) -> ParamsT:
        """Checks the concrete (eager) values of ``params``; traced values pass as is.

        Every leaf of every field must be a real number (bool, integer or float) and
        every float finite. Raises ``ValueError`` naming the field; returns ``params``."""
        for f in dataclasses.fields(params):
            for leaf in jax.tree.leaves(getattr(params, f.name)):
                if isinstance(leaf, jax.core.Tracer):
                    continue
                a = np.asarray(leaf)
                where = f"{self.name}: {type(params).__name__}.{f.name}"
                if a.dtype.kind not in "biuf":
                    raise ValueError(f"{where} must be a real number, got {leaf!r}")
                if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
                    raise ValueError(f"{where} must be finite, got {leaf!r}")
        return params

    def sample_actions(self, key: jax.Array) -> dict[str, jax.Array]:
        """Uniformly random actions for every agent: ``{g: [A_g, *act_shape_g]}``."""
        keys = jax.random.split(key, len(self.groups))
        return {
            g: self.action_space(g).sample(k, (self.num_agents(g),))
            for g, k in zip(self.groups, keys, strict=True)
        }

    def __repr__(self) -> str:
        counts = ", ".join(f"{g}={n}" for g, n in self.agent_counts.items())
        return f"{self.name}({counts})"


def check_actions(env: Env, actions: Any) -> dict[str, jax.Array]:
    """Checks ``actions`` against ``env``'s action spaces and casts them.

    Raises ``ValueError`` naming the group for a missing/unknown group, a wrong shape,
    a wrong dtype kind (integers for discrete spaces, floats for `Box`), and, when the
    values are concrete (eager call), values outside the space.
    Returns ``{g: array}`` cast to each space's dtype.
    """
    groups = env.groups
    if not isinstance(actions, dict):
        if len(groups) != 1:
            raise ValueError(
                f"{env.name} has groups {list(groups)}: pass actions as a dict "
                f"{{group: [num_agents, *action_shape]}}, got {type(actions).__name__}"
            )
        actions = {groups[0]: actions}
    missing = [g for g in groups if g not in actions]
    unknown = [g for g in actions if g not in groups]
    if missing or unknown:
        raise ValueError(
            f"{env.name} actions must have exactly the groups {list(groups)}; "
            f"missing {missing}, unknown {unknown}"
        )
    out = {}
    for g in groups:
        space = env.action_space(g)
        a = actions[g]
        if not hasattr(a, "dtype"):
            a = np.asarray(a)
        want = (env.num_agents(g), *space.shape)
        if tuple(a.shape) != want:
            raise ValueError(
                f"{env.name}: actions['{g}'] must have shape {want} "
                f"([num_agents, *action_shape] for {space}), got {tuple(a.shape)}"
            )
        discrete = jnp.issubdtype(space.dtype, jnp.integer)
        if discrete and not jnp.issubdtype(a.dtype, jnp.integer):
            raise ValueError(
                f"{env.name}: actions['{g}'] must be integers for {space}, got dtype {a.dtype}"
            )
        if not discrete and not jnp.issubdtype(a.dtype, jnp.floating):
            raise ValueError(
                f"{env.name}: actions['{g}'] must be floats for {space}, got dtype {a.dtype}"
            )
        if not isinstance(a, jax.core.Tracer):
            host = np.asarray(a)  # before the cast: int64 2**32 + 1 would wrap to int32 1
            ok = _representable(host, space.dtype)
            if ok:
                with jax.ensure_compile_time_eval():
                    ok = bool(np.asarray(space.contains(host.astype(space.dtype))))
            if not ok:
                raise ValueError(
                    f"{env.name}: actions['{g}'] has values outside {space}: "
                    f"min {host.min()}, max {host.max()}"
                )
        out[g] = jnp.asarray(a).astype(space.dtype)
    return out


def _representable(x: np.ndarray, dtype: Any) -> bool:
    """Whether casting ``x`` to ``dtype`` keeps every value: integers within the
    dtype's range, finite floats within its largest magnitude (NaN and infinities are
    left to the space's own check)."""
    if x.size == 0:
        return True
    if jnp.issubdtype(x.dtype, jnp.integer) and jnp.issubdtype(dtype, jnp.integer):
        info = jnp.iinfo(dtype)
        return int(info.min) <= int(x.min()) and int(x.max()) <= int(info.max)
    if jnp.issubdtype(x.dtype, jnp.floating) and jnp.issubdtype(dtype, jnp.floating):
        finite = x[np.isfinite(x)].astype(np.float64)
        return finite.size == 0 or float(np.max(np.abs(finite))) <= float(jnp.finfo(dtype).max)
    return True
