"""Renders one TagGridWorld state to an RGB image with matplotlib (Agg, no display)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["render"]


def render(env: Any, state: Any, params: Any = None, *, dpi: int = 80) -> np.ndarray:
    """Draws ``state`` of ``env`` (a `TagGridWorld`); returns ``[H, W, 3]`` uint8.

    Taggers are red circles (a number gives how many share a cell), the runner a blue
    square; when a tagger shares the runner's cell the runner is drawn as a black star
    and the title says "tagged". ``state`` must be one env's state (no batch axes).
    """
    del params  # nothing drawn depends on the params
    from jaxdrive.render import figure_to_array, new_figure

    pos = np.asarray(state.positions)
    T, L = env.num_taggers, env.grid_length
    if pos.shape != (T + 1, 2):
        raise ValueError(
            f"render: state.positions must be [M, 2] = {(T + 1, 2)} for one env, got "
            f"{pos.shape} (index a batched state first, e.g. state[i] via jax.tree.map)"
        )
    t = int(np.asarray(state.t))
    taggers, runner = pos[:T], pos[T]
    tagged = bool(np.any(np.all(taggers == runner, axis=-1)))

    fig = new_figure(dpi=dpi)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_xlim(-0.5, L + 0.5)
    ax.set_ylim(-0.5, L + 0.5)
    ax.set_aspect("equal")
    if L <= 30:  # cell lines, only where they stay readable
        ticks = np.arange(-0.5, L + 1.0, 1.0)
        ax.set_xticks(ticks, minor=True)
        ax.set_yticks(ticks, minor=True)
        ax.grid(which="minor", color="0.85", linewidth=0.5)
        ax.tick_params(which="minor", length=0)
    cells, counts = np.unique(taggers, axis=0, return_counts=True)
    ax.scatter(cells[:, 0], cells[:, 1], s=120, c="tab:red", label="tagger", zorder=3)
    for (x, y), n in zip(cells, counts, strict=True):
        if n > 1:
            ax.annotate(
                str(n), (x, y), ha="center", va="center", color="white", fontsize=7, zorder=4
            )
    if tagged:
        ax.scatter(*runner, s=260, marker="*", c="black", label="runner (tagged)", zorder=5)
    else:
        ax.scatter(*runner, s=120, marker="s", c="tab:blue", label="runner", zorder=5)
    status = "  tagged" if tagged else ""
    ax.set_title(f"TagGridWorld  t = {t} / {env.episode_length}{status}", fontsize=10)
    # The legend sits under the axes so it never hides an agent.
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.07), ncol=3, fontsize=7, frameon=False)
    fig.subplots_adjust(left=0.1, right=0.95, top=0.9, bottom=0.16)
    return figure_to_array(fig)
