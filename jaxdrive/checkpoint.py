"""Checkpoints of a training run with orbax-checkpoint, verified on restore.

A checkpoint is one step folder ``<directory>/<step>/`` (``step`` = iterations done)
holding two items: ``state``, the runner state pytree (params, optimiser states, env
state, RNG, iteration), and ``metadata``, a small JSON dict (iteration, env steps,
config hash, digest, ...). Orbax writes each step into a temporary folder and renames
it when complete, so a crash mid-save never leaves a half-written step that
`latest_step` would pick; leftover temporary folders are removed when a manager opens
the folder for writing.

**Digest.** `save` stores a digest of every array of the state in the metadata and
`restore` recomputes it from the restored arrays: a truncated or bit-flipped array file
that still decodes (or decodes to the fill value) is detected instead of silently
restoring wrong numbers. Per leaf, the array's bits are read as ``uint32`` words
``w_i`` (narrower types widened, 64-bit ones split) and two sums are taken modulo
``2^32``: ``Σ w_i·m_i`` and ``Σ (w_i ⊕ c_i)·n_i`` with odd, index-dependent multipliers
``m_i, n_i``. A change of ``k`` bits of one word changes each sum by an odd multiple of
a power of two below ``2^32``, never ``0``: every single-word change is caught, and an
arbitrary corruption escapes both sums with probability about ``2^-64``. Modular sums
do not depend on the order of the reduction, so the digest is the same for any
sharding; it is computed on the device (one small jitted reduction per save).
`restore_newest` falls back to older steps when the newest does not restore or verify.

Typed PRNG keys (``jax.random.key``) are stored as their raw ``uint32`` data and
re-wrapped on restore, so runner states may hold either kind of key.

Only the stable orbax API is used (``CheckpointManager``, ``args.Composite``,
``args.StandardSave/StandardRestore``, ``args.JsonSave/JsonRestore``). Saves are
synchronous: the host loop donates the runner state to the next compiled chunk, so
its buffers must not be read by a background thread after `save` returns.

Example:
    >>> import jax.numpy as jnp, tempfile
    >>> ckpt = Checkpointer(tempfile.mkdtemp(), max_to_keep=2)
    >>> ckpt.save(1, {"w": jnp.ones(3)}, {"iteration": 1})
    >>> state, meta = ckpt.restore({"w": jnp.zeros(3)})
    >>> meta["iteration"], state["w"].tolist()
    (1, [1.0, 1.0, 1.0])
    >>> ckpt.close()
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import json
import logging
import os
import re
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "CheckpointError",
    "Checkpointer",
    "Restored",
    "config_hash",
    "latest_step",
    "placed",
    "read_metadata",
    "state_digest",
    "step_folders",
]

_ITEMS = ("state", "metadata")
_DIGEST_KIND = "wsum32x2"  # the digest's name in the metadata (see the module doc)


class CheckpointError(ValueError):
    """A checkpoint folder holds no checkpoint that restores and verifies."""


def _is_key(x: Any) -> bool:
    dtype = getattr(x, "dtype", None)
    return dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key)


def _keys_to_data(tree: Any) -> Any:
    """Replaces typed PRNG key leaves by their raw ``uint32`` data."""
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def _abstract(x: Any) -> Any:
    """The restore target of one leaf: shape, dtype and (for jax arrays) sharding."""
    if _is_key(x):
        if isinstance(x, jax.Array):
            x = jax.random.key_data(x)
        else:  # an abstract typed key: its raw data's shape, no sharding known
            x = jax.eval_shape(jax.random.key_data, x)
    if isinstance(x, jax.ShapeDtypeStruct):
        return x
    if isinstance(x, jax.Array):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    arr = np.asarray(x)
    return jax.ShapeDtypeStruct(arr.shape, arr.dtype)


def _is_empty(x: Any) -> bool:
    shape = getattr(x, "shape", None)
    return shape is not None and 0 in tuple(shape)


def _drop_empty(tree: Any) -> Any:
    """``tree`` with its zero-size leaves (e.g. MuJoCo MJX's ``act`` of a model without
    activations) replaced by ``None``: orbax cannot store them, and their content is
    known from the restore target's shape and dtype."""
    return jax.tree.map(lambda x: None if _is_empty(x) else x, tree)


def _fill_empty(target: Any, restored: Any) -> Any:
    """``restored`` (saved by way of `_drop_empty`) in ``target``'s structure, with an
    empty array of the target's shape, dtype and sharding at each zero-size leaf."""
    leaves, treedef = jax.tree.flatten(target)
    it = iter(jax.tree.leaves(restored))
    out = []
    for t in leaves:
        if not _is_empty(t):
            out.append(next(it))
            continue
        a = _abstract(t)
        empty = np.zeros(a.shape, a.dtype)
        out.append(jax.device_put(empty, a.sharding) if a.sharding is not None else empty)
    return jax.tree.unflatten(treedef, out)


def _key_impl(x: Any) -> Any:
    if isinstance(x, jax.Array):
        return jax.random.key_impl(x)
    impl = getattr(x.dtype, "_impl", None)  # abstract typed key
    return impl if impl is not None else None


def _restore_keys(target: Any, restored: Any) -> Any:
    """Wraps raw key data back into typed keys where ``target`` holds typed keys."""

    def fix(t, r):
        if not _is_key(t):
            return r
        impl = _key_impl(t)
        return jax.random.wrap_key_data(r, impl=impl) if impl is not None else r

    return jax.tree.map(fix, target, restored)


def placed(tree: Any) -> Any:
    """``tree`` with every array committed to the sharding it has, as a restored
    checkpoint's arrays are. A program jitted on a fresh (uncommitted) state and on a
    restored one lowers to two different modules, so a resumed run would compile its
    programs again instead of finding the first run's in the persistent compilation
    cache; on a placed fresh state both lower alike. Copies nothing."""
    return jax.tree.map(
        lambda x: jax.device_put(x, x.sharding) if isinstance(x, jax.Array) else x, tree
    )


def config_hash(
    config: Any, *, ignore: tuple[str, ...] = ("run", "num_devices", "partitioner")
) -> str | None:
    """A short sha256 of the plain-data ``config`` (dicts, lists, scalars) without its
    top-level keys ``ignore``; ``None`` for ``None``. Callers convert a ConfigDict first.

    The text hashed is ``json.dumps`` with sorted keys (tuples count as lists, non-JSON
    leaves as their ``str``). ``ignore`` defaults to the ``run`` section (chunk sizes,
    checkpoint cadence, logging), ``num_devices`` and ``partitioner`` (results agree
    across device counts and partitioners to floating-point tolerance, so a run may
    resume on another number of devices):
    settings that do not change the numbers a run computes.
    """
    if config is None:
        return None
    if isinstance(config, dict):
        config = {k: v for k, v in config.items() if k not in ignore}
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ----- digest -----------------------------------------------------------------------------
def _words(x: jax.Array) -> jax.Array:
    """The bits of ``x`` as ``uint32 [n]`` (bool/8/16-bit widened, 64-bit split)."""
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        x = jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1)
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
    size = x.dtype.itemsize
    if size in (1, 2):
        x = jax.lax.bitcast_convert_type(x, jnp.dtype(f"uint{8 * size}")).astype(jnp.uint32)
    else:  # 4 bytes: one word; 8 bytes: a trailing axis of two words
        x = jax.lax.bitcast_convert_type(x, jnp.uint32)
    return x.reshape(-1)


def _leaf_digest(x: jax.Array) -> jax.Array:
    w = _words(x)
    i = jnp.arange(w.shape[0], dtype=jnp.uint32)
    m = i * jnp.uint32(0x9E3779B1) | jnp.uint32(1)
    n = (i ^ jnp.uint32(0x85EBCA6B)) * jnp.uint32(0xC2B2AE35) | jnp.uint32(1)
    c = i * jnp.uint32(0x27D4EB2F) + jnp.uint32(0x165667B1)
    s1 = jnp.sum(w * m, dtype=jnp.uint32)
    s2 = jnp.sum((w ^ c) * n, dtype=jnp.uint32)
    return jnp.stack([s1, s2])


@jax.jit
def _digest_words(leaves: list[jax.Array]) -> jax.Array:
    if not leaves:
        return jnp.zeros((0, 2), jnp.uint32)
    return jnp.stack([_leaf_digest(x) for x in leaves])


def state_digest(tree: Any) -> list[str]:
    """One 16-hex-digit digest per array leaf of ``tree`` (see the module doc), with the
    leaf's dtype and shape: ``["float32[3,4]:1a2b…", ...]``."""
    leaves = [jnp.asarray(x) for x in jax.tree.leaves(_keys_to_data(tree))]
    sums = np.asarray(jax.device_get(_digest_words(leaves)))
    return [
        f"{x.dtype}[{','.join(map(str, x.shape))}]:{int(a):08x}{int(b):08x}"
        for x, (a, b) in zip(leaves, sums, strict=True)
    ]


def _verify(step: int, state: Any, meta: dict[str, Any], any_order: bool = False) -> None:
    """Raises `CheckpointError` when ``state`` does not match ``meta``'s digest
    (``any_order``: as a multiset, for a state read back as nested dicts, whose leaf
    order is not the saved structure's)."""
    saved = meta.get("digest")
    if not isinstance(saved, dict) or saved.get("kind") != _DIGEST_KIND:
        return  # written without a digest: nothing to check against
    got = state_digest(state)
    want = saved.get("leaves")
    if any_order:
        got, want = sorted(got), sorted(want or [])
    if got != want:
        bad = [i for i, (a, b) in enumerate(zip(got, want or [], strict=False)) if a != b]
        where = f"leaf {bad[0]} of {len(got)}" if bad else f"{len(got)} vs {len(want or [])}"
        raise CheckpointError(f"checkpoint {step}: array digest mismatch ({where}): corrupted")


# ----- folders ----------------------------------------------------------------------------
def step_folders(directory: str | os.PathLike) -> list[int]:
    """The steps of the complete checkpoints in ``directory``, ascending, read from the
    folder names alone (integer-named folders holding a ``state`` item; orbax's
    temporary ``<step>.orbax-checkpoint-tmp-*`` folders are not integers)."""
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        return []
    return sorted(
        int(name)
        for name in os.listdir(directory)
        if name.isdigit() and os.path.isdir(os.path.join(directory, name, "state"))
    )


def latest_step(directory: str | os.PathLike) -> int | None:
    """The newest complete checkpoint step in ``directory`` without opening a manager."""
    steps = step_folders(directory)
    return steps[-1] if steps else None


def read_metadata(directory: str | os.PathLike, step: int) -> dict[str, Any]:
    """The metadata dict of ``step`` read as plain JSON (no orbax, nothing written).

    Raises ``OSError`` or ``ValueError`` (naming the file) when it is missing or damaged.
    """
    path = os.path.join(os.fspath(directory), str(int(step)), "metadata", "metadata")
    with open(path) as f:
        text = f.read()
    try:
        meta = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: not a JSON object")
    return meta


@dataclasses.dataclass
class Restored:
    """What `Checkpointer.restore_newest` found: the state and metadata of ``step`` and
    the newer steps it skipped, as ``[(step, reason)]``."""

    state: Any
    metadata: dict[str, Any]
    step: int
    skipped: list[tuple[int, str]]


#: `_reason` of a checkpoint whose state has another structure than the one restored into.
_OTHER_STRUCTURE = "its state has another structure than this config's"


def _reason(e: BaseException) -> str:
    """One short line for a failed read or write: the innermost cause, without the
    storage layer's specs; a long tensorstore message (the file in quotes, the OS cause
    last) becomes ``<file>: <cause>``; a state of another structure than the target's
    becomes `_OTHER_STRUCTURE`."""
    inner = e
    while inner.__cause__ is not None and inner.__cause__ is not inner:
        inner = inner.__cause__
    text = " ".join(str(inner).split())
    if "tree structures do not match" in text:
        return _OTHER_STRUCTURE
    text = re.split(r"\s*(?:See full TensorStore details|\[tensorstore_spec)", text)[0]
    quoted = re.search(r'"(/[^"]+)"', text)
    if len(text) > 160 and quoted:
        cause = re.sub(r"\s*\[os_error_code=[^\]]*\]$", "", text.rsplit(": ", 1)[-1])
        return f"{quoted.group(1)}: {cause}"
    name = type(inner).__name__
    return (text if name == "Exception" else f"{name}: {text}")[:160]


class _AbandonedReads(logging.Filter):
    """Drops asyncio's reports of reads abandoned after another read of the same
    restore failed (one per array of a damaged checkpoint, each with the array's
    whole tensorstore spec); the failure itself reaches `restore_newest`."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not text.startswith(
            ("Future exception was never retrieved", "Task exception was never retrieved")
        )


@contextlib.contextmanager
def _quiet_abandoned_reads() -> Iterator[None]:
    """While inside (and for the reads a garbage collection at its end frees), asyncio
    does not log the exceptions of reads abandoned by a failed restore."""
    log = logging.getLogger("asyncio")
    quiet = _AbandonedReads()
    log.addFilter(quiet)
    try:
        yield
    finally:
        gc.collect()
        log.removeFilter(quiet)


class Checkpointer:
    """Saves and restores ``(runner_state, metadata)`` pairs under ``directory``.

    Nothing is created or cleaned up in ``directory`` until the first `save`.

    Args:
      directory: the checkpoints folder (created on the first save when missing).
      max_to_keep: how many of the newest steps to keep (``None``: all).
    """

    def __init__(self, directory: str | os.PathLike, *, max_to_keep: int | None = 3):
        if max_to_keep is not None and int(max_to_keep) < 1:
            raise ValueError(f"max_to_keep must be >= 1 or None, got {max_to_keep}")
        self.directory = os.path.abspath(os.fspath(directory))
        self._max_to_keep = None if max_to_keep is None else int(max_to_keep)
        self._manager = None
        self._writable = False

    def _mgr(self, create: bool) -> Any:
        """The orbax manager, opened on first use (``create``: for writing, which also
        removes the temporary folders of interrupted saves)."""
        if create and self._manager is not None and not self._writable:
            self.close()  # opened for reading: reopen for writing
        if self._manager is None:
            import orbax.checkpoint as ocp

            if not create and not os.path.isdir(self.directory):
                raise FileNotFoundError(f"no checkpoint found in {self.directory}")
            options = ocp.CheckpointManagerOptions(
                max_to_keep=self._max_to_keep,
                create=create,
                cleanup_tmp_directories=create,
                enable_async_checkpointing=False,
            )
            self._manager = ocp.CheckpointManager(
                self.directory, options=options, item_names=_ITEMS
            )
            self._writable = create
        return self._manager

    # ----- queries ---------------------------------------------------------------------
    def all_steps(self) -> list[int]:
        """The steps of every complete checkpoint, ascending."""
        return step_folders(self.directory)

    def latest_step(self) -> int | None:
        """The newest complete step, or ``None`` when there is none."""
        steps = self.all_steps()
        return steps[-1] if steps else None

    # ----- save / restore --------------------------------------------------------------
    def save(self, step: int, state: Any, metadata: dict[str, Any] | None = None) -> None:
        """Writes ``state`` (any pytree of arrays), its digest and ``metadata`` (JSON) as
        ``step``.

        Every process must call it (orbax coordinates multi-process saves; process 0
        writes the shared files). Blocks until the step is on disk. A failed write
        raises ``OSError`` naming the folder and the cause.
        """
        step = int(step)
        if step < 0:
            raise ValueError(f"checkpoint step must be >= 0, got {step}")
        import orbax.checkpoint as ocp

        meta = dict(metadata or {})
        meta.setdefault("step", step)
        state = _drop_empty(_keys_to_data(state))
        meta["digest"] = {"kind": _DIGEST_KIND, "leaves": state_digest(state)}
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            metadata=ocp.args.JsonSave(json.loads(json.dumps(meta, default=str))),
        )
        try:
            manager = self._mgr(create=True)
            manager.save(step, args=args, force=True)
            manager.wait_until_finished()
        except Exception as e:
            raise OSError(
                f"{self.directory}: could not write checkpoint {step}: {_reason(e)}"
            ) from e

    def _check_step(self, step: int | None) -> int:
        steps = self.all_steps()
        if not steps:
            raise FileNotFoundError(f"no checkpoint found in {self.directory}")
        if step is None:
            return steps[-1]
        if int(step) not in steps:
            raise FileNotFoundError(
                f"no checkpoint for step {step} in {self.directory}; steps present: {steps}"
            )
        return int(step)

    def restore_metadata(self, step: int | None = None) -> dict[str, Any]:
        """The metadata dict of ``step`` (default: the latest), digest included."""
        return read_metadata(self.directory, self._check_step(step))

    def restore(
        self, target: Any, step: int | None = None, *, verify: bool = True
    ) -> tuple[Any, dict[str, Any]]:
        """Restores ``step`` (default: the latest) into the structure of ``target``.

        ``target``: a pytree with the saved state's structure, of arrays or
        `jax.ShapeDtypeStruct` (e.g. ``jax.eval_shape(trainer.init, key)``); restored
        arrays get its leaves' dtypes and shardings. Returns ``(state, metadata)``.
        Raises ``FileNotFoundError`` when there is no such checkpoint, ``ValueError``
        when the saved tree does not fit ``target`` and `CheckpointError` when the
        restored arrays do not match the saved digest (``verify``).
        """
        import orbax.checkpoint as ocp

        step = self._check_step(step)
        abstract = _drop_empty(jax.tree.map(_abstract, target))
        try:
            out = self._mgr(create=False).restore(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(abstract), metadata=ocp.args.JsonRestore()
                ),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(
                f"checkpoint {step} in {self.directory} does not fit the target state "
                f"structure (was it written with another config?): {e}"
            ) from e
        meta = dict(out["metadata"])
        if verify:
            _verify(step, out["state"], meta)
        meta.pop("digest", None)
        return _restore_keys(target, _fill_empty(target, out["state"])), meta

    def verify(self, step: int | None = None) -> dict[str, Any]:
        """Reads ``step`` (default: the latest) as saved, with no target structure, and
        checks its digest; returns its metadata. Raises like `restore`."""
        import orbax.checkpoint as ocp

        step = self._check_step(step)
        out = self._mgr(create=False).restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(), metadata=ocp.args.JsonRestore()
            ),
        )
        meta = dict(out["metadata"])
        _verify(step, out["state"], meta, any_order=True)
        return meta

    def restore_newest(
        self, target: Any, steps: list[int] | None = None, *, verify: bool = True
    ) -> Restored:
        """Restores the newest of ``steps`` (default: all) that restores and verifies.

        Each failure (unreadable files, a tree that does not fit, a digest mismatch) is
        recorded in ``Restored.skipped`` and the next older step is tried. Raises
        `CheckpointError` naming the folder and every step's reason when none restores.
        """
        steps = sorted(self.all_steps() if steps is None else steps, reverse=True)
        skipped: list[tuple[int, str]] = []
        for step in steps:
            try:
                with _quiet_abandoned_reads():
                    state, meta = self.restore(target, step, verify=verify)
            except Exception as e:  # any damage: try the next older step
                skipped.append((step, _reason(e)))
                continue
            return Restored(state, meta, step, skipped)
        why = "; ".join(f"{s}: {r}" for s, r in skipped) or "no checkpoint"
        if skipped and all(r == _OTHER_STRUCTURE for _, r in skipped):
            raise CheckpointError(
                f"{self.directory}: no checkpoint restores: their state has another "
                "structure than this config's (another env, network or algorithm); "
                "resume with the run's own config, or use a fresh --workdir"
            )
        raise CheckpointError(
            f"{self.directory}: no checkpoint restores ({why}); move the folder aside "
            "(or delete it) to start afresh"
        )

    def close(self) -> None:
        """Waits for pending work and releases the manager."""
        if self._manager is not None:
            manager, self._manager = self._manager, None
            try:
                manager.wait_until_finished()
            finally:
                manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
