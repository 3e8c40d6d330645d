"""mpe2 as the reference of the MPE scenarios: its world set to given states, stepped.

`mpe2_transitions` writes each state of a batch into an mpe2 1.1.1 ``raw_env`` of the
same scenario (positions, velocities, utterances, goal and key assignments, the colours
that follow from them), applies the actions by mpe2's own ``_execute_world_step`` and
reads back its observations, rewards and next world state: a NumPy loop, one transition
at a time, without the AEC wrappers. `random_states` draws states to inject and
`parity_errors` compares a batch of ours with mpe2's. mpe2 is imported on first use.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from environments.mpe.base import MPEEnv
from environments.mpe.world import MPEState

__all__ = ["make_mpe2", "mpe2_transitions", "parity_errors", "parity_variants", "random_states"]

# Our scenario class name -> mpe2 module (its ``raw_env``).
_MODULES = {
    "Simple": "simple_v3",
    "SimpleSpread": "simple_spread_v3",
    "SimpleTag": "simple_tag_v3",
    "SimpleAdversary": "simple_adversary_v3",
    "SimplePush": "simple_push_v3",
    "SimpleReference": "simple_reference_v3",
    "SimpleSpeakerListener": "simple_speaker_listener_v4",
    "SimpleWorldComm": "simple_world_comm_v3",
    "SimpleCrypto": "simple_crypto_v3",
}


# Constructor options of the continuous variants checked (the discrete ones: mpe2's).
_OTHER_COUNTS = {
    "simple_spread": {"N": 5},
    "simple_tag": {"num_good": 2, "num_adversaries": 4, "num_obstacles": 3},
    "simple_adversary": {"N": 3},
    "simple_world_comm": {"num_good": 3, "num_adversaries": 3, "num_food": 3, "num_forests": 1},
}


def parity_variants(name: str) -> tuple[MPEEnv, MPEEnv]:
    """The two variants of scenario ``name`` that the parity checks step: discrete with
    mpe2's default counts, continuous with other counts where the scenario has any."""
    from environments.mpe import SCENARIOS

    cls = SCENARIOS[name]
    return cls(), cls(continuous_actions=True, **_OTHER_COUNTS.get(name, {}))


def make_mpe2(env: MPEEnv) -> Any:
    """The mpe2 ``raw_env`` of ``env``'s scenario with the same constructor options."""
    module = importlib.import_module(f"mpe2.{_MODULES[type(env).__name__]}")
    kwargs = {f.name: getattr(env, f.name) for f in dataclasses.fields(env)}
    return module.raw_env(**kwargs)


def _set_goals(name: str, world: Any, goal: np.ndarray) -> None:
    """mpe2's reset_world assignments for the goal indices ``goal [K]``."""
    agents, lms = world.agents, world.landmarks
    if name in ("SimpleAdversary", "SimplePush", "SimpleCrypto"):
        for a in agents:
            a.goal_a = lms[goal[0]]
    if name == "SimplePush":
        for a in agents:
            if not a.adversary:
                a.color = np.array([0.25, 0.25, 0.25])
                a.color[goal[0] + 1] += 0.5
    elif name == "SimpleReference":
        agents[0].goal_b, agents[1].goal_b = lms[goal[0]], lms[goal[1]]
    elif name == "SimpleSpeakerListener":
        agents[0].goal_b = lms[goal[0]]
    elif name == "SimpleCrypto":
        agents[2].key = lms[goal[1]].color


def _set_state(raw: Any, env: MPEEnv, s: dict[str, np.ndarray]) -> None:
    world = raw.world
    for i, a in enumerate(world.agents):
        a.state.p_pos = s["agent_pos"][i].astype(np.float64)
        a.state.p_vel = s["agent_vel"][i].astype(np.float64)
        a.state.c = s["comm"][i, : world.dim_c].astype(np.float64)
    for j, lm in enumerate(world.landmarks):
        lm.state.p_pos = s["landmark_pos"][j].astype(np.float64)
        lm.state.p_vel = np.zeros(2)
    _set_goals(type(env).__name__, world, s["goal"])


def mpe2_transitions(
    env: MPEEnv, states: MPEState, actions: dict[str, Any]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """mpe2's step from each of ``B`` states (``states``: leaves ``[B, ...]``) with
    ``actions {g: [B, A_g, ...]}``. Returns ``(obs {g: [B, A_g, O_g]} float32,
    reward {g: [B, A_g]} float64, next {"agent_pos", "agent_vel", "comm": [B, N, ·]}
    float64, and ``"terminal" [B]`` bool, mpe2's ``is_terminal`` after the step)``."""
    raw = make_mpe2(env)
    raw.reset(seed=0)
    host = jax.tree.map(np.asarray, states)
    acts = {g: np.asarray(a) for g, a in actions.items()}
    b = host.t.shape[0]
    names = [a.name for a in raw.world.agents]
    group_of = [g for g in env.groups for _ in range(env.num_agents(g))]
    within = [i for g in env.groups for i in range(env.num_agents(g))]
    obs = {g: np.zeros((b, env.num_agents(g), env.obs_size(g)), np.float32) for g in env.groups}
    rew = {g: np.zeros((b, env.num_agents(g))) for g in env.groups}
    n = env.num_agents_total
    nxt = {
        "agent_pos": np.zeros((b, n, 2)),
        "agent_vel": np.zeros((b, n, 2)),
        "comm": np.zeros((b, n, env.comm_width)),
        "terminal": np.zeros((b,), bool),
    }
    fields = ("agent_pos", "agent_vel", "comm", "landmark_pos", "goal")
    for k in range(b):
        _set_state(raw, env, {f: getattr(host, f)[k] for f in fields})
        for i in range(n):
            a = acts[group_of[i]][k, within[i]]
            raw.current_actions[i] = a.copy() if a.ndim else int(a)
        raw._execute_world_step()
        nxt["terminal"][k] = raw.scenario.is_terminal(raw.world)
        for i, (g, w, name) in enumerate(zip(group_of, within, names, strict=True)):
            obs[g][k, w] = raw.observe(name)
            rew[g][k, w] = raw.rewards[name]
            agent = raw.world.agents[i]
            nxt["agent_pos"][k, i] = agent.state.p_pos
            nxt["agent_vel"][k, i] = agent.state.p_vel
            nxt["comm"][k, i, : env.dim_c] = agent.state.c
    return obs, rew, nxt


def random_states(env: MPEEnv, seed: int, batch: int) -> tuple[MPEState, dict]:
    """``batch`` states to inject and actions to take, drawn by NumPy from ``seed``:
    positions uniform in ``[−1.3, 1.3]²`` (past the boundary penalty's edge), velocities
    normal with scale 1 (past the speed caps), utterances those of random actions
    (one-hot words, or the continuous values; zeros for a fifth of the speakers, and
    always for silent agents), goals uniform;
    actions uniform in the spaces. Returns ``(states [B, ...], actions {g: [B, A_g, ...]})``
    as float32/int32 NumPy arrays."""
    rng = np.random.default_rng(seed)
    n, lm = env.num_agents_total, env.num_landmarks

    def sample() -> dict[str, np.ndarray]:
        out = {}
        for g in env.groups:
            space, shape = env.action_space(g), (batch, env.num_agents(g))
            if env.continuous_actions:
                out[g] = rng.uniform(0.0, 1.0, (*shape, *space.shape)).astype(np.float32)
            else:
                out[g] = rng.integers(0, space.n, shape).astype(np.int32)
        return out

    said = sample()
    comm = [np.zeros((batch, r.count, env.comm_width), np.float32) for r in env.roles]
    for r, c in zip(env.roles, comm, strict=True):
        if r.silent:
            continue
        a, first = said[r.name], 5 if r.movable else 0  # words after the 5 moves
        if env.continuous_actions:
            c[..., : env.dim_c] = a[..., first : first + env.dim_c]
        else:
            word = a // 5 if r.movable else a
            c[..., : env.dim_c] = np.arange(env.dim_c) == word[..., None]
    quiet = rng.uniform(size=(batch, n, 1)) < 0.2
    ranges = env.goal_ranges
    goal = np.zeros((batch, max(len(ranges), 1)), np.int32)
    for k, hi in enumerate(ranges):
        goal[:, k] = rng.integers(0, hi, batch)
    f32 = np.float32
    states = MPEState(
        agent_pos=rng.uniform(-1.3, 1.3, (batch, n, 2)).astype(f32),
        agent_vel=rng.normal(size=(batch, n, 2)).astype(f32),
        comm=np.where(quiet, 0.0, np.concatenate(comm, axis=1)).astype(f32),
        landmark_pos=rng.uniform(-1.0, 1.0, (batch, lm, 2)).astype(f32),
        goal=goal,
        t=np.zeros((batch,), np.int32),
    )
    return states, sample()


def parity_errors(
    envs: Sequence[MPEEnv], seed: int, batch: int, params: Sequence[Any] | None = None
) -> list[dict[str, float]]:
    """For each env of ``envs`` (with its ``params``, default its defaults): ``batch``
    random states (`random_states`) stepped by ours and by mpe2 (`mpe2_transitions`);
    ours for every env in one jitted program (vmapped over the batch). Returns per env
    the largest differences: ``obs``, ``reward`` (each relative to
    ``max(1, |mpe2's|)``), ``pos``, ``vel``, ``comm`` (absolute), ``global_state``
    (ours against mpe2's observations concatenated, relative), and ``terminated`` (the
    fraction of transitions whose termination differs from mpe2's ``is_terminal``)."""
    envs = tuple(envs)
    params = tuple(e.default_params for e in envs) if params is None else tuple(params)
    drawn = [random_states(env, seed, batch) for env in envs]

    @jax.jit
    def step_all(drawn, params):
        out = []
        for env, (states, actions), p in zip(envs, drawn, params, strict=True):
            new, ts = jax.vmap(env.step, in_axes=(None, 0, 0, None))(
                jax.random.key(0), states, actions, p
            )
            out.append((new, ts, jax.vmap(env.global_state, in_axes=(0, None))(new, p)))
        return out

    return [
        _errors(env, batch, ours, mpe2_transitions(env, *d))
        for env, d, ours in zip(envs, drawn, step_all(drawn, params), strict=True)
    ]


def _errors(env: MPEEnv, batch: int, ours: Any, theirs: Any) -> dict[str, float]:
    new, ts, gs = ours
    obs, rew, nxt = theirs

    def err(a, b, rel=False):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        scale = np.maximum(1.0, np.abs(b)) if rel else 1.0
        return float(np.max(np.abs(a - b) / scale)) if a.size else 0.0

    concat = np.concatenate([obs[g].reshape(batch, -1) for g in env.groups], axis=1)
    return {
        "obs": max(err(ts.obs[g], obs[g], rel=True) for g in env.groups),
        "reward": max(err(ts.reward[g], rew[g], rel=True) for g in env.groups),
        "pos": err(new.agent_pos, nxt["agent_pos"]),
        "vel": err(new.agent_vel, nxt["agent_vel"]),
        "comm": err(new.comm, nxt["comm"]),
        "global_state": err(gs, concat, rel=True),
        "terminated": float(
            np.mean(np.asarray(ts.terminated[env.groups[0]])[:, 0] != nxt["terminal"])
        ),
    }
