"""Checkpoints (jaxdrive.checkpoint): exact round trips of runner-state-like pytrees
(optax states, raw and typed PRNG keys, mixed dtypes), retention, atomic steps, errors,
and the digest that catches damaged array files (with fallback to an older step)."""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
from flax import struct

from jaxdrive.checkpoint import (
    Checkpointer,
    CheckpointError,
    config_hash,
    latest_step,
    placed,
    state_digest,
)


@struct.dataclass
class Runner:
    params: dict  # {"dense": {"kernel": [3, 4], "bias": [4]}}
    opt_state: object
    key: jax.Array  # uint32[2]
    typed_keys: jax.Array  # key<fry>[5]
    one_key: jax.Array  # key<fry>[]
    env: dict  # mixed dtypes
    iteration: jax.Array  # [] int32


@jax.jit
def make_state(seed: jax.Array) -> Runner:
    """A runner-state-like pytree whose every leaf depends on ``seed`` (traced)."""
    k = jax.random.PRNGKey(seed)
    k1, k2, k3 = jax.random.split(k, 3)
    params = {
        "dense": {"kernel": jax.random.normal(k1, (3, 4)), "bias": jax.random.normal(k2, (4,))}
    }
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))
    opt_state = tx.init(params)
    # take two steps so the Adam moments and count are non-trivial
    for _ in range(2):
        grads = jax.tree.map(lambda p: p * 0.5 + seed, params)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
    env = {
        "pos": jax.random.uniform(k3, (2, 3, 2)),
        "half": jnp.arange(4, dtype=jnp.bfloat16) * seed,
        "done": jnp.stack([jnp.bool_(True), jnp.bool_(False), seed % 2 == 0]),
        "t": jnp.arange(3, dtype=jnp.int32) + seed,
    }
    return Runner(
        params=params,
        opt_state=opt_state,
        key=k,
        typed_keys=jax.random.split(jax.random.key(seed), 5),
        one_key=jax.random.key(seed + 100),
        env=env,
        iteration=(7 * seed).astype(jnp.int32),
    )


def assert_same(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            assert jax.random.key_impl(x) == jax.random.key_impl(y)
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_round_trip_exact(tmp_path):
    state = make_state(jnp.int32(3))
    with Checkpointer(tmp_path / "ck", max_to_keep=2) as ckpt:
        ckpt.save(12, state, {"iteration": 12, "env_steps": 1200, "note": "x"})
        # into a concrete target of the same structure (other values)
        restored, meta = ckpt.restore(make_state(jnp.int32(4)))
        assert_same(restored, state)
        assert meta == {"iteration": 12, "env_steps": 1200, "note": "x", "step": 12}
        # into an abstract target
        restored2, _ = ckpt.restore(jax.eval_shape(lambda: make_state(jnp.int32(5))))
        assert_same(restored2, state)
        # the restored keys still work as keys, giving the same numbers
        np.testing.assert_array_equal(
            jax.random.uniform(restored.typed_keys[2]), jax.random.uniform(state.typed_keys[2])
        )
        assert ckpt.restore_metadata()["env_steps"] == 1200


def test_placed_fresh_state_lowers_as_a_restored_one(tmp_path):
    """A program jitted on a restored state lowers to the same module as on a `placed`
    fresh one (so a resume finds the first run's programs in the compilation cache),
    and not as on the fresh state itself; placing keeps every value."""
    fresh = make_state(jnp.int32(3))
    with Checkpointer(tmp_path / "ck") as ckpt:
        ckpt.save(1, fresh, {})
        restored, _ = ckpt.restore(make_state(jnp.int32(4)))
    step = jax.jit(lambda s: jax.tree.map(lambda x: x, s.replace(iteration=s.iteration + 1)))
    text = step.lower(restored).as_text()
    assert step.lower(placed(fresh)).as_text() == text != step.lower(fresh).as_text()
    assert_same(placed(fresh), fresh)


def test_retention_latest_and_atomic_steps(tmp_path):
    d = tmp_path / "ck"
    with Checkpointer(d, max_to_keep=2) as ckpt:
        for step in (1, 2, 3, 4, 5):
            ckpt.save(step, {"w": jnp.full((2,), float(step))}, {"iteration": step})
        assert ckpt.all_steps() == [4, 5]
        assert ckpt.latest_step() == 5
        old, meta = ckpt.restore({"w": jnp.zeros(2)}, step=4)
        assert meta["iteration"] == 4 and old["w"].tolist() == [4.0, 4.0]
    assert sorted(os.listdir(d)) == ["4", "5"]  # no temporary folder left behind
    # a save that crashed midway leaves an unfinished temporary folder: never "latest"
    tmp = d / "6.orbax-checkpoint-tmp-1234"
    (tmp / "state").mkdir(parents=True)
    assert latest_step(d) == 5
    with Checkpointer(d, max_to_keep=2) as ckpt:
        assert ckpt.latest_step() == 5
        restored, _ = ckpt.restore({"w": jnp.zeros(2)})
        assert restored["w"].tolist() == [5.0, 5.0]
        assert tmp.exists()  # reading writes nothing
        ckpt.save(6, {"w": jnp.full((2,), 6.0)}, {"iteration": 6})
    assert not tmp.exists()  # cleaned up when the manager opened for writing
    assert sorted(os.listdir(d)) == ["5", "6"]
    assert latest_step(tmp_path / "missing") is None


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="max_to_keep must be >= 1"):
        Checkpointer(tmp_path / "a", max_to_keep=0)
    with Checkpointer(tmp_path / "b") as ckpt:
        with pytest.raises(FileNotFoundError, match="no checkpoint found in"):
            ckpt.restore({"w": jnp.zeros(2)})
        ckpt.save(3, {"w": jnp.ones(2)})
        with pytest.raises(FileNotFoundError, match=r"no checkpoint for step 9 .* \[3\]"):
            ckpt.restore({"w": jnp.zeros(2)}, step=9)
        with pytest.raises(ValueError, match="does not fit the target state structure"):
            ckpt.restore({"w": jnp.zeros(2), "extra": jnp.zeros(1)})
        with pytest.raises(ValueError, match="step must be >= 0"):
            ckpt.save(-1, {"w": jnp.ones(2)})


def test_config_hash():
    c = ml_collections.ConfigDict({"lr": 1e-3, "algo": {"gamma": 0.99}, "run": {"k": 10}})
    h = config_hash(c.to_dict())  # plain data: callers convert a ConfigDict first
    assert h == config_hash({"algo": {"gamma": 0.99}, "lr": 1e-3, "run": {"k": 99}})
    assert h != config_hash({"algo": {"gamma": 0.98}, "lr": 1e-3})
    assert config_hash(None) is None


def test_digest_sees_every_single_bit():
    """Flipping any one bit of any leaf (each dtype width, a typed key) changes the
    digest of that leaf only; equal trees give equal digests."""
    rng = np.random.default_rng(0)
    tree = {
        "f32": rng.normal(size=(3, 2)).astype(np.float32),
        "bf16": jnp.asarray(rng.normal(size=(4,)), jnp.bfloat16),
        "i8": rng.integers(-5, 5, size=(5,)).astype(np.int8),
        "b": np.array([True, False, True]),
        "u32": rng.integers(0, 2**32, size=(2,), dtype=np.uint32),
        "key": jax.random.key(3),
    }
    base = state_digest(tree)
    assert base == state_digest(jax.tree.map(lambda x: x, tree))
    assert base[0].startswith("bool[3]:")  # leaves in tree order with dtype and shape
    leaves, treedef = jax.tree.flatten(tree)
    for i, leaf in enumerate(leaves):
        is_key = jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key)
        data = jax.random.key_data(leaf) if is_key else leaf
        raw = np.array(data).copy()
        view = raw.reshape(-1).view(np.uint8)
        for byte in range(view.size):
            for bit in range(8):
                if raw.dtype == np.bool_ and bit:
                    continue  # a bool's other bits are not part of its value
                view[byte] ^= 1 << bit
                new = jax.random.wrap_key_data(jnp.asarray(raw)) if is_key else raw
                got = state_digest(
                    jax.tree.unflatten(treedef, [*leaves[:i], new, *leaves[i + 1 :]])
                )
                view[byte] ^= 1 << bit
                assert got[i] != base[i] and got[:i] + got[i + 1 :] == base[:i] + base[i + 1 :]


def _array_file(step_dir) -> str:
    """The largest file of the data that restoring reads (``state/d/``, see
    tests/run_folder_util.py)."""
    folder = os.path.join(step_dir, "state", "d")
    return max((os.path.join(folder, f) for f in os.listdir(folder)), key=os.path.getsize)


# orbax leaves the read coroutines of a failed restore unawaited: not our error
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_newest_falls_back(tmp_path, damage):
    """A truncated or same-size bit-flipped array file in the newest step: `restore`
    raises (no silent wrong values), `restore_newest` restores the previous step and
    names the skipped one; with every step damaged, one error names the folder."""
    big = lambda v: {"w": jnp.arange(4096.0) * v, "k": jnp.full((64,), v, jnp.int32)}
    d = tmp_path / "ck"
    with Checkpointer(d, max_to_keep=None) as ckpt:
        for step in (1, 2):
            ckpt.save(step, big(step), {"iteration": step})
    for step in (2, 1):
        path = _array_file(d / str(step))
        data = bytearray(open(path, "rb").read())
        if damage == "truncate":
            data = data[: len(data) // 2]
        else:
            mid = len(data) // 2
            data[mid : mid + 4] = bytes(b ^ 0x5A for b in data[mid : mid + 4])
        open(path, "wb").write(bytes(data))
        with Checkpointer(d) as ckpt:
            with pytest.raises(Exception):  # noqa: B017 (orbax's read error or ours)
                ckpt.restore(big(0), step=step)
            if step == 2:
                got = ckpt.restore_newest(big(0))
                assert got.step == 1 and [s for s, _ in got.skipped] == [2]
                np.testing.assert_array_equal(got.state["w"], big(1)["w"])
            else:
                with pytest.raises(CheckpointError, match=r"ck: no checkpoint restores \(2: "):
                    ckpt.restore_newest(big(0))


def test_wrong_values_are_refused(tmp_path):
    """Arrays that read back without error but differ from what was saved (the silent
    case: an Adam moment off by 3e33 after a flipped byte) fail the digest check: the
    step is refused and `restore_newest` falls back, naming it."""
    d = tmp_path / "ck"
    with Checkpointer(d, max_to_keep=None) as ckpt:
        ckpt.save(1, {"w": jnp.ones(3)}, {"iteration": 1})
        ckpt.save(2, {"w": jnp.full(3, 2.0)}, {"iteration": 2})
    path = d / "2" / "metadata" / "metadata"
    meta = json.loads(path.read_text())
    assert meta["digest"]["leaves"] == state_digest({"w": jnp.full(3, 2.0)})
    # the saved digest of other values stands for arrays that changed on disk
    meta["digest"]["leaves"] = state_digest({"w": jnp.array([2.0, 2.0, 3e33])})
    path.write_text(json.dumps(meta))
    with Checkpointer(d) as ckpt:
        with pytest.raises(CheckpointError, match=r"checkpoint 2: array digest mismatch"):
            ckpt.restore({"w": jnp.zeros(3)})
        with pytest.raises(CheckpointError, match="digest mismatch"):
            ckpt.verify(2)
        got = ckpt.restore_newest({"w": jnp.zeros(3)})
        assert got.step == 1 and "digest mismatch" in got.skipped[0][1]
        assert ckpt.verify(1)["iteration"] == 1


def test_zero_size_leaves_round_trip(tmp_path):
    """Empty arrays (MJX's ``act`` of a model without activations) are not stored: they
    come back from the target's shape and dtype, and the digest covers the rest."""
    state = {
        "x": jnp.arange(6.0).reshape(2, 3),
        "act": jnp.zeros((4, 0), jnp.float32),
        "nested": {"empty": jnp.zeros((0,), jnp.int32), "key": jax.random.key(3)},
    }
    with Checkpointer(tmp_path / "ckpt") as ckpt:
        ckpt.save(5, state, {"iteration": 5})
        restored, meta = ckpt.restore(jax.tree.map(jnp.zeros_like, state))
        assert ckpt.verify(5)["iteration"] == 5
    assert meta["iteration"] == 5
    np.testing.assert_array_equal(restored["x"], state["x"])
    assert restored["act"].shape == (4, 0) and restored["act"].dtype == jnp.float32
    assert restored["nested"]["empty"].shape == (0,)
    np.testing.assert_array_equal(
        jax.random.key_data(restored["nested"]["key"]), jax.random.key_data(state["nested"]["key"])
    )
