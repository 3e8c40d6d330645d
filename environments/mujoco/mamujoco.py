"""Multi-agent MuJoCo (MaMuJoCo) on MJX, with Gymnasium-Robotics' ``mamujoco_v1``
semantics.

A robot's actuated joints are split among agents (a *partition*, e.g. ``Ant`` ``4x2``:
four agents of two joints each). Every agent acts on its joints and observes, through
``agent_obsk`` hops of the joint graph, its own joints (``k = 0``: the scenario's
local categories, e.g. ``qpos, qvel, cfrc_ext`` of the joint and its bodies) and the
joints ``1..k`` hops away (``qpos`` only), then the root's global ``qpos`` and ``qvel``.
All agents share the single-agent env's reward, termination and truncation.

The observation of agent ``i`` is a gather ``R[index_i]`` of one flat vector ``R`` of
the MJX data (``qpos``, ``qvel``, ``qfrc_actuator``, ``cinert``, ``cvel``,
``cfrc_ext``); the indices are worked out on the host at construction, following
Gymnasium-Robotics' ``build_obs`` order (nodes sorted by label per hop, each body's
values once per category).

Groups: when every agent has the same observation and action sizes they form one
group ``"agents"`` (agent axis first, in partition order); otherwise each agent is its
own group ``"agent_<i>"``. ``global_state`` is the single-agent observation.

Registry names: ``MaMuJoCo-Ant-2x4``, ``MaMuJoCo-Ant-4x2``, ``MaMuJoCo-HalfCheetah-6x1``,
``MaMuJoCo-Humanoid-9|8``, ``MaMuJoCo-Walker2d-2x3``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from environments.mujoco import locomotion
from environments.mujoco.base import GROUP, MujocoEnv, MujocoState
from environments.mujoco.model import MjxModelConfig
from jaxdrive.env import Env
from jaxdrive.spaces import Box, Space
from jaxdrive.types import TimeStep

__all__ = [
    "PARTITIONS",
    "MaMuJoCo",
    "agent_indices",
    "ant_2x4",
    "ant_4x2",
    "half_cheetah_6x1",
    "humanoid_9_8",
    "walker2d_2x3",
]

# Joint graphs (facts of Gymnasium-Robotics' obsk.py): per scenario the nodes
# (label, qpos/qvel index (negative: from the end), actuator, bodies), the hyperedges
# (labels), the global root node's (qpos, qvel) slices or per-coordinate indices, and
# whether body values are clipped to [-1, 1].
_HUMANOID_NODES = (
    ("abdomen_y", -17, 0, (1, 2, 3)),
    ("abdomen_z", -16, 1, (1, 2, 3)),
    ("abdomen_x", -15, 2, (3, 4, 7)),
    ("right_hip_x", -14, 3, (4, 5)),
    ("right_hip_z", -13, 4, (4, 5)),
    ("right_hip_y", -12, 5, (4, 5)),
    ("right_knee", -11, 6, (5, 6)),
    ("left_hip_x", -10, 7, (7, 8)),
    ("left_hip_z", -9, 8, (7, 8)),
    ("left_hip_y", -8, 9, (7, 8)),
    ("left_knee", -7, 10, (8, 9)),
    ("right_shoulder1", -6, 11, (1, 10, 11)),
    ("right_shoulder2", -5, 12, (1, 10, 11)),
    ("right_elbow", -4, 13, (11,)),
    ("left_shoulder1", -3, 14, (1, 12, 13)),
    ("left_shoulder2", -2, 15, (1, 12, 13)),
    ("left_elbow", -1, 16, (13,)),
)
_ABD = ("abdomen_x", "abdomen_y", "abdomen_z")
_RHIP = ("right_hip_x", "right_hip_y", "right_hip_z")
_LHIP = ("left_hip_x", "left_hip_y", "left_hip_z")
_SCENARIOS: dict[str, dict[str, Any]] = {
    "HalfCheetah": dict(
        nodes=tuple(
            (n, i - 6, i, ())
            for i, n in enumerate(("bthigh", "bshin", "bfoot", "fthigh", "fshin", "ffoot"))
        ),
        edges=(
            ("bfoot", "bshin"),
            ("bshin", "bthigh"),
            ("bthigh", "fthigh"),
            ("fthigh", "fshin"),
            ("fshin", "ffoot"),
        ),
        root=((1, 2), (0, 1, 2)),  # root_x's qpos is left out; its qvel is kept
        local=(("qpos", "qvel"), ("qpos",)),
        clip=False,
    ),
    "Walker2d": dict(
        nodes=tuple(
            (n, i - 6, i, ())
            for i, n in enumerate(
                (
                    "thigh_joint",
                    "leg_joint",
                    "foot_joint",
                    "thigh_left_joint",
                    "leg_left_joint",
                    "foot_left_joint",
                )
            )
        ),
        edges=(
            ("foot_joint", "leg_joint"),
            ("leg_joint", "thigh_joint"),
            ("foot_left_joint", "leg_left_joint"),
            ("leg_left_joint", "thigh_left_joint"),
            ("thigh_joint", "thigh_left_joint"),
        ),
        root=((1, 2), (0, 1, 2)),
        local=(("qpos", "qvel"), ("qpos",)),
        clip=False,
    ),
    "Ant": dict(
        nodes=(
            ("hip1", -8, 2, (1, 2)),
            ("ankle1", -7, 3, (2, 3, 4)),
            ("hip2", -6, 4, (1, 5)),
            ("ankle2", -5, 5, (5, 6, 7)),
            ("hip3", -4, 6, (1, 8)),
            ("ankle3", -3, 7, (8, 9, 10)),
            ("hip4", -2, 0, (1, 11)),
            ("ankle4", -1, 1, (11, 12, 13)),
        ),
        edges=(
            ("ankle4", "hip4"),
            ("ankle1", "hip1"),
            ("ankle2", "hip2"),
            ("ankle3", "hip3"),
            ("hip4", "hip1", "hip2", "hip3"),
        ),
        root=(tuple(range(2, 7)), tuple(range(6))),
        local=(("qpos", "qvel", "cfrc_ext"), ("qpos",)),
        clip=True,
    ),
    "Humanoid": dict(
        nodes=_HUMANOID_NODES,
        edges=(
            _ABD,
            _RHIP,
            _LHIP,
            ("left_elbow", "left_shoulder1", "left_shoulder2"),
            ("right_elbow", "right_shoulder1", "right_shoulder2"),
            ("left_knee", *_LHIP),
            ("right_knee", *_RHIP),
            ("left_shoulder1", "left_shoulder2", *_ABD),
            ("right_shoulder1", "right_shoulder2", *_ABD),
            (*_ABD, *_LHIP),
            (*_ABD, *_RHIP),
        ),
        root=(tuple(range(2, 7)), tuple(range(6))),
        local=(("qpos", "qvel", "cinert", "cvel", "qfrc_actuator", "cfrc_ext"), ("qpos",)),
        clip=False,
    ),
}

# The partitions (agent -> joint labels, in Gymnasium-Robotics' order).
PARTITIONS: dict[tuple[str, str], tuple[tuple[str, ...], ...]] = {
    ("HalfCheetah", "6x1"): tuple(
        (n,) for n in ("bthigh", "bshin", "bfoot", "fthigh", "fshin", "ffoot")
    ),
    ("HalfCheetah", "2x3"): (("bthigh", "bshin", "bfoot"), ("fthigh", "fshin", "ffoot")),
    ("Walker2d", "2x3"): (
        ("foot_joint", "leg_joint", "thigh_joint"),
        ("foot_left_joint", "leg_left_joint", "thigh_left_joint"),
    ),
    ("Ant", "2x4"): (("hip1", "ankle1", "hip2", "ankle2"), ("hip3", "ankle3", "hip4", "ankle4")),
    ("Ant", "2x4d"): (("hip1", "ankle1", "hip4", "ankle4"), ("hip2", "ankle2", "hip3", "ankle3")),
    ("Ant", "4x2"): (
        ("hip1", "ankle1"),
        ("hip2", "ankle2"),
        ("hip3", "ankle3"),
        ("hip4", "ankle4"),
    ),
    ("Humanoid", "9|8"): (
        (*_ABD, "right_shoulder1", "right_shoulder2", "right_elbow")
        + ("left_shoulder1", "left_shoulder2", "left_elbow"),
        (*_RHIP, "right_knee", *_LHIP, "left_knee"),
    ),
}

_SINGLE = {
    "HalfCheetah": locomotion.HalfCheetah,
    "Walker2d": locomotion.Walker2d,
    "Ant": locomotion.Ant,
    "Humanoid": locomotion.Humanoid,
}


def _k_hops(part: tuple[str, ...], edges: tuple[tuple[str, ...], ...], k: int) -> list[list[str]]:
    """Joint labels by hop distance ``0..k`` from ``part``, each hop sorted by label."""
    seen = set(part)
    frontier = set(part)
    hops = [sorted(frontier)]
    for _ in range(k):
        near = set(
            itertools.chain.from_iterable(set(e) - {n} for n in frontier for e in edges if n in e)
        )
        frontier = near - seen
        seen |= frontier
        hops.append(sorted(frontier))
    return hops


def _layout(nq: int, nv: int, nbody: int) -> dict[str, int]:
    """Offsets of the categories in the flat vector ``R``."""
    sizes = dict(qpos=nq, qvel=nv, qfrc_actuator=nv, cinert=10 * nbody, cvel=6 * nbody)
    sizes["cfrc_ext"] = 6 * nbody
    offsets, at = {}, 0
    for name, size in sizes.items():
        offsets[name] = at
        at += size
    offsets["size"] = at
    return offsets


def agent_indices(
    scenario: str, part: tuple[str, ...], obsk: int, nq: int, nv: int, nbody: int
) -> np.ndarray:
    """``[O_i]`` int32 indices into ``R`` (`_layout`) of one agent's local observation."""
    spec = _SCENARIOS[scenario]
    nodes = {n[0]: n for n in spec["nodes"]}
    off = _layout(nq, nv, nbody)
    width = dict(cinert=10, cvel=6, cfrc_ext=6)
    local = spec["local"]
    out: list[int] = []
    seen: dict[str, set[int]] = {}
    for k, labels in enumerate(_k_hops(part, spec["edges"], obsk)):
        for label in labels:
            _, q, _, bodies = nodes[label]
            for cat in local[min(k, len(local) - 1)]:
                if cat in ("qpos", "qvel", "qfrc_actuator"):
                    n = nq if cat == "qpos" else nv
                    out.append(off[cat] + q % n)
                    continue
                for b in bodies:
                    if b not in seen.setdefault(cat, set()):
                        seen[cat].add(b)
                        out.extend(off[cat] + width[cat] * b + np.arange(width[cat]))
    root_qpos, root_qvel = spec["root"]
    out.extend(off["qpos"] + i for i in root_qpos)
    out.extend(off["qvel"] + i for i in root_qvel)
    return np.asarray(out, np.int32)


@dataclasses.dataclass(frozen=True, repr=False)
class MaMuJoCo(Env[MujocoState, Any]):
    """A MaMuJoCo partition of a single-agent MJX env.

    Args:
      scenario: ``"Ant"``, ``"HalfCheetah"``, ``"Humanoid"`` or ``"Walker2d"``.
      agent_conf: the partition (`PARTITIONS`: ``"2x4"``, ``"2x4d"``, ``"4x2"``,
        ``"6x1"``, ``"2x3"``, ``"9|8"``).
      agent_obsk: hops of the joint graph each agent observes (Gymnasium-Robotics'
        default 1).
      model, max_episode_steps: passed to the single-agent env.

    Params are the single-agent env's (`HumanoidParams`, `AntParams`, …).
    """

    scenario: str
    agent_conf: str
    agent_obsk: int = 1
    model: str | MjxModelConfig = "mjx"
    max_episode_steps: int = 1000

    def __post_init__(self) -> None:
        key = (self.scenario, self.agent_conf)
        if key not in PARTITIONS:
            raise ValueError(
                f"MaMuJoCo: unknown (scenario, agent_conf) {key}; known: {sorted(PARTITIONS)}"
            )
        k = self.agent_obsk
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"MaMuJoCo: agent_obsk must be an int >= 0, got {k!r}")
        single: MujocoEnv = _SINGLE[self.scenario](
            model=self.model, max_episode_steps=self.max_episode_steps
        )
        m = single.mj_model
        parts = PARTITIONS[key]
        nodes = {n[0]: n for n in _SCENARIOS[self.scenario]["nodes"]}
        idx = [agent_indices(self.scenario, p, k, m.nq, m.nv, m.nbody) for p in parts]
        acts = [np.asarray([nodes[n][2] for n in p], np.int32) for p in parts]
        shared = len({(len(i), len(a)) for i, a in zip(idx, acts, strict=True)}) == 1
        groups = ("agents",) if shared else tuple(f"agent_{i}" for i in range(len(parts)))
        members = (
            {"agents": list(range(len(parts)))}
            if shared
            else {g: [i] for i, g in enumerate(groups)}
        )
        cache = dict(
            single=single,
            groups=groups,
            obs_index={g: np.stack([idx[i] for i in members[g]]) for g in groups},
            act_index={g: np.stack([acts[i] for i in members[g]]) for g in groups},
        )
        object.__setattr__(self, "_cache", cache)

    @property
    def name(self) -> str:
        return f"MaMuJoCo-{self.scenario}-{self.agent_conf}"

    @property
    def single_agent_env(self) -> MujocoEnv:
        """The wrapped single-agent env."""
        return self._cache["single"]

    @property
    def groups(self) -> tuple[str, ...]:
        return self._cache["groups"]

    def _check_group(self, group: str) -> None:
        if group not in self.groups:
            raise ValueError(f"{self.name} has the groups {list(self.groups)}, got {group!r}")

    def num_agents(self, group: str) -> int:
        self._check_group(group)
        return int(self._cache["obs_index"][group].shape[0])

    def observation_space(self, group: str) -> Space:
        self._check_group(group)
        return Box(-np.inf, np.inf, (int(self._cache["obs_index"][group].shape[1]),))

    def action_space(self, group: str) -> Space:
        self._check_group(group)
        full = self.single_agent_env.action_space(GROUP)
        acts = self._cache["act_index"][group][0]
        return Box(np.asarray(full.low)[acts], np.asarray(full.high)[acts], (len(acts),))

    def obs_indices(self, group: str) -> np.ndarray:
        """``[A_g, O_g]`` int32 indices of the group's observations into the flat data
        vector (`agent_indices`)."""
        return self._cache["obs_index"][group]

    def action_indices(self, group: str) -> np.ndarray:
        """``[A_g, U_g]`` int32 actuator index of each agent's action entries."""
        return self._cache["act_index"][group]

    @property
    def default_params(self) -> Any:
        return self.single_agent_env.default_params

    def check_params(self, params: Any) -> Any:
        return self.single_agent_env.check_params(params)

    @property
    def episode_length(self) -> int:
        return self.max_episode_steps

    # ----- dynamics ---------------------------------------------------------------------
    def _flat(self, state: MujocoState, params: Any) -> jax.Array:
        """``R``: ``qpos, qvel, qfrc_actuator, cinert, cvel, cfrc_ext`` (clipped to
        ``[-1, 1]`` where the scenario clips body values), flattened, float32."""
        d = state.data
        cfrc = state.cfrc_ext
        if _SCENARIOS[self.scenario]["clip"]:
            cfrc = jnp.clip(cfrc, -1.0, 1.0)
        env = self.single_agent_env
        cinert, cvel = env.body_cinert(d).ravel(), env.body_cvel(d).ravel()
        parts = [d.qpos, d.qvel, d.qfrc_actuator, cinert, cvel]
        return jnp.concatenate([*parts, cfrc.ravel()]).astype(jnp.float32)

    def observations(self, state: MujocoState, params: Any) -> dict[str, jax.Array]:
        """``{g: [A_g, O_g]}`` float32 local observations of ``state``."""
        flat = self._flat(state, params)
        return {g: flat[jnp.asarray(self.obs_indices(g))] for g in self.groups}

    def global_state(self, state: MujocoState, params: Any) -> jax.Array:
        """``[O]`` float32: the single-agent env's observation."""
        return self.single_agent_env.global_state(state, params)

    def _per_agent(self, ts: TimeStep, state: MujocoState, params: Any) -> TimeStep:
        def every(x: dict[str, jax.Array]) -> dict[str, jax.Array]:
            return {g: jnp.broadcast_to(x[GROUP][0], (self.num_agents(g),)) for g in self.groups}

        return ts.replace(
            obs=self.observations(state, params),
            reward=every(ts.reward),
            terminated=every(ts.terminated),
            truncated=every(ts.truncated),
            active=every(ts.active),
        )

    def reset_env(self, key: jax.Array, params: Any) -> tuple[MujocoState, TimeStep]:
        state, ts = self.single_agent_env.reset_env(key, params)
        return state, self._per_agent(ts, state, params)

    def global_action(self, actions: dict[str, jax.Array]) -> jax.Array:
        """``[U]`` float32: the single-agent action assembled from ``{g: [A_g, U_g]}``."""
        u = self.single_agent_env.mj_model.nu
        out = jnp.zeros((u,), jnp.float32)
        for g in self.groups:
            out = out.at[jnp.asarray(self.action_indices(g)).ravel()].set(actions[g].ravel())
        return out

    def step_env(
        self, key: jax.Array, state: MujocoState, actions: dict[str, jax.Array], params: Any
    ) -> tuple[MujocoState, TimeStep]:
        """The single-agent step on the assembled action; every agent gets its reward,
        termination and truncation."""
        action = {GROUP: self.global_action(actions)[None]}
        state, ts = self.single_agent_env.step_env(key, state, action, params)
        return state, self._per_agent(ts, state, params)


def _partition(scenario: str, agent_conf: str) -> Any:
    factory = functools.partial(MaMuJoCo, scenario, agent_conf)
    factory.__name__ = f"MaMuJoCo-{scenario}-{agent_conf}"  # type: ignore[attr-defined]
    return factory


ant_2x4 = _partition("Ant", "2x4")
ant_4x2 = _partition("Ant", "4x2")
half_cheetah_6x1 = _partition("HalfCheetah", "6x1")
humanoid_9_8 = _partition("Humanoid", "9|8")
walker2d_2x3 = _partition("Walker2d", "2x3")
