"""Renders MJX env states with MuJoCo's own renderer (`mujoco.Renderer`).

MuJoCo draws with OpenGL; it picks its context type from the ``MUJOCO_GL``
environment variable when ``mujoco`` is first imported: ``MUJOCO_GL=egl`` renders
headless on a GPU machine (or with Mesa's EGL). `make_renderer` is the run folder's
animation hook (``experiments.common.find_renderer``): where no context can be made
it logs `unavailable_reason` in one line and returns ``None``, and the animation is
skipped.

Example::

    MUJOCO_GL=egl python -m experiments.train --config=... # animation.gif in the run folder
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["make_renderer", "render", "unavailable_reason"]

_PROBE_XML = "<mujoco><worldbody><geom size='1'/></worldbody></mujoco>"


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """``None`` when MuJoCo can make an OpenGL context here, else a one-line reason."""
    try:
        import mujoco

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
    import mujoco

    del model_id  # the cache key: one renderer per model object and size
    return mujoco.Renderer(model, height, width)


def render(
    env: Any, state: Any, params: Any = None, *, height: int = 240, width: int = 320
) -> np.ndarray:
    """Draws one env's ``state`` (no batch axes) from the model's ``"track"`` camera
    (Gymnasium's ``rgb_array`` view; the free camera where the model has none);
    returns ``[height, width, 3]`` uint8. ``env``: a locomotion env or a `MaMuJoCo`."""
    del params  # nothing drawn depends on the params
    import mujoco

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
