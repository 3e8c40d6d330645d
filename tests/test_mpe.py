"""The MPE scenarios against mpe2 1.1.1, from injected states, and the env contract.

Parity: `environments.mpe.reference.parity_errors` writes random states (positions past
the boundary penalty's edge, velocities past the speed caps, utterances, goals) into
mpe2's world, steps mpe2 (float64) and ours (float32, one vmapped jitted call) with the
same random actions, and compares observations and rewards (relative to
``max(1, |mpe2's|)``), next positions, velocities and utterances (absolute), and
``global_state`` against mpe2's ``state()`` layout, all within ``1e-5``: float32
rounding of float64 arithmetic; terminations (``terminate_on_success``) exactly. Each
scenario runs discrete with mpe2's default counts and continuous with other counts, then
mpe2's partial observability and early termination, ``_TRANSITIONS`` transitions each;
``python -m experiments.benchmarks.run --suite=mpe_parity`` runs 10⁴ per variant and
`check_env` on every variant.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdrive
from environments.mpe import SCENARIOS, SimpleAdversary, SimpleSpread, SimpleTag
from environments.mpe.reference import parity_errors, parity_variants
from jaxdrive.testing import check_env

_TRANSITIONS = 150
_TOL = 1e-5


# Parity variants: every scenario discrete (mpe2's counts) and continuous (other counts),
# then mpe2's partial observability (tag's 7 > 6 others and adversary's 5 > 4 landmarks
# are zero-padded) and its ``terminate_on_success`` (terminations compared too).
_VARIANTS = [env for name in SCENARIOS for env in parity_variants(name)] + [
    SimpleSpread(N=6, num_agent_neighbors=3, num_landmark_neighbors=2),
    SimpleTag(num_good=3, num_adversaries=4, num_obstacles=3, num_agent_neighbors=7,
              num_landmark_neighbors=1, continuous_actions=True),
    SimpleAdversary(N=4, num_agent_neighbors=2, num_landmark_neighbors=5),
    SimpleTag(num_adversaries=6, terminate_on_success=True),
    SimpleSpread(N=1, terminate_on_success=True, continuous_actions=True),
]  # fmt: skip


@pytest.fixture(scope="module")
def parity():
    """Every variant's largest differences from mpe2 (ours in one compiled program)."""
    return dict(zip(_VARIANTS, parity_errors(_VARIANTS, seed=7, batch=_TRANSITIONS), strict=True))


@pytest.mark.parametrize("env", _VARIANTS, ids=repr)
def test_parity_with_mpe2(parity, env):
    bad = {k: v for k, v in parity[env].items() if not v <= _TOL}
    assert not bad, f"{env}: differences above {_TOL}: {bad}"


@pytest.mark.parametrize("name", ["simple_spread", "simple_speaker_listener"])
def test_check_env(name):
    """The conformance check (jit, vmap, scan, shapes, determinism, no retrace) over a
    full episode: one group of movers; a speaker and a listener (two groups, an
    immovable agent). ``--suite=mpe_parity`` runs it on every scenario and action
    variant (the parity test above steps every variant jitted and vmapped)."""
    env = SCENARIOS[name]()
    report = check_env(env, num_steps=env.max_cycles + 1, num_envs=2)
    assert report["episodes"] == 1


def test_episode_truncates_at_max_cycles():
    env = SimpleSpread(max_cycles=4)
    state, _ = env.reset(jax.random.key(0))
    step = jax.jit(env.step)
    for t in range(4):
        state, ts = step(jax.random.key(t), state, env.sample_actions(jax.random.key(t)))
        assert bool(ts.done) == (t == 3)
        assert bool(ts.truncated["agent"].all()) == (t == 3)
        assert not bool(ts.terminated["agent"].any())


def test_registry_and_params():
    env, params = jaxdrive.make("MPE_simple_tag_v3", num_good=2, agent_max_speed=2.0)
    assert env.agent_counts == {"adversary": 3, "agent": 2}
    assert params.agent_max_speed == 2.0
    env, _ = jaxdrive.make("MPE_simple_speaker_listener_v4", continuous_actions=True)
    assert env.action_space("speaker").shape == (3,)
    with pytest.raises(ValueError, match=r"SimpleSpreadParams\.local_ratio must be in \[0, 1\]"):
        jaxdrive.make("MPE_simple_spread_v3", local_ratio=1.5)
    with pytest.raises(ValueError, match=r"SimpleTag: num_good must be an integer >= 1"):
        SimpleTag(num_good=0)


def test_params_vmap_over_local_ratio():
    """``EnvParams`` are data: one compiled step serves a batch of reward mixes."""
    env = SimpleSpread()
    state, _ = env.reset(jax.random.key(0))
    actions = env.sample_actions(jax.random.key(1))
    ratios = jnp.asarray([0.0, 0.5, 1.0])
    params = jax.vmap(lambda r: env.default_params.replace(local_ratio=r))(ratios)
    _, ts = jax.jit(jax.vmap(env.step, in_axes=(None, None, None, 0)))(
        jax.random.key(2), state, actions, params
    )
    r = np.asarray(ts.reward["agent"])  # [3 ratios, N]
    np.testing.assert_allclose(r[1], 0.5 * (r[0] + r[2]), rtol=1e-6, atol=1e-6)


def test_many_agents():
    """Hundreds of agents: one vectorised ``[N, N]`` step (no per-agent Python loop); the
    full observation (spread, 100 agents) and the 8 nearest others (tag, 300 agents)."""
    envs = (
        SimpleSpread(N=100),
        SimpleTag(num_good=200, num_adversaries=100, num_agent_neighbors=8),
    )

    @jax.jit
    def run(key):
        out = []
        for env in envs:
            state, _ = env.reset(key)
            out.append(env.step(key, state, env.sample_actions(key))[1].obs)
        return out

    for env, obs in zip(envs, run(jax.random.key(0)), strict=True):
        for g in env.groups:
            assert obs[g].shape == (env.num_agents(g), env.obs_size(g))
            assert bool(jnp.all(jnp.isfinite(obs[g])))


def test_render_and_reset():
    from environments.mpe.render import render

    env = SCENARIOS["simple_world_comm"]()
    state, _ = jax.jit(env.reset)(jax.random.key(3))
    assert float(jnp.max(jnp.abs(state.landmark_pos))) <= 0.9  # mpe2: uniform in ±0.9
    assert float(jnp.max(jnp.abs(state.agent_pos))) <= 1.0
    image = render(env, state)
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[-1] == 3
