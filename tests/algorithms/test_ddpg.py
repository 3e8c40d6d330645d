"""Tests of algorithms.ddpg: replay buffer, noise, losses, the fused trainer, configs."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import struct

import jaxdrive
from algorithms.ddpg import buffer as rb
from algorithms.ddpg import default_config, losses, make_train
from algorithms.ddpg import noise as nz
from algorithms.ddpg.train import from_env_action, to_env_action
from jaxdrive import Box, Env, EnvParams, TimeStep

# ----------------------------------------------------------------------------------------
# A tiny two-group Box env written for these tests.


@struct.dataclass
class WalkParams(EnvParams):
    pass


@struct.dataclass
class WalkState:
    pos: jax.Array  # [3] float32: agents a0, a1, b0
    t: jax.Array  # [] int32


@dataclasses.dataclass(frozen=True)
class Walkers(Env):
    """Group "a" (2 agents, the second never active) and "b" (1 agent) walk on a line.

    obs ``[pos, t]``; action: a displacement (``[-1, 1]`` for "a", ``[-2, 2]`` for "b");
    reward ``-|new pos|``. After ``length`` steps every active agent is terminated.
    """

    length: int = 3

    @property
    def groups(self):
        return ("a", "b")

    def num_agents(self, group):
        return {"a": 2, "b": 1}[group]

    def observation_space(self, group):
        return Box(-100.0, 100.0, (2,))

    def action_space(self, group):
        return Box(-1.0, 1.0, (1,)) if group == "a" else Box(-2.0, 2.0, (1,))

    @property
    def default_params(self):
        return WalkParams()

    @property
    def episode_length(self):
        return self.length

    def _obs(self, s):
        o = jnp.stack([s.pos, jnp.full((3,), s.t, jnp.float32)], -1)
        return {"a": o[:2], "b": o[2:]}

    def _active(self):
        return {"a": jnp.array([True, False]), "b": jnp.array([True])}

    def reset_env(self, key, params):
        s = WalkState(jax.random.uniform(key, (3,), jnp.float32, -1.0, 1.0), jnp.int32(0))
        return s, TimeStep.restart(self._obs(s), active=self._active())

    def step_env(self, key, state, actions, params):
        pos = state.pos + jnp.concatenate([actions["a"][:, 0], actions["b"][:, 0]])
        s = WalkState(pos, state.t + 1)
        end = s.t >= self.length
        active = self._active()
        obs = self._obs(s)
        reward = {g: -jnp.abs(obs[g][:, 0]) for g in self.groups}
        term = {g: active[g] & end for g in self.groups}
        trunc = {g: jnp.zeros_like(active[g]) for g in self.groups}
        return s, TimeStep(obs, reward, term, trunc, active, end)


def walk_config() -> ml_collections.ConfigDict:
    c = default_config()
    c.env_name = "walkers"
    c.num_envs, c.num_steps, c.total_env_steps = 3, 4, 72
    c.algo.buffer_size, c.algo.batch_size = 64, 8
    c.algo.learning_starts, c.algo.updates_per_iteration = 24, 2
    c.algo.noise, c.algo.noise_scale = "ou", 0.2
    c.algo.max_grad_norm = 1.0
    del c.policies["agent"]
    c.policies.pa = ml_collections.ConfigDict(
        dict(groups=["a"], actor_lr=1e-2, critic_lr=1e-2, hidden_sizes=(8,), frozen=False)
    )
    c.policies.pa.noise_scale = 0.5  # overrides config.algo for this policy
    c.policies.pb = ml_collections.ConfigDict(
        dict(groups=["b"], actor_lr=1e-2, critic_lr=1e-2, hidden_sizes=(8,), frozen=True)
    )
    return c


@pytest.fixture(scope="module")
def walk():
    """The Walkers trainer, its jitted update (trace-counted) and 6 iterations from seed 0."""
    env = Walkers()
    trainer = make_train(walk_config(), env)
    traces = {"n": 0}

    def counted(rs):
        traces["n"] += 1
        return trainer.update(rs)

    update = jax.jit(counted)
    rs0 = jax.jit(trainer.init)(jax.random.key(0))
    states, metrics = [rs0], []
    for _ in range(trainer.num_iterations):
        rs, m = update(states[-1])
        states.append(rs)
        metrics.append(m)
    return dict(
        env=env, trainer=trainer, update=update, traces=traces, states=states, metrics=metrics
    )


# ----------------------------------------------------------------------------------------
# replay buffer


def _numpy_buffer(cap, batches):
    data, ptr, size = np.zeros((cap, 2), np.float32), 0, 0
    for b in batches:
        for row in b:  # one-by-one circular writes
            data[ptr] = row
            ptr = (ptr + 1) % cap
            size = min(size + 1, cap)
    return data, ptr, size


def _transitions(obs: np.ndarray) -> rb.Transition:
    n = obs.shape[0]
    return rb.Transition(
        obs=jnp.asarray(obs),
        action=jnp.asarray(obs[:, :1] * 2),
        reward=jnp.asarray(obs[:, 0] + 0.5),
        next_obs=jnp.asarray(obs + 1),
        terminated=jnp.asarray((obs[:, 0] % 2 == 0).astype(np.float32)),
        active=jnp.ones((n,), jnp.float32),
    )


def test_buffer_circular_insert_matches_numpy():
    cap = 5
    buf = rb.init(cap, (2,), 1)
    add = jax.jit(rb.add_batch)
    batches, start = [], 1
    for n in (3, 4, 7, 1, 5):  # wraps, and a batch larger than the capacity
        b = np.stack([np.arange(start, start + n), -np.arange(start, start + n)], 1)
        batches.append(b.astype(np.float32))
        start += n
        buf = add(buf, _transitions(batches[-1]))
        want, ptr, size = _numpy_buffer(cap, batches)
        np.testing.assert_array_equal(np.asarray(buf.data.obs)[:size], want[:size])
        np.testing.assert_array_equal(np.asarray(buf.data.next_obs)[:size], want[:size] + 1)
        np.testing.assert_array_equal(np.asarray(buf.data.reward)[:size], want[:size, 0] + 0.5)
        assert int(buf.ptr) == ptr and int(buf.size) == size


def test_buffer_sample_draws_uniformly_from_filled_slots():
    buf = rb.init(10, (2,), 1)
    rows = np.stack([np.arange(1, 7), np.arange(1, 7) * 10], 1).astype(np.float32)
    buf = rb.add_batch(buf, _transitions(rows))  # 6 of 10 slots filled
    batch = jax.jit(rb.sample, static_argnums=2)(buf, jax.random.key(3), 6000)
    obs = np.asarray(batch.obs)
    ids = obs[:, 0].astype(int)
    assert set(ids) == set(range(1, 7))  # never an empty (zero) slot
    np.testing.assert_array_equal(obs[:, 1], ids * 10)  # fields stay aligned
    np.testing.assert_array_equal(np.asarray(batch.action)[:, 0], ids * 2)
    np.testing.assert_array_equal(np.asarray(batch.terminated), (ids % 2 == 0))
    counts = np.bincount(ids, minlength=7)[1:]
    assert np.all(np.abs(counts - 1000) < 5 * np.sqrt(1000))  # ~5 sigma


# ----------------------------------------------------------------------------------------
# noise


def test_ou_noise_mean_reversion_and_stationary_std():
    theta, sigma, x0 = 0.15, 0.2, 2.0

    @jax.jit
    def run(key):
        def body(x, k):
            x = nz.ou_step(k, x, theta, sigma)
            return x, x

        return jax.lax.scan(body, jnp.full((20000,), x0), jax.random.split(key, 60))[1]

    xs = np.asarray(run(jax.random.key(0)))  # [60, 20000]
    for t in (1, 5, 20):
        assert abs(xs[t - 1].mean() - x0 * (1 - theta) ** t) < 0.01
    assert abs(xs[-1].std() - nz.ou_stationary_std(theta, sigma)) < 0.01
    # lag-1 autocorrelation of the stationary process is 1 - theta
    a, b = xs[-2] - xs[-2].mean(), xs[-1] - xs[-1].mean()
    assert abs(np.mean(a * b) / np.sqrt(np.mean(a * a) * np.mean(b * b)) - (1 - theta)) < 0.02


def test_noise_reset_and_gaussian_scale():
    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 2, 2) + 1
    out = np.asarray(nz.reset_where(jnp.array([True, False, True]), x))
    assert np.all(out[[0, 2]] == 0) and np.array_equal(out[1], np.asarray(x[1]))
    assert np.all(np.asarray(nz.ou_init((3, 2))) == 0)
    g = np.asarray(nz.gaussian(jax.random.key(1), (50000,), 0.3))
    assert abs(g.mean()) < 0.01 and abs(g.std() - 0.3) < 0.01


def test_ou_state_resets_at_episode_end(walk):
    # Walkers episodes last 3 steps and an iteration is 4: after iteration 3 (12 steps)
    # every env has just ended an episode; after iteration 1 none has.
    s1, s3 = walk["states"][1], walk["states"][3]
    assert not np.any(np.asarray(s1.timestep.done))
    assert np.all(np.abs(np.asarray(s1.noise["a"])) > 0)
    assert np.all(np.asarray(s3.timestep.done))
    assert np.all(np.asarray(s3.noise["a"]) == 0)
    assert np.all(np.asarray(s1.noise["b"]) == 0)  # a frozen policy adds no noise


# ----------------------------------------------------------------------------------------
# losses


def test_soft_update_math():
    target = {"w": jnp.array([1.0, 2.0]), "b": jnp.array(3.0)}
    online = {"w": jnp.array([5.0, -2.0]), "b": jnp.array(-1.0)}
    out = losses.soft_update(target, online, 0.25)
    np.testing.assert_allclose(out["w"], [2.0, 1.0])
    np.testing.assert_allclose(out["b"], 2.0)
    same = losses.soft_update(target, online, 1.0)
    np.testing.assert_allclose(same["w"], online["w"])


def test_td_target_and_losses_hand_worked():
    r = jnp.array([1.0, -2.0, 0.5])
    term = jnp.array([0.0, 1.0, 0.0])
    next_q = jnp.array([10.0, 5.0, -4.0])
    np.testing.assert_allclose(losses.td_target(r, term, next_q, 0.9), [10.0, -2.0, -3.1])

    # linear "networks": mu(s) = k * s[0]; Q(s, a) = w0 * s[0] + w1 * a[0]
    actor_fn = lambda k, o: k * o[..., :1]
    critic_fn = lambda w, o, a: w[0] * o[..., 0] + w[1] * a[..., 0]
    batch = rb.Transition(
        obs=jnp.array([[1.0], [2.0], [3.0]]),
        action=jnp.array([[0.5], [-1.0], [0.0]]),
        reward=r,
        next_obs=jnp.array([[2.0], [0.0], [1.0]]),
        terminated=term,
        active=jnp.array([1.0, 1.0, 0.0]),
    )
    w, w_t, k_t = jnp.array([1.0, 2.0]), jnp.array([0.5, 1.0]), jnp.array(2.0)
    # next a = 2 s'; Q'(s', a') = 0.5 s' + a' -> [5, 0, 2.5]; y = [1 + .9*5, -2, .5 + .9*2.5]
    # Q(s, a) = s + 2 a -> [2, 0, 3]; errors [-3.5, 2, (inactive)]
    loss, q_mean = losses.critic_loss(w, k_t, w_t, batch, 0.9, actor_fn, critic_fn)
    np.testing.assert_allclose(loss, (3.5**2 + 2.0**2) / 2, rtol=1e-6)
    np.testing.assert_allclose(q_mean, 1.0, rtol=1e-6)
    # the target is held fixed: d loss / d w0 = mean(2 err * s) over active
    g = jax.grad(lambda w: losses.critic_loss(w, k_t, w_t, batch, 0.9, actor_fn, critic_fn)[0])(w)
    np.testing.assert_allclose(g[0], (2 * -3.5 * 1 + 2 * 2.0 * 2) / 2, rtol=1e-6)
    # actor: -mean Q(s, mu(s)) = -mean(s + 2 k s) over active; with k = 1 -> -(3 + 6) / 2
    a_loss = losses.actor_loss(jnp.array(1.0), w, batch, actor_fn, critic_fn)
    np.testing.assert_allclose(a_loss, -4.5, rtol=1e-6)
    ga = jax.grad(losses.actor_loss)(jnp.array(1.0), w, batch, actor_fn, critic_fn)
    np.testing.assert_allclose(ga, -(2 * 1 + 2 * 2) / 2, rtol=1e-6)


def test_action_scaling_round_trip():
    space = Box([-2.0, 0.0], [2.0, 10.0], (2,))
    a = jnp.array([[-1.0, 1.0], [0.0, 0.5], [3.0, -4.0]])
    x = np.asarray(to_env_action(a, space))
    np.testing.assert_allclose(x, [[-2.0, 10.0], [0.0, 7.5], [2.0, 0.0]])
    np.testing.assert_allclose(from_env_action(x[:2], space), a[:2], atol=1e-6)


# ----------------------------------------------------------------------------------------
# the trainer


def test_iteration_compiles_once_and_metrics(walk):
    trainer, metrics = walk["trainer"], walk["metrics"]
    assert walk["traces"]["n"] == 1  # 6 iterations, learning off then on: one trace
    assert trainer.num_iterations == 6 and trainer.env_steps_per_iteration == 12
    want = {
        "loss/pa/actor",
        "loss/pa/critic",
        "q_mean",
        "episode_return/a",
        "episode_return/b",
        "episodes_done",
        "env_steps",
    }
    assert set(metrics[0]) == want  # frozen "pb" has no losses
    for m in metrics:
        for k, v in m.items():
            assert v.shape == () and v.dtype == jnp.float32, k
    np.testing.assert_array_equal([float(m["env_steps"]) for m in metrics], 12.0 * np.arange(1, 7))
    # learning starts once 24 env steps are done: the end of iteration 2
    assert float(metrics[0]["loss/pa/critic"]) == 0.0
    assert all(float(m["loss/pa/critic"]) > 0 for m in metrics[1:])
    # 3-step episodes end at steps 3, 6, 9, 12, ... of each of the 3 envs
    assert [float(m["episodes_done"]) for m in metrics] == [3.0, 3.0, 6.0, 3.0, 3.0, 6.0]


def test_buffer_holds_aligned_transitions(walk):
    rs = walk["states"][2]  # 2 iterations: 2 * 4 steps * 3 envs * 2 agents of "a"
    assert set(rs.buffers) == {"pa"}  # the frozen policy keeps no buffer
    buf = rs.buffers["pa"]
    n = int(buf.size)
    assert n == 48 and int(buf.ptr) == 48
    d = jax.tree.map(lambda x: np.asarray(x)[:n], buf.data)
    # next_obs is the episode's own last obs (not the reset obs) where an episode ended
    np.testing.assert_array_equal(d.next_obs[:, 1], d.obs[:, 1] + 1)
    np.testing.assert_allclose(d.next_obs[:, 0], d.obs[:, 0] + d.action[:, 0], atol=1e-6)
    np.testing.assert_allclose(d.reward, -np.abs(d.next_obs[:, 0]), atol=1e-6)
    # agent a1 never acts: active alternates 1, 0 over the flattened agent axis
    np.testing.assert_array_equal(d.active, np.tile([1.0, 0.0], n // 2))
    # terminal transitions are exactly the active ones entering t = 3
    np.testing.assert_array_equal(d.terminated, (d.next_obs[:, 1] == 3) & (d.active == 1))
    assert np.all(np.abs(d.action) <= 1.0)


def test_frozen_policy_keeps_its_params_and_learner_moves(walk):
    first, last = walk["states"][0], walk["states"][-1]
    jaxdrive.testing.assert_trees_equal(first.policies["pb"], last.policies["pb"], "frozen pb")
    moved = jax.tree.map(
        lambda a, b: float(jnp.max(jnp.abs(a - b))),
        first.policies["pa"].actor,
        last.policies["pa"].actor,
    )
    assert max(jax.tree.leaves(moved)) > 0
    # target networks trail the online ones (tau < 1) but have moved too
    t0 = jax.tree.leaves(first.policies["pa"].target_critic)
    t1 = jax.tree.leaves(last.policies["pa"].target_critic)
    c1 = jax.tree.leaves(last.policies["pa"].critic)
    assert any(not np.array_equal(a, b) for a, b in zip(t0, t1, strict=True))
    assert any(not np.array_equal(a, b) for a, b in zip(t1, c1, strict=True))


def test_determinism_for_a_fixed_seed(walk):
    trainer, update = walk["trainer"], walk["update"]
    rs = jax.jit(trainer.init)(jax.random.key(0))
    jaxdrive.testing.assert_trees_equal(rs, walk["states"][0], "init")
    for i in range(3):
        rs, m = update(rs)
        jaxdrive.testing.assert_trees_equal(m, walk["metrics"][i], f"metrics {i}")
    jaxdrive.testing.assert_trees_equal(rs, walk["states"][3], "state after 3 iterations")
    other = jax.jit(trainer.init)(jax.random.key(1))
    assert not np.array_equal(np.asarray(other.key), np.asarray(rs.key))
    assert walk["traces"]["n"] == 1


def test_vmap_over_seeds_matches_single_runs(walk):
    trainer = walk["trainer"]
    keys = jnp.stack(
        [jax.random.key_data(jax.random.key(0)), jax.random.key_data(jax.random.key(7))]
    )
    _, metrics = jax.jit(jax.vmap(trainer))(keys)
    assert metrics["env_steps"].shape == (2, trainer.num_iterations)
    single = {k: np.stack([np.asarray(m[k]) for m in walk["metrics"]]) for k in metrics}
    for k, v in metrics.items():
        np.testing.assert_allclose(v[0], single[k], rtol=1e-4, atol=1e-5, err_msg=k)
    assert not np.allclose(metrics["loss/pa/critic"][0], metrics["loss/pa/critic"][1])


def test_act_and_get_params(walk):
    trainer, env = walk["trainer"], walk["env"]
    params = trainer.get_params(walk["states"][-1])
    assert set(params) == {"pa", "pb"} and set(params["pa"]) == {"actor", "critic"}
    obs = {"a": jnp.ones((5, 2, 2)), "b": jnp.ones((5, 1, 2))}
    acts = trainer.act(params, jax.random.key(0), obs)
    assert acts["a"].shape == (5, 2, 1) and acts["b"].shape == (5, 1, 1)
    for g in env.groups:
        assert bool(env.action_space(g).contains(acts[g]))
    # all 5 envs see the same obs: deterministic actions agree, noisy ones (pa) do not
    assert np.allclose(acts["a"], acts["a"][:1])
    noisy = trainer.act(params, jax.random.key(0), obs, deterministic=False)
    assert bool(env.action_space("a").contains(noisy["a"]))
    assert not np.allclose(noisy["a"], noisy["a"][:1])
    np.testing.assert_array_equal(noisy["b"], acts["b"])  # frozen: never noisy


# ----------------------------------------------------------------------------------------
# bad configs


def test_bad_configs_raise_value_error():
    env = Walkers()
    cases = []
    c = walk_config()
    c.learning_rate = 1e-3
    cases.append((c, "learning_rate"))
    c = walk_config()
    c.algo.n_step = 3
    cases.append((c, "n_step"))
    c = walk_config()
    c.policies.pa.entropy_coef = 0.1
    cases.append((c, "entropy_coef"))
    c = walk_config()
    c.algo.batch_size = 65
    cases.append((c, "batch_size=65 exceeds"))
    c = walk_config()
    c.algo.noise = "pink"
    cases.append((c, "noise"))
    c = walk_config()
    c.policies.pa.groups = ["a", "zz"]
    cases.append((c, "'zz'"))
    c = walk_config()
    c.policies.pb.groups = ["a"]
    cases.append((c, "served by two policies"))
    c = walk_config()
    del c.policies["pb"]
    cases.append((c, r"group\(s\) \['b'\] .* not served by any policy"))
    c = walk_config()
    c.policies.pa.batch_size = 100  # a per-policy override of config.algo
    cases.append((c, "policy 'pa': batch_size=100 exceeds buffer_size=64"))
    c = walk_config()
    c.policies.pa.activation = "sigmoidish"
    cases.append((c, "sigmoidish"))
    c = walk_config()
    c.algorithm = "ppo"
    cases.append((c, "algorithm"))
    c = walk_config()
    c.algo.tau = 0.0
    cases.append((c, "tau"))
    c = walk_config()
    c.total_env_steps = 5
    cases.append((c, "total_env_steps"))
    for cfg, words in cases:
        with pytest.raises(ValueError, match=words):
            make_train(cfg, env)


def test_discrete_action_space_is_rejected():
    env, params = jaxdrive.make("CartPole-v1")
    c = default_config()
    c.env_name = "CartPole-v1"
    with pytest.raises(ValueError, match="DDPG needs Box actions"):
        make_train(c, env, params)


# ----------------------------------------------------------------------------------------
# learning


def test_pendulum_return_improves():
    """DDPG learns Pendulum-v1 in 6,400 env steps (small nets, one update per env step).

    The 8 envs run in lockstep, so their 200-step episodes end together at env steps
    1600, 3200, 4800 and 6400. The first episodes are mostly uniform random actions
    (about -1200 each); by the last ones the pendulum is swung up and held (about -200
    on the seeds tried while tuning; the bound leaves a wide margin).
    """
    env, params = jaxdrive.make("Pendulum-v1")
    c = default_config()
    c.num_envs, c.num_steps, c.total_env_steps = 8, 8, 6400
    c.algo.batch_size, c.algo.learning_starts, c.algo.updates_per_iteration = 128, 1000, 64
    c.policies.agent.hidden_sizes = (64, 64)
    c.policies.agent.critic_lr = 2e-3
    trainer = make_train(c, env, params)
    _, m = jax.jit(trainer)(jax.random.key(0))
    done = np.asarray(m["episodes_done"])
    returns = np.asarray(m["episode_return/agent"])[done > 0]
    assert len(returns) == 4 and np.all(done[done > 0] == 8)
    assert returns[0] < -900, returns
    assert returns[-1] > -500, returns
    assert np.all(np.isfinite(np.asarray(m["loss/agent/critic"])))


@pytest.mark.parametrize("name", ["pendulum", "mountain_car_continuous"])
def test_experiment_configs_build(name):
    import importlib

    mod = importlib.import_module(f"experiments.configs.{name}")
    for preset in ("", "tiny"):
        config = mod.get_config(preset)
        trainer = make_train(config)  # builds the env from config.env_name; checks keys
        assert trainer.num_iterations == config.total_env_steps // (
            config.num_envs * config.num_steps
        )
