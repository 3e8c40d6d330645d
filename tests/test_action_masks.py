"""Action masks end to end (`jaxdrive.types.TimeStep.action_mask`): masked categorical
heads never sample a forbidden action and their log-probs/entropies are those of the
restricted distribution; `check_env` rejects broken masks; auto-reset carries masks;
PPO trains on a masked env without ever taking a forbidden action; an all-True mask
changes nothing."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import algorithms
import jaxdrive
from algorithms.common.config import base_config, drop_ppo_only_keys
from algorithms.common.networks import (
    NEG_LOGIT,
    ActionSpec,
    Categorical,
    MultiCategorical,
    log_prob_and_entropy,
    mask_actions,
    split_dims,
)
from jaxdrive import Discrete, MultiDiscrete
from jaxdrive.testing import EnvCheckError, check_env
from tests.toy_envs import MaskedChoice, MaskedChoiceObs

FAST = {"xla_backend_optimization_level": 0}
B, DRAWS = 3, 64  # agents per example, samples per agent


# ----------------------------------------------------------------------------------------
# Masked heads: never a forbidden sample; log-prob and entropy of the restricted law
# ----------------------------------------------------------------------------------------
@functools.partial(jax.jit, static_argnums=0)
def _masked_head(spec, logits, mask, key):
    """Draws, mode, fused log-prob/entropy of the draws and its logit gradient."""

    def dist_of(lg):
        d = Categorical(lg) if spec.kind == "discrete" else MultiCategorical(
            split_dims(lg, spec.sizes, NEG_LOGIT)
        )  # fmt: skip
        return mask_actions(d, mask, spec)

    dist = dist_of(logits)
    draws = jax.vmap(dist.sample)(jax.random.split(key, DRAWS))  # [DRAWS, B(, D)]

    def total(lg):
        lp, ent = log_prob_and_entropy(dist_of(lg), draws[0])
        return jnp.sum(lp + ent), (lp, ent)

    grad, (lp, ent) = jax.grad(total, has_aux=True)(logits)
    return draws, dist.mode(), lp, ent, grad, dist.log_prob(draws[0]), dist.entropy()


def _allowed(mask: np.ndarray, x: np.ndarray, sizes: tuple[int, ...]) -> np.ndarray:
    """``mask [..., B, K]`` (broadcast) at actions ``x [..., B, D]``: ``[..., B, D]``."""
    cols = x + np.cumsum((0, *sizes[:-1]))  # [..., B, D] columns of the flat mask
    return np.take_along_axis(np.broadcast_to(mask, (*x.shape[:-1], mask.shape[-1])), cols, -1)


@settings(max_examples=12, deadline=None)
@given(
    sizes=st.sampled_from([(5,), (4, 1, 3)]),
    seed=st.integers(0, 2**31 - 1),
    data=st.data(),
)
def test_masked_actions_are_never_sampled(sizes, seed, data):
    space = Discrete(sizes[0]) if len(sizes) == 1 else MultiDiscrete(list(sizes))
    spec = ActionSpec.from_space(space)
    k = sum(sizes)
    bits = data.draw(st.lists(st.booleans(), min_size=B * k, max_size=B * k))
    mask = np.asarray(bits).reshape(B, k)
    offsets = np.cumsum((0, *sizes[:-1]))
    for d, n in enumerate(sizes):  # at least one allowed action per agent and dimension
        keep = data.draw(st.lists(st.integers(0, n - 1), min_size=B, max_size=B))
        mask[np.arange(B), offsets[d] + np.asarray(keep)] = True
    rng = np.random.default_rng(seed)
    # forbidden classes get the largest logits: any leak of the mask would show
    logits = rng.uniform(-20, 20, (B, k)).astype(np.float32) + np.where(mask, 0.0, 1e6)
    logits = logits.astype(np.float32)
    draws, mode, lp, ent, grad, lp_ref, ent_ref = jax.device_get(
        _masked_head(spec, jnp.asarray(logits), jnp.asarray(mask), jax.random.key(seed))
    )
    if len(sizes) == 1:
        draws, mode = draws[..., None], mode[..., None]
    assert _allowed(mask, draws, sizes).all()
    assert _allowed(mask, mode, sizes).all()
    # Independent reference: softmax over the allowed classes only (float64).
    want_lp, want_ent = np.zeros(B), np.zeros(B)
    for d, n in enumerate(sizes):
        cols = slice(offsets[d], offsets[d] + n)
        lg = np.where(mask[:, cols], logits[:, cols].astype(np.float64), -np.inf)
        logp = lg - np.logaddexp.reduce(lg, axis=-1, keepdims=True)
        p = np.exp(logp)
        want_ent -= np.sum(p * np.where(mask[:, cols], logp, 0.0), -1)
        want_lp += logp[np.arange(B), draws[0][:, d]]
    np.testing.assert_allclose(lp, want_lp, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(ent, want_ent, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(lp_ref, want_lp, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(ent_ref, want_ent, rtol=1e-5, atol=1e-4)
    # Gradients stay finite (no -inf) and never reach a masked logit.
    assert np.all(np.isfinite(grad))
    assert np.all(grad[~mask] == 0.0)


def test_mask_actions_none_is_the_unmasked_head_and_box_is_refused():
    spec = ActionSpec.from_space(MultiDiscrete([2, 3]))
    dist = MultiCategorical(jnp.zeros((1, 2, 3)))
    assert mask_actions(dist, None, spec) is dist
    with pytest.raises(ValueError, match="action masks are for Discrete and MultiDiscrete"):
        mask_actions(dist, jnp.ones((1, 2), bool), ActionSpec("gaussian", (2,), (0, 0), (1, 1)))


# ----------------------------------------------------------------------------------------
# The env contract: check_env and auto-reset
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("env", [MaskedChoiceObs(), MaskedChoice(multi=True)], ids=str)
def test_check_env_accepts_masks(env):
    assert check_env(env, num_steps=6, num_envs=2)["episodes"] >= 1


@pytest.mark.parametrize(
    "mode, multi, message",
    [
        ("int", False, r"reset: action_mask\['agent'\] is int8\[2, 4\], expected bool\[2, 4\]"),
        ("shape", True, r"reset: action_mask\['agent'\] is bool\[2, 8\], expected bool\[2, 7\]"),
        ("empty", False, r"reset: action_mask\['agent'\] allows no action for agent \(0,\)"),
        ("empty", True, r"action_mask\['agent'\] allows no action in dimension 1 for agent"),
        ("reset_only", False, r"action_mask: present after reset but not after step"),
    ],
)
def test_check_env_rejects_bad_masks(mode, multi, message):
    with pytest.raises(EnvCheckError, match=r"check_env\(MaskedChoice.*" + message):
        check_env(MaskedChoice(mask_mode=mode, multi=multi), num_steps=6, num_envs=2)


def _expected_mask(obs: np.ndarray) -> np.ndarray:
    """The mask `MaskedChoice(multi=True)` gives for its one-hot observations."""
    phase = obs.argmax(-1)[..., None]
    return np.concatenate([np.arange(4) != phase, np.arange(3) != phase % 3], -1)


@pytest.mark.parametrize("cls", [MaskedChoice, MaskedChoiceObs])  # branch / select reset
def test_vectorize_auto_reset_carries_masks(cls):
    env = cls(multi=True, length=3)
    out = jaxdrive.rollout(
        env, jaxdrive.random_policy(env), jax.random.key(0), num_envs=4, num_steps=10
    )
    ts = jax.device_get(out.timesteps)
    assert ts.done.sum() >= 8  # every env ended episodes
    np.testing.assert_array_equal(ts.action_mask["agent"], _expected_mask(ts.obs["agent"]))


def test_auto_reset_wrapper_carries_masks():
    env = jaxdrive.wrappers.AutoReset(MaskedChoice(multi=True, length=2))

    @jax.jit
    def run(key):
        state, ts = env.reset(key)

        def body(state, k):
            state, ts = env.step(k, state, env.sample_actions(k))
            return state, ts

        return jax.lax.scan(body, state, jax.random.split(key, 8))[1]

    ts = jax.device_get(run(jax.random.key(1)))
    assert ts.done.sum() == 4
    np.testing.assert_array_equal(ts.action_mask["agent"], _expected_mask(ts.obs["agent"]))


# ----------------------------------------------------------------------------------------
# PPO on a masked env
# ----------------------------------------------------------------------------------------
def _trainer(env, iterations: int, num_envs: int = 8, num_steps: int = 16, a2c: bool = False):
    c = base_config("ppo", "masked_choice")
    c.num_envs, c.num_steps = num_envs, num_steps
    c.total_env_steps = num_envs * num_steps * iterations
    c.algo.gamma = 0.5
    c.policies.agent.hidden_sizes = (32,)
    c.policies.agent.lr = 1e-2
    if a2c:
        drop_ppo_only_keys(c)
    return algorithms.make_train(c, env, env.default_params)


@pytest.mark.parametrize("env", [MaskedChoiceObs(), MaskedChoice(multi=True)], ids=str)
def test_ppo_learns_and_never_takes_a_masked_action(env):
    trainer = _trainer(env, iterations=10)
    rs, m = jax.jit(trainer, compiler_options=FAST)(jax.random.key(0))
    ret = np.asarray(m["episode_return/agent"])
    best = env.length * (2 if env.multi else 1)  # the best unmasked return
    # A masked action pays FORBIDDEN_REWARD: any one in any iteration lifts its mean
    # return (over at most 8·16/4 = 32 episodes) far above `best`.
    assert np.all(ret <= best), ret
    # Uniform over the allowed actions earns 1/3 (dimension 1: 1/2) per step.
    chance = env.length * (1 / 3 + (0.5 if env.multi else 0.0))
    assert ret[0] < chance + 0.5 and ret[-3:].mean() > 0.9 * best, ret
    # Trainer.act honours masks too, sampling and taking the mode.
    params = trainer.get_params(rs)
    _, ts = jaxdrive.vectorize(env, 16).reset(jax.random.key(5))
    sizes = env.action_space("agent").nvec if env.multi else (env.num_choices,)
    for det in (False, True):
        a = trainer.act(params, jax.random.key(6), ts.obs, det, action_mask=ts.action_mask)
        a = np.asarray(a["agent"]).reshape(16, env.agents, len(sizes))
        assert _allowed(np.asarray(ts.action_mask["agent"]), a, tuple(sizes)).all()


def test_all_true_mask_equals_no_mask():
    """The masked code path with every action allowed computes exactly the unmasked run
    (``where(True, logits, ·)`` is the identity; the stored mask changes no reduction)."""
    runs = {}
    for mode in ("none", "all"):
        trainer = _trainer(MaskedChoice(mask_mode=mode), iterations=3, num_envs=4, num_steps=8)
        runs[mode] = jax.device_get(jax.jit(trainer, compiler_options=FAST)(jax.random.key(2)))
    (rs_none, m_none), (rs_all, m_all) = runs["none"], runs["all"]
    assert rs_none.timestep.action_mask is None and rs_all.timestep.action_mask is not None
    jaxdrive.testing.assert_trees_equal(m_all, m_none, "metrics, all-True mask vs none")
    jaxdrive.testing.assert_trees_equal(
        rs_all.policies, rs_none.policies, "policy states, all-True mask vs none"
    )


def test_a2c_learner_uses_the_rollout_masks():
    """A2C takes one gradient step at the behaviour policy: the learner's log-probs
    equal the rollout's (approx_kl 0) only if it masks as acting did, and the entropy
    of a near-uniform masked policy is at most log 3 + log 2 (3 and 2 allowed actions;
    unmasked it would be near log 4 + log 3)."""
    trainer = _trainer(MaskedChoice(multi=True), iterations=2, num_envs=4, num_steps=8, a2c=True)
    _, m = jax.device_get(jax.jit(trainer, compiler_options=FAST)(jax.random.key(3)))
    np.testing.assert_allclose(m["loss/agent/approx_kl"], 0.0, atol=1e-6)
    assert np.all(m["loss/agent/entropy"] <= np.log(3) + np.log(2) + 1e-5), m["loss/agent/entropy"]
    assert np.all(m["loss/agent/entropy"] > 1.5)


def test_evaluation_honours_masks():
    """`experiments.common.evaluate_policy` (the scripts' evaluation) passes each step's
    masks to the policy: an untrained policy, sampling, never earns a masked action's
    reward."""
    from experiments.common import evaluate_policy

    env = MaskedChoice()
    trainer = _trainer(env, iterations=1)
    params = trainer.get_params(trainer.init(jax.random.key(0)))
    for det in (False, True):
        res = evaluate_policy(
            env, env.default_params, trainer, params, jax.random.key(1), episodes=8,
            deterministic=det,
        )  # fmt: skip
        assert res["returns"]["agent"]["max"] <= env.length, res
