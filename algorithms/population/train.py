"""Populations in one compiled program: ``P`` members, each a whole training run of one
algorithm, vmapped over a member axis (optionally split over devices), with PBT or
tournament selection between chunks as jitted functions of the population state.

``make_population_train(config, env, env_params) -> Population``. ``config`` is a run
config of any algorithm plus a ``population`` section (`algorithms.population.config`).
Every member is the algorithm's `Trainer` built from the config without that section;
members differ by their PRNG key (member ``i`` starts from ``trainer.init(keys[i])``,
``keys = split(k_members, P)``) and by the hyper-parameters drawn from the configured
ranges, which live in each policy's ``hparams`` in the runner state (see
`algorithms.common.on_policy_setup`), so one program trains them all.

Selection (every ``pbt.interval_chunks`` chunks, `Population.select`):

* **score**: the mean over the last chunk's iterations in which episodes ended of the
  ``score`` metric (the running episode returns of training; a member with none keeps
  its previous score), or with ``eval_episodes`` = E > 0 the mean return of the score
  group over E deterministic evaluation episodes of each member (`Population.evaluate`);
* **leaderboard** (``tournament.leaderboard_size`` = K > 0): every member's learner
  state (a *snapshot*: parameters, optimiser states, normalisation statistics and
  hyper-parameters of every policy; not its envs) is merged into the K best
  (`algorithms.population.leaderboard`);
* **pbt**: truncation selection: the bottom ``q`` copy the learner state of a top ``q``
  member, then their hyper-parameters are perturbed or resampled
  (`algorithms.population.selection`); **tournament**: the bottom ``q`` restart from a
  leaderboard snapshot drawn by rank (weight ``1/(rank+1)``), then explore the same way.
  A member keeps its own envs, PRNG key and iteration count.

**Devices** (``population.num_devices`` = D > 1): the member axis is split over a 1-D
mesh (axis ``"member"``); a chunk runs each device's ``P/D`` members in ``shard_map``
(no communication; with the member config's ``partitioner = "auto"``, as the MuJoCo
configs set, XLA partitions the vmapped members instead), selection is a jitted
function of the sharded state. Members' randomness does not depend on D, so a
population gives the same numbers on any D that divides ``P`` (up to floating-point
differences of batched kernels).

Dimension letters: ``P`` members, ``H`` varied hyper-parameter slots, ``K`` leaderboard
entries (or iterations of a chunk in metrics ``[P, K]``).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as Spec

import algorithms
import jaxdrive
from algorithms.common.config import as_dict, make_env
from algorithms.population.config import PopulationSpec, resolve_population
from algorithms.population.hparams import from_unit
from algorithms.population.leaderboard import (
    Leaderboard,
    empty_leaderboard,
    update_leaderboard,
)
from algorithms.population.selection import draws, explore, rank_pick, truncation_plan
from jaxdrive.distributed import shard_map
from jaxdrive.training import Trainer

__all__ = ["MEMBER_AXIS", "Population", "PopulationState", "make_population_train"]

#: The mesh axis the member axis is split over.
MEMBER_AXIS = "member"

#: Policy-state fields that belong to a member's envs, not to its learner (not copied).
_ENV_FIELDS = ("ret_acc", "carry")  # carry: recurrent cores' hidden states


@struct.dataclass
class PopulationState:
    """Everything a population run carries between chunks (checkpointable)."""

    members: Any  # the members' runner states, leaves [P, ...]
    scores: jax.Array  # [P] float32 latest scores (NaN before the first)
    parent: jax.Array  # [P] int32 source of the last copy (member or entry), -1: none
    leaderboard: Leaderboard | None  # K snapshots (None when K = 0)
    key: jax.Array  # [2] uint32 raw PRNG key of selection
    generation: jax.Array  # [] int32 selection rounds done


def _snapshot(policies: dict[str, Any]) -> dict[str, Any]:
    """The learner part of every policy state (env-shaped fields left out)."""
    return {
        p: ps.replace(**{f: None for f in _ENV_FIELDS if hasattr(ps, f)})
        for p, ps in policies.items()
    }


def _with_snapshot(policies: dict[str, Any], snap: dict[str, Any]) -> dict[str, Any]:
    """``policies`` with their learner part replaced by ``snap``'s."""
    return {
        p: snap[p].replace(**{f: getattr(ps, f) for f in _ENV_FIELDS if hasattr(ps, f)})
        for p, ps in policies.items()
    }


def _member_config(config: Any) -> Any:
    """``config`` without its ``population`` section (what one member trains)."""
    if hasattr(config, "copy_and_resolve_references"):
        c = config.copy_and_resolve_references()
        if "population" in c:
            with c.unlocked():
                del c["population"]
        return c
    return {k: copy.deepcopy(v) for k, v in as_dict(config).items() if k != "population"}


@dataclasses.dataclass(frozen=True, eq=False)
class Population:
    """``P`` members of one algorithm in one program (see the module docstring).

    The methods are pure (jit them); `init` and `chunk` are sharded over `mesh` when
    there is one.
    """

    trainer: Trainer  # one member's trainer
    spec: PopulationSpec
    config: Any  # the full config (with its population section)
    mesh: Mesh | None  # the member mesh when spec.num_devices > 1
    env: Any
    env_params: Any

    @property
    def size(self) -> int:
        return self.spec.size

    @property
    def slots(self) -> tuple:
        return self.spec.slots

    # ---- hyper-parameters -----------------------------------------------------------
    def hparams(self, members: Any) -> jax.Array:
        """``[P, H]`` float32 values of the varied slots."""
        cols = [members.policies[s.policy].hparams[s.name] for s in self.slots]
        if not cols:
            return jnp.zeros((members.iteration.shape[0], 0), jnp.float32)
        return jnp.stack(cols, axis=-1)

    def with_hparams(self, members: Any, values: jax.Array) -> Any:
        """``members`` with the varied slots set to ``values [P, H]``."""
        pols = dict(members.policies)
        for h, s in enumerate(self.slots):
            ps = pols[s.policy]
            pols[s.policy] = ps.replace(hparams={**ps.hparams, s.name: values[:, h]})
        return members.replace(policies=pols)

    # ---- sharding -------------------------------------------------------------------
    def _specs(self, state: PopulationState) -> PopulationState:
        return PopulationState(
            members=jax.tree.map(lambda _: Spec(MEMBER_AXIS), state.members),
            scores=Spec(),
            parent=Spec(),
            leaderboard=jax.tree.map(lambda _: Spec(), state.leaderboard),
            key=Spec(),
            generation=Spec(),
        )

    def shardings(self, state: PopulationState) -> Any:
        """The `NamedSharding` of every leaf of ``state`` (members split on the member
        axis, the rest replicated); ``None`` on one device."""
        if self.mesh is None:
            return None
        return jax.tree.map(lambda s: NamedSharding(self.mesh, s), self._specs(state))

    def _constrain(self, state: PopulationState) -> PopulationState:
        sh = self.shardings(state)
        return state if sh is None else jax.lax.with_sharding_constraint(state, sh)

    # ---- the program ----------------------------------------------------------------
    def init(self, key: jax.Array) -> PopulationState:
        """Members from ``split(k_members, P)`` with hyper-parameters drawn from the
        ranges (``k_hparams``), an empty leaderboard; ``key`` splits into
        ``(k_members, k_hparams, k_select)``."""
        key = jnp.asarray(key)
        if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
            key = jax.random.key_data(key)
        k_mem, k_hp, k_sel = jax.random.split(jax.random.wrap_key_data(key), 3)
        keys = jax.random.key_data(jax.random.split(k_mem, self.size))
        members = jax.vmap(self.trainer.init)(keys)
        if self.slots:
            u = jax.random.uniform(k_hp, (self.size, len(self.slots)), jnp.float32)
            members = self.with_hparams(members, from_unit(u, self.slots))
        lb = None
        if self.spec.leaderboard_size:
            one = jax.tree.map(lambda x: x[0], _snapshot(members.policies))
            lb = empty_leaderboard(one, self.spec.leaderboard_size)
        state = PopulationState(
            members=members,
            scores=jnp.full((self.size,), jnp.nan, jnp.float32),
            parent=jnp.full((self.size,), -1, jnp.int32),
            leaderboard=lb,
            key=jax.random.key_data(k_sel),
            generation=jnp.zeros((), jnp.int32),
        )
        return self._constrain(state)

    def chunk(self, state: PopulationState, num_iterations: int) -> tuple[PopulationState, dict]:
        """``num_iterations`` iterations of every member; metrics ``{name: [P, K]}``."""

        def run(members):
            return jax.vmap(lambda rs: self.trainer.chunk(rs, num_iterations))(members)

        if self.mesh is not None and self.config.get("partitioner") == "auto":
            # XLA partitions the vmapped members (the MJX envs, which XLA's GPU compiler
            # cannot compile inside shard_map); members never communicate either way
            members, metrics = run(state.members)
            return self._constrain(state.replace(members=members)), metrics
        if self.mesh is not None:
            axis = Spec(MEMBER_AXIS)
            run = shard_map(run, mesh=self.mesh, in_specs=(axis,), out_specs=(axis, axis))
        members, metrics = run(state.members)
        return state.replace(members=members), metrics

    def update(self, state: PopulationState) -> tuple[PopulationState, dict]:
        """One iteration of every member; metrics ``{name: [P]}``."""
        state, metrics = self.chunk(state, 1)
        return state, {k: v[:, 0] for k, v in metrics.items()}

    def score(self, state: PopulationState, metrics: dict) -> PopulationState:
        """``state`` with its scores from a chunk's metrics ``{name: [P, K]}``: the mean
        of the score metric over iterations where episodes ended (kept where none did);
        with ``eval_episodes`` > 0, `evaluate` with a key folded from ``state.key`` and
        the members' iteration count. The state keeps its sharding (`shardings`)."""
        if self.spec.eval_episodes:
            k = jax.random.fold_in(jax.random.wrap_key_data(state.key), state.members.iteration[0])
            scores = self.evaluate(state, jax.random.key_data(k))
            return self._constrain(state.replace(scores=scores))
        ret = metrics[self.spec.score]
        ended = (metrics["episodes_done"] > 0) & jnp.isfinite(ret)
        n = jnp.sum(ended, axis=1)
        mean = jnp.sum(jnp.where(ended, ret, 0.0), axis=1) / jnp.maximum(n, 1)
        scores = jnp.where(n > 0, mean, state.scores).astype(jnp.float32)
        return self._constrain(state.replace(scores=scores))

    def evaluate(self, state: PopulationState, key: jax.Array) -> jax.Array:
        """``[P]`` float32: every member's mean return of the score group over
        ``eval_episodes`` deterministic episodes (envs reset with ``key``, the same for
        every member; rewards after an env's first ``done`` are masked out; at most the
        env's episode length, else 1000 steps)."""
        env, tr = self.env, self.trainer
        E, group = self.spec.eval_episodes, self.spec.score.split("/", 1)[1]
        venv = jaxdrive.vectorize(env, E, auto_reset=False)
        steps = env.episode_length or 1000
        k_reset, k_loop = jax.random.split(jnp.asarray(key))

        def one(rs):
            params = tr.get_params(rs)
            es, ts = venv.reset(k_reset, self.env_params)

            def body(carry, k):
                es, ts, ret, alive = carry
                a = tr.act(params, k, ts.obs, deterministic=True)
                es, ts = venv.step(k, es, a, self.env_params)
                r = jnp.mean(ts.reward[group], axis=-1)
                return (es, ts, ret + jnp.where(alive, r, 0.0), alive & ~ts.done), None

            carry = (es, ts, jnp.zeros((E,), jnp.float32), jnp.ones((E,), bool))
            (_, _, ret, _), _ = jax.lax.scan(body, carry, jax.random.split(k_loop, steps))
            return jnp.mean(ret)

        return jax.vmap(one)(state.members).astype(jnp.float32)

    def exploit_explore(
        self, state: PopulationState, scores: jax.Array, key: jax.Array
    ) -> PopulationState:
        """PBT: the bottom ``q`` copy the learner state and hyper-parameters of a top
        ``q`` member (by ``scores [P]``), then explore (see `selection`)."""
        sp, members = self.spec, state.members
        d = draws(key, self.size, len(self.slots), len(sp.perturb_factors))
        src, copied = truncation_plan(scores, d["pick"], sp.truncation)
        snap = jax.tree.map(lambda x: x[src], _snapshot(members.policies))
        members = members.replace(policies=_with_snapshot(members.policies, snap))
        values = explore(
            self.hparams(members), copied, d, self.slots, sp.perturb_factors, sp.resample_prob
        )
        members = self.with_hparams(members, values)
        return state.replace(members=members, parent=jnp.where(copied, src, -1))

    def restart_from_leaderboard(
        self, state: PopulationState, scores: jax.Array, key: jax.Array
    ) -> PopulationState:
        """Tournament: the bottom ``q`` members (by ``scores [P]``) restart from
        leaderboard snapshots drawn by rank, then explore."""
        sp, members, lb = self.spec, state.members, state.leaderboard
        d = draws(key, self.size, len(self.slots), len(sp.perturb_factors))
        _, restart = truncation_plan(scores, d["pick"], sp.truncation)
        restart = restart & jnp.any(lb.valid)
        entry = rank_pick(lb.valid, d["pick"])

        def take(own, board):
            new = board[entry]
            return jnp.where(restart.reshape(-1, *[1] * (own.ndim - 1)), new, own)

        snap = jax.tree.map(take, _snapshot(members.policies), lb.snapshots)
        members = members.replace(policies=_with_snapshot(members.policies, snap))
        values = explore(
            self.hparams(members), restart, d, self.slots, sp.perturb_factors, sp.resample_prob
        )
        members = self.with_hparams(members, values)
        return state.replace(members=members, parent=jnp.where(restart, entry, -1))

    def select(self, state: PopulationState) -> PopulationState:
        """One selection round on ``state.scores``: leaderboard update, then PBT or a
        tournament restart (by ``spec.mode``); one jittable function."""
        key, k_sel = jax.random.split(jax.random.wrap_key_data(state.key))
        scores = state.scores
        if state.leaderboard is not None:
            steps = state.members.iteration.astype(jnp.float32) * float(
                self.trainer.env_steps_per_iteration
            )
            lb = update_leaderboard(
                state.leaderboard,
                _snapshot(state.members.policies),
                scores,
                steps,
                state.generation,
            )
            state = state.replace(leaderboard=lb)
        if self.spec.mode == "pbt":
            state = self.exploit_explore(state, scores, k_sel)
        elif self.spec.mode == "tournament":
            state = self.restart_from_leaderboard(state, scores, k_sel)
        state = state.replace(key=jax.random.key_data(key), generation=state.generation + 1)
        return self._constrain(state)

    def member(self, state: PopulationState, i: int) -> Any:
        """Member ``i``'s runner state (a single-member trainer's state)."""
        return jax.tree.map(lambda x: x[i], state.members)


def make_population_train(config: Any, env: Any = None, env_params: Any = None) -> Population:
    """The `Population` of ``config`` (see the module docstring); ``env`` built from the
    config when ``None``. ``ValueError`` naming the key for a bad population section, or
    for ``config.num_devices`` > 1 (the member axis, not the env batch, is split)."""
    member_cfg = _member_config(config)
    if int(as_dict(member_cfg).get("num_devices", 1) or 1) != 1:
        raise ValueError(
            "config.num_devices must be 1 in a population run: the member axis is split "
            "over devices instead (config.population.num_devices)"
        )
    if env is None:
        env, made = make_env(member_cfg)
        env_params = made if env_params is None else env_params
    trainer = algorithms.make_train(member_cfg, env, env_params)
    shape = jax.eval_shape(trainer.init, jax.random.PRNGKey(0))
    pol_cfg = as_dict(member_cfg["policies"])
    names = {
        p: tuple(getattr(ps, "hparams", {}))
        for p, ps in shape.policies.items()
        if not as_dict(pol_cfg[p]).get("frozen", False)
    }
    section = as_dict(config).get("population")
    spec = resolve_population(
        section, names, env.groups, lambda: tuple(jax.eval_shape(trainer.update, shape)[1])
    )
    mesh = None
    if spec.num_devices > 1:
        devs = jax.devices()
        if spec.num_devices > len(devs):
            raise ValueError(
                f"config.population.num_devices={spec.num_devices} but only {len(devs)} "
                "devices are present"
            )
        mesh = Mesh(np.asarray(devs[: spec.num_devices]), (MEMBER_AXIS,))
    return Population(
        trainer=trainer, spec=spec, config=config, mesh=mesh, env=env, env_params=env_params
    )
