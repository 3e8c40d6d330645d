"""Self-play leagues for two opposed policies (Tag's taggers against its runners).

``make_league(config, sides=("tagger", "runner"), ...) -> League``. The two sides train
in turns, a chunk each: while side ``X`` learns, the opposing side ``Y`` acts (frozen)
with a snapshot drawn from ``Y``'s **pool** of past snapshots, kept on the device. After
its chunk, ``X``'s new state enters ``X``'s pool (a ring of ``pool_size`` entries,
oldest overwritten), and the opponent ``X``'s next turn will face is drawn by
``sampling``:

* ``"latest"``: the newest entry of the opponent's pool (plain alternating self-play);
* ``"uniform"``: any valid entry with equal probability (fictitious self-play);
* ``"prioritized"``: entries ranked by the learning side's running score against them
  (lowest first; entries never played first of all), entry of rank ``r`` drawn with
  weight ``1/(r+1)``: the opponents it does worst against come most often.

A side's score against an entry is an exponential moving average (rate ``1/2``) of
the mean episode return of its groups over the chunks it played that entry.

Each side keeps its own learner state (`LeagueState.live`); the runner state's slot of
the frozen side holds the drawn snapshot. `League.held_out` gives the parameter sets a
final evaluation plays each side's live policy against: the opposing pool's oldest
entry, a freshly initialised (random) opponent and the opponent's latest (live) state.

Dimension letters: ``S`` pool entries.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

import algorithms
from algorithms.common.config import as_dict
from algorithms.population.selection import rank_pick
from algorithms.population.train import _member_config, _snapshot, _with_snapshot
from jaxdrive.training import Trainer

__all__ = ["SAMPLING", "League", "LeagueState", "Pool", "make_league"]

SAMPLING = ("latest", "uniform", "prioritized")


@struct.dataclass
class Pool:
    """One side's past snapshots (a ring)."""

    snapshots: Any  # learner states of the side's policy, leaves [S, ...]
    valid: jax.Array  # [S] bool
    added: jax.Array  # [S] int32 turn it was added in (-1 where empty)
    score: jax.Array  # [S] float32 the other side's running score against it (NaN: unplayed)
    next: jax.Array  # [] int32 the slot the next snapshot goes to


@struct.dataclass
class LeagueState:
    """A league between chunks (checkpointable)."""

    runner: Any  # the runner state (envs, both policies' slots)
    live: dict[str, Any]  # each side's own policy state, by policy name
    pools: dict[str, Pool]  # by policy name
    opponent: jax.Array  # [] int32 pool entry the next turn's frozen side plays with
    turn: jax.Array  # [] int32 chunks done (side sides[turn % 2] learns next)
    key: jax.Array  # [2] uint32


def _put(pool: Pool, snap: Any, turn: jax.Array) -> Pool:
    i = pool.next
    S = pool.valid.shape[0]
    return Pool(
        snapshots=jax.tree.map(lambda b, x: b.at[i].set(x), pool.snapshots, snap),
        valid=pool.valid.at[i].set(True),
        added=pool.added.at[i].set(turn),
        score=pool.score.at[i].set(jnp.nan),
        next=(i + 1) % S,
    )


@dataclasses.dataclass(frozen=True, eq=False)
class League:
    """Two sides in turns against each other's pools (see the module docstring)."""

    trainers: dict[str, Trainer]  # by side: the trainer in which only that side learns
    sides: tuple[str, str]
    groups: dict[str, tuple[str, ...]]  # the env groups of each side
    pool_size: int
    sampling: str

    def other(self, side: str) -> str:
        return self.sides[1] if side == self.sides[0] else self.sides[0]

    def side_of(self, state: LeagueState) -> str:
        """The side that learns in the next chunk (host-side: reads ``state.turn``)."""
        return self.sides[int(state.turn) % 2]

    def _draw(self, pool: Pool, key: jax.Array) -> jax.Array:
        S = pool.valid.shape[0]
        if self.sampling == "latest":
            return (pool.next - 1) % S
        u = jax.random.uniform(key, (1,))
        if self.sampling == "uniform":
            w = pool.valid.astype(jnp.float32)
            cdf = jnp.cumsum(w) / jnp.maximum(jnp.sum(w), 1.0)
            return jnp.minimum(jnp.sum(u[0] >= cdf), S - 1).astype(jnp.int32)
        s = jnp.where(jnp.isnan(pool.score), -jnp.inf, pool.score)
        s = jnp.where(pool.valid, s, jnp.inf)
        order = jnp.argsort(s, stable=True)  # lowest score (hardest opponent) first
        return order[rank_pick(pool.valid[order], u)[0]].astype(jnp.int32)

    def init(self, key: jax.Array) -> LeagueState:
        """Both sides from ``trainers[sides[0]].init(k_run)`` (``key`` splits into
        ``(k_run, k_league)``); each pool holds its side's initial snapshot; the first
        turn's opponent is that entry."""
        key = jnp.asarray(key)
        if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
            key = jax.random.key_data(key)
        k_run, k_league = jax.random.split(jax.random.wrap_key_data(key))
        rs = self.trainers[self.sides[0]].init(jax.random.key_data(k_run))
        snaps = _snapshot(rs.policies)
        pools = {}
        for side in self.sides:
            one = snaps[side]
            empty = Pool(
                snapshots=jax.tree.map(
                    lambda x: jnp.zeros((self.pool_size, *x.shape), x.dtype), one
                ),
                valid=jnp.zeros((self.pool_size,), bool),
                added=jnp.full((self.pool_size,), -1, jnp.int32),
                score=jnp.full((self.pool_size,), jnp.nan, jnp.float32),
                next=jnp.zeros((), jnp.int32),
            )
            pools[side] = _put(empty, one, jnp.zeros((), jnp.int32))
        return LeagueState(
            runner=rs,
            live=dict(rs.policies),
            pools=pools,
            opponent=jnp.zeros((), jnp.int32),
            turn=jnp.zeros((), jnp.int32),
            key=jax.random.key_data(k_league),
        )

    def chunk(
        self, state: LeagueState, num_iterations: int, side: str
    ) -> tuple[LeagueState, dict[str, jax.Array]]:
        """``side`` learns for ``num_iterations`` iterations against the opponent
        snapshot ``state.opponent``; then its snapshot enters its pool, the opponent's
        score is updated and the next turn's opponent (for the other side) is drawn.
        ``side`` must be `side_of` ``(state)`` (static: one program per side)."""
        opp = self.other(side)
        pool = state.pools[opp]
        drawn = jax.tree.map(lambda x: x[state.opponent], pool.snapshots)
        pols = dict(state.runner.policies)
        pols[side] = state.live[side].replace(ret_acc=pols[side].ret_acc)
        pols.update(_with_snapshot({opp: pols[opp]}, {opp: drawn}))
        rs, metrics = self.trainers[side].chunk(state.runner.replace(policies=pols), num_iterations)
        live = {**state.live, side: rs.policies[side]}
        ended = metrics["episodes_done"] > 0
        ret = sum(metrics[f"episode_return/{g}"] for g in self.groups[side]) / len(
            self.groups[side]
        )
        n = jnp.sum(ended)
        got = jnp.sum(jnp.where(ended, ret, 0.0)) / jnp.maximum(n, 1)
        old = pool.score[state.opponent]
        new = jnp.where(jnp.isnan(old), got, 0.5 * old + 0.5 * got)
        pool = pool.replace(score=pool.score.at[state.opponent].set(jnp.where(n > 0, new, old)))
        turn = state.turn + 1
        mine = _put(state.pools[side], _snapshot({side: live[side]})[side], turn)
        key, k_draw = jax.random.split(jax.random.wrap_key_data(state.key))
        pools = {side: mine, opp: pool}
        state = LeagueState(
            runner=rs,
            live=live,
            pools=pools,
            opponent=self._draw(mine, k_draw),  # the other side learns next, against `side`
            turn=turn,
            key=jax.random.key_data(key),
        )
        return state, metrics

    def held_out(self, state: LeagueState, key: jax.Array) -> dict[str, dict[str, Any]]:
        """``{side: {"oldest" | "random" | "latest": params_by_policy}}``: the live
        policy of ``side`` with each held-out opponent, in `Trainer.get_params` form."""
        fresh = self.trainers[self.sides[0]].init(key).policies
        out = {}
        for side in self.sides:
            opp = self.other(side)
            pool = state.pools[opp]
            oldest = jnp.argmin(jnp.where(pool.valid, pool.added, jnp.iinfo(jnp.int32).max))
            snap = jax.tree.map(lambda x: x[oldest], pool.snapshots)
            choices = {"oldest": snap, "random": fresh[opp], "latest": state.live[opp]}
            out[side] = {
                name: {
                    side: {
                        "params": state.live[side].params,
                        "obs_norm": state.live[side].obs_norm,
                    },
                    opp: {"params": o.params, "obs_norm": o.obs_norm},
                }
                for name, o in choices.items()
            }
        return out


def make_league(
    config: Any,
    env: Any = None,
    env_params: Any = None,
    *,
    sides: tuple[str, str] = ("tagger", "runner"),
    pool_size: int = 8,
    sampling: str = "prioritized",
) -> League:
    """The `League` of an on-policy ``config`` with (at least) the two policies
    ``sides``; ``ValueError`` naming what is wrong."""
    if sampling not in SAMPLING:
        raise ValueError(f"sampling must be one of {list(SAMPLING)}, got {sampling!r}")
    if isinstance(pool_size, bool) or int(pool_size) < 1:
        raise ValueError(f"pool_size must be an integer >= 1, got {pool_size!r}")
    base = _member_config(config)
    policies = as_dict(base["policies"])
    if len(sides) != 2 or sides[0] == sides[1] or any(s not in policies for s in sides):
        raise ValueError(
            f"sides must name two policies of config.policies {list(policies)}, got {sides!r}"
        )
    trainers, groups = {}, {}
    for side in sides:
        c = copy.deepcopy(base)
        opp = sides[1] if side == sides[0] else sides[0]
        c["policies"][opp]["frozen"] = True
        c["policies"][side]["frozen"] = False
        trainers[side] = algorithms.make_train(c, env, env_params)
        g = as_dict(policies[side]).get("groups")
        groups[side] = (g,) if isinstance(g, str) else tuple(g)
    return League(trainers, tuple(sides), groups, int(pool_size), sampling)
