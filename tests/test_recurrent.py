"""Recurrent policies (`algorithms.common.recurrent`): the cores against a NumPy loop
with random resets, the learner's sequence re-run against acting (the BPTT invariant:
ratio 1 at the first step), a memory task a GRU learns and an MLP cannot, exact resume
from a checkpoint, several policies with a centralised critic and agent IDs, action
masks, evaluation with the carry, no retrace, and the config errors. Distribution over
forced CPU devices: `tests/test_distributed.py`."""

from __future__ import annotations

import functools
import types

import flax.linen as nn
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

import algorithms
from algorithms.common.config import base_config, resolve_run
from algorithms.common.on_policy import POLICY_DEFAULTS, POLICY_RULES
from algorithms.common.on_policy_learn import _sequence_eval, _sequence_minibatches
from algorithms.common.on_policy_rollout import rollout
from algorithms.common.on_policy_setup import build_setup
from algorithms.common.recurrent import RecurrentCore, cell_step, initial_carry, run_cores
from algorithms.ppo.losses import ppo_loss
from experiments import common
from jaxdrive.checkpoint import Checkpointer
from jaxdrive.testing import assert_trees_equal
from tests.recurrent_envs import RepeatFirstBit
from tests.toy_envs import Counter

FAST = {"xla_backend_optimization_level": 0}
ENV = RepeatFirstBit(length=5)  # 8-step rollouts: episodes cross iteration boundaries
ITERS = 24  # the last iteration ends mid-episode (192 = 38·5 + 2 steps)


def jit(f):
    return jax.jit(f, compiler_options=FAST)


def memory_config(core: str, iters: int = ITERS):
    c = base_config("ppo", "repeat_first_bit")
    c.num_envs, c.num_steps = 16, 8
    c.total_env_steps = 16 * 8 * iters
    c.algo.update(ent_coef=0.0, num_minibatches=2, num_epochs=4)
    c.policies.agent.update(core=core, core_size=16, hidden_sizes=(16,), lr=3e-3)
    return c


# ----------------------------------------------------------------------------------------
# The cores: resets against a NumPy loop
# ----------------------------------------------------------------------------------------
def _np_core(kind, p, carry, x, ends):
    """The GRU / LSTM equations step by step in NumPy (float64), resetting after steps
    whose ``ends`` is True."""
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))
    wi, bi = np.asarray(p["input_kernel"], np.float64), np.asarray(p["input_bias"])
    wh = np.asarray(p["hidden_kernel"], np.float64)
    h_size = wh.shape[0]
    c, ys = np.asarray(carry, np.float64), []
    for t in range(x.shape[0]):
        xp = x[t] @ wi + bi
        if kind == "gru":
            hp = c @ wh
            r = sig(xp[:, :h_size] + hp[:, :h_size])
            z = sig(xp[:, h_size : 2 * h_size] + hp[:, h_size : 2 * h_size])
            n = np.tanh(
                xp[:, 2 * h_size :] + r * (hp[:, 2 * h_size :] + np.asarray(p["hidden_bias"]))
            )
            c = (1 - z) * n + z * c
            ys.append(c)
        else:
            cc, hh = c[:, :h_size], c[:, h_size:]
            g = xp + hh @ wh
            cc = sig(g[:, h_size : 2 * h_size]) * cc + sig(g[:, :h_size]) * np.tanh(
                g[:, 2 * h_size : 3 * h_size]
            )
            hh = sig(g[:, 3 * h_size :]) * np.tanh(cc)
            c = np.concatenate([cc, hh], -1)
            ys.append(hh)
        c = np.where(ends[t][:, None], 0.0, c)
    return c, np.stack(ys)


@pytest.fixture(scope="module")
def cores():
    out = {}
    for kind in ("gru", "lstm"):
        core = RecurrentCore(kind, 5)
        s = 5 if kind == "gru" else 10
        params = core.init(jax.random.key(0), jnp.zeros((4, s)), jnp.zeros((6, 4, 3)))
        out[kind] = (params, jax.jit(core.apply), s)
    return out


@settings(max_examples=8, deadline=None)
@given(
    kind=st.sampled_from(["gru", "lstm"]),
    ends=st.lists(st.booleans(), min_size=24, max_size=24),
    seed=st.integers(0, 2**16),
)
def test_core_resets_match_numpy(cores, kind, ends, seed):
    params, apply, s = cores[kind]
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(6, 4, 3)).astype(np.float32)
    carry = rng.normal(size=(4, s)).astype(np.float32)
    ends = np.array(ends).reshape(6, 4)
    got_c, got_y = apply(params, carry, x, ends)
    want_c, want_y = _np_core(kind, params["params"], carry, x.astype(np.float64), ends)
    np.testing.assert_allclose(np.asarray(got_y), want_y, atol=2e-5)
    np.testing.assert_allclose(np.asarray(got_c), want_c, atol=2e-5)
    # one step without a loop (acting) is the first step of the sequence
    one_c, one_y = apply(params, carry, x[:1])
    np.testing.assert_allclose(np.asarray(one_y[0]), np.asarray(got_y[0]), atol=1e-6)


class _TwoCores(nn.Module):
    """A GRU and an LSTM in one time scan (`run_cores`), as an actor-critic runs them."""

    @nn.compact
    def __call__(self, carries, xs, ends):
        cores = (RecurrentCore("gru", 5, name="a"), RecurrentCore("lstm", 4, name="b"))
        return run_cores(cores, carries, xs, ends)


def _loop_cores(params, carries, xs, ends):
    """The same cores as a Python loop of `cell_step` (JAX's autodiff of the plain step)."""
    out_c, out_y = [], []
    for (kind, h, name), c, x in zip((("gru", 5, "a"), ("lstm", 4, "b")), carries, xs, strict=True):
        p = params["params"][name]
        ys = []
        for t in range(x.shape[0]):
            xp = x[t] @ p["input_kernel"] + p["input_bias"]
            c = cell_step(kind, h, (p["hidden_kernel"], p.get("hidden_bias")), xp, c)
            ys.append(c if kind == "gru" else c[..., h:])
            c = jnp.where(ends[t][:, None], 0.0, c)
        out_c.append(c)
        out_y.append(jnp.stack(ys))
    return tuple(out_c), tuple(out_y)


@pytest.fixture(scope="module")
def two_cores():
    net = _TwoCores()
    carries = (jnp.zeros((3, 5)), jnp.zeros((3, 8)))
    xs = (jnp.zeros((6, 3, 2)), jnp.zeros((6, 3, 4)))
    params = net.init(jax.random.key(0), carries, xs, jnp.zeros((6, 3), bool))

    def loss(run, params, carries, xs, ends, w):  # every output enters the loss
        cs, ys = run(params, carries, xs, ends)
        outs = jax.tree.leaves((cs, ys))
        return sum(jnp.sum(jnp.sin(a) * b) for a, b in zip(outs, w, strict=True))

    grads = [
        jit(jax.grad(functools.partial(loss, run), argnums=(0, 1, 2)))
        for run in (net.apply, _loop_cores)
    ]
    return params, grads


@settings(max_examples=6, deadline=None)
@given(ends=st.lists(st.booleans(), min_size=18, max_size=18), seed=st.integers(0, 2**16))
def test_core_gradients_match_autodiff_of_the_step(two_cores, ends, seed):
    """`run_cores`' custom VJP (one reverse scan, the recurrent kernels' gradients as one
    GEMM) gives JAX's gradients of the step-by-step cells, resets included."""
    params, (got_fn, want_fn) = two_cores
    rng = np.random.default_rng(seed)
    params = jax.tree.map(lambda p: p + rng.normal(size=p.shape).astype(np.float32), params)
    carries = (rng.normal(size=(3, 5)), rng.normal(size=(3, 8)))
    xs = (rng.normal(size=(6, 3, 2)), rng.normal(size=(6, 3, 4)))
    carries, xs = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), (carries, xs))
    w = [
        jnp.asarray(rng.normal(size=s), jnp.float32) for s in [(3, 5), (3, 8), (6, 3, 5), (6, 3, 4)]
    ]
    ends = jnp.asarray(np.array(ends).reshape(6, 3))
    got = got_fn(params, carries, xs, ends, w)
    want = want_fn(params, carries, xs, ends, w)
    for g, r in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------------------
# The BPTT invariant: the learner's sequence re-run equals acting
# ----------------------------------------------------------------------------------------
def counter_config():
    """Counter (red, blue) with two recurrent policies, a centralised critic, agent IDs."""
    c = base_config("ppo", "counter", policies={"red": ["red"], "blue": ["blue"]})
    c.num_envs, c.num_steps, c.total_env_steps = 4, 10, 40
    c.algo.update(centralized_critic=True, num_minibatches=2, num_epochs=2)
    c.policies.red.update(
        core="gru", core_size=8, hidden_sizes=(8,), agent_ids=True, post_core_sizes=(8,)
    )
    c.policies.blue.update(core="lstm", critic_core="gru", core_size=6, hidden_sizes=(8,))
    return c


def test_sequence_rerun_equals_acting():
    """Every minibatch of the first epoch, re-run from the stored carries with the
    acting parameters, gives the behaviour log-probs and values (ratio 1); episodes
    end inside the sequences (Counter's 7-step episodes in 10 steps)."""
    env = Counter()
    setup = build_setup(resolve_run(counter_config(), env, None, algorithm="ppo",
                                    algo_defaults=algorithms.ppo.ALGO_DEFAULTS,
                                    policy_defaults=POLICY_DEFAULTS,
                                    rules=POLICY_RULES), ppo_loss, False)  # fmt: skip
    trainer = algorithms.make_train(counter_config(), env, env.default_params)
    rs = jit(trainer.init)(jax.random.PRNGKey(0))

    @jit
    def check(rs, key):
        k1, k2 = jax.random.split(key)
        env_state, ts, traj, _, _, _ = rollout(setup, rs, k1)  # carries become non-zero
        pols = {p: ps.replace(carry=traj["_carry"][p]) for p, ps in rs.policies.items()}
        rs = rs.replace(env_state=env_state, timestep=ts, policies=pols)
        _, _, traj, _, _, _ = rollout(setup, rs, k2)
        T, NL = setup.run.num_steps, setup.num_local_envs
        gs_all = traj["_gs"].reshape(T * NL, -1)
        out = {}
        for p, ps in setup.policies.items():
            tr, B = traj[p], NL * ps.spec.num_agents
            batch = {
                "obs": tr["obs"].reshape(T * B, -1),
                "action": tr["action"].reshape(T * B, *tr["action"].shape[3:]),
                "old_logp": tr["logp"].reshape(T * B),
                "old_value": tr["value"].reshape(T * B),
                "ends": tr["ends"].reshape(T * B),
                "carry0": tr["carry0"],
            }
            mbs = _sequence_minibatches(setup, p, batch, jax.random.key(1))
            params = rs.policies[p].params
            norm = rs.policies[p].obs_norm

            def one(mb, p=p, params=params, norm=norm):
                logp, _, v, flat = _sequence_eval(setup, p, params, norm, gs_all, mb)
                return logp - flat["old_logp"], v - flat["old_value"]

            nonzero = jnp.any(jnp.stack([jnp.any(c != 0) for c in jax.tree.leaves(tr["carry0"])]))
            out[p] = (jax.lax.map(one, mbs), jnp.any(tr["ends"][:-1]) & nonzero, mbs["env"])
        return out

    out = check(rs, jax.random.key(5))
    for p, ((dlogp, dv), ended, envs) in out.items():
        assert bool(ended), p  # non-zero start carries, resets inside the sequences
        assert np.abs(np.asarray(dlogp)).max() < 1e-5, p
        assert np.abs(np.asarray(dv)).max() < 1e-5, p
        # every sequence in exactly one minibatch
        n_agents = setup.policies[p].spec.num_agents
        assert sorted(np.bincount(np.asarray(envs).ravel())) == [n_agents] * 4


# ----------------------------------------------------------------------------------------
# The memory task: a GRU learns it, an MLP cannot; masks; evaluation; resume; no retrace
# ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gru_run():
    trainer = algorithms.make_train(memory_config("gru"), ENV, ENV.default_params)
    rs0 = jit(trainer.init)(jax.random.PRNGKey(0))
    chunk = jit(lambda r: trainer.chunk(r, ITERS))
    rs, m = chunk(rs0)
    return types.SimpleNamespace(trainer=trainer, rs0=rs0, rs=rs, m=m, chunk=chunk)


def _eval(trainer, rs) -> float:
    res = common.evaluate_policy(
        ENV, ENV.default_params, trainer, trainer.get_params(rs), jax.random.PRNGKey(1),
        episodes=64,
    )  # fmt: skip
    return res["returns"]["agent"]["mean"]


def test_gru_learns_what_an_mlp_cannot(gru_run):
    ret = np.asarray(gru_run.m["episode_return/agent"])
    assert ret.max() <= ENV.length  # the masked action (reward 100) is never taken
    assert ret[:3].mean() < 3.5 and ret[-3:].mean() > 4.7, ret
    assert _eval(gru_run.trainer, gru_run.rs) > 4.9  # deterministic, carrying the state
    mlp = algorithms.make_train(memory_config("mlp"), ENV, ENV.default_params)
    rs, m = jit(mlp)(jax.random.PRNGKey(0))
    # memoryless: after the first step the observation is the same for both bits, so at
    # best 1 + 4 / 2 = 3 in expectation
    assert np.asarray(m["episode_return/agent"])[-3:].mean() < 3.6
    assert _eval(mlp, rs) < 3.9


def test_resume_from_checkpoint_is_exact_and_no_retrace(gru_run, tmp_path):
    """Mid-episode carries are saved and restored bit for bit with the rest of the runner
    state; ``chunk`` is a pure function of that state, so the resumed run continues
    exactly (the host loop's resume from run folders: `tests/test_loop.py`)."""
    carry = gru_run.rs.policies["agent"].carry
    assert set(carry) == {"actor", "critic"} and carry["actor"].shape == (16, 2, 16)
    assert all(np.any(np.asarray(c)) for c in carry.values())
    ckpt = Checkpointer(str(tmp_path), max_to_keep=1)
    ckpt.save(ITERS, gru_run.rs, {"iteration": ITERS})
    restored, _ = ckpt.restore(jax.tree.map(jnp.zeros_like, gru_run.rs))
    ckpt.close()
    assert_trees_equal(restored, gru_run.rs, "restored runner state")
    gru_run.chunk(gru_run.rs)
    assert gru_run.chunk._cache_size() == 1  # no retrace for the chunk's own output


def test_shared_core_learns_with_one_torso_and_one_core():
    """``shared_torso`` with a GRU: one torso and one core feed both heads (no critic
    parameters or carry of their own), and the memory task is learnt (more slowly than
    with two cores: the value loss shares the core's gradient)."""
    c = memory_config("gru")
    c.policies.agent.shared_torso = True
    trainer = algorithms.make_train(c, ENV, ENV.default_params)
    rs, m = jit(trainer)(jax.random.PRNGKey(0))
    params = trainer.get_params(rs)["agent"]["params"]["params"]
    assert set(params) == {"actor_torso", "actor_rnn", "actor_head", "value_head"}
    assert set(rs.policies["agent"].carry) == {"actor"}
    ret = np.asarray(m["episode_return/agent"])
    # beyond what memory-less policies can reach (3 in expectation, see below)
    assert ret[:3].mean() < 3.0 and ret[-3:].mean() > 4.0, ret
    assert _eval(trainer, rs) > 4.5


def test_padded_sequence_minibatches_train_alike(monkeypatch):
    """Sequence minibatches padded with all-zero, masked-out sequences (for aligned GEMMs)
    update exactly as unpadded ones (advantage normalisation ignores them too)."""
    from algorithms.common import on_policy_learn

    c = memory_config("gru", iters=2)
    c.algo.normalize_advantages = True
    out = {}
    for name, mult in (("plain", 1), ("padded", 64)):
        monkeypatch.setattr(on_policy_learn, "row_multiple", lambda rows, m=mult: m)
        trainer = algorithms.make_train(c, ENV, ENV.default_params)
        rs, m = jit(trainer)(jax.random.PRNGKey(0))
        out[name] = jax.device_get((trainer.get_params(rs), m))
    for x, y in zip(jax.tree.leaves(out["plain"]), jax.tree.leaves(out["padded"]), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=1e-6)


def test_post_core_layers_with_a_shared_core():
    """``post_core_sizes`` puts dense layers between the core and each head: with a shared
    core, one MLP per head after it (the sequence re-run with them is checked against
    acting in `test_sequence_rerun_equals_acting`)."""
    c = memory_config("gru", iters=2)
    c.policies.agent.update(shared_torso=True, post_core_sizes=(8, 4))
    trainer = algorithms.make_train(c, ENV, ENV.default_params)
    rs, m = jit(trainer)(jax.random.PRNGKey(0))
    params = trainer.get_params(rs)["agent"]["params"]["params"]
    assert set(params) == {
        "actor_torso", "actor_rnn", "actor_post", "critic_post", "actor_head", "value_head"
    }  # fmt: skip
    assert params["critic_post"]["dense_1"]["kernel"].shape == (8, 4)
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(m))


def test_act_needs_the_carry(gru_run):
    tr, params = gru_run.trainer, gru_run.trainer.get_params(gru_run.rs)
    obs = jnp.zeros((3, 2, 2))
    with pytest.raises(ValueError, match="recurrent: act needs carry"):
        tr.act(params, jax.random.key(0), obs)
    a, carry = tr.act(params, jax.random.key(0), obs, carry=tr.init_carry((3,)))
    assert a["agent"].shape == (3, 2) and carry["agent"]["actor"].shape == (3, 2, 16)
    assert algorithms.make_train(memory_config("mlp"), ENV, ENV.default_params).init_carry is None


# ----------------------------------------------------------------------------------------
# Config errors
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "policy, message",
    [
        ({"core": "rnn"}, r"config.policies.agent.core must be one of"),
        (
            {"core": "gru", "shared_torso": True, "critic_core": "lstm"},
            "shared_torso shares the actor's core with the critic, so critic_core must stay",
        ),
        (
            {"core": "gru", "num_minibatches": 3},
            r"num_minibatches=3 does not divide the 32 sequences",
        ),
        ({"critic_core": "gru", "core_size": 0}, r"core_size must be a positive integer"),
        ({"core": "gru", "post_core_sizes": (0,)}, r"post_core_sizes entries must be"),
    ],
)
def test_config_errors(policy, message):
    c = memory_config("mlp")
    c.policies.agent.update(policy)
    with pytest.raises(ValueError, match=message):
        algorithms.make_train(c, ENV, ENV.default_params)


def test_initial_carry_shapes():
    hp = {"core": "lstm", "critic_core": "mlp", "core_size": 4}
    assert jax.tree.map(jnp.shape, initial_carry(hp, (3, 2))) == {"actor": (3, 2, 8)}


@pytest.mark.parametrize("preset", ["", "27m_vs_30m", "mava", "tiny", "27m_vs_30m,mava"])
def test_smax_configs_are_valid(preset):
    """The SMAX presets hold only known, valid keys (the env itself comes from the JaxMARL
    adapter: `jaxdrive.make("jaxmarl:smax:3s5z")`)."""
    from algorithms.common.config import check_values, merge_defaults
    from experiments.configs import smax

    c = smax.get_config(preset)
    assert c.env_name == "jaxmarl:smax:" + ("27m_vs_30m" if "27m" in preset else "3s5z")
    algo = merge_defaults(c.algo, algorithms.ppo.ALGO_DEFAULTS, "config.algo")
    hp = {**merge_defaults(c.policies.ally, POLICY_DEFAULTS, "ally"), **algo}
    hp = check_values(hp, POLICY_RULES, {})
    assert hp["core"] == "gru" and hp["centralized_critic"] and hp["agent_ids"]
    assert c.num_envs % hp["num_minibatches"] == 0  # whole sequences of envs per minibatch
    with pytest.raises(ValueError, match="pick different maps"):
        smax.get_config("3s5z,27m_vs_30m")


def test_recurrent_suite_ratios():
    """The benchmark suite's ratio lines: GRU, LSTM and a shared GRU against
    feed-forward, per case."""
    from experiments.benchmarks.recurrent import ratio_lines

    recs = [
        {"name": "tag", "core": "mlp", "env_steps_per_s": 200.0},
        {"name": "tag_gru", "core": "gru", "env_steps_per_s": 100.0},
        {"name": "tag_lstm", "core": "lstm", "env_steps_per_s": 50.0},
        {"name": "tag_gru_shared", "core": "gru_shared", "env_steps_per_s": 150.0},
        {"name": "cp", "core": "mlp", "env_steps_per_s": 10.0},
    ]
    assert ratio_lines(recs) == [
        "recurrent tag: GRU / feed-forward = 0.50x",
        "recurrent tag: LSTM / feed-forward = 0.25x",
        "recurrent tag: GRU_SHARED / feed-forward = 0.75x",
    ]
