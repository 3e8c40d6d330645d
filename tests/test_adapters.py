"""The inward adapters (`jaxdrive.adapters.from_jaxmarl`, `from_gymnax`, `from_jumanji`)
and `jaxdrive.make`'s prefixed names: each adapted env passes `check_env`; a random
rollout equals the wrapped library's own (observations, rewards, SMAX's masks from
``get_avail_actions``) from the same key; PPO and MAPPO train on adapted envs; a
missing library gives one error naming the package and the extra."""

from __future__ import annotations

import functools
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import algorithms
import jaxdrive
from algorithms.common.config import base_config
from jaxdrive.adapters import from_gymnax, from_jaxmarl
from jaxdrive.testing import check_env

FAST = {"xla_backend_optimization_level": 0}

# tiny versions: short episodes, small maps
ADAPTED = {
    "jaxmarl:MPE_simple_spread_v3": {"max_steps": 6},
    "jaxmarl:SMAX": {"num_allies": 2, "num_enemies": 2, "max_steps": 5},  # two masked groups
    "gymnax:CartPole-v1": {"max_steps_in_episode": 8},
    "gymnax:Breakout-MinAtar": {"max_steps_in_episode": 8},
    "jumanji:Snake-v1": {"num_rows": 5, "num_cols": 5, "time_limit": 8},
}


@pytest.mark.parametrize("name", list(ADAPTED))
def test_adapted_env_passes_check_env(name):
    env, params = jaxdrive.make(name, **ADAPTED[name])
    report = check_env(env, params, num_envs=2)
    assert report["episodes"] >= 1
    if name == "jaxmarl:SMAX":
        assert env.agent_counts == {"ally": 2, "enemy": 2}
        assert env.action_space("enemy") == jaxdrive.Discrete(7)  # 2 targets + 5 moves


def test_groups_from_agent_names_and_spaces():
    env, _ = jaxdrive.make("jaxmarl:MPE_simple_tag_v3")
    assert env.groups == ("adversary", "agent")
    assert env.agent_counts == {"adversary": 3, "agent": 1}
    assert env.agent_names("adversary") == ("adversary_0", "adversary_1", "adversary_2")
    assert env.observation_space("adversary").shape == (16,)
    assert env.observation_space("agent").shape == (14,)


# ----------------------------------------------------------------------------------------
# The same rollout as the wrapped library's own
# ----------------------------------------------------------------------------------------
T = 12


def _jaxmarl_rollouts(env, key):
    """Ours and JaxMARL's ``step`` on the same keys and actions: per step obs, rewards,
    masks and done, each ``{g: [T, A_g, ...]}``."""
    lib = env.env

    def group(d):
        return {g: jnp.stack([d[a] for a in env.agent_names(g)]) for g in env.groups}

    def body(carry, k):
        s, s_lib = carry
        k_act, k_step = jax.random.split(k)
        actions = env.sample_actions(k_act)
        s, ts = env.step(k_step, s, actions)
        named = {a: actions[g][i] for g in env.groups for i, a in enumerate(env.agent_names(g))}
        o, s_lib, r, d, _ = lib.step(k_step, s_lib, named)
        mask = group(lib.get_avail_actions(s_lib))
        mine = (ts.obs, ts.reward, ts.action_mask, ts.done)
        return (s, s_lib), (mine, (group(o), group(r), mask, d["__all__"]))

    @functools.partial(jax.jit, compiler_options=FAST)
    def run(key):
        s, ts = env.reset(key)
        _, s_lib = lib.reset(key)
        first = (ts.action_mask, group(lib.get_avail_actions(s_lib)))
        return first, jax.lax.scan(body, (s, s_lib), jax.random.split(key, T))[1]

    return jax.device_get(run(key))


def test_smax_rollout_and_masks_equal_jaxmarl():
    env, _ = jaxdrive.make("jaxmarl:smax:3m", max_steps=T - 2)
    assert env.agent_counts == {"ally": 3} and env.action_space("ally") == jaxdrive.Discrete(8)
    (mask0, lib_mask0), (mine, theirs) = _jaxmarl_rollouts(env, jax.random.key(3))
    np.testing.assert_array_equal(mask0["ally"], lib_mask0["ally"])
    end = int(np.argmax(theirs[3]))  # JaxMARL's step auto-resets after its first done
    assert theirs[3][end] and mine[3][end] and not mine[3][:end].any()
    for ours, lib in zip(mine[:3], theirs[:3], strict=True):
        np.testing.assert_array_equal(ours["ally"][:end], lib["ally"][:end])
    np.testing.assert_array_equal(mine[1]["ally"][end], theirs[1]["ally"][end])  # reward
    assert not mine[2]["ally"].all()  # some actions are masked (out-of-range enemies)


def test_smax_team_episodes_keep_dead_units_active():
    """``team_episodes=True``: a unit that dies stays active (its mask leaves stop) and
    keeps the team's reward until the battle ends, on the same transitions as the
    default, where its episode ends at its death."""
    own, _ = jaxdrive.make("jaxmarl:smax:3m", max_steps=80)
    team, _ = jaxdrive.make("jaxmarl:smax:3m", max_steps=80, team_episodes=True)

    def rollout(env, key):
        def body(s, k):
            k_act, k_step = jax.random.split(k)
            s, ts = env.step(k_step, s, env.sample_actions(k_act))
            return s, (ts.reward["ally"], ts.terminated["ally"], ts.active["ally"],
                       ts.done, ts.action_mask["ally"])  # fmt: skip

        s, _ = env.reset(key)
        return jax.lax.scan(body, s, jax.random.split(key, 80))[1]

    run = jax.jit(lambda k: (rollout(own, k), rollout(team, k)), compiler_options=FAST)
    (r0, term0, act0, done0, _), (r1, term1, act1, done1, mask1) = jax.device_get(
        run(jax.random.key(0))
    )
    end = int(np.argmax(done0))
    assert done0[end] and (done0 == done1).all()
    np.testing.assert_array_equal(r0[: end + 1], r1[: end + 1])  # the same battle
    early = ~act0[:end].all(axis=0)  # units whose episode ended before the battle's
    assert early.any() and term0[:end].any()
    assert act1[:end].all() and not term1[:end].any() and term1[end].all()
    dead_after = np.argmax(~act0[:end], axis=0)  # first step each early unit was inactive
    for a in np.flatnonzero(early):
        later = mask1[dead_after[a] + 1 : end, a]  # after death only "stop" is left
        assert (later.sum(-1) == 1).all()


def test_gymnax_rollout_equals_gymnax():
    import gymnax

    lib, lib_params = gymnax.make("Breakout-MinAtar")
    env = from_gymnax(lib, lib_params)

    def body(carry, k):
        s, s_lib = carry
        k_act, k_step = jax.random.split(k)
        a = env.sample_actions(k_act)
        s, ts = env.step(k_step, s, a, lib_params)
        o, s_lib, r, term, trunc, _ = lib.step(k_step, s_lib, a["agent"][0], lib_params)
        mine = (ts.obs["agent"][0], ts.reward["agent"][0], ts.done)
        return (s, s_lib), (mine, (o.astype(jnp.float32), r, term | trunc))

    @functools.partial(jax.jit, compiler_options=FAST)
    def run(key):
        s, ts = env.reset(key, lib_params)
        o, s_lib = lib.reset(key, lib_params)
        out = jax.lax.scan(body, (s, s_lib), jax.random.split(key, 3 * T))[1]
        return ts.obs["agent"][0], o.astype(jnp.float32), out

    obs0, lib_obs0, (mine, theirs) = jax.device_get(run(jax.random.key(1)))
    np.testing.assert_array_equal(obs0, lib_obs0)
    end = int(np.argmax(theirs[2])) if theirs[2].any() else len(theirs[2])
    np.testing.assert_array_equal(mine[0][:end], theirs[0][:end])
    np.testing.assert_array_equal(mine[1][: end + 1], theirs[1][: end + 1])
    assert mine[1].sum() > 0 or end < len(theirs[2])  # something happened


# ----------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------
def _config(env_name, policies=None, iterations=2, num_envs=4, num_steps=16):
    c = base_config("ppo", env_name, policies)
    c.num_envs, c.num_steps = num_envs, num_steps
    c.total_env_steps = num_envs * num_steps * iterations
    for p in c.policies:
        c.policies[p].hidden_sizes = (32,)
    return c


def test_ppo_learns_on_gymnax_cartpole():
    env, params = jaxdrive.make("gymnax:CartPole-v1")
    c = _config("gymnax:CartPole-v1", iterations=12, num_envs=8, num_steps=64)
    c.policies.agent.lr = 3e-3
    trainer = algorithms.make_train(c, env, params)
    _, m = jax.device_get(jax.jit(trainer, compiler_options=FAST)(jax.random.key(0)))
    ret = np.asarray(m["episode_return/agent"])
    assert np.all(np.isfinite(ret)) and ret[-3:].mean() > 1.5 * ret[:2].mean(), ret


def test_mappo_trains_on_jaxmarl_mpe():
    """MAPPO's critic reads the adapted env's global state: MPE's observations of every
    agent, concatenated."""
    env, params = jaxdrive.make("jaxmarl:MPE_simple_spread_v3", max_steps=6)
    state, ts = jax.jit(env.reset)(jax.random.key(0))
    gs = jax.jit(env.global_state)(state, params)
    np.testing.assert_array_equal(gs, ts.obs["agent"].reshape(-1))
    c = _config("jaxmarl:MPE_simple_spread_v3", num_steps=8)
    c.algo.centralized_critic = True
    trainer = algorithms.make_train(c, env, params)
    _, m = jax.device_get(jax.jit(trainer, compiler_options=FAST)(jax.random.key(0)))
    assert np.all(m["episodes_done"] == 4)  # 4 envs, 8 steps, episodes of 7
    for k in ("loss/agent/value", "loss/agent/explained_variance", "episode_return/agent"):
        assert np.all(np.isfinite(m[k])) and np.any(m[k] != 0), (k, m[k])


def test_ppo_trains_on_jumanji_snake_with_its_action_mask():
    """PPO end to end on an adapted Jumanji env whose timesteps carry action masks: the
    masked categorical head acts, learns and never picks a masked action."""
    env, params = jaxdrive.make("jumanji:Snake-v1", **ADAPTED["jumanji:Snake-v1"])
    g = env.groups[0]
    c = _config("jumanji:Snake-v1", iterations=2, num_steps=10)
    trainer = algorithms.make_train(c, env, params)
    rs, m = jax.device_get(jax.jit(trainer, compiler_options=FAST)(jax.random.key(0)))
    assert np.sum(m["episodes_done"]) >= 1
    for k in (f"loss/{g}/value", f"loss/{g}/entropy"):
        assert np.all(np.isfinite(m[k])), (k, m[k])
    # 64 starts, some with a forbidden move; sampled actions never take one
    keys = jax.random.split(jax.random.key(3), 64)
    _, ts = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params)
    mask = np.asarray(ts.action_mask[g])  # [64, 1, 4]
    assert not mask.all()
    actions = jax.jit(trainer.act)(
        trainer.get_params(rs), jax.random.key(4), ts.obs, action_mask=ts.action_mask
    )
    picked = np.asarray(actions[g])  # [64, 1]
    assert np.take_along_axis(mask, picked[..., None], -1).all()


# ----------------------------------------------------------------------------------------
# Names, errors and laziness
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "package, name",
    [
        ("jaxmarl", "jaxmarl:smax:3m"),
        ("gymnax", "gymnax:CartPole-v1"),
        ("jumanji", "jumanji:Snake-v1"),
    ],
)
def test_missing_package_names_it_and_the_extra(monkeypatch, package, name):
    monkeypatch.setitem(sys.modules, package, None)  # `import package` raises ImportError
    with pytest.raises(ImportError, match=rf"needs the package '{package}'.*jaxdrive\[interop\]"):
        jaxdrive.make(name)


@pytest.mark.parametrize(
    "name, overrides, message",
    [
        ("jaxmarl:smax:4m", {}, "unknown SMAX map '4m'; maps: .*3s5z"),
        ("jaxmarl:MPE_nope", {}, "'MPE_nope' is not a JaxMARL env"),
        ("gymnax:CartPole-v9", {}, "'CartPole-v9' is not a gymnax env"),
        ("gymnax:CartPole-v1", {"gravty": 1.0}, r"bad override\(s\) \['gravty'\]"),
        ("gymnax:CartPole-v1", {"gravity": float("nan")}, "gravity must be finite"),
        ("jumanji:Snake-v1", {"obs_fields": ["nope"]}, r"obs_fields \['nope'\] must name"),
        ("jaxmarl:", {}, "name the jaxmarl env after the colon"),
    ],
)
def test_bad_adapted_names_and_overrides(name, overrides, message):
    with pytest.raises(ValueError, match=message):
        jaxdrive.make(name, **overrides)


def test_from_jaxmarl_refuses_other_objects():
    with pytest.raises(TypeError, match="from_jaxmarl needs a JaxMARL MultiAgentEnv"):
        from_jaxmarl(object())


def test_importing_jaxdrive_imports_no_adapted_library():
    code = (
        "import sys, jaxdrive, jaxdrive.adapters as a; dir(a); "
        "print(sorted({'jaxmarl', 'gymnax', 'jumanji', 'pettingzoo', 'gymnasium'} "
        "& set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
