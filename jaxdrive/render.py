"""Rendering helpers: matplotlib figures to arrays, animations, and host-side rollouts.

Renderers draw with matplotlib's Agg canvas directly (no pyplot, no display), so they
work on headless machines and never change the global backend. Example::

    from environments.tag_gridworld import TagGridWorld, render
    env = TagGridWorld(num_taggers=3, grid_length=6)
    states = rollout_states(env, None, jax.random.key(0), num_steps=50)
    animate(states, lambda s: render(env, s), "tag.gif", fps=8)
"""

from __future__ import annotations

import pathlib
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdrive.env import Env

__all__ = ["animate", "figure_to_array", "new_figure", "rollout_states"]

RenderFn = Callable[[Any], np.ndarray]
PolicyFn = Callable[[jax.Array, dict[str, jax.Array]], dict[str, jax.Array]]


def new_figure(figsize: tuple[float, float] = (4.0, 4.0), dpi: int = 80) -> Any:
    """A matplotlib ``Figure`` on an Agg canvas (no pyplot state, no display)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def figure_to_array(fig: Any) -> np.ndarray:
    """Draws ``fig`` (on an Agg canvas) and returns its pixels, ``[H, W, 3]`` uint8."""
    fig.canvas.draw()
    return np.array(fig.canvas.buffer_rgba(), dtype=np.uint8)[..., :3]


def _is_frame(x: Any) -> bool:
    return (
        isinstance(x, np.ndarray | jax.Array)
        and x.ndim == 3
        and x.shape[-1] in (3, 4)
        and x.dtype == np.uint8
    )


def _to_frames(frames_or_states: Any, render_fn: RenderFn | None) -> list[np.ndarray]:
    if isinstance(frames_or_states, np.ndarray | jax.Array) and frames_or_states.ndim == 4:
        items: Sequence[Any] = list(np.asarray(frames_or_states))
    else:
        items = list(frames_or_states)
    if not items:
        raise ValueError("animate: got no frames or states")
    frames = []
    for i, item in enumerate(items):
        if not _is_frame(item):
            if render_fn is None:
                raise ValueError(
                    f"animate: item {i} is not a [H, W, 3] uint8 frame and no render_fn was given"
                )
            item = render_fn(item)
            if not _is_frame(item):
                raise ValueError(
                    f"animate: render_fn must return a [H, W, 3] uint8 array, got "
                    f"{getattr(item, 'dtype', type(item))} {getattr(item, 'shape', '')}"
                )
        frames.append(np.asarray(item)[..., :3])
    shapes = {f.shape for f in frames}
    if len(shapes) != 1:
        raise ValueError(f"animate: frames must all have one shape, got {sorted(shapes)}")
    return frames


def _write_gif(frames: list[np.ndarray], path: pathlib.Path, fps: float) -> None:
    from PIL import Image

    images = [Image.fromarray(f) for f in frames]
    # Pillow merges identical consecutive frames (adding their durations).
    images[0].save(
        path,
        save_all=True,
        append_images=images[1:],
        duration=max(1, round(1000.0 / fps)),
        loop=0,
    )


def _write_mp4(frames: list[np.ndarray], path: pathlib.Path, fps: float) -> None:
    from matplotlib import animation

    h, w = frames[0].shape[:2]
    dpi = 100
    fig = new_figure(figsize=(w / dpi, h / dpi), dpi=dpi)
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_axis_off()
    image = ax.imshow(frames[0], interpolation="nearest")
    writer = animation.FFMpegWriter(fps=fps)
    with writer.saving(fig, str(path), dpi):
        for f in frames:
            image.set_data(f)
            writer.grab_frame()


def animate(
    frames_or_states: Any,
    render_fn: RenderFn | None,
    path: str | pathlib.Path,
    fps: float = 10,
) -> pathlib.Path:
    """Writes an animation of a sequence of frames or states; returns the written path.

    ``frames_or_states``: a sequence whose items are ``[H, W, 3]`` uint8 frames or env
    states (``render_fn(state) -> [H, W, 3]`` uint8 draws those), or a ``[N, H, W, 3]``
    array. ``path`` ending in ``.gif`` writes a GIF with Pillow; ``.mp4`` writes with
    matplotlib's ffmpeg writer when ffmpeg is available, else warns and writes a GIF
    next to it (``.gif`` suffix), whose path is returned.
    """
    if not fps > 0:
        raise ValueError(f"animate: fps must be > 0, got {fps}")
    path = pathlib.Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".gif", ".mp4"):
        raise ValueError(f"animate: path must end in .gif or .mp4, got {str(path)!r}")
    frames = _to_frames(frames_or_states, render_fn)
    path.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".mp4":
        from matplotlib import animation

        if animation.writers.is_available("ffmpeg"):
            _write_mp4(frames, path, fps)
            return path
        path = path.with_suffix(".gif")
        warnings.warn(
            f"animate: ffmpeg is not available for MP4; writing a GIF to {path} instead",
            RuntimeWarning,
            stacklevel=2,
        )
    _write_gif(frames, path, fps)
    return path


def rollout_states(
    env: Env,
    policy_fn: PolicyFn | None,
    key: jax.Array,
    params: Any = None,
    num_steps: int = 100,
    *,
    stop_at_done: bool = True,
) -> list[Any]:
    """Plays one env for ``num_steps`` steps; returns the states ``[s_0, s_1, …]`` on host.

    ``policy_fn(key, obs)`` maps one env's ``{g: [A_g, *O_g]}`` to ``{g: [A_g, *act]}``;
    ``None`` plays uniformly random actions. The steps run as one jitted `lax.scan`
    (no auto-reset); the stacked states are split on the host into ``num_steps + 1``
    states, cut after the first ``done`` when ``stop_at_done``.
    """
    if isinstance(num_steps, bool) or not isinstance(num_steps, int | np.integer):
        raise ValueError(f"rollout_states: num_steps must be an integer, got {num_steps!r}")
    if int(num_steps) < 1:
        raise ValueError(f"rollout_states: num_steps must be >= 1, got {num_steps}")
    params = env.default_params if params is None else params

    def act(k: jax.Array, obs: dict[str, jax.Array]) -> dict[str, jax.Array]:
        return env.sample_actions(k) if policy_fn is None else policy_fn(k, obs)

    @jax.jit
    def run(key: jax.Array, params: Any) -> tuple[Any, Any, jax.Array]:
        k_reset, k_loop = jax.random.split(key)
        state0, ts0 = env.reset(k_reset, params)

        def body(carry, k):
            state, ts = carry
            k_act, k_step = jax.random.split(k)
            state, ts = env.step(k_step, state, act(k_act, ts.obs), params)
            return (state, ts), (state, ts.done)

        _, (states, dones) = jax.lax.scan(
            body, (state0, ts0), jax.random.split(k_loop, int(num_steps))
        )
        all_states = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), state0, states)
        return all_states, dones

    all_states, dones = jax.device_get(run(key, params))
    n = int(num_steps) + 1
    if stop_at_done and np.any(dones):
        n = int(np.argmax(dones)) + 2  # s_0 and the states up to the first done
    return [jax.tree.map(lambda x, i=i: x[i], all_states) for i in range(n)]
