"""SAC and TD3 trainers (algorithms.common.off_policy): Pendulum-v1 learning, one trace,
determinism, exact resume from a checkpoint, delayed actor updates, acting, groups of
several policies (one frozen), and bad configs.

Each algorithm compiles its ``update`` once (module-scoped fixture); the learning run,
the determinism and resume checks and the metrics all use that compiled function.
"""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdrive
from jaxdrive.checkpoint import Checkpointer
from tests.algorithms.test_ddpg import Walkers, walk_config

#: per algorithm: env steps of the learning run (8 lockstep envs, 200-step episodes)
STEPS = {"sac": 4800, "td3": 6400}
CKPT, RESUMED = 10, 14  # checkpoint after this iteration; compare after that one


def pendulum_config(alg: str):
    c = importlib.import_module(f"algorithms.{alg}").default_config()
    c.num_envs, c.num_steps, c.total_env_steps = 8, 8, STEPS[alg]
    c.algo.batch_size, c.algo.learning_starts, c.algo.updates_per_iteration = 128, 1000, 64
    c.policies.agent.update(hidden_sizes=(64, 64), actor_lr=1e-3, critic_lr=2e-3)
    if alg == "sac":
        c.policies.agent.alpha_lr = 1e-3
    return c


@pytest.fixture(scope="module", params=["sac", "td3"])
def run(request):
    """One training run of ``alg`` on Pendulum-v1 with its update jitted once: metrics of
    every iteration and the states at 0, `CKPT`, `RESUMED` and the end."""
    alg = request.param
    mod = importlib.import_module(f"algorithms.{alg}")
    env, params = jaxdrive.make("Pendulum-v1")
    trainer = mod.make_train(pendulum_config(alg), env, params)
    traces = {"n": 0}

    def counted(rs):
        traces["n"] += 1
        return trainer.update(rs)

    update, init = jax.jit(counted), jax.jit(trainer.init)
    rs = init(jax.random.key(0))
    states, metrics = {0: rs}, []
    for i in range(1, trainer.num_iterations + 1):
        rs, m = update(rs)
        metrics.append(m)
        if i in (CKPT, RESUMED):
            states[i] = rs
    states["end"] = rs
    metrics = {k: np.stack([np.asarray(m[k]) for m in metrics]) for k in metrics[0]}
    return dict(alg=alg, env=env, trainer=trainer, update=update, init=init, traces=traces,
                states=states, metrics=metrics)  # fmt: skip


def test_pendulum_learns(run):
    """The pendulum is swung up and held by the last episodes (about −1,200 for the
    first, random ones; the bound leaves a margin over the seeds tried)."""
    m = run["metrics"]
    done = m["episodes_done"]
    returns = m["episode_return/agent"][done > 0]
    assert len(returns) == STEPS[run["alg"]] // 1600 and returns[0] < -900, returns
    assert returns[-1] > -400, returns
    assert np.all(np.isfinite(m["loss/agent/critic"]))
    if run["alg"] == "sac":  # the temperature falls from 1 as the entropy nears −|A|
        assert 0.0 < m["loss/agent/alpha"][-1] < 0.5


def test_one_trace_and_metrics(run):
    m, trainer = run["metrics"], run["trainer"]
    assert run["traces"]["n"] == 1  # learning off, then on: one program
    extra = {"sac": {"alpha", "alpha_loss", "entropy"}, "td3": set()}[run["alg"]]
    losses = {f"loss/agent/{k}" for k in {"actor", "critic", *extra}}
    assert set(m) == losses | {"q_mean", "episode_return/agent", "episodes_done", "env_steps"}
    np.testing.assert_array_equal(m["env_steps"], 64.0 * np.arange(1, trainer.num_iterations + 1))
    # learning starts with the iteration that ends at >= 1000 env steps (the 16th)
    assert np.all(m["loss/agent/critic"][:15] == 0) and np.all(m["loss/agent/critic"][15:] > 0)


def test_delayed_actor_updates_and_steps(run):
    """TD3: the actor's optimiser (and its targets) stepped on every 2nd critic step; SAC:
    actor, critics and temperature every step."""
    ps = run["states"]["end"].policies["agent"]
    learning_iters = run["trainer"].num_iterations - 15
    n = 64 * learning_iters

    def counts(opt):  # the Adam step counts in an optax state
        return [int(x) for x in jax.tree.leaves(opt) if x.dtype == jnp.int32]

    assert set(counts(ps.critic_opt)) == {n}
    assert set(counts(ps.actor_opt)) == {n // 2 if run["alg"] == "td3" else n}
    if run["alg"] == "td3":
        assert int(ps.steps) == n
        first = run["states"][0].policies["agent"].target_actor
        assert not np.array_equal(jax.tree.leaves(ps.target_actor)[0], jax.tree.leaves(first)[0])
    else:
        assert set(counts(ps.alpha_opt)) == {n}


def test_deterministic_and_exact_resume_from_a_checkpoint(run, tmp_path):
    """A fresh init equals the first; the state saved after `CKPT` iterations, restored
    into an abstract target and run on, equals the uninterrupted run bitwise."""
    st, update = run["states"], run["update"]
    jaxdrive.testing.assert_trees_equal(run["init"](jax.random.key(0)), st[0], "init")
    with Checkpointer(tmp_path / "ck") as ckpt:
        ckpt.save(CKPT, st[CKPT], {"iteration": CKPT})
        target = jax.eval_shape(run["trainer"].init, jax.random.key(0))
        rs, meta = ckpt.restore(target)
    rs = jax.tree.map(np.asarray, rs)  # host arrays: the compiled update serves them as is
    assert meta["iteration"] == CKPT
    for _ in range(RESUMED - CKPT):
        rs, _ = update(rs)
    jaxdrive.testing.assert_trees_equal(rs, st[RESUMED], "resumed")
    assert run["traces"]["n"] == 1


def test_act_and_get_params(run):
    trainer, env = run["trainer"], run["env"]
    params = trainer.get_params(run["states"]["end"])
    assert set(params["agent"]) == {"actor", "critic"}
    obs = {"agent": jnp.broadcast_to(jnp.asarray([1.0, 0.0, 0.5]), (5, 1, 3))}
    act = jax.jit(trainer.act, static_argnames="deterministic")
    a = act(params, jax.random.key(0), obs)
    assert a["agent"].shape == (5, 1, 1) and bool(env.action_space("agent").contains(a["agent"]))
    assert np.allclose(a["agent"], a["agent"][:1])  # deterministic: equal obs, equal actions
    noisy = act(params, jax.random.key(0), obs, deterministic=False)["agent"]
    assert bool(env.action_space("agent").contains(noisy)) and not np.allclose(noisy, noisy[:1])


@pytest.mark.parametrize("alg", ["sac", "td3"])
def test_groups_policies_and_frozen(alg):
    """Walkers (tests/algorithms/test_ddpg.py): policy "pa" learns group "a" (two agents,
    one never active), "pb" (group "b", actions in [-2, 2]) is frozen. Traced, not run
    (`jax.eval_shape`): the shared skeleton's values on Walkers are DDPG's tests."""
    mod = importlib.import_module(f"algorithms.{alg}")
    c = walk_config()
    c.algorithm = alg
    if alg == "sac":
        for k in ("noise", "noise_scale", "ou_theta", "ou_sigma"):
            del c.algo[k]
        del c.policies.pa["noise_scale"]
    trainer = mod.make_train(c, Walkers())
    rs = jax.eval_shape(trainer.init, jax.random.key(0))
    assert set(rs.buffers) == {"pa"} and rs.buffers["pa"].data.obs.shape == (64, 2)
    assert rs.buffers["pa"].data.action.shape == (64, 1)
    new, m = jax.eval_shape(trainer.update, rs)
    assert jax.tree.structure(new) == jax.tree.structure(rs)
    assert "loss/pa/critic" in m and not any(k.startswith("loss/pb") for k in m)
    assert {"episode_return/a", "episode_return/b"} <= set(m)
    params = jax.eval_shape(trainer.get_params, rs)
    obs = {"a": jnp.ones((4, 2, 2)), "b": jnp.ones((4, 1, 2))}
    acts = jax.eval_shape(lambda p: trainer.act(p, jax.random.key(1), obs), params)
    assert acts["a"].shape == (4, 2, 1) and acts["b"].shape == (4, 1, 1)


@pytest.mark.parametrize(
    ("alg", "key", "value", "words"),
    [
        ("sac", "algo.target_entropy", "auto", "target_entropy must be a number"),
        ("sac", "algo.alpha_init", 0.0, "alpha_init"),
        ("sac", "algo.noise_scale", 0.1, "noise_scale"),
        ("sac", "policies.agent.alpha_lr", -1.0, "alpha_lr"),
        ("td3", "algo.policy_delay", 0, "policy_delay must be a positive integer"),
        ("td3", "algo.noise_clip", -0.5, "noise_clip"),
        ("td3", "policies.agent.alpha_lr", 1e-3, "alpha_lr"),
        ("sac", "algo.tau", 0.0, "tau"),
        ("td3", "algo.batch_size", 10**6, "exceeds buffer_size"),
    ],
)
def test_bad_configs(alg, key, value, words):
    mod = importlib.import_module(f"algorithms.{alg}")
    c = mod.default_config()
    node = c
    *path, last = key.split(".")
    for part in path:
        node = node[part]
    node[last] = value
    with pytest.raises(ValueError, match=words):
        mod.make_train(c, *jaxdrive.make("Pendulum-v1"))


@pytest.mark.parametrize("alg", ["sac", "td3"])
def test_discrete_actions_are_refused(alg):
    mod = importlib.import_module(f"algorithms.{alg}")
    c = mod.default_config()
    c.env_name = "CartPole-v1"
    with pytest.raises(ValueError, match=f"{alg.upper()} needs Box actions"):
        mod.make_train(c)
