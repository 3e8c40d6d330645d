"""Renders one MPE state to an RGB image with matplotlib (Agg, no display)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["render"]

# One colour per group position (adversaries first in mpe2's scenarios, then others).
_GROUP_COLOURS = ("tab:red", "tab:blue", "tab:green", "tab:purple")


def render(env: Any, state: Any, params: Any = None, *, dpi: int = 80) -> np.ndarray:
    """Draws ``state`` of ``env`` (an `environments.mpe.MPEEnv`); returns ``[H, W, 3]``
    uint8.

    Landmarks are grey discs (the goal landmarks of ``state.goal`` outlined in black,
    for scenarios with goals), agents discs coloured by group, drawn at their sizes from
    ``params`` (default ``env.default_params``), with a short line along their velocity.
    The title gives the scenario, the step and the non-zero utterances' argmax words.
    ``state`` must be one env's state (no batch axes).
    """
    from jaxdrive.render import figure_to_array, new_figure

    params = env.default_params if params is None else params
    pos = np.asarray(state.agent_pos, np.float32)
    if pos.shape != (env.num_agents_total, 2):
        raise ValueError(
            f"render: state.agent_pos must be [N, 2] = {(env.num_agents_total, 2)} for one "
            f"env, got {pos.shape} (index a batched state first)"
        )
    vel = np.asarray(state.agent_vel, np.float32)
    lm = np.asarray(state.landmark_pos, np.float32)
    size = np.asarray(env.agent_physics(params)[0], np.float32)
    goals = set(np.asarray(state.goal).tolist()) if env.goal_ranges else set()

    fig = new_figure(dpi=dpi)
    ax = fig.add_subplot(1, 1, 1)
    extent = max(1.0, float(np.max(np.abs(np.concatenate([pos, lm])))) if lm.size else 1.0)
    extent = min(extent + 0.2, 3.0)
    ax.set_xlim(-extent, extent)
    ax.set_ylim(-extent, extent)
    ax.set_aspect("equal")
    from matplotlib.patches import Circle

    for j, (p, r) in enumerate(zip(lm, env.landmark_sizes(params), strict=True)):
        edge = "black" if j in goals else "none"
        ax.add_patch(Circle(tuple(p), float(r), fc="0.6", ec=edge, lw=1.5, alpha=0.6, zorder=1))
    for gi, (g, rows) in enumerate(env.group_slices().items()):
        colour = _GROUP_COLOURS[gi % len(_GROUP_COLOURS)]
        for i in range(rows.start, rows.stop):
            ax.add_patch(Circle(tuple(pos[i]), float(size[i]), color=colour, alpha=0.8, zorder=3))
            ax.plot(*zip(pos[i], pos[i] + 0.3 * vel[i], strict=True), color="0.2", lw=1, zorder=4)
        ax.plot([], [], "o", color=colour, label=g)
    comm = np.asarray(state.comm, np.float32)
    said = [f"{i}:{int(np.argmax(c))}" for i, c in enumerate(comm) if env.dim_c and np.any(c)]
    words = f"  says {' '.join(said)}" if said else ""
    ax.set_title(
        f"{env.name}  t = {int(np.asarray(state.t))} / {env.max_cycles}{words}", fontsize=8
    )
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.07), ncol=4, fontsize=7, frameon=False)
    fig.subplots_adjust(left=0.1, right=0.95, top=0.9, bottom=0.16)
    return figure_to_array(fig)
