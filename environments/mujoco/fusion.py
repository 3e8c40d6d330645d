"""Stepping a model with its jointless bodies fused, observing the bodies as written.

MuJoCo's ``fusestatic`` compiler option merges every body without joints into its
parent: the same rigid motion with fewer bodies, so MJX's kinematic tree has fewer
levels to sweep (the Humanoid's feet, the Ant's leg roots). The observations of the v5
envs, though, name the bodies of the file (``cinert``, ``cvel`` and ``cfrc_ext`` of
each). `BodyMap` rebuilds those rows from the fused model's data:

* ``cvel``: a body rigidly attached to its carrier (the fused body that absorbed it)
  moves with it, and ``cvel`` is the spatial velocity at the root subtree's centre of
  mass, so the body's row is its carrier's.
* ``cinert``: each merged body's own inertia ``I`` (principal, in its inertial frame
  ``R``), mass ``m`` and centre ``p``, placed by the carrier's pose (constant offsets
  from the unfused model) and moved to the root subtree's centre of mass ``c``:
  ``R diag(I) Rᵀ + m (|d|² 1 − d dᵀ)``, ``d = p − c``, stored as MuJoCo stores it
  (upper triangle ``xx, yy, zz, xy, xz, yz``, then ``m d``, ``m``).
* ``cfrc_ext``: the contact wrench a carrier receives goes to the one body among those
  it carries whose geoms collide (the others get zeros); a carrier whose merged bodies
  have colliding geoms in more than one of them cannot be split, and fusing refuses it.

Dimension letters: ``B`` bodies of the file, ``F`` bodies of the fused model, ``M`` the
file's bodies whose ``cinert`` is rebuilt (those of carriers that absorbed others).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["BodyMap", "fuse_static"]

# float32 products of 3×3 rotations: full precision (the GPU's default is TF32)
_EXACT = jax.lax.Precision.HIGHEST


@dataclasses.dataclass(frozen=True, eq=False)
class BodyMap:
    """Where each body of the unfused model lives in the fused one (host constants).

    Attributes:
      carrier: ``[B]`` the fused body each body moved with.
      merged: ``[M]`` the bodies whose ``cinert`` is rebuilt (every body of a carrier
        that absorbed another).
      ipos: ``[M, 3]`` their centres of mass in the carrier's body frame.
      imat: ``[M, 3, 3]`` their inertial frames' axes in the carrier's body frame.
      inertia: ``[M, 3]`` their principal moments; ``mass``: ``[M]``.
      root: ``[M]`` the fused id of their root body (the subtree whose centre ``cinert``
        is taken about).
      wrench: ``[B]`` whether the body receives its carrier's ``cfrc_ext`` row.
      frame: ``[B, 3]`` each body's frame origin in its carrier's body frame.
    """

    carrier: np.ndarray
    merged: np.ndarray
    ipos: np.ndarray
    imat: np.ndarray
    inertia: np.ndarray
    mass: np.ndarray
    root: np.ndarray
    wrench: np.ndarray
    frame: np.ndarray

    def xpos(self, data: Any, body: int) -> jax.Array:
        """``[3]`` the frame origin of ``body`` from the fused ``data``."""
        c = int(self.carrier[body])
        return data.xpos[c] + jnp.sum(data.xmat[c] * jnp.asarray(self.frame[body]), axis=-1)

    def cvel(self, data: Any) -> jax.Array:
        """``[B, 6]`` each body's ``cvel`` from the fused ``data`` (``cvel`` ``[F, 6]``)."""
        return data.cvel[self.carrier]

    def cinert(self, data: Any) -> jax.Array:
        """``[B, 10]`` each body's ``cinert`` from the fused ``data`` (``xpos`` ``[F, 3]``,
        ``xmat`` ``[F, 3, 3]``, ``subtree_com`` ``[F, 3]``, ``cinert`` ``[F, 10]``)."""
        rows = data.cinert[self.carrier]
        c = self.carrier[self.merged]
        xmat = data.xmat[c]  # [M, 3, 3]
        p = data.xpos[c] + jnp.sum(xmat * self.ipos[:, None, :], axis=-1)  # [M, 3]
        r = jnp.einsum("mij,mjk->mik", xmat, self.imat, precision=_EXACT)  # [M, 3, 3]
        d = p - data.subtree_com[self.root]  # [M, 3]
        mass = jnp.asarray(self.mass, jnp.float32)
        r_scaled = r * jnp.asarray(self.inertia, jnp.float32)[:, None, :]
        rot = jnp.einsum("mij,mkj->mik", r_scaled, r, precision=_EXACT)
        shift = mass[:, None, None] * (
            jnp.sum(d * d, -1)[:, None, None] * jnp.eye(3) - d[:, :, None] * d[:, None, :]
        )
        full = rot + shift  # [M, 3, 3]
        tri = full[:, (0, 1, 2, 0, 0, 1), (0, 1, 2, 1, 2, 2)]  # [M, 6]
        new = jnp.concatenate([tri, d * mass[:, None], mass[:, None]], axis=-1)
        return rows.at[self.merged].set(new.astype(rows.dtype))

    def cfrc_ext(self, cfrc_ext: jax.Array) -> jax.Array:
        """``[B, 6]`` each body's external wrench from the fused ``[F, 6]`` one."""
        return jnp.where(self.wrench[:, None], cfrc_ext[self.carrier], 0.0)


def _colliding(m: Any) -> np.ndarray:
    """``[nbody]`` whether a body (not the world) owns a geom that can collide."""
    on = (m.geom_contype != 0) | (m.geom_conaffinity != 0)
    out = np.zeros(m.nbody, bool)
    np.logical_or.at(out, m.geom_bodyid[on], True)
    out[0] = False
    return out


def fuse_static(mj_model: Any, xml: str) -> tuple[Any, BodyMap | None]:
    """The model of ``xml`` (``mj_model``'s MJCF text) compiled with ``fusestatic``
    and the `BodyMap` back to ``mj_model``'s bodies; ``(mj_model, None)`` where no body
    fuses. Raises ``ValueError`` where the bodies cannot be told apart again (a body
    fused into the world, or contacts on two bodies of one carrier)."""
    import mujoco

    spec = mujoco.MjSpec.from_string(xml)
    for i, body in enumerate(spec.bodies):  # unnamed bodies get names to be found by
        if not body.name:
            body.name = f"_body{i}"
    named = spec.compile()
    names = [named.body(b).name for b in range(named.nbody)]
    if named.nbody != mj_model.nbody or len(set(names)) != len(names):
        raise ValueError("fuse_static: the bodies of the model cannot be named apart")
    spec.compiler.fusestatic = True
    fused = spec.compile()
    if fused.nbody == mj_model.nbody:
        return mj_model, None
    ids = {fused.body(f).name: f for f in range(fused.nbody)}
    kept = np.arange(mj_model.nbody)  # each body's nearest ancestor (or itself) kept
    for b in range(1, mj_model.nbody):
        while names[kept[b]] not in ids:
            kept[b] = mj_model.body_parentid[kept[b]]
        if kept[b] == 0:
            raise ValueError(
                f"fuse_static: body {names[b]!r} would fuse into the world "
                "(MjxModelConfig(fuse_static=False) steps the model as written)"
            )
    carrier = np.asarray([ids[names[a]] for a in kept], np.int32)

    # Constant offsets from the unfused model at qpos0; the carriers' frames must agree.
    d0, d1 = mujoco.MjData(mj_model), mujoco.MjData(fused)
    mujoco.mj_kinematics(mj_model, d0)
    mujoco.mj_kinematics(fused, d1)
    counts = np.bincount(carrier, minlength=fused.nbody)
    merged = np.flatnonzero(counts[carrier] > 1)
    xmat_c = d1.xmat.reshape(-1, 3, 3)[carrier[merged]]
    same = np.allclose(d1.xpos[carrier], d0.xpos[kept], atol=1e-9) and np.allclose(
        d1.xmat[carrier], d0.xmat[kept], atol=1e-9
    )
    if not same:
        raise ValueError("fuse_static: fusing moved a kept body's frame")
    ipos = np.einsum("mji,mj->mi", xmat_c, d0.xipos[merged] - d1.xpos[carrier[merged]])
    imat = np.einsum("mji,mjk->mik", xmat_c, d0.ximat.reshape(-1, 3, 3)[merged])
    frame = np.einsum("bji,bj->bi", d1.xmat.reshape(-1, 3, 3)[carrier], d0.xpos - d1.xpos[carrier])

    hits = _colliding(mj_model)
    wrench = np.zeros(mj_model.nbody, bool)
    for f in range(1, fused.nbody):
        owners = np.flatnonzero((carrier == f) & hits)
        if len(owners) > 1:
            clash = [names[b] for b in owners]
            raise ValueError(
                f"fuse_static: bodies {clash} fuse into one and all have colliding geoms "
                "(their contact forces cannot be told apart; MjxModelConfig("
                "fuse_static=False) steps the model as written)"
            )
        wrench[owners] = True
        if len(owners) == 1:  # contacts are regularised by the colliding body's weights
            fused.body_invweight0[f] = mj_model.body_invweight0[owners[0]]
    body_map = BodyMap(
        carrier=carrier,
        merged=merged.astype(np.int32),
        ipos=ipos.astype(np.float32),
        imat=imat.astype(np.float32),
        inertia=mj_model.body_inertia[merged].astype(np.float32),
        mass=mj_model.body_mass[merged].astype(np.float32),
        root=carrier[mj_model.body_rootid[merged]].astype(np.int32),
        wrench=wrench,
        frame=frame.astype(np.float32),
    )
    return fused, body_map
