"""Renders one TagContinuous state to an RGB image with matplotlib (Agg, no display)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["render"]


def render(env: Any, state: Any, params: Any = None, *, dpi: int = 80) -> np.ndarray:
    """Draws ``state`` of ``env`` (a `TagContinuous`); returns ``[H, W, 3]`` uint8.

    Taggers are red dots, runners in the game blue dots, each with a short arrow along
    its heading scaled by its speed; runners out of the game (tagged) are grey crosses.
    The title gives the time step and how many runners are left. ``state`` must be
    one env's state (fields ``[M]``, no batch axes); ``params`` default to
    ``env.default_params`` (only ``grid_length`` is read).
    """
    from jaxdrive.render import figure_to_array, new_figure

    params = env.default_params if params is None else params
    L = float(np.asarray(params.grid_length))
    M = int(env.num_taggers) + int(env.num_runners)
    x, y = np.asarray(state.x, np.float32), np.asarray(state.y, np.float32)
    if x.shape != (M,):
        raise ValueError(
            f"render: state.x must be [M] = {(M,)} for one env, got {x.shape} "
            "(index a batched state first, e.g. jax.tree.map(lambda a: a[i], state))"
        )
    speed = np.asarray(state.speed, np.float32)
    theta = np.asarray(state.direction, np.float32)
    in_game = np.asarray(state.in_game).astype(bool)
    is_tagger = np.zeros(M, bool)
    is_tagger[np.asarray(env.tagger_ids, np.int64).reshape(-1)] = True
    runner_in = ~is_tagger & in_game
    runner_out = ~is_tagger & ~in_game
    t = int(np.asarray(state.t))

    fig = new_figure(dpi=dpi)
    ax = fig.add_subplot(1, 1, 1)
    pad = 0.03 * L
    ax.set_xlim(-pad, L + pad)
    ax.set_ylim(-pad, L + pad)
    ax.set_aspect("equal")
    ax.add_patch(_square(L))
    size = 36.0 if M <= 50 else 12.0
    for mask, colour, label in (
        (is_tagger, "tab:red", "tagger"),
        (runner_in, "tab:blue", "runner"),
    ):
        if mask.any():
            ax.scatter(x[mask], y[mask], s=size, c=colour, label=label, zorder=3)
    moving = in_game & (speed > 0)
    if moving.any():
        ax.quiver(
            x[moving],
            y[moving],
            np.cos(theta[moving]) * speed[moving],
            np.sin(theta[moving]) * speed[moving],
            angles="xy",
            scale_units="xy",
            scale=1.0,
            width=0.004,
            color="0.3",
            zorder=2,
        )
    if runner_out.any():
        ax.scatter(
            x[runner_out], y[runner_out], s=size, marker="x", c="0.6", label="tagged", zorder=1
        )
    episode = getattr(env, "episode_length", None)
    when = f"t = {t}" if episode is None else f"t = {t} / {episode}"
    left = int(runner_in.sum())
    ax.set_title(f"TagContinuous  {when}  runners left {left}/{int(env.num_runners)}", fontsize=9)
    # The legend sits under the axes so it never hides an agent.
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.07), ncol=3, fontsize=7, frameon=False)
    fig.subplots_adjust(left=0.1, right=0.95, top=0.9, bottom=0.16)
    return figure_to_array(fig)


def _square(L: float) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((0.0, 0.0), L, L, fill=False, edgecolor="0.5", linewidth=1.0)
