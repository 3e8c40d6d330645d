"""Networks and distributions: output shapes, and log-probs/entropies against NumPy."""

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from algorithms.common.multi_policy import PolicyMap
from algorithms.common.networks import (
    MLP,
    ActionSpec,
    ActorCritic,
    Categorical,
    DiagGaussian,
    MultiCategorical,
    QNetwork,
    TanhGaussian,
    cast_kernels,
    joint_head_params,
)
from algorithms.common.normalization import RunningMeanStd
from jaxdrive.spaces import Box, Discrete, MultiDiscrete

# Halves XLA's CPU compile time of these small programs.
jit = functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0})


def np_log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


@pytest.mark.parametrize(
    "space, act_shape",
    [
        (Discrete(4), ()),
        (MultiDiscrete([3, 5, 2]), (3,)),
        (Box(-1.0, 1.0, (2,)), (2,)),
    ],
)
def test_actor_critic_shapes(space, act_shape):
    spec = ActionSpec.from_space(space)
    net = ActorCritic(spec, hidden_sizes=(8, 8), activation="relu")

    @jit
    def run(key):
        obs = jnp.zeros((5, 3, 6))
        params = net.init(key, obs)
        dist, v = net.apply(params, obs)
        a = dist.sample(jax.random.fold_in(key, 1))
        # Centralised critic input and the value-only method.
        c = jnp.ones((5, 3, 11))
        params_c = net.init(key, obs, c)
        v2 = net.apply(params_c, obs, c, method="value")
        kernel = params_c["params"]["critic_torso"]["dense_0"]["kernel"]
        return v, a, dist.log_prob(a), dist.entropy(), dist.mode(), dist.to_env(a), v2, kernel

    v, a, lp, ent, mode, env_a, v2, kernel = run(jax.random.key(0))
    assert v.shape == (5, 3) and v.dtype == jnp.float32
    assert a.shape == (5, 3, *act_shape)
    assert lp.shape == (5, 3) and ent.shape == (5, 3)
    assert mode.shape == (5, 3, *act_shape)
    assert bool(space.contains(env_a))
    assert v2.shape == (5, 3) and kernel.shape == (11, 8)


def test_initial_policy_is_near_uniform():
    spec = ActionSpec.from_space(MultiDiscrete([21, 21]))
    net = ActorCritic(spec, hidden_sizes=(32, 32))

    @jit
    def entropy(key):
        obs = jax.random.normal(key, (10, 7))
        params = net.init(jax.random.fold_in(key, 1), obs)
        return net.apply(params, obs)[0].entropy()

    np.testing.assert_allclose(np.asarray(entropy(jax.random.key(0))), 2 * math.log(21), rtol=1e-2)


def test_shared_torso():
    net = ActorCritic(ActionSpec.from_space(Discrete(3)), (8,), shared_torso=True)
    params = jit(net.init)(jax.random.key(0), jnp.zeros((2, 4)))
    assert set(params["params"]) == {"torso", "actor_head", "value_head"}
    with pytest.raises(ValueError, match="shared_torso"):
        jax.eval_shape(lambda p: net.apply(p, jnp.zeros((2, 4)), jnp.zeros((2, 5))), params)


@pytest.mark.parametrize("bias_column", [False, True])
@pytest.mark.parametrize("shared", [False, True])
def test_padded_input_matches_unpadded(shared, bias_column):
    """Obs zero-padded 7 -> 8 with ``obs_features=7``: same parameter shapes and init,
    same outputs and the same gradients as the plain network on the unpadded obs."""
    spec = ActionSpec.from_space(MultiDiscrete([3, 3]))  # equal sizes: the reshape head
    plain = ActorCritic(spec, (16, 8), "relu", shared_torso=shared)
    padded = ActorCritic(
        spec,
        (16, 8),
        "relu",
        shared_torso=shared,
        obs_features=7,
        critic_features=7,
        bias_column=bias_column,
    )
    obs = jax.random.normal(jax.random.key(1), (4, 5, 7))
    obs_pad = jnp.pad(obs, ((0, 0), (0, 0), (0, 1)))
    if bias_column:  # the first padding column is 1.0 and carries the bias
        obs_pad = jnp.pad(obs, ((0, 0), (0, 0), (0, 2)), constant_values=1.0)
        obs_pad = obs_pad.at[..., 8].set(0.0)
    act = jax.random.randint(jax.random.key(2), (4, 5, 2), 0, 3)

    def loss(net, params, x):
        dist, v = net.apply(params, x)
        return jnp.sum(dist.log_prob(act) * v) + jnp.sum(dist.entropy()), (dist.logits, v)

    @jit
    def run(key):
        p0 = plain.init(key, obs)
        p1 = padded.init(key, obs_pad)
        g0 = jax.grad(lambda p: loss(plain, p, obs), has_aux=True)(p0)
        g1 = jax.grad(lambda p: loss(padded, p, obs_pad), has_aux=True)(p0)
        return p0, p1, g0, g1, padded.apply(p0, obs)[1]  # unpadded input works too

    p0, p1, (g0, out0), (g1, out1), v_unpadded = run(jax.random.key(0))
    jax.tree.map(np.testing.assert_array_equal, p0, p1)  # same shapes and values
    torso = "torso" if shared else "actor_torso"
    assert p1["params"][torso]["dense_0"]["kernel"].shape == (7, 16)
    for a, b in zip(jax.tree.leaves((out0, g0)), jax.tree.leaves((out1, g1)), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(v_unpadded), np.asarray(out0[1]), rtol=1e-6)
    with pytest.raises(ValueError, match="fewer than the layer's in_features=7"):
        jax.eval_shape(lambda p: padded.apply(p, obs[..., :6]), p0)


def test_multi_categorical_equal_sizes_against_numpy():
    spec = ActionSpec.from_space(MultiDiscrete([4, 4]))
    net = ActorCritic(spec, (8,))
    obs = jax.random.normal(jax.random.key(0), (6, 3))
    params = jit(net.init)(jax.random.key(1), obs)
    dist = net.apply(params, obs, method="policy")
    assert dist.logits.shape == (6, 2, 4)
    out = np.asarray(_head_output(params, obs), np.float64)  # [6, 8]: dims at 0:4 and 4:8
    np.testing.assert_allclose(np.asarray(dist.logits), out.reshape(6, 2, 4), rtol=1e-6)
    x = np.array([[0, 3], [1, 2], [2, 1], [3, 0], [0, 0], [3, 3]])
    lp = np_log_softmax(out.reshape(6, 2, 4))
    want = lp[np.arange(6), 0, x[:, 0]] + lp[np.arange(6), 1, x[:, 1]]
    np.testing.assert_allclose(np.asarray(dist.log_prob(jnp.asarray(x))), want, rtol=1e-5)


def _head_output(params, obs):
    p = params["params"]
    dense = p["actor_torso"]["dense_0"]
    h = jnp.tanh(obs @ dense["kernel"] + dense["bias"])
    head = p["actor_head"]["logits"]
    return h @ head["kernel"] + head["bias"]


def test_categorical_against_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 5)).astype(np.float32)
    x = rng.integers(0, 5, size=6)
    d = Categorical(jnp.asarray(logits))
    lp = np_log_softmax(logits)
    np.testing.assert_allclose(
        np.asarray(d.log_prob(jnp.asarray(x))), lp[np.arange(6), x], rtol=1e-5
    )
    np.testing.assert_allclose(np.asarray(d.entropy()), -(np.exp(lp) * lp).sum(-1), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(d.mode()), logits.argmax(-1))
    # Sampling frequencies follow the probabilities.
    big = Categorical(jnp.asarray(np.log(np.array([[0.1, 0.6, 0.3]], np.float32))))
    s = np.asarray(jax.vmap(big.sample)(jax.random.split(jax.random.key(0), 4000)))
    np.testing.assert_allclose(np.bincount(s[:, 0], minlength=3) / 4000, [0.1, 0.6, 0.3], atol=0.03)


def test_multi_categorical_against_numpy():
    nvec = (3, 5)
    spec = ActionSpec.from_space(MultiDiscrete(nvec))
    net = ActorCritic(spec, hidden_sizes=(8,))

    @jit
    def make(key):
        obs = jax.random.normal(key, (7, 4)) * 10.0
        params = net.init(jax.random.fold_in(key, 1), obs)
        params = jax.tree.map(lambda p: p * 50.0, params)  # far from uniform
        return net.apply(params, obs)[0]

    dist = make(jax.random.key(0))
    assert isinstance(dist, MultiCategorical) and dist.logits.shape == (7, 2, 5)
    logits = np.asarray(dist.logits)
    lp0 = np_log_softmax(logits[:, 0, :3])  # padded entries excluded
    lp1 = np_log_softmax(logits[:, 1, :5])
    x = np.stack([np.arange(7) % 3, np.arange(7) % 5], -1)
    want = lp0[np.arange(7), x[:, 0]] + lp1[np.arange(7), x[:, 1]]
    np.testing.assert_allclose(
        np.asarray(dist.log_prob(jnp.asarray(x))), want, rtol=1e-4, atol=1e-4
    )
    ent = -(np.exp(lp0) * lp0).sum(-1) - (np.exp(lp1) * lp1).sum(-1)
    np.testing.assert_allclose(np.asarray(dist.entropy()), ent, rtol=1e-4, atol=1e-5)
    # Padded categories are never drawn.
    s = np.asarray(jax.vmap(dist.sample)(jax.random.split(jax.random.key(2), 500)))
    assert s[..., 0].max() < 3 and s[..., 1].max() < 5 and s.min() >= 0


def test_gaussian_against_numpy():
    rng = np.random.default_rng(1)
    mean = rng.normal(size=(4, 3)).astype(np.float32)
    log_std = rng.normal(size=(3,)).astype(np.float32) * 0.3
    x = rng.normal(size=(4, 3)).astype(np.float32) * 2
    low, high = -np.ones(3, np.float32), np.ones(3, np.float32)
    d = DiagGaussian(jnp.asarray(mean), jnp.broadcast_to(log_std, (4, 3)), low, high)
    std = np.exp(log_std)
    want = (-0.5 * ((x - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)).sum(-1)
    np.testing.assert_allclose(np.asarray(d.log_prob(jnp.asarray(x))), want, rtol=1e-5)
    np.testing.assert_allclose(
        np.asarray(d.entropy()),
        np.full(4, (log_std + 0.5 * (1 + np.log(2 * np.pi))).sum()),
        rtol=1e-5,
    )
    assert np.all(np.abs(np.asarray(d.to_env(jnp.asarray(x)))) <= 1.0)
    s = np.asarray(jax.vmap(d.sample)(jax.random.split(jax.random.key(0), 4000)))
    np.testing.assert_allclose(s.std(0), np.broadcast_to(std, (4, 3)), rtol=0.1)


def test_tanh_gaussian_against_numpy():
    rng = np.random.default_rng(2)
    mean = rng.normal(size=(5, 2)).astype(np.float32)
    log_std = np.array([-0.2, 0.3], np.float32)
    u = rng.normal(size=(5, 2)).astype(np.float32) * 2
    low, high = np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32)
    d = TanhGaussian(jnp.asarray(mean), jnp.broadcast_to(log_std, (5, 2)), low, high)
    std = np.exp(log_std)
    base = (-0.5 * ((u - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)).sum(-1)
    half = (high - low) / 2
    jac = np.log(half * (1 - np.tanh(u.astype(np.float64)) ** 2)).sum(-1)
    np.testing.assert_allclose(np.asarray(d.log_prob(jnp.asarray(u))), base - jac, rtol=1e-4)
    a = np.asarray(d.to_env(jnp.asarray(u)))
    np.testing.assert_allclose(a, low + (np.tanh(u) + 1) / 2 * (high - low), rtol=1e-5)
    assert np.all(a >= low) and np.all(a <= high)


def test_action_spec_errors():
    with pytest.raises(ValueError, match="finite"):
        ActionSpec.from_space(Box(-np.inf, np.inf, (2,)), "tanh_gaussian")
    with pytest.raises(ValueError, match="unknown continuous action head"):
        ActionSpec.from_space(Box(-1.0, 1.0, (2,)), "beta")
    with pytest.raises(ValueError, match="1-D"):
        ActionSpec.from_space(Box(-1.0, 1.0, (2, 2)))
    with pytest.raises(ValueError, match="unknown activation"):
        MLP((4,), "sigmoidish").init(jax.random.key(0), jnp.zeros((1, 2)))


def test_q_network_shape():
    q = QNetwork((8,))
    out = jax.eval_shape(
        lambda k: q.apply(
            q.init(k, jnp.zeros((3, 4)), jnp.zeros((3, 2))), jnp.zeros((3, 4)), jnp.zeros((3, 2))
        ),
        jax.random.key(0),
    )
    assert out.shape == (3,) and out.dtype == jnp.float32


def test_policy_map_round_trip():
    pm = PolicyMap({"p": ("b", "a"), "q": ("c",)}, {"a": 2, "b": 3, "c": 1})
    tree = {"a": jnp.zeros((4, 2, 7)), "b": jnp.ones((4, 3, 7)), "c": jnp.full((4, 1, 7), 2.0)}
    pol = pm.to_policy(tree, axis=1)
    assert pol["p"].shape == (4, 5, 7) and pm.num_agents("p") == 5
    back = pm.to_groups(pol, axis=1)
    for g in tree:
        np.testing.assert_array_equal(np.asarray(back[g]), np.asarray(tree[g]))


def test_running_mean_std_masked():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(50, 3)).astype(np.float32) * 3 + 1
    mask = rng.random(50) < 0.6
    rms = RunningMeanStd.create((3,)).update(jnp.asarray(x[:20]), jnp.asarray(mask[:20]))
    rms = rms.update(jnp.asarray(x[20:]), jnp.asarray(mask[20:]))
    np.testing.assert_allclose(np.asarray(rms.mean), x[mask].mean(0), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(np.asarray(rms.var), x[mask].var(0), rtol=1e-3)


@pytest.mark.parametrize("shared", [False, True])
def test_bfloat16_compute_dtype(shared):
    """``compute_dtype=bfloat16``: the same float32 parameters (init), float32 logits and
    values close to the float32 network's, float32 gradients close to its gradients."""
    spec = ActionSpec.from_space(MultiDiscrete([5, 5]))
    kw = dict(shared_torso=shared, obs_features=7, critic_features=None if shared else 7)
    f32 = ActorCritic(spec, (32, 32), "relu", **kw)
    bf16 = ActorCritic(spec, (32, 32), "relu", compute_dtype=jnp.bfloat16, **kw)
    obs = jax.random.uniform(jax.random.key(1), (64, 8), minval=-1.0, maxval=1.0)
    obs = obs.at[:, 7].set(0.0)
    act = jax.random.randint(jax.random.key(2), (64, 2), 0, 5)

    def loss(net, params):
        dist, v = net.apply(params, obs)
        return jnp.mean(dist.log_prob(act) + v**2), (dist.logits, v)

    @jit
    def run(key):
        p32, p16 = f32.init(key, obs), bf16.init(key, obs)
        g32 = jax.grad(lambda p: loss(f32, p), has_aux=True)(p32)
        g16 = jax.grad(lambda p: loss(bf16, p), has_aux=True)(p32)
        return p32, p16, g32, g16

    p32, p16, (g32, (lg32, v32)), (g16, (lg16, v16)) = run(jax.random.key(0))
    jax.tree.map(np.testing.assert_array_equal, p32, p16)
    assert lg16.dtype == v16.dtype == jnp.float32
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(g16))
    np.testing.assert_allclose(np.asarray(lg16), np.asarray(lg32), atol=2e-3)
    np.testing.assert_allclose(np.asarray(v16), np.asarray(v32), rtol=3e-2, atol=3e-2)
    for a, b in zip(jax.tree.leaves(g16), jax.tree.leaves(g32), strict=True):
        a, b = np.asarray(a).ravel(), np.asarray(b).ravel()
        # bf16 rounds each value by ~2^-8; the actor's gradients at init are sums that
        # mostly cancel (head gain 0.01), so their relative error reaches ~10%.
        assert np.linalg.norm(a - b) <= 0.15 * np.linalg.norm(b)


def test_fused_dense_matches_dense():
    """`FusedDense` (custom VJP) has `nn.Dense`'s parameters, outputs and gradients, also
    under `jax.vmap` (several seeds) and for inputs with several leading axes."""
    from algorithms.common.networks import FusedDense

    x = jax.random.normal(jax.random.key(0), (3, 4, 6, 5))  # [seeds, ..., I]
    ref, fused = nn.Dense(7), FusedDense(7)
    params = jax.vmap(ref.init, in_axes=(None, 0))(jax.random.key(1), x)

    def grads(net, p, xi):
        return jax.grad(lambda p, xi: jnp.sum(jnp.sin(net.apply(p, xi))), (0, 1))(p, xi)

    g_ref = jax.jit(jax.vmap(lambda p, xi: grads(ref, p, xi)))(params, x)
    g_fused = jax.jit(jax.vmap(lambda p, xi: grads(fused, p, xi)))(params, x)
    for a, b in zip(jax.tree.leaves(g_fused), jax.tree.leaves(g_ref), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
    y_ref = jax.vmap(ref.apply)(params, x)
    np.testing.assert_allclose(jax.vmap(fused.apply)(params, x), y_ref, rtol=1e-6, atol=1e-6)


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([(3,), (4, 4), (2, 5, 3)]))
def test_log_prob_and_entropy_matches_autodiff(seed, sizes):
    """The fused categorical log-prob/entropy (hand-written VJP) gives the values and
    logit gradients of ``dist.log_prob`` and ``dist.entropy`` differentiated by JAX,
    padded categories (unequal ``nvec``) and single `Discrete` heads included."""
    from algorithms.common.networks import ActionHead, log_prob_and_entropy

    space = Discrete(sizes[0]) if len(sizes) == 1 else MultiDiscrete(list(sizes))
    head = ActionHead(ActionSpec.from_space(space))
    k1, k2, k3, k4 = jax.random.split(jax.random.key(seed), 4)
    h = jax.random.normal(k1, (6, 5)) * 3.0
    params = head.init(k2, h)
    params = jax.tree.map(lambda p: p + jax.random.normal(k3, p.shape), params)
    x = head.apply(params, h).sample(k4)
    w_lp, w_ent = jnp.linspace(-1.0, 2.0, 6), jnp.linspace(0.5, -0.7, 6)

    def loss(params, fused):
        dist = head.apply(params, h)
        lp, ent = log_prob_and_entropy(dist, x) if fused else (dist.log_prob(x), dist.entropy())
        return jnp.sum(w_lp * lp + w_ent * ent), (lp, ent)

    (_, ref), g_ref = jax.value_and_grad(lambda p: loss(p, False), has_aux=True)(params)
    (_, got), g_got = jax.value_and_grad(lambda p: loss(p, True), has_aux=True)(params)
    for a, b in zip(jax.tree.leaves((got, g_got)), jax.tree.leaves((ref, g_ref)), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize(
    "space", [MultiDiscrete([4, 4]), MultiDiscrete([3, 5]), Box(-1.0, 1.0, (2,))]
)
def test_shared_torso_joint_heads_match_separate_heads(space, dtype):
    """A shared torso computes the policy heads and the value head in one GEMM (float32,
    padded to 8 columns) or two (bfloat16); the distribution, value and gradients equal
    those of `policy` and `value` (one GEMM each)."""
    spec = ActionSpec.from_space(space)
    net = ActorCritic(spec, (16, 16), "relu", shared_torso=True, compute_dtype=dtype)
    obs = jax.random.normal(jax.random.key(0), (12, 6))
    params = net.init(jax.random.key(1), obs)
    assert set(params["params"]["value_head"]) == {"kernel", "bias"}
    act = net.apply(params, obs, method="policy").sample(jax.random.key(2))

    def loss(p, joint):
        if joint:
            dist, v = net.apply(p, obs)
        else:
            dist, v = net.apply(p, obs, method="policy"), net.apply(p, obs, method="value")
        return jnp.sum(dist.log_prob(act) + 0.3 * v), v

    (_, v1), g1 = jax.value_and_grad(lambda p: loss(p, True), has_aux=True)(params)
    (_, v0), g0 = jax.value_and_grad(lambda p: loss(p, False), has_aux=True)(params)
    tol = 1e-5 if dtype == jnp.float32 else 1e-2
    np.testing.assert_allclose(v1, v0, rtol=tol, atol=tol)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g0), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("space", [MultiDiscrete([4, 4]), Box(-1.0, 1.0, (2,))])
def test_act_and_cast_kernels(space, shared):
    """``act`` (the rollout's forward: a shared torso's heads in one padded GEMM) gives
    `__call__`'s distribution and value; kernels cast once by `cast_kernels` give the
    same outputs bit for bit (bfloat16, padded input with a bias column), and float32
    parameters are returned as they are."""
    spec = ActionSpec.from_space(space)
    net = ActorCritic(
        spec,
        (16, 16),
        "relu",
        shared_torso=shared,
        obs_features=6,
        critic_features=None if shared else 6,
        compute_dtype=jnp.bfloat16,
        bias_column=True,
    )
    obs = jax.random.normal(jax.random.key(0), (12, 6))
    obs = jnp.concatenate([obs, jnp.ones((12, 1)), jnp.zeros((12, 1))], -1)  # [12, 8]
    params = net.init(jax.random.key(1), obs)
    cast = cast_kernels(params, jnp.bfloat16)
    kernels = [
        leaf for path, leaf in jax.tree_util.tree_leaves_with_path(cast) if path[-1].key == "kernel"
    ]
    assert kernels and all(k.dtype == jnp.bfloat16 for k in kernels)
    assert all(
        leaf.dtype == jnp.float32
        for path, leaf in jax.tree_util.tree_leaves_with_path(cast)
        if path[-1].key != "kernel"
    )
    assert cast_kernels(params, jnp.float32) is params
    ref = jax.jit(lambda p: net.apply(p, obs))(params)
    for p in (params, cast):
        got = jax.jit(lambda q: net.apply(q, obs, method="act"))(p)
        tol = 0.0 if not shared else 1e-2  # one GEMM for the heads: other roundings
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(ref), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)
    if shared:  # the joint head built once gives the same outputs, bit for bit
        for p in (params, cast):
            a = jax.jit(lambda q: net.apply(q, obs, method="act"))(p)
            j = joint_head_params(p, spec)
            assert j[0].dtype == p["params"]["value_head"]["kernel"].dtype
            b = jax.jit(lambda q, j: net.apply(q, obs, None, j, method="act"))(p, j)
            for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
                assert np.array_equal(np.asarray(x), np.asarray(y))
    for method in ("act", "value", None):
        a = jax.jit(lambda q, m=method: net.apply(q, obs, method=m))(params)
        b = jax.jit(lambda q, m=method: net.apply(q, obs, method=m))(cast)
        equal = all(
            np.array_equal(np.asarray(x), np.asarray(y))
            for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
        )
        assert equal, method


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([[3], [1, 6], [4, 2, 5]]))
def test_log_prob_by_logsumexp_matches_log_softmax(seed, sizes):
    """The categorical log-probs (``logit[x] − logsumexp``) equal picking from the
    log-softmax, for random logits (padded classes included) and actions."""
    k1, k2 = jax.random.split(jax.random.key(seed))
    kmax = max(sizes)
    logits = 3.0 * jax.random.normal(k1, (5, len(sizes), kmax))
    pad = jnp.arange(kmax)[None, :] >= jnp.asarray(sizes)[:, None]
    logits = jnp.where(pad, -1e9, logits)
    dist = MultiCategorical(logits)
    x = dist.sample(k2)
    ref = np.take_along_axis(
        np.asarray(jax.nn.log_softmax(logits, -1)), np.asarray(x)[..., None], -1
    )[..., 0].sum(-1)
    np.testing.assert_allclose(np.asarray(dist.log_prob(x)), ref, rtol=1e-5, atol=1e-5)
    cat = Categorical(logits[:, 0, :])
    ref0 = np.take_along_axis(
        np.asarray(jax.nn.log_softmax(logits[:, 0], -1)), np.asarray(x)[:, :1], -1
    )[:, 0]
    np.testing.assert_allclose(np.asarray(cat.log_prob(x[:, 0])), ref0, rtol=1e-5, atol=1e-5)
