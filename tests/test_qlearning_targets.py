"""The pure pieces of the Q-learning family against NumPy references and invariants:
Q(λ) returns, double-Q bootstraps, ε-greedy under action masks, QMIX monotonicity,
VDN additivity, the replay ring buffer."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from algorithms.qlearning import replay
from algorithms.qlearning import targets as tg
from algorithms.qlearning.networks import (
    AgentQNetwork,
    QMixer,
    agent_inputs,
    next_q,
    unroll,
    vdn_mix,
)

_SETTINGS = settings(max_examples=8, deadline=None)


def _np_lambda_returns(r, d, v, cut, lam):
    """Forward-view definition, written independently: for each t, the λ-weighted mix
    of n-step returns bootstrapped with v, truncated at the first cut."""
    T = r.shape[0]
    out = np.zeros_like(r)
    for t in range(T):
        # end: the last step whose transition continues the chain from t
        end = t
        while end < T - 1 and not cut[end]:
            end += 1
        total, weight_left = 0.0, 1.0
        for k in range(t, end + 1):  # n-step return that bootstraps at step k
            ret, disc = 0.0, 1.0
            for j in range(t, k + 1):
                ret += disc * r[j]
                disc *= d[j]
            ret += disc * v[k]
            w = weight_left * (1.0 - lam) if k < end else weight_left
            total += w * ret
            weight_left *= lam
        out[t] = total
    return out


@pytest.mark.parametrize("lam", [0.0, 0.6, 1.0])
def test_lambda_returns_match_numpy(lam):
    rng = np.random.default_rng(int(lam * 10))
    T, B = 9, 5
    r = rng.normal(size=(T, B)).astype(np.float32)
    d = (0.9 * (rng.random((T, B)) > 0.2)).astype(np.float32)
    v = rng.normal(size=(T, B)).astype(np.float32)
    cut = rng.random((T, B)) < 0.25
    got = np.asarray(tg.lambda_returns(jnp.asarray(r), jnp.asarray(d), jnp.asarray(v),
                                       jnp.asarray(cut), lam))  # fmt: skip
    want = np.stack([_np_lambda_returns(r[:, b], d[:, b], v[:, b], cut[:, b], lam)
                     for b in range(B)], axis=1)  # fmt: skip
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_bootstrap_value_double_q_matches_numpy():
    rng = np.random.default_rng(1)
    q_t = rng.normal(size=(6, 4, 5)).astype(np.float32)
    q_o = rng.normal(size=(6, 4, 5)).astype(np.float32)
    mask = rng.random((6, 4, 5)) < 0.6
    mask[..., 2] = True
    got = np.asarray(tg.bootstrap_value(jnp.asarray(q_t), jnp.asarray(q_o), jnp.asarray(mask)))
    a = np.argmax(np.where(mask, q_o, -np.inf), axis=-1)
    np.testing.assert_allclose(got, np.take_along_axis(q_t, a[..., None], -1)[..., 0])
    got_max = np.asarray(tg.bootstrap_value(jnp.asarray(q_t), None, jnp.asarray(mask)))
    np.testing.assert_allclose(got_max, np.max(np.where(mask, q_t, -np.inf), axis=-1))


_eps_greedy = jax.jit(tg.epsilon_greedy)


@_SETTINGS
@given(seed=st.integers(0, 2**31 - 1), eps=st.sampled_from([0.0, 0.5, 1.0]))
def test_masked_actions_never_chosen(seed, eps):
    rng = np.random.default_rng(seed)
    mask = rng.random((64, 7)) < 0.3
    mask[np.arange(64), rng.integers(0, 7, 64)] = True  # at least one allowed action
    q = rng.normal(size=(64, 7)).astype(np.float32) * 100
    a = np.asarray(_eps_greedy(jax.random.key(seed), jnp.asarray(q), eps, jnp.asarray(mask)))
    assert mask[np.arange(64), a].all()
    if eps == 0.0:
        np.testing.assert_array_equal(a, np.argmax(np.where(mask, q, -np.inf), axis=-1))


_mixer = QMixer(embed_dim=8, hypernet_hidden=16, init_scale=1.0)


@jax.jit
def _min_mixer_grad(key):
    """The smallest ``∂Q_tot/∂q_a`` over 32 random (q, state) pairs, random weights."""
    k_p, k_q, k_s = jax.random.split(key, 3)
    params = _mixer.init(k_p, jnp.zeros((1, 4)), jnp.zeros((1, 6)))
    # random weights (not the init's): monotonicity must not depend on them
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(k_p, len(leaves))
    params = tree.unflatten(
        [3.0 * jax.random.normal(k, x.shape) for k, x in zip(keys, leaves, strict=True)]
    )
    q = 5.0 * jax.random.normal(k_q, (32, 4))
    s = 5.0 * jax.random.normal(k_s, (32, 6))
    grad = jax.vmap(jax.grad(lambda q1, s1: _mixer.apply(params, q1, s1)))(q, s)
    return jnp.min(grad)


@_SETTINGS
@given(seed=st.integers(0, 2**31 - 1))
def test_qmix_is_monotone_in_every_agent_q(seed):
    assert float(_min_mixer_grad(jax.random.key(seed))) >= 0.0


def test_vdn_is_the_sum_of_agent_qs():
    q = jax.random.normal(jax.random.key(0), (3, 5, 4))
    np.testing.assert_allclose(vdn_mix(q), np.asarray(q).sum(-1), rtol=1e-6)
    # additive: the gradient wrt every agent's Q is exactly one
    np.testing.assert_array_equal(jax.grad(lambda x: vdn_mix(x).sum())(q), np.ones(q.shape))


def test_replay_ring_matches_a_python_list():
    cap = 5
    buf = replay.init({"x": jnp.zeros((2,), jnp.int32)}, cap)
    add = jax.jit(replay.add)
    ref: list[int] = []
    counter = 0
    for n in [2, 3, 2, 7, 3, 2]:
        items = np.arange(counter, counter + n)
        counter += n
        buf = add(buf, {"x": jnp.asarray(np.stack([items, -items], 1), jnp.int32)})
        ref.extend(items.tolist())
        ref = ref[-cap:]
        assert int(buf.size) == len(ref)
        assert sorted(np.asarray(buf.data["x"][: int(buf.size), 0]).tolist()) == sorted(ref)
        # the next write overwrites the oldest item
        oldest = ref[0]
        if len(ref) == cap:
            assert int(buf.data["x"][int(buf.ptr), 0]) == oldest
    drawn = np.asarray(jax.jit(replay.sample, static_argnums=2)(buf, jax.random.key(0), 200)["x"])
    drawn = drawn[:, 0]
    assert set(drawn.tolist()) == set(ref)


def test_unroll_resets_the_hidden_state_at_episode_starts():
    net = AgentQNetwork(num_actions=3, hidden_sizes=(8,), gru_size=6)
    x = jax.random.normal(jax.random.key(1), (4, 2, 5))
    params = jax.jit(net.init)(jax.random.key(0), jnp.zeros((1, 6)), jnp.zeros((1, 5)))
    first = jnp.array([[1, 0], [0, 0], [0, 1], [0, 0]], bool)
    carry0 = jax.random.normal(jax.random.key(2), (2, 6))
    run = jax.jit(lambda x: unroll(net, params, carry0, x, first))
    h, q = run(x)
    # column 0 starts an episode at step 0: the stored carry is ignored there
    _, q0 = net.apply(params, jnp.zeros((1, 6)), x[0, :1])
    np.testing.assert_allclose(q[0, 0], q0[0], rtol=1e-5, atol=1e-6)
    # column 1 continues from its stored carry, then restarts at step 2: what came
    # before step 2 changes its Q-values before, never after
    h2, q2 = run(x.at[:2].set(7.0))
    assert not np.allclose(q2[1, 1], q[1, 1])
    np.testing.assert_allclose(q2[2:, 1], q[2:, 1], rtol=1e-5, atol=1e-6)
    # one more step from each state (the bootstrap's next Q) continues the recurrence
    q_next = jax.jit(lambda h, x: next_q(net, params, h, x))(h[:-1], x[1:])
    np.testing.assert_allclose(q_next[:, 0], q[1:, 0], rtol=1e-5, atol=1e-6)


def test_agent_inputs_layout():
    obs = jnp.ones((2, 3, 4))
    x = agent_inputs(obs, jnp.array([[0, -1, 2], [1, 1, 1]]), 3, agent_id=True)
    assert x.shape == (2, 3, 4 + 3 + 3)
    np.testing.assert_array_equal(x[0, 1, 4:7], [0, 0, 0])  # -1: no last action
    np.testing.assert_array_equal(x[0, 2, 4:7], [0, 0, 1])
    np.testing.assert_array_equal(x[1, 2, 7:], [0, 0, 1])
