"""Renders one TagContinuous state to an RGB image with matplotlib (Agg, no display)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["make_renderer", "render"]


def render(env: Any, state: Any, params: Any = None, *, dpi: int = 80) -> np.ndarray:
    """Draws ``state`` of ``env`` (a `TagContinuous`); returns ``[H, W, 3]`` uint8.

    Taggers are red dots, runners in the game blue dots, each with a short arrow along
    its heading scaled by its speed; runners out of the game (tagged) are grey crosses.
    The title gives the time step and how many runners are left. ``state`` must be
    one env's state (fields ``[M]``, no batch axes); ``params`` default to
    ``env.default_params`` (only ``grid_length`` is read). To draw many states, make
    one `make_renderer` and call it per state (the figure is built once).
    """
    return make_renderer(env, params, dpi=dpi)(state)


def make_renderer(env: Any, params: Any = None, *, dpi: int = 80) -> Callable[[Any], np.ndarray]:
    """``draw(state) -> [H, W, 3]`` uint8, the frames of `render`, drawing every state
    into one figure: the axes and legend are drawn once into a saved background, and
    each call restores it and draws only the agents' markers, their arrows and the
    title over it (blitting)."""
    from jaxdrive.render import new_figure

    params = env.default_params if params is None else params
    L = float(np.asarray(params.grid_length))
    M = int(env.num_taggers) + int(env.num_runners)
    is_tagger = np.zeros(M, bool)
    is_tagger[np.asarray(env.tagger_ids, np.int64).reshape(-1)] = True
    episode = getattr(env, "episode_length", None)

    fig = new_figure(dpi=dpi)
    ax = fig.add_subplot(1, 1, 1)
    pad = 0.03 * L
    ax.set_xlim(-pad, L + pad)
    ax.set_ylim(-pad, L + pad)
    ax.set_aspect("equal")
    ax.add_patch(_square(L))
    size = 36.0 if M <= 50 else 12.0
    none = np.zeros((0, 2))
    taggers = ax.scatter(none[:, 0], none[:, 1], s=size, c="tab:red", label="tagger", zorder=3)
    runners = ax.scatter(none[:, 0], none[:, 1], s=size, c="tab:blue", label="runner", zorder=3)
    tagged = ax.scatter(
        none[:, 0], none[:, 1], s=size, marker="x", c="0.6", label="tagged", zorder=1
    )
    # One arrow per agent; agents that don't move get a NaN position (not drawn).
    arrows = ax.quiver(
        np.full(M, np.nan),
        np.full(M, np.nan),
        np.zeros(M),
        np.zeros(M),
        angles="xy",
        scale_units="xy",
        scale=1.0,
        width=0.004,
        color="0.3",
        zorder=2,
    )
    title = ax.set_title("", fontsize=9)
    # The legend sits under the axes so it never hides an agent.
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.07), ncol=3, fontsize=7, frameon=False)
    fig.subplots_adjust(left=0.1, right=0.95, top=0.9, bottom=0.16)
    moving_parts = (tagged, arrows, runners, taggers, title)  # drawn in this order (zorder)
    for a in moving_parts:
        a.set_animated(True)  # left out of the full draw: the background has none of them
    fig.canvas.draw()
    background = fig.canvas.copy_from_bbox(fig.bbox)

    def draw(state: Any) -> np.ndarray:
        x, y = np.asarray(state.x, np.float32), np.asarray(state.y, np.float32)
        if x.shape != (M,):
            raise ValueError(
                f"render: state.x must be [M] = {(M,)} for one env, got {x.shape} "
                "(index a batched state first, e.g. jax.tree.map(lambda a: a[i], state))"
            )
        speed = np.asarray(state.speed, np.float32)
        theta = np.asarray(state.direction, np.float32)
        in_game = np.asarray(state.in_game).astype(bool)
        xy = np.stack([x, y], axis=1)
        taggers.set_offsets(xy[is_tagger])
        runners.set_offsets(xy[~is_tagger & in_game])
        tagged.set_offsets(xy[~is_tagger & ~in_game])
        moving = in_game & (speed > 0)
        arrows.set_offsets(np.where(moving[:, None], xy, np.nan))
        arrows.set_UVC(np.cos(theta) * speed, np.sin(theta) * speed)
        t = int(np.asarray(state.t))
        when = f"t = {t}" if episode is None else f"t = {t} / {episode}"
        left = int((~is_tagger & in_game).sum())
        title.set_text(f"TagContinuous  {when}  runners left {left}/{int(env.num_runners)}")
        fig.canvas.restore_region(background)
        for a in moving_parts:
            fig.draw_artist(a)
        return np.array(fig.canvas.buffer_rgba(), dtype=np.uint8)[..., :3]

    return draw


def _square(L: float) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((0.0, 0.0), L, L, fill=False, edgecolor="0.5", linewidth=1.0)
