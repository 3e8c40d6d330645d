"""Loading the MuJoCo models of the locomotion envs, and the MJX-friendly edits.

The envs load Gymnasium's own model files from its installed package (``gymnasium/
envs/mujoco/assets``), or a user's ``xml_file``, into a `mujoco.MjSpec`, apply a
`MjxModelConfig` (solver, iterations, integrator, which geoms touch the floor) and
compile it. The edited spec also writes itself back as XML (`model_xml`), so
Gymnasium's reference env can load exactly the model the MJX env steps.

Two named configs per env (``model="gymnasium"`` or ``model="mjx"``):

* ``"gymnasium"``: the XML as shipped; only the solver changes where the XML asks for
  PGS (MJX implements CG and Newton; Newton takes its place).
* ``"mjx"``: the edits Brax makes for its MJX envs: only the listed geoms collide,
  and only with the floor; Euler integration (no RK4); Newton with few iterations;
  Ant's lower legs get Brax's massless foot spheres, which alone touch the floor.
  See ``docs/environments/mujoco.md`` for each env's list.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any

__all__ = ["MJX_PRESETS", "MjxModelConfig", "gymnasium_asset", "load_model", "resolve_config"]

_SOLVERS = ("cg", "newton")
_INTEGRATORS = ("euler", "rk4", "implicit", "implicitfast")


@dataclasses.dataclass(frozen=True)
class MjxModelConfig:
    """Edits applied to a loaded model before MJX steps it (hashable; ``None`` keeps
    the XML's value).

    Attributes:
      solver: ``"newton"`` or ``"cg"``; ``None`` keeps the XML's (PGS becomes Newton:
        MJX has no PGS).
      iterations: the constraint solver's maximum iterations.
      ls_iterations: the line search's maximum iterations.
      integrator: ``"euler"``, ``"rk4"``, ``"implicit"`` or ``"implicitfast"``.
      eulerdamp: whether Euler integrates joint damping implicitly (MuJoCo's default
        True; ``False`` sets ``mjDSBL_EULERDAMP``).
      end_spheres: ``(capsule, sphere)`` name pairs: each named capsule (defined by
        ``fromto``) gets a massless sphere geom named ``sphere``, of the capsule's
        radius, centred on the capsule's ``fromto`` end point (its end cap), in the
        same body: masses and inertias stay as they are. Added before
        ``contact_geoms`` applies, so the spheres can be the geoms that collide.
      contact_geoms: names of the geoms that collide, each only with the floor (the
        world body's geoms); every other contact is switched off. ``None`` keeps the
        XML's ``contype``/``conaffinity``.
      fuse_static: MJX steps a copy of the model with every body that has no joint
        merged into its parent (MuJoCo's ``fusestatic``: the same rigid motion, fewer
        tree levels to sweep). Observations still describe the file's bodies: their
        ``cinert``, ``cvel`` and ``cfrc_ext`` are rebuilt (`environments.mujoco.
        fusion`), and a merged body's contacts keep the colliding body's weights
        (``body_invweight0``), so contacts are regularised as in the file's model.
    """

    solver: str | None = None
    iterations: int | None = None
    ls_iterations: int | None = None
    integrator: str | None = None
    eulerdamp: bool | None = None
    end_spheres: tuple[tuple[str, str], ...] = ()
    contact_geoms: tuple[str, ...] | None = None
    fuse_static: bool = False

    def __post_init__(self) -> None:
        if self.solver is not None and self.solver not in _SOLVERS:
            raise ValueError(
                f"MjxModelConfig.solver must be one of {_SOLVERS}, got {self.solver!r}"
            )
        if self.integrator is not None and self.integrator not in _INTEGRATORS:
            raise ValueError(
                f"MjxModelConfig.integrator must be one of {_INTEGRATORS}, got {self.integrator!r}"
            )
        for name in ("iterations", "ls_iterations"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"MjxModelConfig.{name} must be an int >= 1, got {v!r}")
        if not isinstance(self.fuse_static, bool):
            raise ValueError(f"MjxModelConfig.fuse_static must be a bool, got {self.fuse_static!r}")
        if self.contact_geoms is not None:
            if isinstance(self.contact_geoms, str) or not all(
                isinstance(g, str) for g in self.contact_geoms
            ):
                raise ValueError(
                    "MjxModelConfig.contact_geoms must be a tuple of geom names, got "
                    f"{self.contact_geoms!r}"
                )
            object.__setattr__(self, "contact_geoms", tuple(self.contact_geoms))
        pairs = self.end_spheres
        if isinstance(pairs, str) or not all(
            isinstance(p, tuple | list) and len(p) == 2 and all(isinstance(n, str) for n in p)
            for p in pairs
        ):
            raise ValueError(
                "MjxModelConfig.end_spheres must be a tuple of (capsule, sphere) name pairs, "
                f"got {pairs!r}"
            )
        object.__setattr__(self, "end_spheres", tuple(tuple(p) for p in pairs))


_NEWTON_FEW = dict(solver="newton", integrator="euler")

# The "mjx" edits per env (Brax's MJX envs: which geoms touch the floor, the solver and
# its iterations). Line searches: MJX runs every one of ``ls_iterations`` steps under
# vmap (a scan of conds), so the planar envs cap it at 4 where the XML says 50. Ant:
# Brax's foot spheres (at the lower legs' tips, radius 0.08, massless), which
# Gymnasium's model lacks, are added and are its only contacts.
_ANT_LEGS = ("left", "right", "third", "fourth")
MJX_PRESETS: dict[str, MjxModelConfig] = {
    "Humanoid": MjxModelConfig(
        **_NEWTON_FEW,
        iterations=1,
        ls_iterations=4,
        eulerdamp=False,
        contact_geoms=("left_foot", "right_foot"),
        fuse_static=True,
    ),
    "Ant": MjxModelConfig(
        **_NEWTON_FEW,
        iterations=1,
        ls_iterations=4,
        eulerdamp=False,
        end_spheres=tuple((f"{leg}_ankle_geom", f"{leg}_foot_geom") for leg in _ANT_LEGS),
        contact_geoms=tuple(f"{leg}_foot_geom" for leg in _ANT_LEGS),
        fuse_static=True,
    ),
    "HalfCheetah": MjxModelConfig(
        **_NEWTON_FEW,
        iterations=4,
        ls_iterations=4,
        contact_geoms=("head", "bthigh", "bfoot", "fthigh", "ffoot"),
    ),
    "Hopper": MjxModelConfig(
        **_NEWTON_FEW, iterations=4, ls_iterations=4, contact_geoms=("foot_geom",)
    ),
    "Walker2d": MjxModelConfig(
        **_NEWTON_FEW,
        iterations=4,
        ls_iterations=4,
        contact_geoms=("torso_geom", "foot_geom", "foot_left_geom"),
    ),
}


def resolve_config(env_name: str, model: str | MjxModelConfig) -> MjxModelConfig:
    """The `MjxModelConfig` that ``model`` names for ``env_name`` (``"gymnasium"``: no
    edits; ``"mjx"``: `MJX_PRESETS`; a `MjxModelConfig` as given)."""
    if isinstance(model, MjxModelConfig):
        return model
    if model == "gymnasium":
        return MjxModelConfig()
    if model == "mjx":
        return MJX_PRESETS[env_name]
    raise ValueError(
        f"{env_name}: model must be 'gymnasium', 'mjx' or an MjxModelConfig, got {model!r}"
    )


def gymnasium_asset(name: str) -> str:
    """The path of Gymnasium's shipped model file ``name`` (e.g. ``"hopper.xml"``)."""
    try:
        import gymnasium
    except ImportError as e:
        raise ImportError(
            "the MuJoCo envs load Gymnasium's model files: install gymnasium[mujoco] "
            "(pip install -e '.[mujoco,interop]'), or pass xml_file=<path>"
        ) from e
    return os.path.join(os.path.dirname(gymnasium.__file__), "envs", "mujoco", "assets", name)


def _edit(spec: Any, config: MjxModelConfig) -> None:
    import mujoco

    opt = spec.option
    if config.solver is not None:
        opt.solver = {"cg": mujoco.mjtSolver.mjSOL_CG, "newton": mujoco.mjtSolver.mjSOL_NEWTON}[
            config.solver
        ]
    elif opt.solver == mujoco.mjtSolver.mjSOL_PGS:
        opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
    if config.iterations is not None:
        opt.iterations = config.iterations
    if config.ls_iterations is not None:
        opt.ls_iterations = config.ls_iterations
    if config.integrator is not None:
        opt.integrator = {
            "euler": mujoco.mjtIntegrator.mjINT_EULER,
            "rk4": mujoco.mjtIntegrator.mjINT_RK4,
            "implicit": mujoco.mjtIntegrator.mjINT_IMPLICIT,
            "implicitfast": mujoco.mjtIntegrator.mjINT_IMPLICITFAST,
        }[config.integrator]
    if config.eulerdamp is not None:
        bit = int(mujoco.mjtDisableBit.mjDSBL_EULERDAMP)
        flags = int(opt.disableflags)
        opt.disableflags = flags & ~bit if config.eulerdamp else flags | bit
    _add_end_spheres(spec, config.end_spheres)
    if config.contact_geoms is not None:
        world = spec.worldbody
        floor = [g for g in world.geoms]
        names = {g.name for g in spec.geoms}
        missing = sorted(set(config.contact_geoms) - names)
        if missing:
            raise ValueError(
                f"MjxModelConfig.contact_geoms names geoms the model lacks: {missing}; "
                f"its geoms: {sorted(n for n in names if n)}"
            )
        for g in spec.geoms:
            if any(g is f for f in floor):
                g.contype, g.conaffinity = 1, 1
            elif g.name in config.contact_geoms:
                g.contype, g.conaffinity = 1, 0
            else:
                g.contype, g.conaffinity = 0, 0


def _add_end_spheres(spec: Any, pairs: tuple[tuple[str, str], ...]) -> None:
    """`MjxModelConfig.end_spheres`: a massless sphere on each named capsule's end cap."""
    import mujoco
    import numpy as np

    geoms = {g.name: g for g in spec.geoms}
    for capsule, sphere in pairs:
        g = geoms.get(capsule)
        if g is None or g.type != mujoco.mjtGeom.mjGEOM_CAPSULE or np.isnan(g.fromto).any():
            raise ValueError(
                f"MjxModelConfig.end_spheres: {capsule!r} is not a capsule geom defined by "
                f"fromto in this model"
            )
        if sphere in geoms:
            raise ValueError(f"MjxModelConfig.end_spheres: the model has a geom {sphere!r}")
        g.parent.add_geom(
            name=sphere,
            type=mujoco.mjtGeom.mjGEOM_SPHERE,
            size=[g.size[0], 0.0, 0.0],
            pos=np.asarray(g.fromto[3:], np.float64),
            mass=0.0,
            contype=g.contype,
            conaffinity=g.conaffinity,
            friction=g.friction,
            condim=g.condim,
            margin=g.margin,
            rgba=g.rgba,
        )
        geoms[sphere] = None


def load_model(xml_path: str, config: MjxModelConfig) -> tuple[Any, str]:
    """Loads ``xml_path``, applies ``config``; returns ``(mujoco.MjModel, xml)`` where
    ``xml`` is the edited model as MJCF text (what Gymnasium's ``xml_file`` can load)."""
    import mujoco

    if not os.path.exists(xml_path):
        raise ValueError(f"xml_file {xml_path!r} does not exist")
    spec = mujoco.MjSpec.from_file(xml_path)
    _edit(spec, config)
    with warnings.catch_warnings():  # half_cheetah.xml's settotalmass, which still works
        warnings.filterwarnings("ignore", message=".*settotalmass.*", category=UserWarning)
        return spec.compile(), spec.to_xml()
