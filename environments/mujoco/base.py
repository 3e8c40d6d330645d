"""The shared machinery of the MJX locomotion envs (Gymnasium v5 semantics).

One env is one MuJoCo model stepped by `mujoco.mjx` in float32. A step writes the
action into ``data.ctrl`` and runs ``frame_skip`` `mjx.step` calls in a `lax.fori_loop`;
every quantity the v5 envs read after ``mj_step`` (``subtree_com``, ``cinert``, ``cvel``,
``qfrc_actuator``: computed at the start of the last physics step, as in MuJoCo) is
read from the same fields of the MJX data. Between steps the state keeps only
`PhysicsData`, the fields a step reads from the previous one and those the envs read:
the rest of `mjx.Data` (constraint Jacobians, mass matrix, contacts, ...) is rebuilt by
the next step before it is read, so it lives inside the step and a training loop never
stores it. ``cfrc_ext`` comes from
`mjx.rne_postconstraint` after the step, as Gymnasium calls ``mj_rnePostConstraint``,
and is kept in the state (zeros after a reset, where Gymnasium's ``mj_forward`` leaves
it zero); an env whose options use no ``cfrc_ext`` (`MujocoEnv.uses_cfrc_ext`) skips
that pass and keeps zeros. Where `MjxModelConfig.fuse_static` has MJX step a copy of the
model with its jointless bodies merged, the per-body rows the envs read come from
`MujocoEnv.body_cinert`, `body_cvel` and `body_xpos` and ``cfrc_ext`` is mapped back, all
in the file's body numbering (`environments.mujoco.fusion`).

Dimension letters: ``Q`` = ``nq`` position coordinates, ``V`` = ``nv`` velocity
coordinates, ``U`` = ``nu`` actuators, ``B`` = ``nbody`` bodies (world included),
``O`` the observation size.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Generic, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from environments.classic_control import single_agent_timestep
from environments.mujoco.fusion import fuse_static
from environments.mujoco.model import MjxModelConfig, gymnasium_asset, load_model, resolve_config
from environments.mujoco.render import import_mujoco
from jaxdrive.env import Env
from jaxdrive.spaces import Box, Space
from jaxdrive.types import EnvParams, EnvState, TimeStep

__all__ = ["GROUP", "MujocoEnv", "MujocoParams", "MujocoState", "PhysicsData"]

GROUP = "agent"


@struct.dataclass
class MujocoParams(EnvParams):
    """Fields every locomotion env has (Gymnasium v5's names and defaults vary per env).

    Fields named ``*_range`` are ``(low, high)`` pairs that may be infinite."""

    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 0.1
    reset_noise_scale: float = 0.1


@struct.dataclass
class PhysicsData:
    """The part of one env's `mjx.Data` kept between steps, float32: what `mjx.step`
    reads from the previous step (``time``, ``qpos``, ``qvel``, ``act``,
    ``qacc_warmstart``; not the applied forces, which the envs never set, nor ``ctrl``,
    which a step writes) and what the envs read after a step. Every other field of
    `mjx.Data` is computed by a step before it reads it. Body rows ``F`` are those of
    the stepped model (`MujocoEnv.mjx_model`: fused where `MjxModelConfig.fuse_static`;
    `MujocoEnv.body_cinert`, `body_cvel` and `body_xpos` give the file's bodies)."""

    time: jax.Array  # [] simulated seconds
    qpos: jax.Array  # [Q]
    qvel: jax.Array  # [V]
    act: jax.Array  # [A] actuator activations (A = 0 in Gymnasium's models)
    qacc_warmstart: jax.Array  # [V] the constraint solver's warm start
    xpos: jax.Array  # [F, 3] body frame origins
    xmat: jax.Array  # [F, 3, 3] body frame orientations
    subtree_com: jax.Array  # [F, 3] centres of mass of the bodies' subtrees
    cinert: jax.Array  # [F, 10] com-based inertias
    cvel: jax.Array  # [F, 6] com-based velocities
    qfrc_actuator: jax.Array  # [V] actuator forces
    ten_length: jax.Array  # [T] tendon lengths (Gymnasium's Humanoid ``info``)
    ten_velocity: jax.Array  # [T] tendon velocities

    @classmethod
    def of(cls, data: Any) -> PhysicsData:
        """The kept fields of an `mjx.Data` (one env's, or a batch's)."""
        impl = {n: getattr(data._impl, n) for n in _IMPL_FIELDS}
        return cls(**impl, **{n: getattr(data, n) for n in _public_fields()})

    def to_mjx(self, template: Any) -> Any:
        """An `mjx.Data`: ``template`` (`mjx.make_data` of the stepped model) with these
        fields; what a step reads from it is then this state's."""
        impl = template._impl.replace(**{n: getattr(self, n) for n in _IMPL_FIELDS})
        return template.replace(_impl=impl, **{n: getattr(self, n) for n in _public_fields()})


#: `PhysicsData` fields that `mjx.Data` keeps in its JAX implementation's part.
_IMPL_FIELDS = ("cinert", "ten_velocity")


def _public_fields() -> list[str]:
    return [f.name for f in dataclasses.fields(PhysicsData) if f.name not in _IMPL_FIELDS]


@struct.dataclass
class MujocoState(EnvState):
    """One env's state."""

    data: PhysicsData  # what the next step and the observations read
    cfrc_ext: jax.Array  # [B, 6] float32 external contact forces (zeros after reset)
    time: jax.Array  # [] int32 steps taken in this episode


ParamsT = TypeVar("ParamsT", bound=MujocoParams)


@dataclasses.dataclass(frozen=True, repr=False)
class MujocoEnv(Env[MujocoState, ParamsT], Generic[ParamsT]):
    """Base of the single-agent MJX envs: one group ``"agent"`` of one agent.

    Subclasses are frozen dataclasses (more options, their own ``frame_skip`` default)
    and set the class attributes ``_ENV`` (the `MJX_PRESETS` key), ``_XML`` (Gymnasium's
    file name) and ``_NORMAL_QVEL_NOISE`` (reset ``qvel`` noise Gaussian, else uniform).
    They implement `obs_parts`, `_obs`, `_forward_position`, `_terms` and `_healthy`, and
    `uses_cfrc_ext` where their observation or reward reads ``cfrc_ext``.

    Args:
      xml_file: a model file to load instead of Gymnasium's (the ``model`` edits apply).
      frame_skip: physics steps per env step.
      model: ``"mjx"`` (`MJX_PRESETS`), ``"gymnasium"`` (as shipped) or a `MjxModelConfig`.
      max_episode_steps: the time limit (truncation).
      exclude_current_positions_from_observation: drop the root's x (and y for a free
        root) from the observation.
    """

    _ENV: ClassVar[str] = ""
    _XML: ClassVar[str] = ""
    _NORMAL_QVEL_NOISE: ClassVar[bool] = False

    xml_file: str | None = None
    frame_skip: int = 5
    model: str | MjxModelConfig = "mjx"
    max_episode_steps: int = 1000
    exclude_current_positions_from_observation: bool = True

    # ----- construction ------------------------------------------------------------------
    def __post_init__(self) -> None:
        import_mujoco()  # first: a MUJOCO_GL whose library is missing must not break it
        from mujoco import mjx

        for name in ("frame_skip", "max_episode_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{self.name}: {name} must be an int >= 1, got {v!r}")
        if self.xml_file is not None and not isinstance(self.xml_file, str):
            raise ValueError(f"{self.name}: xml_file must be a path or None, got {self.xml_file!r}")
        config = resolve_config(self._ENV, self.model)
        path = self.xml_file if self.xml_file is not None else gymnasium_asset(self._XML)
        mj_model, xml = load_model(path, config)
        sim_model, body_map = fuse_static(mj_model, xml) if config.fuse_static else (mj_model, None)
        mx = mjx.put_model(sim_model)
        cache = dict(
            mj_model=mj_model,
            body_map=body_map,
            mjx_model=mx,
            xml=xml,
            config=config,
            data0=mjx.make_data(mx),
            qpos0=jnp.asarray(mj_model.qpos0, jnp.float32),
        )
        object.__setattr__(self, "_cache", cache)
        self._check_model(mj_model)

    def _check_model(self, mj_model: Any) -> None:
        """Subclasses check the model fits what they read (e.g. a free root joint)."""

    @property
    def mj_model(self) -> Any:
        """The edited `mujoco.MjModel` (float64, host)."""
        return self._cache["mj_model"]

    @property
    def mjx_model(self) -> Any:
        """The `mjx.Model` that `step` runs (`mj_model`, or its copy with jointless
        bodies fused where `MjxModelConfig.fuse_static`)."""
        return self._cache["mjx_model"]

    def mjx_data(self, data: PhysicsData) -> Any:
        """An `mjx.Data` of `mjx_model` holding ``data`` (`PhysicsData.to_mjx`), the other
        fields as `mjx.make_data` makes them: what `mjx.step` needs to continue."""
        return data.to_mjx(self._cache["data0"])

    def body_cinert(self, data: Any) -> jax.Array:
        """``[B, 10]`` ``cinert`` of `mj_model`'s bodies from the stepped ``data``."""
        body_map = self._cache["body_map"]
        return data.cinert if body_map is None else body_map.cinert(data)

    def body_cvel(self, data: Any) -> jax.Array:
        """``[B, 6]`` ``cvel`` of `mj_model`'s bodies from the stepped ``data``."""
        body_map = self._cache["body_map"]
        return data.cvel if body_map is None else body_map.cvel(data)

    def body_xpos(self, data: Any, body: int) -> jax.Array:
        """``[3]`` the frame origin of `mj_model`'s body ``body`` from the stepped ``data``."""
        body_map = self._cache["body_map"]
        return data.xpos[body] if body_map is None else body_map.xpos(data, body)

    @property
    def model_config(self) -> MjxModelConfig:
        """The `MjxModelConfig` the ``model`` option resolved to."""
        return self._cache["config"]

    def model_xml(self) -> str:
        """The edited model as MJCF text: what Gymnasium's ``xml_file`` loads for a
        reference on the same model."""
        return self._cache["xml"]

    @property
    def uses_cfrc_ext(self) -> bool:
        """Whether the observation or the reward reads ``cfrc_ext`` (a static property
        of the options): if not, `step` skips `mjx.rne_postconstraint` and keeps zeros."""
        return False

    @property
    def dt(self) -> float:
        """Seconds per env step: ``timestep * frame_skip``."""
        return float(self.mj_model.opt.timestep) * self.frame_skip

    # ----- spaces --------------------------------------------------------------------------
    @property
    def groups(self) -> tuple[str, ...]:
        return (GROUP,)

    def _check_group(self, group: str) -> None:
        if group != GROUP:
            raise ValueError(f"{self.name} has only the group {GROUP!r}, got {group!r}")

    def num_agents(self, group: str) -> int:
        self._check_group(group)
        return 1

    @property
    def obs_parts(self) -> tuple[tuple[str, int], ...]:
        """``(name, size)`` of each part of the observation, in order (sizes sum to ``O``)."""
        raise NotImplementedError

    @property
    def obs_size(self) -> int:
        """``O``, the length of one observation."""
        return sum(size for _, size in self.obs_parts)

    def observation_space(self, group: str) -> Space:
        self._check_group(group)
        return Box(-math.inf, math.inf, (self.obs_size,))

    def action_space(self, group: str) -> Space:
        self._check_group(group)
        lo, hi = np.asarray(self.mj_model.actuator_ctrlrange, np.float32).T
        return Box(lo, hi, (self.mj_model.nu,))

    @property
    def episode_length(self) -> int:
        return self.max_episode_steps

    # ----- params ----------------------------------------------------------------------
    def check_params(self, params: ParamsT) -> ParamsT:
        """Every leaf a real number, finite except in ``*_range`` pairs, which may be
        infinite but need ``low <= high``. Raises ``ValueError`` naming the field."""
        for f in dataclasses.fields(params):
            v = getattr(params, f.name)
            leaves = jax.tree.leaves(v)
            if any(isinstance(x, jax.core.Tracer) for x in leaves):
                continue
            where = f"{self.name}: {type(params).__name__}.{f.name}"
            a = np.asarray(leaves)
            if a.dtype.kind not in "biuf" or np.isnan(a.astype(np.float64)).any():
                raise ValueError(f"{where} must be real numbers, got {v!r}")
            if f.name.endswith("_range"):
                if a.shape != (2,) or a[0] > a[1]:
                    raise ValueError(f"{where} must be a pair (low, high), low <= high, got {v!r}")
            elif not np.isfinite(a.astype(np.float64)).all():
                raise ValueError(f"{where} must be finite, got {v!r}")
        return params

    # ----- dynamics --------------------------------------------------------------------
    def _noise(self, key: jax.Array, params: ParamsT) -> tuple[jax.Array, jax.Array]:
        """``(qpos [Q], qvel [V])`` of a reset: ``qpos0 + U(-s, s)`` and ``U(-s, s)`` or
        ``s * N(0, 1)`` for ``qvel``, ``s = reset_noise_scale``."""
        m = self.mj_model
        s = jnp.asarray(params.reset_noise_scale, jnp.float32)
        k1, k2 = jax.random.split(key)
        qpos = self._cache["qpos0"] + jax.random.uniform(k1, (m.nq,), jnp.float32, -s, s)
        if self._NORMAL_QVEL_NOISE:
            qvel = s * jax.random.normal(k2, (m.nv,), jnp.float32)
        else:
            qvel = jax.random.uniform(k2, (m.nv,), jnp.float32, -s, s)
        return qpos, qvel

    def state_from(self, qpos: jax.Array, qvel: jax.Array) -> MujocoState:
        """The state of Gymnasium's ``set_state(qpos, qvel)`` after ``mj_resetData``:
        zero controls, warm start and time; of what ``mj_forward`` computes, the fields
        the observations and the next step's forward velocity read (``xpos``,
        ``xmat``, ``subtree_com``, ``cinert``, ``cvel``; ``qfrc_actuator`` is zero, as the
        controls are), as `PhysicsData`; ``cfrc_ext`` zero."""
        from mujoco import mjx

        m = self.mjx_model
        d = self._cache["data0"].replace(
            qpos=jnp.asarray(qpos, jnp.float32), qvel=jnp.asarray(qvel, jnp.float32)
        )
        k = mjx.com_vel(m, mjx.com_pos(m, mjx.kinematics(m, d)))
        # only these fields from k: its qpos has the free joint's quaternion normalised,
        # where MuJoCo's mj_forward leaves qpos as set
        d = d.replace(
            xpos=k.xpos,
            xmat=k.xmat,
            subtree_com=k.subtree_com,
            cvel=k.cvel,
            _impl=d._impl.replace(cinert=k._impl.cinert),
        )
        nbody = self.mj_model.nbody
        return MujocoState(
            data=PhysicsData.of(d),
            cfrc_ext=jnp.zeros((nbody, 6), jnp.float32),
            time=jnp.zeros((), jnp.int32),
        )

    def reset_env(self, key: jax.Array, params: ParamsT) -> tuple[MujocoState, TimeStep]:
        """A start state from `_noise` (see `state_from`)."""
        state = self.state_from(*self._noise(key, params))
        extras = {k: jnp.zeros((), jnp.float32) for k in self.extras_keys}
        obs = {GROUP: self._obs(state.data, state.cfrc_ext, params)[None]}
        return state, TimeStep.restart(obs, extras=extras)

    def _physics(self, data: PhysicsData, action: jax.Array) -> tuple[PhysicsData, jax.Array]:
        """``frame_skip`` MJX steps with ``ctrl = action``; returns the kept data and
        ``[B, 6]`` ``cfrc_ext`` (only where `uses_cfrc_ext`; else zeros)."""
        from mujoco import mjx

        m = self.mjx_model
        data = self.mjx_data(data).replace(ctrl=action)
        data = jax.lax.fori_loop(0, self.frame_skip, lambda _, d: mjx.step(m, d), data)
        if self.uses_cfrc_ext:
            cfrc_ext = mjx.rne_postconstraint(m, data)._impl.cfrc_ext
            if self._cache["body_map"] is not None:
                cfrc_ext = self._cache["body_map"].cfrc_ext(cfrc_ext)
        else:
            cfrc_ext = jnp.zeros((self.mj_model.nbody, 6), jnp.float32)
        return PhysicsData.of(data), cfrc_ext.astype(jnp.float32)

    def step_env(
        self,
        key: jax.Array,
        state: MujocoState,
        actions: dict[str, jax.Array],
        params: ParamsT,
    ) -> tuple[MujocoState, TimeStep]:
        """One env step: physics, then v5's reward terms (in ``extras``), termination
        and the time limit. ``actions["agent"]``: ``[1, U]`` float32."""
        del key
        action = actions[GROUP][0].astype(jnp.float32)
        before = self._forward_position(state.data)
        data, cfrc_ext = self._physics(state.data, action)
        velocity = (self._forward_position(data) - before) / self.dt
        healthy = self._healthy(data, params)
        terms = self._terms(velocity, healthy, data, cfrc_ext, action, params)
        reward = sum(terms[k] for k in sorted(terms) if k.startswith("reward_"))
        terminated = self._terminated(healthy, params)
        new_state = MujocoState(data=data, cfrc_ext=cfrc_ext, time=state.time + 1)
        ts = single_agent_timestep(
            self._obs(data, cfrc_ext, params),
            reward,
            terminated,
            new_state.time,
            self.max_episode_steps,
        )
        extras = {k: jnp.asarray(terms[k], jnp.float32) for k in self.extras_keys}
        return new_state, ts.replace(extras=extras)

    def _terminated(self, healthy: jax.Array, params: ParamsT) -> jax.Array:
        flag = getattr(params, "terminate_when_unhealthy", None)
        if flag is None:
            return jnp.asarray(False)
        return jnp.logical_and(jnp.asarray(flag, bool), ~healthy)

    def observations(self, state: MujocoState, params: ParamsT) -> dict[str, jax.Array]:
        """``{"agent": [1, O]}`` float32, the observation `reset`/`step` return for
        ``state`` (a function of the state alone)."""
        return {GROUP: self._obs(state.data, state.cfrc_ext, params)[None]}

    def global_state(self, state: MujocoState, params: ParamsT) -> jax.Array:
        """``[O]`` float32: the observation."""
        return self._obs(state.data, state.cfrc_ext, params)

    # ----- per env (override) ---------------------------------------------------------
    @property
    def extras_keys(self) -> tuple[str, ...]:
        """The keys of ``ts.extras`` (each a ``[]`` float32), the same after reset."""
        raise NotImplementedError

    def _obs(self, data: Any, cfrc_ext: jax.Array, params: Any) -> jax.Array:
        """``[O]`` float32 observation of ``data`` (``cfrc_ext``: ``[B, 6]``)."""
        raise NotImplementedError

    def _forward_position(self, data: Any) -> jax.Array:
        """The position whose change over ``dt`` is the forward velocity (``[]`` or ``[2]``)."""
        raise NotImplementedError

    def _healthy(self, data: Any, params: ParamsT) -> jax.Array:
        """``[]`` bool; envs without a health test return True."""
        return jnp.asarray(True)

    def _terms(
        self,
        velocity: jax.Array,
        healthy: jax.Array,
        data: Any,
        cfrc_ext: jax.Array,
        action: jax.Array,
        params: ParamsT,
    ) -> dict[str, jax.Array]:
        """The reward terms (keys ``reward_*``, summed into the reward) and other
        values for ``extras``."""
        raise NotImplementedError
