"""The env-stepping benchmark's random actions (`experiments.benchmarks.random_actions`):
Philox against Random123's known answers and a NumPy reference, the Pallas kernel (in
interpret mode, and lowered to Triton) against its XLA form, and the policy against the
spaces' contract."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdrive
from experiments.benchmarks import random_actions
from jaxdrive import MultiDiscrete
from tests.toy_envs import Counter


def _philox_numpy(key_data, counters):
    """Philox-4x32-10 of the counters ``(q, 0, 0, 0)``, in NumPy (an independent
    reference, itself checked against Random123's published known answers)."""
    m = np.uint64(0xFFFFFFFF)
    k0, k1 = (np.uint64(int(v)) for v in np.asarray(key_data))
    c = [counters.astype(np.uint64)] + [np.zeros(len(counters), np.uint64)] * 3
    for r in range(10):
        if r:
            k0, k1 = (k0 + np.uint64(0x9E3779B9)) & m, (k1 + np.uint64(0xBB67AE85)) & m
        p0 = c[0] * np.uint64(0xD2511F53)
        p1 = c[2] * np.uint64(0xCD9E8D57)
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & m, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & m]
    return c


def _draw_numpy(key, batch, nvec):
    """The module doc's draw in NumPy: flat component ``j`` is word ``j % 4`` of hash
    ``j // 4``, mapped to ``floor(w · n / 2^32)``."""
    total = int(np.prod(batch)) * len(nvec)
    words = _philox_numpy(jax.random.key_data(key), np.arange(-(-total // 4)))
    flat = np.stack(words, -1).reshape(-1)[:total]
    n = np.asarray(nvec, np.uint64)[np.arange(total) % len(nvec)]
    return ((flat * n) >> np.uint64(32)).astype(np.int64).reshape(*batch, len(nvec))


def test_philox_known_answers():
    """`philox4x32` gives Random123's published Philox-4x32-10 known answers (its
    kat_vectors), and the NumPy reference agrees."""
    kats = (
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    )
    for ctr, key, want in kats:
        u = [jnp.asarray([v], jnp.uint32) for v in (*key, *ctr)]
        got = random_actions.philox4x32(*u)
        assert [int(w[0]) for w in got] == list(want)
        ref = _philox_numpy(np.asarray(key), np.asarray([ctr[0]]))
        if ctr[1:] == (0, 0, 0):  # the reference takes counters (q, 0, 0, 0)
            assert [int(w[0]) for w in ref] == list(want)


#: (batch shape, nvec, dtype) per group: components that straddle hashes, one component,
#: sizes where C does not divide 4, a small dtype, a group of no samples.
GROUPS = (
    ((37, 3), (21, 21), jnp.int32),
    ((70,), (3, 5, 7), jnp.uint8),
    ((9,), (6,), jnp.int32),
    ((0, 4), (2, 2), jnp.int32),
)


def test_kernel_equals_xla_form_and_numpy_reference():
    """`multi_discrete_groups`: the Pallas kernel (interpret mode) gives the XLA form's
    values, both the NumPy reference's; each draw depends on its own key only."""
    keys = jax.random.split(jax.random.key(11), len(GROUPS))
    batches, nvecs, dtypes = zip(*GROUPS, strict=True)
    kernel = random_actions.multi_discrete_groups(keys, batches, nvecs, dtypes, use_pallas=True)
    xla = random_actions.multi_discrete_groups(keys, batches, nvecs, dtypes, use_pallas=False)
    for i, (batch, nvec, dtype) in enumerate(GROUPS):
        assert kernel[i].shape == (*batch, len(nvec)) and kernel[i].dtype == dtype
        np.testing.assert_array_equal(np.asarray(kernel[i]), np.asarray(xla[i]))
        np.testing.assert_array_equal(np.asarray(xla[i]), _draw_numpy(keys[i], batch, nvec))
        alone = random_actions.multi_discrete_groups(keys[i : i + 1], [batch], [nvec], [dtype])
        np.testing.assert_array_equal(np.asarray(alone[0]), np.asarray(xla[i]))


def test_draw_is_uniform_over_the_product():
    """Every (a, b) of 3 × 5 equally likely (chi-square; the XLA form, the kernel's values)."""
    nvec, n = (3, 5), 60_000
    (x,) = random_actions.multi_discrete_groups(
        jax.random.split(jax.random.key(7), 1), [(n,)], [nvec], [jnp.int32], use_pallas=False
    )
    counts = np.zeros(nvec)
    np.add.at(counts, (np.asarray(x[:, 0]), np.asarray(x[:, 1])), 1)
    expected = n / np.prod(nvec)
    assert float(np.sum((counts - expected) ** 2 / expected)) < 54.6  # 14 dof: P = 1e-6


def test_bad_draws_raise():
    key = jax.random.key(0)
    one = ([(3,)], [(2, 2)], [jnp.int32])
    with pytest.raises(ValueError, match=r"a \[P\] typed key array"):
        random_actions.multi_discrete_groups(key, *one)
    with pytest.raises(ValueError, match="threefry2x32 keys"):
        random_actions.multi_discrete_groups(jax.random.key(0, impl="rbg")[None], *one)
    with pytest.raises(ValueError, match="one batch shape, nvec and dtype per key"):
        random_actions.multi_discrete_groups(jax.random.split(key), *one)
    with pytest.raises(ValueError, match="bad draw"):
        random_actions.multi_discrete_groups(key[None], [(3,)], [(2, 0)], [jnp.int32])


class _Multi(Counter):
    def action_space(self, group):
        return MultiDiscrete([3, 5, 7]) if group == "red" else MultiDiscrete([21, 21])


def test_random_policy_one_kernel_for_all_groups():
    """Groups of `MultiDiscrete` spaces: one kernel launch per step for every group (also
    with a group of no agents), the values of `multi_discrete_groups` with the groups'
    keys (given as one key or already split), in each space."""
    key = jax.random.key(8)
    for num_red in (3, 0):
        env = _Multi(num_red=num_red, num_blue=5)
        obs = {g: jnp.zeros((13, env.num_agents(g), 2)) for g in env.groups}
        policy = random_actions.random_policy(env, use_pallas=True)  # interpret mode here
        jaxpr = str(jax.make_jaxpr(policy)(key, obs))
        assert jaxpr.count("pallas_call") == 1
        acts = jax.jit(policy)(key, obs)
        keys = jax.random.split(key)
        want = random_actions.multi_discrete_groups(
            keys,
            [(13, env.num_agents(g)) for g in env.groups],
            [env.action_space(g).nvec for g in env.groups],
            [jnp.int32] * 2,
            use_pallas=False,
        )
        given = policy(keys, obs)
        for g, w in zip(env.groups, want, strict=True):
            np.testing.assert_array_equal(np.asarray(acts[g]), np.asarray(w))
            np.testing.assert_array_equal(np.asarray(given[g]), np.asarray(w))
            assert bool(env.action_space(g).contains(acts[g]))


def test_random_policy_falls_back_to_the_spaces_draws():
    """Other spaces, or other keys than threefry: `jaxdrive.random_policy` itself."""
    env = Counter(num_red=2, num_blue=3)  # Discrete spaces
    assert random_actions.random_policy(env) is jaxdrive.random_policy(env)
    multi = _Multi(num_red=2, num_blue=3)
    obs = {g: jnp.zeros((4, multi.num_agents(g), 2)) for g in multi.groups}
    rbg = jax.random.key(3, impl="rbg")
    got = random_actions.random_policy(multi)(rbg, obs)
    want = jaxdrive.random_policy(multi)(rbg, obs)
    for g in multi.groups:
        np.testing.assert_array_equal(np.asarray(got[g]), np.asarray(want[g]))


def test_kernel_lowers_to_triton():
    """The kernel with its inline PTX multiplies, traced as on a GPU (``interpret=False``)
    and lowered for CUDA on this machine: one Triton call for all groups."""
    keys = jax.random.split(jax.random.key(0), 2)

    def draws(keys):
        return random_actions.multi_discrete_groups(
            keys, [(3, 4), (3, 40)], [(3, 5, 7), (21, 21)], [jnp.int32] * 2,
            use_pallas=True, interpret=False,
        )  # fmt: skip

    text = jax.jit(draws).trace(keys).lower(lowering_platforms=("cuda",)).as_text()
    assert text.count("__gpu$xla.gpu.triton") == 1
