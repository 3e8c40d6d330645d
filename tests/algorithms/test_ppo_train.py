"""PPO end to end: learning on CartPole, two policies on a tiny Tag with one frozen,
MAPPO over vmapped seeds, Box actions, one compile per program, determinism, and the
config errors."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import algorithms
import jaxdrive
from algorithms.ppo import make_train
from experiments.configs import cartpole, tag_continuous, tag_gridworld

# Halves XLA's CPU compile time here; every comparison below is within one compiled program.
FAST = {"xla_backend_optimization_level": 0}


def jit(f):
    return jax.jit(f, compiler_options=FAST)


def leaves_equal(a, b) -> bool:
    return all(
        np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


# ----------------------------------------------------------------------------------------
# CartPole learns
# ----------------------------------------------------------------------------------------
def test_ppo_learns_cartpole():
    c = cartpole.get_config()
    c.num_envs, c.num_steps = 8, 128
    c.total_env_steps = 8 * 128 * 25  # 25.6k env steps
    c.policies.agent.lr = 2.5e-3
    c.policies.agent.hidden_sizes = (32, 32)
    c.algo.ent_coef = 0.0
    trainer = algorithms.make_train(c, *jaxdrive.make("CartPole-v1"))
    _, m = jit(trainer)(jax.random.PRNGKey(0))
    ret = np.asarray(m["episode_return/agent"])
    assert ret.shape == (25,)
    # A random policy balances ~22 steps; PPO reaches well over 100 within 25 iterations.
    assert ret[:2].mean() < 50
    assert ret[-5:].mean() > 120, ret
    np.testing.assert_allclose(np.asarray(m["env_steps"])[-1], 8 * 128 * 25)
    assert np.all(np.asarray(m["loss/agent/approx_kl"]) >= 0)


# ----------------------------------------------------------------------------------------
# Tiny Tag: two policies, the runner frozen
# ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tag_run():
    c = tag_continuous.get_config("tiny")
    c.policies.runner.frozen = True
    env, params = jaxdrive.make(c.env_name, **c.env_kwargs)
    trainer = algorithms.make_train(c, env, params)
    traces = []

    def counted_update(rs):
        traces.append(1)
        return trainer.update(rs)

    counted = dataclasses.replace(trainer, update=counted_update)
    init = jit(trainer.init)
    chunk = jit(lambda rs: counted.chunk(rs, 2))
    rs0 = init(jax.random.PRNGKey(3))
    rs1, m1 = chunk(rs0)
    rs2, m2 = chunk(rs1)
    return dict(
        config=c,
        env=env,
        trainer=trainer,
        init=init,
        chunk=chunk,
        traces=traces,
        rs0=rs0,
        rs2=rs2,
        m1=jax.device_get(m1),
        m2=jax.device_get(m2),
    )


def test_tag_frozen_policy_unchanged_trained_policy_changes(tag_run):
    rs0, rs2 = tag_run["rs0"], tag_run["rs2"]
    assert leaves_equal(rs0.policies["runner"].params, rs2.policies["runner"].params)
    assert not leaves_equal(rs0.policies["tagger"].params, rs2.policies["tagger"].params)
    assert int(rs2.iteration) == 4
    # Adam's step count: 4 iterations × 2 epochs × 2 minibatches; none for the frozen one.
    assert int(rs2.policies["tagger"].opt_state[1][0].count) == 16
    assert int(rs2.policies["runner"].opt_state[1][0].count) == 0


def test_tag_metrics(tag_run):
    m = tag_run["m2"]
    c = tag_run["config"]
    for k in ("policy", "value", "entropy", "approx_kl", "grad_norm"):
        assert f"loss/tagger/{k}" in m
        assert f"loss/runner/{k}" not in m  # frozen: no update, no loss
    for k in ("episode_return/tagger", "episode_return/runner", "episode_length"):
        assert k in m
    for k, v in m.items():
        assert v.shape == (2,) and v.dtype == np.float32, k
        assert np.all(np.isfinite(v)), k
    np.testing.assert_array_equal(m["env_steps"], [3 * 32, 4 * 32])
    assert c.num_envs * c.num_steps == 32
    # Entropy of a near-uniform MultiDiscrete([5, 5]) head is close to 2·log 5.
    assert np.all(m["loss/tagger/entropy"] > 2 * np.log(5) - 0.5)
    # 4 envs × 32 steps with 20-step episodes: some episodes end; lengths are in range.
    done = tag_run["m1"]["episodes_done"] + m["episodes_done"]
    assert done.sum() >= 4
    lens = np.concatenate([tag_run["m1"]["episode_length"], m["episode_length"]])
    assert np.all((lens >= 0) & (lens <= 20))


def test_tag_compiles_once(tag_run):
    assert len(tag_run["traces"]) == 1
    tag_run["chunk"](tag_run["rs2"])
    assert len(tag_run["traces"]) == 1


def test_tag_deterministic(tag_run):
    rs, m1 = tag_run["chunk"](tag_run["init"](jax.random.PRNGKey(3)))
    _, m2 = tag_run["chunk"](rs)
    jaxdrive.testing.assert_trees_equal(jax.device_get(m1), tag_run["m1"], "metrics, same seed")
    jaxdrive.testing.assert_trees_equal(jax.device_get(m2), tag_run["m2"], "metrics, same seed")
    _, other = tag_run["chunk"](tag_run["init"](jax.random.PRNGKey(4)))
    assert not np.allclose(
        np.asarray(other["loss/tagger/value"]), tag_run["m1"]["loss/tagger/value"]
    )


def test_tag_act(tag_run):
    trainer, env, rs = tag_run["trainer"], tag_run["env"], tag_run["rs2"]
    params = trainer.get_params(rs)
    assert set(params) == {"tagger", "runner"}

    @jit
    def act(params, key, obs):
        return (
            trainer.act(params, key, obs, deterministic=True),
            trainer.act(params, key, obs),
        )

    det, sampled = act(params, jax.random.PRNGKey(0), rs.timestep.obs)
    for g in env.groups:
        want = (4, env.num_agents(g), 2)
        assert det[g].shape == want and sampled[g].shape == want
        assert bool(env.action_space(g).contains(det[g]))
        assert bool(env.action_space(g).contains(sampled[g]))


# ----------------------------------------------------------------------------------------
# MAPPO, vmapped over seeds
# ----------------------------------------------------------------------------------------
def test_mappo_shared_policy_vmapped_seeds():
    # The grid world's one "shared" policy acts for both groups (2 taggers + 1 runner).
    c = tag_gridworld.get_config("tiny,mappo")
    assert list(c.policies.keys()) == ["shared"]
    c.total_env_steps = 2 * c.num_envs * c.num_steps
    env, params = jaxdrive.make(c.env_name, **c.env_kwargs)
    trainer = algorithms.make_train(c, env, params)
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    rs, m = jit(jax.vmap(trainer))(keys)
    m = jax.device_get(m)
    for k, v in m.items():
        assert v.shape == (2, 2) and np.all(np.isfinite(v)), k
    assert not np.allclose(m["loss/shared/value"][0], m["loss/shared/value"][1])
    assert rs.iteration.shape == (2,) and np.all(np.asarray(rs.iteration) == 2)
    # The centralised critic reads concat(global_state [2M+1], own obs [O]).
    gs = 2 * env.total_agents + 1
    obs = env.observation_space("tagger").shape[0]
    ps = rs.policies["shared"]
    assert ps.params["params"]["critic_torso"]["dense_0"]["kernel"].shape == (2, gs + obs, 16)
    assert ps.params["params"]["actor_torso"]["dense_0"]["kernel"].shape == (2, obs, 16)
    assert ps.ret_acc.shape == (2, 4, 3)  # [seeds, envs, 2 taggers + 1 runner]
    # Acting with one seed's params routes the shared policy's actions to both groups.
    one = jax.tree.map(lambda x: x[0], (trainer.get_params(rs), rs.timestep.obs))
    acts = jit(trainer.act)(one[0], jax.random.PRNGKey(2), one[1])
    assert acts["tagger"].shape == (4, 2) and acts["runner"].shape == (4, 1)
    for g in env.groups:
        assert bool(env.action_space(g).contains(acts[g]))


# ----------------------------------------------------------------------------------------
# Box actions with every option on
# ----------------------------------------------------------------------------------------
def test_box_actions_with_normalisation_and_schedules():
    c = cartpole.get_config("tiny")
    c.env_name = "Pendulum-v1"
    c.total_env_steps = 3 * c.num_envs * c.num_steps
    c.algo.update(
        normalize_obs=True,
        normalize_rewards=True,
        lr_schedule="linear",
        ent_schedule="linear",
        ent_coef=0.02,
        ent_coef_final=0.0,
        clip_value=False,
    )
    c.policies.agent.action_head = "tanh_gaussian"
    c.policies.agent.log_std_init = -0.5
    trainer = make_train(c)
    rs, m = jit(trainer)(jax.random.PRNGKey(0))
    m = jax.device_get(m)
    for k, v in m.items():
        assert np.all(np.isfinite(v)), k
    np.testing.assert_allclose(m["loss/agent/ent_coef"], [0.02, 0.02 * 2 / 3, 0.02 / 3], rtol=1e-5)
    ps = rs.policies["agent"]
    n = 3 * c.num_envs * c.num_steps
    np.testing.assert_allclose(float(ps.obs_norm.count), n, rtol=1e-3)
    assert float(ps.ret_norm.count) > 1
    assert ps.params["params"]["actor_head"]["log_std"].shape == (1,)


# ----------------------------------------------------------------------------------------
# Config errors
# ----------------------------------------------------------------------------------------
@struct.dataclass
class PlainState:
    t: jax.Array  # [] int32


@dataclasses.dataclass(frozen=True)
class Plain(jaxdrive.Env):
    """Groups "walker" and "pusher" (and "odd" with other spaces): unbounded Box
    actions, no global_state. Only built, never stepped."""

    odd: bool = False

    @property
    def groups(self):
        return ("walker", "pusher", "odd") if self.odd else ("walker", "pusher")

    def num_agents(self, group):
        return 1

    def observation_space(self, group):
        return jaxdrive.Box(-1.0, 1.0, (3 if group == "odd" else 2,))

    def action_space(self, group):
        return jaxdrive.Box(-np.inf, np.inf, (2,))

    @property
    def default_params(self):
        return jaxdrive.EnvParams()

    def reset_env(self, key, params):
        obs = {g: jnp.zeros((1, *self.observation_space(g).shape)) for g in self.groups}
        return PlainState(jnp.zeros((), jnp.int32)), jaxdrive.TimeStep.restart(obs)

    def step_env(self, key, state, actions, params):
        return self.reset_env(key, params)


def tiny():
    return cartpole.get_config("tiny")


def tiny_tag():
    return tag_continuous.get_config("tiny")


def test_unknown_keys_raise():
    c = tiny()
    c.bogus = 1
    with pytest.raises(ValueError, match=r"unknown config key.*bogus"):
        make_train(c)
    c = tiny()
    c.algo.clip_epsilon = 0.1
    with pytest.raises(ValueError, match=r"clip_epsilon.*config.algo"):
        make_train(c)
    c = tiny()
    c.policies.agent.learning_rate = 0.1
    with pytest.raises(ValueError, match=r"learning_rate.*config.policies.agent"):
        make_train(c)


def test_group_coverage_errors():
    c = tiny_tag()
    del c.policies["runner"]
    with pytest.raises(ValueError, match=r"\['runner'\].*not served"):
        make_train(c)
    c = tiny_tag()
    c.policies.runner.groups = ["runner", "tagger"]
    with pytest.raises(ValueError, match="served by two policies"):
        make_train(c)
    c = tiny_tag()
    c.policies.runner.groups = ["chaser"]
    with pytest.raises(ValueError, match="'chaser', not a group"):
        make_train(c)
    c = tiny_tag()
    c.policies.runner.groups = []
    with pytest.raises(ValueError, match="must list at least one"):
        make_train(c)


def test_batch_size_errors():
    c = tiny()
    c.algo.num_minibatches = 3  # 4 envs × 16 steps × 1 agent = 64 samples
    with pytest.raises(ValueError, match=r"num_minibatches=3 does not divide.*64"):
        make_train(c)
    c = tiny_tag()
    c.policies.tagger.num_minibatches = 5  # per-policy override: 8·4·2 = 64 tagger samples
    with pytest.raises(ValueError, match=r"'tagger'.*num_minibatches=5"):
        make_train(c)
    c = tiny()
    c.total_env_steps = 10
    with pytest.raises(ValueError, match="less than one iteration"):
        make_train(c)
    c = tiny()
    c.num_envs = 0
    with pytest.raises(ValueError, match="num_envs must be a positive integer"):
        make_train(c)
    c = tiny()
    c.partitioner = "gspmd"
    with pytest.raises(ValueError, match=r"config.partitioner must be one of \('shard_map'"):
        make_train(c)


def test_minibatches_not_dividing_one_env_shuffle_whole_batch():
    """One device: 4 minibatches of 10 samples per env (2 taggers × 5 steps) still train,
    from a shuffle of the whole batch (stratifying by env needs divisibility)."""
    c = tiny_tag()
    c.num_steps = 5
    c.total_env_steps = c.num_envs * c.num_steps * 2
    c.algo.num_minibatches = 4
    tr = make_train(c)
    rs = jit(tr.init)(jax.random.PRNGKey(0))
    rs2, m = jit(lambda r: tr.chunk(r, 2))(rs)
    assert all(np.isfinite(np.asarray(v)).all() for v in m.values())
    before = jax.tree.leaves(tr.get_params(rs)["tagger"])
    after = jax.tree.leaves(tr.get_params(rs2)["tagger"])
    assert any(not np.allclose(a, b) for a, b in zip(before, after, strict=True))


def test_action_space_and_option_errors():
    c = tiny()
    c.env_name = "Pendulum-v1"
    c.policies.agent.action_head = "beta"
    with pytest.raises(ValueError, match=r"policies.agent.action_head must be one of \['gau"):
        make_train(c)
    c = tiny()
    c.policies.agent.groups = ["walker", "pusher"]
    c.policies.agent.action_head = "tanh_gaussian"
    with pytest.raises(ValueError, match="'tanh_gaussian' needs finite Box bounds"):
        make_train(c, Plain())
    c.policies.agent.action_head = "gaussian"
    c.algo.centralized_critic = True
    with pytest.raises(ValueError, match="centralized_critic needs env.global_state"):
        make_train(c, Plain())
    c = tiny()
    c.policies.agent.groups = ["walker", "pusher", "odd"]
    with pytest.raises(ValueError, match="whose spaces differ"):
        make_train(c, Plain(odd=True))
    c = tiny()
    c.algo.lr_schedule = "cosine"
    with pytest.raises(ValueError, match="lr_schedule must be one of"):
        make_train(c)
    c = tiny()
    c.policies.agent.activation = "sigmoidish"
    with pytest.raises(ValueError, match=r"config.policies.agent.activation must be one of"):
        make_train(c)
    c = tiny()
    c.algorithm = "a2c"
    with pytest.raises(ValueError, match="'a2c' but this is the 'ppo' trainer"):
        make_train(c)
    c = tiny()
    c.algorithm = "sarsa"
    with pytest.raises(ValueError, match="unknown algorithm 'sarsa'"):
        algorithms.make_train(c, None)


def test_config_presets():
    with pytest.raises(ValueError, match="unknown config preset"):
        tag_continuous.get_config("huge")
    c = tag_continuous.get_config()
    assert c.env_kwargs.num_taggers == 10 and c.env_kwargs.num_runners == 100
    assert c.policies.tagger.lr == 0.001 and c.policies.runner.lr == 0.005
    assert c.num_envs * c.num_steps == 25000
    a2c = tag_continuous.get_config("tiny,a2c")
    assert a2c.algorithm == "a2c" and "clip_eps" not in a2c.algo
    adv = tag_continuous.get_config("advnorm")
    assert adv.algo.normalize_advantages and adv.algo.ent_coef == 0.01
    assert not c.algo.normalize_advantages and c.algo.ent_coef == 0.05  # WarpDrive's


def test_on_policy_max_grad_norm_zero_is_no_clipping():
    """``max_grad_norm`` is a traced hyper-parameter: 0 (also the config's ``None``)
    leaves gradients unclipped, as a norm no gradient reaches does; 0.01 clips."""
    c = cartpole.get_config("tiny")
    c.algo.max_grad_norm = None
    env, params = jaxdrive.make(c.env_name)
    trainer = algorithms.make_train(c, env, params)
    rs0 = jax.jit(trainer.init)(jax.random.PRNGKey(0))
    update = jax.jit(trainer.update)

    def trained(max_norm: float) -> list:
        pol = rs0.policies["agent"]
        hp = {**pol.hparams, "max_grad_norm": jnp.float32(max_norm)}
        rs = rs0.replace(policies={"agent": pol.replace(hparams=hp)})
        return jax.tree.leaves(trainer.get_params(update(rs)[0]))

    off, huge, tight = trained(0.0), trained(1e30), trained(0.01)
    assert float(rs0.policies["agent"].hparams["max_grad_norm"]) == 0.0
    for a, b in zip(off, huge, strict=True):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, b) for a, b in zip(off, tight, strict=True))
