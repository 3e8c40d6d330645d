"""Checkpoints of a training run with orbax-checkpoint.

A checkpoint is one step folder ``<directory>/<step>/`` (``step`` = iterations done)
holding two items: ``state``, the runner state pytree (params, optimiser states, env
state, RNG, iteration), and ``metadata``, a small JSON dict (iteration, env steps,
config hash, ...). Orbax writes each step into a temporary folder and renames it when
complete, so a crash mid-save never leaves a half-written step that `latest_step`
would pick; leftover temporary folders are removed when the manager opens.

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

import hashlib
import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Checkpointer", "config_hash", "config_to_dict", "latest_step"]

_ITEMS = ("state", "metadata")


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


def config_to_dict(config: Any) -> Any:
    """A JSON-compatible plain copy of ``config`` (ConfigDict, dict, dataclass or scalar).

    Tuples become lists and non-JSON leaves their ``str``, as ``json.dumps`` would need.
    """
    if config is None:
        return None
    if hasattr(config, "to_dict"):
        config = config.to_dict()
    return json.loads(json.dumps(config, sort_keys=True, default=str))


def config_hash(config: Any, *, ignore: tuple[str, ...] = ("run", "num_devices")) -> str | None:
    """A short sha256 of ``config`` without its top-level keys ``ignore``.

    ``ignore`` defaults to the ``run`` section (chunk sizes, checkpoint cadence,
    logging) and ``num_devices`` (results agree across device counts to floating-point
    tolerance, so a run may resume on another number of devices): settings that do not
    change the numbers a run computes.
    """
    d = config_to_dict(config)
    if d is None:
        return None
    if isinstance(d, dict):
        d = {k: v for k, v in d.items() if k not in ignore}
    text = json.dumps(d, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Checkpointer:
    """Saves and restores ``(runner_state, metadata)`` pairs under ``directory``.

    Args:
      directory: the checkpoints folder (created on the first save when missing).
      max_to_keep: how many of the newest steps to keep (``None``: all).
    """

    def __init__(self, directory: str | os.PathLike, *, max_to_keep: int | None = 3):
        import orbax.checkpoint as ocp

        if max_to_keep is not None and int(max_to_keep) < 1:
            raise ValueError(f"max_to_keep must be >= 1 or None, got {max_to_keep}")
        self.directory = os.path.abspath(os.fspath(directory))
        self._ocp = ocp
        options = ocp.CheckpointManagerOptions(
            max_to_keep=None if max_to_keep is None else int(max_to_keep),
            create=True,
            cleanup_tmp_directories=True,
            enable_async_checkpointing=False,
        )
        self._manager = ocp.CheckpointManager(self.directory, options=options, item_names=_ITEMS)

    # ----- queries ---------------------------------------------------------------------
    def all_steps(self) -> list[int]:
        """The steps of every complete checkpoint, ascending."""
        return sorted(int(s) for s in self._manager.all_steps())

    def latest_step(self) -> int | None:
        """The newest complete step, or ``None`` when there is none."""
        steps = self.all_steps()
        return steps[-1] if steps else None

    # ----- save / restore --------------------------------------------------------------
    def save(self, step: int, state: Any, metadata: dict[str, Any] | None = None) -> None:
        """Writes ``state`` (any pytree of arrays) and ``metadata`` (JSON) as ``step``.

        Every process must call it (orbax coordinates multi-process saves; process 0
        writes the shared files). Blocks until the step is on disk.
        """
        ocp = self._ocp
        step = int(step)
        if step < 0:
            raise ValueError(f"checkpoint step must be >= 0, got {step}")
        meta = dict(metadata or {})
        meta.setdefault("step", step)
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(_keys_to_data(state)),
            metadata=ocp.args.JsonSave(json.loads(json.dumps(meta, default=str))),
        )
        self._manager.save(step, args=args, force=True)
        self._manager.wait_until_finished()

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
        """The metadata dict of ``step`` (default: the latest)."""
        ocp = self._ocp
        step = self._check_step(step)
        out = self._manager.restore(step, args=ocp.args.Composite(metadata=ocp.args.JsonRestore()))
        return dict(out["metadata"])

    def restore(self, target: Any, step: int | None = None) -> tuple[Any, dict[str, Any]]:
        """Restores ``step`` (default: the latest) into the structure of ``target``.

        ``target``: a pytree with the saved state's structure, of arrays or
        `jax.ShapeDtypeStruct` (e.g. ``jax.eval_shape(trainer.init, key)``); restored
        arrays get its leaves' dtypes and shardings. Returns ``(state, metadata)``.
        Raises ``FileNotFoundError`` when there is no such checkpoint and
        ``ValueError`` when the saved tree does not fit ``target``.
        """
        ocp = self._ocp
        step = self._check_step(step)
        abstract = jax.tree.map(_abstract, target)
        try:
            out = self._manager.restore(
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
        state = _restore_keys(target, out["state"])
        return state, dict(out["metadata"])

    def close(self) -> None:
        """Waits for pending work and releases the manager."""
        self._manager.wait_until_finished()
        self._manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def latest_step(directory: str | os.PathLike) -> int | None:
    """The newest complete checkpoint step in ``directory`` without opening a manager.

    Complete steps are integer-named folders holding a ``state`` item; orbax's
    temporary folders (``<step>.orbax-checkpoint-tmp-*``) are not integers.
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        return None
    steps = [
        int(name)
        for name in os.listdir(directory)
        if name.isdigit() and os.path.isdir(os.path.join(directory, name, "state"))
    ]
    return max(steps) if steps else None
