"""Gymnasium's MuJoCo v5 locomotion tasks on MJX: Humanoid, Ant, HalfCheetah, Hopper,
Walker2d (single group ``"agent"`` of one agent).

Each env follows its Gymnasium 1.x ``*_v5.py``: the observation layout, the reward
terms (reported in ``ts.extras`` under v5's ``info`` names), the health test and
termination, the reset noise, ``frame_skip`` and the 1000-step limit. Numeric options
are `EnvParams` fields under v5's names; options that change shapes or the model are
constructor arguments (``xml_file``, ``frame_skip``, ``model``,
``exclude_current_positions_from_observation``, ``include_*_in_observation``,
``main_body``; and ``include_contact_cost``, which v5 does not have: off, Humanoid's and
Ant's reward drop the contact cost, and with ``include_cfrc_ext_in_observation`` off too
the step computes no ``cfrc_ext``, as Brax's MJX envs). ``model="mjx"`` (the default)
edits the model for MJX (see `environments.mujoco.model`); ``model="gymnasium"`` keeps
it as shipped.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from environments.mujoco.base import MujocoEnv, MujocoParams

__all__ = [
    "Ant",
    "AntParams",
    "HalfCheetah",
    "HalfCheetahParams",
    "Hopper",
    "HopperParams",
    "Humanoid",
    "HumanoidParams",
    "Walker2d",
    "Walker2dParams",
]

_INF = math.inf


def _in_open(x: jax.Array, rng: tuple[Any, Any]) -> jax.Array:
    """``low < x < high`` elementwise."""
    return jnp.logical_and(rng[0] < x, x < rng[1])


def _ctrl_cost(action: jax.Array, weight: Any) -> jax.Array:
    return weight * jnp.sum(jnp.square(action))


_XY_KEYS = ("x_position", "y_position", "distance_from_origin", "x_velocity", "y_velocity")


def _xy_values(data: Any, velocity: jax.Array) -> dict[str, jax.Array]:
    """v5's position/velocity ``info`` of a free-root robot (`_XY_KEYS`)."""
    return {
        "x_position": data.qpos[0],
        "y_position": data.qpos[1],
        "distance_from_origin": jnp.linalg.norm(data.qpos[:2]),
        "x_velocity": velocity[0],
        "y_velocity": velocity[1],
    }


def _root_state(env: MujocoEnv, data: Any) -> list[jax.Array]:
    """``[qpos[2:] (or qpos), qvel]``: the first observation parts of a free-root robot."""
    drop = env.exclude_current_positions_from_observation
    return [data.qpos[2:] if drop else data.qpos, data.qvel]


# ----- Humanoid ----------------------------------------------------------------------------
@struct.dataclass
class HumanoidParams(MujocoParams):
    """Humanoid-v5's numeric options (its defaults)."""

    forward_reward_weight: float = 1.25
    ctrl_cost_weight: float = 0.1
    contact_cost_weight: float = 5e-7
    contact_cost_range: tuple[float, float] = (-_INF, 10.0)
    healthy_reward: float = 5.0
    terminate_when_unhealthy: bool = True
    healthy_z_range: tuple[float, float] = (1.0, 2.0)
    reset_noise_scale: float = 1e-2


@dataclasses.dataclass(frozen=True, repr=False)
class Humanoid(MujocoEnv[HumanoidParams]):
    """Humanoid-v5: walk forward fast without falling.

    Observation ``[O]`` (348 by default): ``qpos[2:]`` (all of ``qpos`` when
    ``exclude_current_positions_from_observation`` is off), ``qvel``, then, each when
    included, ``cinert[1:]``, ``cvel[1:]``, ``qfrc_actuator[6:]``, ``cfrc_ext[1:]``
    flattened. Reward: ``forward_reward_weight * vx`` of the centre of mass (body-mass
    weighted ``xipos``: MuJoCo's ``subtree_com`` of the world body) + ``healthy_reward``
    while ``low < z < high`` − ``ctrl_cost_weight * |a|²`` − ``clip(contact_cost_weight *
    |cfrc_ext|², contact_cost_range)`` (0 when ``include_contact_cost`` is off).
    """

    _ENV = "Humanoid"
    _XML = "humanoid.xml"

    include_cinert_in_observation: bool = True
    include_cvel_in_observation: bool = True
    include_qfrc_actuator_in_observation: bool = True
    include_cfrc_ext_in_observation: bool = True
    include_contact_cost: bool = True

    @property
    def uses_cfrc_ext(self) -> bool:
        return self.include_cfrc_ext_in_observation or self.include_contact_cost

    @property
    def default_params(self) -> HumanoidParams:
        return HumanoidParams()

    @property
    def obs_parts(self) -> tuple[tuple[str, int], ...]:
        m = self.mj_model
        nb = m.nbody - 1
        return (
            ("qpos", m.nq - 2 * self.exclude_current_positions_from_observation),
            ("qvel", m.nv),
            ("cinert", 10 * nb * self.include_cinert_in_observation),
            ("cvel", 6 * nb * self.include_cvel_in_observation),
            ("qfrc_actuator", (m.nv - 6) * self.include_qfrc_actuator_in_observation),
            ("cfrc_ext", 6 * nb * self.include_cfrc_ext_in_observation),
        )

    @property
    def extras_keys(self) -> tuple[str, ...]:
        return ("reward_survive", "reward_forward", "reward_ctrl", "reward_contact", *_XY_KEYS)

    def _obs(self, data: Any, cfrc_ext: jax.Array, params: Any) -> jax.Array:
        parts = _root_state(self, data)
        if self.include_cinert_in_observation:
            parts.append(self.body_cinert(data)[1:].ravel())
        if self.include_cvel_in_observation:
            parts.append(self.body_cvel(data)[1:].ravel())
        if self.include_qfrc_actuator_in_observation:
            parts.append(data.qfrc_actuator[6:])
        if self.include_cfrc_ext_in_observation:
            parts.append(cfrc_ext[1:].ravel())
        return jnp.concatenate(parts).astype(jnp.float32)

    def _forward_position(self, data: Any) -> jax.Array:
        return data.subtree_com[0, :2]  # the world body's subtree: the whole robot

    def _healthy(self, data: Any, params: HumanoidParams) -> jax.Array:
        return _in_open(data.qpos[2], params.healthy_z_range)

    def _terms(self, velocity, healthy, data, cfrc_ext, action, params):
        contact = jnp.zeros((), jnp.float32)
        if self.include_contact_cost:
            contact = params.contact_cost_weight * jnp.sum(jnp.square(cfrc_ext))
            contact = jnp.clip(contact, *params.contact_cost_range)
        return {
            "reward_survive": healthy * jnp.float32(params.healthy_reward),
            "reward_forward": params.forward_reward_weight * velocity[0],
            "reward_ctrl": -_ctrl_cost(action, params.ctrl_cost_weight),
            "reward_contact": -contact,
            **_xy_values(data, velocity),
        }


# ----- Ant ---------------------------------------------------------------------------------
@struct.dataclass
class AntParams(MujocoParams):
    """Ant-v5's numeric options (its defaults)."""

    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 0.5
    contact_cost_weight: float = 5e-4
    healthy_reward: float = 1.0
    terminate_when_unhealthy: bool = True
    healthy_z_range: tuple[float, float] = (0.2, 1.0)
    contact_force_range: tuple[float, float] = (-1.0, 1.0)
    reset_noise_scale: float = 0.1


@dataclasses.dataclass(frozen=True, repr=False)
class Ant(MujocoEnv[AntParams]):
    """Ant-v5: a four-legged robot walks forward.

    Observation ``[O]`` (105 by default): ``qpos[2:]``, ``qvel`` and, when
    ``include_cfrc_ext_in_observation``, ``cfrc_ext[1:]`` clipped to
    ``contact_force_range``, flattened. Reward: ``forward_reward_weight * vx`` of
    ``main_body``'s ``xpos`` + ``healthy_reward`` while healthy (finite state and
    ``low <= z <= high``) − ``ctrl_cost_weight * |a|²`` − ``contact_cost_weight *
    |clip(cfrc_ext)|²`` (0 when ``include_contact_cost`` is off). Reset ``qvel`` noise
    is Gaussian.
    """

    _ENV = "Ant"
    _XML = "ant.xml"
    _NORMAL_QVEL_NOISE = True

    include_cfrc_ext_in_observation: bool = True
    include_contact_cost: bool = True
    main_body: int | str = 1

    @property
    def uses_cfrc_ext(self) -> bool:
        return self.include_cfrc_ext_in_observation or self.include_contact_cost

    def _check_model(self, mj_model: Any) -> None:
        import mujoco

        if isinstance(self.main_body, str):
            body = mujoco.mj_name2id(mj_model, mujoco.mjtObj.mjOBJ_BODY, self.main_body)
        else:
            body = int(self.main_body)
        if not 0 <= body < mj_model.nbody:
            raise ValueError(f"{self.name}: main_body {self.main_body!r} is not a body")
        self._cache["main_body"] = body

    @property
    def default_params(self) -> AntParams:
        return AntParams()

    @property
    def obs_parts(self) -> tuple[tuple[str, int], ...]:
        m = self.mj_model
        return (
            ("qpos", m.nq - 2 * self.exclude_current_positions_from_observation),
            ("qvel", m.nv),
            ("cfrc_ext", 6 * (m.nbody - 1) * self.include_cfrc_ext_in_observation),
        )

    @property
    def extras_keys(self) -> tuple[str, ...]:
        return ("reward_forward", "reward_ctrl", "reward_contact", "reward_survive", *_XY_KEYS)

    def _obs(self, data: Any, cfrc_ext: jax.Array, params: Any) -> jax.Array:
        parts = _root_state(self, data)
        if self.include_cfrc_ext_in_observation:
            parts.append(jnp.clip(cfrc_ext[1:], *params.contact_force_range).ravel())
        return jnp.concatenate(parts).astype(jnp.float32)

    def _forward_position(self, data: Any) -> jax.Array:
        return self.body_xpos(data, self._cache["main_body"])[:2]

    def _healthy(self, data: Any, params: AntParams) -> jax.Array:
        finite = jnp.all(jnp.isfinite(data.qpos)) & jnp.all(jnp.isfinite(data.qvel))
        lo, hi = params.healthy_z_range
        return finite & (lo <= data.qpos[2]) & (data.qpos[2] <= hi)

    def _terms(self, velocity, healthy, data, cfrc_ext, action, params):
        contact = jnp.zeros((), jnp.float32)
        if self.include_contact_cost:
            forces = jnp.clip(cfrc_ext, *params.contact_force_range)
            contact = params.contact_cost_weight * jnp.sum(jnp.square(forces))
        return {
            "reward_forward": params.forward_reward_weight * velocity[0],
            "reward_ctrl": -_ctrl_cost(action, params.ctrl_cost_weight),
            "reward_contact": -contact,
            "reward_survive": healthy * jnp.float32(params.healthy_reward),
            **_xy_values(data, velocity),
        }


# ----- planar walkers --------------------------------------------------------------------
class _Planar(MujocoEnv):
    """HalfCheetah, Hopper and Walker2d: the root moves in the x-z plane; observation
    ``qpos[1:]`` (all of ``qpos`` when ``exclude_current_positions_from_observation`` is
    off) and ``qvel`` (clipped to ±10 where ``_CLIP_QVEL``); forward velocity from
    ``qpos[0]``."""

    _CLIP_QVEL = False

    @property
    def obs_parts(self) -> tuple[tuple[str, int], ...]:
        m = self.mj_model
        return (
            ("qpos", m.nq - int(self.exclude_current_positions_from_observation)),
            ("qvel", m.nv),
        )

    def _obs(self, data: Any, cfrc_ext: jax.Array, params: Any) -> jax.Array:
        del cfrc_ext, params
        qpos = data.qpos[1:] if self.exclude_current_positions_from_observation else data.qpos
        qvel = jnp.clip(data.qvel, -10.0, 10.0) if self._CLIP_QVEL else data.qvel
        return jnp.concatenate([qpos, qvel]).astype(jnp.float32)

    def _forward_position(self, data: Any) -> jax.Array:
        return data.qpos[0]

    @property
    def extras_keys(self) -> tuple[str, ...]:
        keys = ("reward_forward", "reward_ctrl", "x_position", "x_velocity")
        if self._CLIP_QVEL:  # the walkers: a survival reward and the height change
            keys += ("reward_survive", "z_distance_from_origin")
        return keys

    def _terms(self, velocity, healthy, data, cfrc_ext, action, params):
        terms = {
            "reward_forward": params.forward_reward_weight * velocity,
            "reward_ctrl": -_ctrl_cost(action, params.ctrl_cost_weight),
            "x_position": data.qpos[0],
            "x_velocity": velocity,
        }
        if self._CLIP_QVEL:
            terms["reward_survive"] = healthy * jnp.float32(params.healthy_reward)
            terms["z_distance_from_origin"] = data.qpos[1] - self.mj_model.qpos0[1]
        return terms


@struct.dataclass
class HalfCheetahParams(MujocoParams):
    """HalfCheetah-v5's numeric options (its defaults)."""

    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 0.1
    reset_noise_scale: float = 0.1


@dataclasses.dataclass(frozen=True, repr=False)
class HalfCheetah(_Planar):
    """HalfCheetah-v5: run forward; never terminates. Observation ``[17]``. Reward
    ``forward_reward_weight * vx − ctrl_cost_weight * |a|²``; Gaussian ``qvel`` reset noise."""

    _ENV = "HalfCheetah"
    _XML = "half_cheetah.xml"
    _NORMAL_QVEL_NOISE = True

    @property
    def default_params(self) -> HalfCheetahParams:
        return HalfCheetahParams()


@struct.dataclass
class HopperParams(MujocoParams):
    """Hopper-v5's numeric options (its defaults)."""

    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 1e-3
    healthy_reward: float = 1.0
    terminate_when_unhealthy: bool = True
    healthy_state_range: tuple[float, float] = (-100.0, 100.0)
    healthy_z_range: tuple[float, float] = (0.7, _INF)
    healthy_angle_range: tuple[float, float] = (-0.2, 0.2)
    reset_noise_scale: float = 5e-3


@dataclasses.dataclass(frozen=True, repr=False)
class Hopper(_Planar):
    """Hopper-v5: hop forward. Observation ``[11]`` (``qvel`` clipped to ±10). Healthy
    while ``(qpos, qvel)[2:]``, ``z = qpos[1]`` and ``angle = qpos[2]`` lie strictly
    inside their ranges. Reward ``forward_reward_weight * vx + healthy_reward *
    healthy − ctrl_cost_weight * |a|²``."""

    _ENV = "Hopper"
    _XML = "hopper.xml"
    _CLIP_QVEL = True

    frame_skip: int = 4

    @property
    def default_params(self) -> HopperParams:
        return HopperParams()

    def _healthy(self, data: Any, params: HopperParams) -> jax.Array:
        state = jnp.concatenate([data.qpos, data.qvel])[2:]
        return (
            jnp.all(_in_open(state, params.healthy_state_range))
            & _in_open(data.qpos[1], params.healthy_z_range)
            & _in_open(data.qpos[2], params.healthy_angle_range)
        )


@struct.dataclass
class Walker2dParams(MujocoParams):
    """Walker2d-v5's numeric options (its defaults)."""

    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 1e-3
    healthy_reward: float = 1.0
    terminate_when_unhealthy: bool = True
    healthy_z_range: tuple[float, float] = (0.8, 2.0)
    healthy_angle_range: tuple[float, float] = (-1.0, 1.0)
    reset_noise_scale: float = 5e-3


@dataclasses.dataclass(frozen=True, repr=False)
class Walker2d(_Planar):
    """Walker2d-v5 (``walker2d_v5.xml``): walk forward on two legs. Observation
    ``[17]`` (``qvel`` clipped to ±10). Healthy while ``z = qpos[1]`` and ``angle =
    qpos[2]`` lie strictly inside their ranges. Reward as Hopper's."""

    _ENV = "Walker2d"
    _XML = "walker2d_v5.xml"
    _CLIP_QVEL = True

    frame_skip: int = 4

    @property
    def default_params(self) -> Walker2dParams:
        return Walker2dParams()

    def _healthy(self, data: Any, params: Walker2dParams) -> jax.Array:
        return _in_open(data.qpos[1], params.healthy_z_range) & _in_open(
            data.qpos[2], params.healthy_angle_range
        )
