"""Tests of the renderers (TagGridWorld, TagContinuous) and jaxdrive.render helpers."""

from __future__ import annotations

import dataclasses
import types
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

from environments.tag_continuous.render import make_renderer
from environments.tag_continuous.render import render as render_continuous
from environments.tag_gridworld import TagGridWorld, TagGridWorldState
from environments.tag_gridworld import render as render_grid
from jaxdrive.render import animate, rollout_states

GREY = 153  # the out-of-game crosses are drawn in matplotlib's "0.6" grey


@pytest.fixture(scope="module")
def grid_env() -> TagGridWorld:
    return TagGridWorld(num_taggers=2, grid_length=3, episode_length=8)


@pytest.fixture(scope="module")
def grid_states(grid_env):
    return rollout_states(grid_env, None, jax.random.key(0), num_steps=8, stop_at_done=False)


def _grey_pixels(img: np.ndarray) -> int:
    return int(np.all(img == GREY, axis=-1).sum())


# -------------------------------------------------------------------------- gridworld
def test_gridworld_render_shape_and_tag(grid_env):
    free, _ = grid_env.init_state(np.array([[1, 1], [3, 3], [0, 0]]), 2)
    tagged, _ = grid_env.init_state(np.array([[0, 0], [3, 3], [0, 0]]), 2)
    a, b = render_grid(grid_env, free), render_grid(grid_env, tagged)
    assert a.shape == b.shape and a.ndim == 3 and a.shape[-1] == 3 and a.dtype == np.uint8
    assert a.shape[0] > 100 and a.shape[1] > 100
    assert np.any(a != b)
    # The same state gives the same picture; the time step shows in it.
    np.testing.assert_array_equal(a, render_grid(grid_env, free))
    later, _ = grid_env.init_state(np.array([[1, 1], [3, 3], [0, 0]]), 5)
    assert np.any(render_grid(grid_env, later) != a)


def test_gridworld_render_rejects_batched_state(grid_env):
    state = TagGridWorldState(positions=np.zeros((2, 3, 2), np.int32), t=np.zeros(2, np.int32))
    with pytest.raises(ValueError, match="one env"):
        render_grid(grid_env, state)


# --------------------------------------------------------------------- tag continuous
@dataclasses.dataclass
class _StandInState:
    """The fields of TagContinuous's ``TagState`` (``[M]`` each, ``t`` scalar)."""

    x: np.ndarray
    y: np.ndarray
    speed: np.ndarray
    direction: np.ndarray
    acceleration: np.ndarray
    in_game: np.ndarray
    t: np.ndarray


def _stand_in() -> tuple[types.SimpleNamespace, _StandInState]:
    rng = np.random.default_rng(0)
    m = 8
    env = types.SimpleNamespace(
        num_taggers=2,
        num_runners=6,
        tagger_ids=(1, 4),
        episode_length=50,
        default_params=types.SimpleNamespace(grid_length=10.0),
    )
    state = _StandInState(
        x=rng.uniform(0, 10, m).astype(np.float32),
        y=rng.uniform(0, 10, m).astype(np.float32),
        speed=rng.uniform(0, 1, m).astype(np.float32),
        direction=rng.uniform(0, 2 * np.pi, m).astype(np.float32),
        acceleration=np.zeros(m, np.float32),
        in_game=np.ones(m, bool),
        t=np.asarray(3, np.int32),
    )
    return env, state


def _check_continuous(env, state, runner_ids) -> None:
    img = render_continuous(env, state)
    assert img.ndim == 3 and img.shape[-1] == 3 and img.dtype == np.uint8
    out = np.asarray(state.in_game).copy()
    out[list(runner_ids)] = False
    tagged = (
        dataclasses.replace(state, in_game=out)
        if dataclasses.is_dataclass(state)
        else (state.replace(in_game=out))
    )
    img2 = render_continuous(env, tagged)
    assert img2.shape == img.shape
    assert np.any(img2 != img)
    # Tagged runners are drawn as grey crosses (and listed in the legend).
    assert _grey_pixels(img2) > _grey_pixels(img) + 10


def test_continuous_render_stand_in():
    env, state = _stand_in()
    _check_continuous(env, state, runner_ids=(0, 5, 7))
    with pytest.raises(ValueError, match="one env"):
        render_continuous(env, dataclasses.replace(state, x=np.zeros((2, 8), np.float32)))


def test_continuous_render_real_env():
    mod = pytest.importorskip("environments.tag_continuous.env")
    env = mod.TagContinuous(num_taggers=2, num_runners=5, episode_length=20)
    states = rollout_states(env, None, jax.random.key(1), env.default_params, num_steps=3)
    assert [int(s.t) for s in states] == [0, 1, 2, 3]
    runners = [i for i in range(7) if i not in set(env.tagger_ids)]
    _check_continuous(env, states[-1], runner_ids=runners[:3])
    # One figure redrawn per state (blitting over a saved background) gives exactly the
    # frames of a fresh figure per state, in any order.
    draw = make_renderer(env)
    for s in [*states[::-1], states[0]]:
        np.testing.assert_array_equal(draw(s), render_continuous(env, s))


# -------------------------------------------------------------------------- helpers
def test_rollout_states(grid_env, grid_states):
    assert len(grid_states) == 9
    assert [int(s.t) for s in grid_states] == list(range(9))
    assert grid_states[0].positions.shape == (3, 2)
    assert isinstance(grid_states[0].positions, np.ndarray)  # on host
    # Stopping at done keeps the states up to the first done (a tag, or t = E).
    first = rollout_states(grid_env, None, jax.random.key(0), num_steps=8)
    ends = [
        i
        for i, s in enumerate(grid_states)
        if int(s.t) >= 8 or np.any(np.all(s.positions[:2] == s.positions[2], -1))
    ]
    assert ends and len(first) == ends[0] + 1
    # A policy: everyone stays put.
    stay = lambda k, obs: {g: jnp.zeros(o.shape[0], jnp.int32) for g, o in obs.items()}
    still = rollout_states(grid_env, stay, jax.random.key(0), num_steps=3)
    assert all(np.array_equal(s.positions, still[0].positions) for s in still)
    with pytest.raises(ValueError, match="num_steps"):
        rollout_states(grid_env, None, jax.random.key(0), num_steps=0)


def test_animate_gif(tmp_path, grid_env, grid_states):
    path = animate(grid_states[:4], lambda s: render_grid(grid_env, s), tmp_path / "tag.gif", 5)
    with Image.open(path) as im:
        assert im.n_frames == 4
        assert im.size[::-1] == render_grid(grid_env, grid_states[0]).shape[:2]
        assert im.info["duration"] == 200
    # Frames directly, as a list or a [N, H, W, 3] array.
    frames = np.stack([np.full((8, 10, 3), 40 * i, np.uint8) for i in range(3)])
    for item in (list(frames), frames):  # into a folder that does not exist yet
        p = animate(item, None, tmp_path / "new" / "frames.gif")
        with Image.open(p) as im:
            assert im.n_frames == 3 and im.size == (10, 8)


def test_animate_mp4_or_fallback(tmp_path, monkeypatch):
    from matplotlib import animation

    frames = [np.full((16, 16, 3), 60 * i, np.uint8) for i in range(3)]
    monkeypatch.setattr(animation.writers, "is_available", lambda name: False)
    with pytest.warns(RuntimeWarning, match="ffmpeg"):
        path = animate(frames, None, tmp_path / "movie.mp4")
    assert path == tmp_path / "movie.gif"
    with Image.open(path) as im:
        assert im.n_frames == 3
    monkeypatch.undo()
    if animation.writers.is_available("ffmpeg"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            path = animate(frames, None, tmp_path / "movie.mp4")
        assert path.suffix == ".mp4" and path.stat().st_size > 0


def test_animate_bad_input(tmp_path):
    frame = np.zeros((8, 8, 3), np.uint8)
    with pytest.raises(ValueError, match="fps"):
        animate([frame], None, tmp_path / "a.gif", fps=0)
    with pytest.raises(ValueError, match=r"\.gif or \.mp4"):
        animate([frame], None, tmp_path / "a.png")
    with pytest.raises(ValueError, match="no frames"):
        animate([], None, tmp_path / "a.gif")
    with pytest.raises(ValueError, match="render_fn"):
        animate([{"not": "a frame"}], None, tmp_path / "a.gif")
    with pytest.raises(ValueError, match="render_fn must return"):
        animate([{"not": "a frame"}], lambda s: np.zeros((8, 8)), tmp_path / "a.gif")
    with pytest.raises(ValueError, match="one shape"):
        animate([frame, np.zeros((9, 8, 3), np.uint8)], None, tmp_path / "a.gif")
