"""`from_jaxmarl`: any JaxMARL ``MultiAgentEnv`` on the jaxdrive contract.

JaxMARL keys everything by agent name; jaxdrive stacks agents of equal spaces into
groups. Agents are grouped by name prefix (the name without its ``_<index>`` suffix)
and by their observation and action spaces, in the order of ``env.agents``: SMAX's
``ally_0 … ally_7`` become the group ``ally``, MPE simple_tag's ``adversary_*`` and
``agent_*`` the groups ``adversary`` and ``agent``. Agents of one prefix with
different spaces form groups ``<prefix>_g0``, ``<prefix>_g1`` ….

What maps to what (one step):

- ``step`` calls JaxMARL's ``step_env`` (no auto-reset: jaxdrive's `vectorize` and
  wrappers reset) with the key JaxMARL's own ``step`` would give it (the first half
  of ``split(key)``), so a transition equals JaxMARL's ``step`` with the same key
  wherever that one does not reset.
- ``dones["__all__"]`` is ``done``. An agent's episode ends at the first step where
  its own done flag or ``__all__`` is set (dead SMAX units end early); it is
  ``truncated`` when that step reaches `JaxMARLEnv.episode_length` (a time limit:
  JaxMARL's MPE and SMAX observations hold no clock) and ``terminated`` otherwise.
  After its end an agent is inactive (``active`` False). With ``team_episodes=True``
  every agent's episode lasts until ``__all__``: a dead SMAX unit stays active, takes
  the one action its mask leaves (stop) and keeps receiving the team's reward, which
  JaxMARL's SMAX pays dead units ("noble sacrifice"), so its return is the battle's; as
  Mava's systems train (episode-level dones).
- ``get_avail_actions`` (where the env implements it) gives `TimeStep.action_mask`.
- ``global_state``: the env's ``get_world_state`` (SMAX's ``world_state``), else the
  agents' observations concatenated in ``env.agents`` order, as float32.
- Observations are cast to float32; ``infos`` are dropped.
- SMAX envs also give ``extras["won"]``: ``[]`` bool, True on the step that ends a
  battle with every enemy dead and an ally alive (JaxMARL's won-battle bonus; a draw,
  both teams dead, is no win), False otherwise and after reset. Trainers aggregate it
  into a ``win_rate`` metric. (JaxMARL's ``SMAXLogWrapper`` calls an episode won when
  its last reward is at least 1, which is the same event save for a draw in which every
  enemy falls from full health within the last step.)

A SMAX unit that dies, or a battle won, on the very step that reaches the cap is marked
truncated (JaxMARL does not say which of the two ended the episode).
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxdrive.adapters._spaces import action_space_from, observation_box_from
from jaxdrive.env import Env
from jaxdrive.spaces import Space
from jaxdrive.types import EnvParams, TimeStep

__all__ = ["JaxMARLEnv", "JaxMARLState", "from_jaxmarl", "group_agents", "strong_types"]


@struct.dataclass
class JaxMARLState:
    """Dimension letters: ``A`` agents of the JaxMARL env (``env.agents`` order)."""

    inner: Any  # the JaxMARL env's state
    ended: jax.Array  # [A] bool, the agent's episode has ended
    t: jax.Array  # [] int32, steps taken in this episode


def _space_key(space: Any) -> tuple:
    """A hashable description of a foreign space (class, shape, sizes, bounds)."""
    parts = [type(space).__name__, tuple(getattr(space, "shape", ()))]
    for attr in ("n", "num_categories", "low", "high"):
        if hasattr(space, attr):
            v = jnp.asarray(getattr(space, attr))
            parts.append((attr, tuple(v.reshape(-1).tolist())))
    return tuple(parts)


def group_agents(env: Any) -> dict[str, tuple[str, ...]]:
    """``{group: agent names}``: ``env.agents`` grouped by name prefix and by equal
    observation and action spaces, groups and agents in ``env.agents`` order."""
    keyed: dict[tuple, list[str]] = {}
    for agent in env.agents:
        prefix = re.sub(r"_\d+$", "", agent)
        sig = (_space_key(env.observation_space(agent)), _space_key(env.action_space(agent)))
        keyed.setdefault((prefix, sig), []).append(agent)
    prefixes = [p for p, _ in keyed]
    groups = {}
    for (prefix, sig), agents in keyed.items():
        if prefixes.count(prefix) > 1:
            sigs = [s for p, s in keyed if p == prefix]
            prefix = f"{prefix}_g{sigs.index(sig)}"
        groups[prefix] = tuple(agents)
    return groups


# JaxMARL families whose episodes last ``max_steps + 1`` steps (see `JaxMARLEnv`) and
# whose ``step_env`` observes by ``get_obs(state)``
_COUNTED = ("jaxmarl.environments.mpe", "jaxmarl.environments.smax")
_SMAX = "jaxmarl.environments.smax"


class JaxMARLEnv(Env[JaxMARLState, EnvParams]):
    """A JaxMARL ``MultiAgentEnv`` as a jaxdrive `Env` (see the module docstring).

    Args:
      env: the JaxMARL env (static: its configuration fixes the shapes).
      episode_length: the static cap on an episode's steps, where ends are truncations;
        ``None``: ``max_steps + 1`` for JaxMARL's MPE and SMAX (their ``step_env`` sets
        done once the step count *before* the step reaches ``max_steps``), no cap for
        other envs (every end is then a termination, as JaxMARL's own algorithms treat
        it).
      team_episodes: every agent's episode ends with the env's (``dones["__all__"]``),
        not at its own done (see the module docstring).
    """

    def __init__(self, env: Any, episode_length: int | None = None, team_episodes: bool = False):
        self.env = env
        self._team_episodes = bool(team_episodes)
        self._groups = group_agents(env)
        self._agents = tuple(a for g in self._groups.values() for a in g)
        order = {a: i for i, a in enumerate(env.agents)}
        self._slots = {g: [order[a] for a in agents] for g, agents in self._groups.items()}
        self._obs_spaces = {
            g: observation_box_from(env.observation_space(a[0])) for g, a in self._groups.items()
        }
        self._act_spaces = {
            g: action_space_from(env.action_space(a[0])) for g, a in self._groups.items()
        }
        max_steps = getattr(env, "max_steps", None)
        counted = type(env).__module__.startswith(_COUNTED)
        if episode_length is None and isinstance(max_steps, int) and counted:
            episode_length = max_steps + 1
        self._episode_length = None if episode_length is None else int(episode_length)
        self._has_masks = _implements(env, "get_avail_actions")
        self._has_world_state = _implements(env, "get_world_state")
        self._obs_of_state = type(env).__module__.startswith(_COUNTED)
        self._smax = type(env).__module__.startswith(_SMAX)

    # ----- static description ----------------------------------------------------------
    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(self._groups)

    def num_agents(self, group: str) -> int:
        return len(self._groups[group])

    def agent_names(self, group: str) -> tuple[str, ...]:
        """The JaxMARL names of ``group``'s agents, in order."""
        return self._groups[group]

    def observation_space(self, group: str) -> Space:
        return self._obs_spaces[group]

    def action_space(self, group: str) -> Space:
        return self._act_spaces[group]

    @property
    def default_params(self) -> EnvParams:
        return EnvParams()

    @property
    def episode_length(self) -> int | None:
        """The cap given to the constructor, or JaxMARL's ``max_steps + 1`` (MPE, SMAX)."""
        return self._episode_length

    @property
    def name(self) -> str:
        return f"JaxMARL<{getattr(self.env, 'name', type(self.env).__name__)}>"

    # ----- dynamics --------------------------------------------------------------------
    def _group_obs(self, obs: dict[str, jax.Array]) -> dict[str, jax.Array]:
        return {
            g: jnp.stack([obs[a] for a in agents]).astype(jnp.float32)
            for g, agents in self._groups.items()
        }

    def _masks(self, inner: Any) -> dict[str, jax.Array] | None:
        if not self._has_masks:
            return None
        avail = self.env.get_avail_actions(inner)
        return {
            g: jnp.stack([avail[a] for a in agents]).astype(bool)
            for g, agents in self._groups.items()
        }

    def _split(self, flat: jax.Array) -> dict[str, jax.Array]:
        """``[A]`` in ``env.agents`` order -> ``{g: [A_g]}``."""
        return {g: flat[jnp.asarray(idx)] for g, idx in self._slots.items()}

    def reset_env(self, key: jax.Array, params: EnvParams) -> tuple[JaxMARLState, TimeStep]:
        """JaxMARL's ``reset(key)``; every agent active."""
        del params
        obs, inner = self.env.reset(key)
        inner = strong_types(inner)
        n = len(self.env.agents)
        state = JaxMARLState(inner=inner, ended=jnp.zeros((n,), bool), t=jnp.zeros((), jnp.int32))
        extras = {"won": jnp.asarray(False)} if self._smax else {}
        return state, TimeStep.restart(
            self._group_obs(obs), extras=extras, action_mask=self._masks(inner)
        )

    def _won(self, inner: Any) -> jax.Array:
        """``[]`` bool: every enemy dead and an ally alive (SMAX's won battle); ``inner``
        is a SMAX state or an ``EnemySMAX`` state holding one in ``.state``."""
        alive = getattr(inner, "unit_alive", None)
        if alive is None:
            alive = inner.state.unit_alive  # [allies + enemies]
        n = int(self.env.num_allies)
        return jnp.any(alive[:n]) & ~jnp.any(alive[n:])

    def step_env(
        self,
        key: jax.Array,
        state: JaxMARLState,
        actions: dict[str, jax.Array],
        params: EnvParams,
    ) -> tuple[JaxMARLState, TimeStep]:
        """JaxMARL's ``step_env`` on ``split(key)[0]``; flags as in the module docstring."""
        del params
        step_key, _ = jax.random.split(key)
        named = {
            a: actions[g][i] for g, agents in self._groups.items() for i, a in enumerate(agents)
        }
        obs, inner, rewards, dones, _ = self.env.step_env(step_key, state.inner, named)
        inner = strong_types(inner)
        agents = self.env.agents
        all_done = jnp.asarray(dones["__all__"], bool)
        if self._team_episodes:  # an agent's episode is the battle
            own = jnp.zeros((len(agents),), bool)
        else:
            own = jnp.stack([jnp.asarray(dones[a], bool) for a in agents])  # [A]
        t = state.t + 1
        ends = (own | all_done) & ~state.ended
        cap = self._episode_length
        time_up = jnp.asarray(False) if cap is None else t >= cap
        ended = state.ended | ends
        reward = jnp.stack([jnp.asarray(rewards[a], jnp.float32) for a in agents])
        ts = TimeStep(
            obs=self._group_obs(obs),
            reward=self._split(reward),
            terminated=self._split(ends & ~time_up),
            truncated=self._split(ends & time_up),
            active=self._split(~ended),
            done=all_done,
            extras={"won": all_done & self._won(inner)} if self._smax else {},
            action_mask=self._masks(inner),
        )
        return JaxMARLState(inner=inner, ended=ended, t=t), ts

    @property
    def has_observations(self) -> bool:
        """True for MPE and SMAX, whose ``step_env`` observes by ``get_obs(state)``."""
        return self._obs_of_state

    def observations(self, state: JaxMARLState, params: EnvParams) -> dict[str, jax.Array]:
        """``ts.obs`` from the state alone: JaxMARL's ``get_obs`` (MPE and SMAX only; lets
        `jaxdrive.vectorize` auto-reset by selecting states, as JaxMARL's ``step`` does)."""
        del params
        if not self._obs_of_state:
            raise NotImplementedError(f"{self.name} does not implement observations()")
        return self._group_obs(self.env.get_obs(state.inner))

    def global_state(self, state: JaxMARLState, params: EnvParams) -> jax.Array:
        """``[D]`` float32: ``get_world_state`` where the env has it, else every agent's
        observation (``get_obs``) flattened and concatenated in ``env.agents`` order."""
        del params
        if self._has_world_state:
            return jnp.ravel(self.env.get_world_state(state.inner)).astype(jnp.float32)
        obs = self.env.get_obs(state.inner)
        return jnp.concatenate([jnp.ravel(obs[a]) for a in self.env.agents]).astype(jnp.float32)


def strong_types(tree: Any) -> Any:
    """``tree`` with every array leaf of a weak type made strong (same dtype and values),
    so states after reset and after step share one jit signature (no retrace)."""

    def strong(x: Any) -> Any:
        if isinstance(x, bool | int | float):  # a Python number: weakly typed under jit
            x = jnp.asarray(x)
        if isinstance(x, jax.Array) and jax.typeof(x).weak_type:
            return x.astype(x.dtype)
        return x

    return jax.tree.map(strong, tree)


def _implements(env: Any, method: str) -> bool:
    """Whether ``env.method`` exists and is not the base class's ``NotImplementedError``
    stub (probed abstractly on a reset state: no computation)."""
    fn = getattr(env, method, None)
    if fn is None:
        return False
    try:
        jax.eval_shape(lambda k: fn(env.reset(k)[1]), jax.random.key(0))
    except NotImplementedError:
        return False
    return True


def from_jaxmarl(
    env: Any, episode_length: int | None = None, team_episodes: bool = False
) -> JaxMARLEnv:
    """Wraps a JaxMARL ``MultiAgentEnv`` (e.g. ``jaxmarl.make("MPE_simple_spread_v3")``)
    as a jaxdrive `Env`; see `jaxdrive.adapters.jaxmarl_env` for what maps to what.
    Its params are an empty `EnvParams` (JaxMARL envs hold their numbers as attributes);
    ``episode_length`` and ``team_episodes`` as in `JaxMARLEnv`."""
    for attr in ("agents", "reset", "step_env", "observation_space", "action_space"):
        if not hasattr(env, attr):
            raise TypeError(
                f"from_jaxmarl needs a JaxMARL MultiAgentEnv (with .{attr}), got "
                f"{type(env).__name__}"
            )
    return JaxMARLEnv(env, episode_length, team_episodes)
