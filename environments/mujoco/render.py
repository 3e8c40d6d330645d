"""Renders MJX env states with MuJoCo's own renderer (`mujoco.Renderer`).

MuJoCo draws with OpenGL; it picks its context type from the ``MUJOCO_GL``
environment variable when ``mujoco`` is first imported: ``MUJOCO_GL=egl`` renders
headless on a GPU machine (or with Mesa's EGL). A platform whose library is missing
(``MUJOCO_GL=egl`` without libEGL) would make that import itself fail, so the envs
import MuJoCo through `import_mujoco`, which then runs it with rendering disabled.
`make_renderer` is the run folder's animation hook (``experiments.common.
find_renderer``): where no context can be made it logs `unavailable_reason` in one line
and returns ``None``, and the animation is skipped.

Example::

    MUJOCO_GL=egl python -m experiments.train --config=... # animation.gif in the run folder
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["import_mujoco", "make_renderer", "render", "unavailable_reason"]

_PROBE_XML = "<mujoco><worldbody><geom size='1'/></worldbody></mujoco>"

#: Per ``MUJOCO_GL`` platform, the libraries PyOpenGL loads when MuJoCo is imported
#: (each tuple: any one of these names).
_GL_LIBRARIES = {"egl": (("EGL",), ("OpenGL", "GL")), "osmesa": (("OSMesa",),), "glx": (("GL",),)}


def _loadable(name: str) -> bool:
    """Whether ``lib<name>.so`` or ``lib<name>.so.<0-9>`` loads here, as PyOpenGL looks
    for it (the dynamic loader's search, ``LD_LIBRARY_PATH`` included)."""
    for suffix in ("", *(f".{n}" for n in range(10))):
        try:
            ctypes.CDLL(f"lib{name}.so{suffix}")
            return True
        except OSError:
            continue
    return False


@functools.lru_cache(maxsize=1)
def _gl_fallback() -> str | None:
    """Before MuJoCo's first import, once: where ``MUJOCO_GL`` names a platform whose
    library is not installed, sets ``MUJOCO_GL=disable``, logs one line and returns it
    (``None`` where nothing changed)."""
    if "mujoco" in sys.modules:
        return None
    gl = os.environ.get("MUJOCO_GL", "").strip().lower()
    for names in _GL_LIBRARIES.get(gl, ()):
        if not any(_loadable(n) for n in names):
            os.environ["MUJOCO_GL"] = "disable"
            why = (
                f"MUJOCO_GL={gl}, but lib{names[0]} is not installed here: MuJoCo runs "
                "without rendering (MUJOCO_GL=disable)"
            )
            logging.warning(why)
            return why
    return None


def import_mujoco() -> Any:
    """The `mujoco` module, imported so that ``MUJOCO_GL`` cannot break it: a platform
    whose library is missing becomes ``MUJOCO_GL=disable`` first (`unavailable_reason`
    then says so). Any other failure of the import under ``MUJOCO_GL`` raises one
    ``ImportError`` naming the variable."""
    _gl_fallback()
    try:
        import mujoco
    except Exception as e:
        gl = os.environ.get("MUJOCO_GL", "")
        if gl.strip().lower() in ("", "disable", "disabled", "off", "false", "0"):
            raise
        raise ImportError(
            f"importing mujoco failed with MUJOCO_GL={gl} ({type(e).__name__}: {e}): that "
            "OpenGL platform could not load here; unset MUJOCO_GL, or set "
            "MUJOCO_GL=disable to run without rendering"
        ) from e
    return mujoco


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """``None`` when MuJoCo can make an OpenGL context here, else a one-line reason."""
    try:
        mujoco = import_mujoco()
        why = _gl_fallback()
        if why:
            return why
        renderer = mujoco.Renderer(mujoco.MjModel.from_xml_string(_PROBE_XML), 8, 8)
        renderer.close()
    except Exception as e:  # any failure to make a context means: no pictures here
        return (
            "MuJoCo rendering needs an OpenGL context (set MUJOCO_GL=egl before starting "
            f"Python on a GPU machine); here: {type(e).__name__}"
        )
    return None


@functools.lru_cache(maxsize=4)
def _renderer(model_id: int, model: Any, height: int, width: int) -> Any:
    mujoco = import_mujoco()
    del model_id  # the cache key: one renderer per model object and size
    return mujoco.Renderer(model, height, width)


def render(
    env: Any, state: Any, params: Any = None, *, height: int = 240, width: int = 320
) -> np.ndarray:
    """Draws one env's ``state`` (no batch axes) from the model's ``"track"`` camera
    (Gymnasium's ``rgb_array`` view; the free camera where the model has none);
    returns ``[height, width, 3]`` uint8. ``env``: a locomotion env or a `MaMuJoCo`."""
    del params  # nothing drawn depends on the params
    mujoco = import_mujoco()

    base = getattr(env, "single_agent_env", env)
    model = base.mj_model
    qpos = np.asarray(state.data.qpos, np.float64)
    if qpos.shape != (model.nq,):
        raise ValueError(
            f"render: state.data.qpos must be [{model.nq}] for one env, got {qpos.shape} "
            "(index a batched state first)"
        )
    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    data.qvel[:] = np.asarray(state.data.qvel, np.float64)
    mujoco.mj_forward(model, data)
    renderer = _renderer(id(model), model, height, width)
    camera = "track" if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "track") >= 0 else -1
    renderer.update_scene(data, camera=camera)
    return np.asarray(renderer.render(), np.uint8)


def make_renderer(env: Any, params: Any = None) -> Callable[[Any], np.ndarray] | None:
    """``draw(state) -> [H, W, 3]`` uint8 for one env's states (`render`), or ``None``
    with a one-line log where MuJoCo cannot make an OpenGL context."""
    why = unavailable_reason()
    if why:
        logging.info("no MuJoCo animation: %s", why)
        return None
    return lambda state: render(env, state, params)
