"""Several devices and several hosts: the device mesh, collectives, multi-host start-up.

Data parallelism in jaxdrive shards the env batch (``num_envs``) over a 1-D device mesh
with the named axis `DEVICE_AXIS` (``"dev"``); parameters, optimiser states and
statistics are replicated. Inside the sharded program (``shard_map``) the learning code
averages gradients and statistics across devices with `maybe_psum`/`maybe_pmean`, which
are the identity when ``axis_name`` is ``None`` (one device: the same code, unchanged).

Several hosts run the same program after `initialize` (``jax.distributed.initialize``);
``jax.devices()`` then lists the devices of every host and the mesh spans them all.

Example:
    >>> resolve_num_devices(1, num_envs=8)
    1
    >>> maybe_pmean(3.0, None)
    3.0
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

try:  # jax >= 0.6
    from jax import shard_map as _shard_map
except ImportError:  # pragma: no cover - older jax
    from jax.experimental.shard_map import shard_map as _shard_map

__all__ = [
    "DEVICE_AXIS",
    "initialize",
    "is_primary",
    "make_mesh",
    "maybe_pmean",
    "maybe_psum",
    "replicated",
    "resolve_num_devices",
    "shard_map",
    "sharded",
]

#: The name of the mesh axis the env batch is sharded over.
DEVICE_AXIS = "dev"


def shard_map(f: Any, *, mesh: Mesh, in_specs: Any, out_specs: Any) -> Any:
    """``shard_map`` across jax versions, with replication checks off: collectives are
    written explicitly (`maybe_psum`), so gradients are never summed implicitly."""
    try:
        return _shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    except TypeError:  # pragma: no cover - older jax spells it check_rep
        return _shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_rep=False)


def maybe_psum(x: Any, axis_name: str | None) -> Any:
    """``lax.psum(x, axis_name)`` over a pytree, or ``x`` when ``axis_name`` is None."""
    return x if axis_name is None else jax.lax.psum(x, axis_name)


def maybe_pmean(x: Any, axis_name: str | None) -> Any:
    """``lax.pmean(x, axis_name)`` over a pytree, or ``x`` when ``axis_name`` is None."""
    return x if axis_name is None else jax.lax.pmean(x, axis_name)


def resolve_num_devices(value: Any, num_envs: int | None = None) -> int:
    """The device count a config asks for: ``value`` an int ≥ 1, or ``0``/``"all"`` for
    every device (of every host). ``ValueError`` when it exceeds the devices present,
    does not divide ``num_envs``, or (several hosts) leaves some host's devices out."""
    present = jax.device_count()
    if value is None:
        value = 1
    if isinstance(value, str):
        if value.strip().lower() != "all":
            try:
                value = int(value)
            except ValueError:
                raise ValueError(
                    f"num_devices must be a positive integer, 0 or 'all', got {value!r}"
                ) from None
        else:
            value = 0
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ValueError(f"num_devices must be a positive integer, 0 or 'all', got {value!r}")
    d = present if int(value) == 0 else int(value)
    if d > present:
        raise ValueError(
            f"num_devices={d} asks for a mesh larger than the {present} device(s) present "
            f"({jax.default_backend()}: {jax.devices()[:4]}{'...' if present > 4 else ''}); "
            "on a CPU set XLA_FLAGS=--xla_force_host_platform_device_count=<n> before jax starts"
        )
    if jax.process_count() > 1 and d != present:
        raise ValueError(
            f"num_devices={d}: with {jax.process_count()} processes the mesh must span all "
            f"{present} devices (use num_devices=0 or 'all')"
        )
    if num_envs is not None and int(num_envs) % d:
        raise ValueError(
            f"num_envs={num_envs} is not divisible by the device count {d}: the env batch is "
            f"sharded evenly over devices (use a multiple of {d})"
        )
    return d


def make_mesh(num_devices: int) -> Mesh:
    """A 1-D mesh over the first ``num_devices`` devices, axis `DEVICE_AXIS`."""
    devs = jax.devices()
    if num_devices > len(devs):
        raise ValueError(f"a mesh of {num_devices} devices but only {len(devs)} are present")
    return Mesh(np.asarray(devs[:num_devices]), (DEVICE_AXIS,))


def sharded(mesh: Mesh) -> NamedSharding:
    """Leading axis split over the mesh (the env axis)."""
    return NamedSharding(mesh, PartitionSpec(DEVICE_AXIS))


def replicated(mesh: Mesh) -> NamedSharding:
    """A full copy on every device of the mesh."""
    return NamedSharding(mesh, PartitionSpec())


def is_primary() -> bool:
    """Whether this is process 0 (the one that writes logs, plots and summaries)."""
    return jax.process_index() == 0


def _wait_for_coordinator(
    address: str, timeout_s: float, process_id: int | None, num_processes: int | None
) -> None:
    """Polls a TCP connection to ``address`` until it opens; `TimeoutError` after
    ``timeout_s`` seconds."""
    import socket
    import time

    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1.0):
                return
        except OSError as e:
            last = e
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"the JAX coordinator at {address} did not answer within {timeout_s:g} s "
                f"(this is process {process_id} of {num_processes}); check the address, that "
                f"process 0 was started with the same --coordinator_address, and the "
                f"firewall ({type(last).__name__}: {last})"
            )
        time.sleep(0.2)


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    timeout_s: int = 300,
    local_device_ids: Any = None,
) -> bool:
    """Starts multi-host JAX (``jax.distributed.initialize``) from the arguments or the
    environment variables ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES`` and
    ``JAX_PROCESS_ID``. Returns ``False`` (nothing done) when neither names a coordinator
    and no cluster (SLURM, ...) is detected to be needed; ``True`` once connected.

    Raises ``ValueError`` for inconsistent arguments and ``TimeoutError`` when the
    coordinator does not answer within ``timeout_s`` seconds.
    """
    env = os.environ
    coordinator_address = coordinator_address or env.get("JAX_COORDINATOR_ADDRESS") or None
    if num_processes is None and env.get("JAX_NUM_PROCESSES"):
        num_processes = int(env["JAX_NUM_PROCESSES"])
    if process_id is None and env.get("JAX_PROCESS_ID"):
        process_id = int(env["JAX_PROCESS_ID"])
    if coordinator_address is None:
        if num_processes not in (None, 1) or process_id not in (None, 0):
            raise ValueError(
                f"num_processes={num_processes}, process_id={process_id} given without a "
                "coordinator address (--coordinator_address=host:port or "
                "JAX_COORDINATOR_ADDRESS)"
            )
        return False
    if ":" not in coordinator_address:
        raise ValueError(f"coordinator_address must be host:port, got {coordinator_address!r}")
    if num_processes is not None and num_processes < 1:
        raise ValueError(f"num_processes must be >= 1, got {num_processes}")
    if process_id is not None and num_processes is not None:
        if not 0 <= process_id < num_processes:
            raise ValueError(f"process_id={process_id} must lie in [0, {num_processes})")
    if int(timeout_s) < 1:
        raise ValueError(f"timeout_s must be >= 1 second, got {timeout_s}")
    if process_id != 0:  # process 0 hosts the coordinator; the others wait for it to listen
        # The runtime aborts the whole process (no Python exception) when it cannot
        # register in time, so reachability is checked here first.
        _wait_for_coordinator(coordinator_address, float(timeout_s), process_id, num_processes)
    try:
        jax.distributed.initialize(
            coordinator_address=coordinator_address,
            num_processes=num_processes,
            process_id=process_id,
            local_device_ids=local_device_ids,
            initialization_timeout=int(timeout_s),
        )
    except Exception as e:  # the runtime raises XlaRuntimeError (DEADLINE_EXCEEDED, ...)
        text = str(e)
        if "DEADLINE" in text.upper() or "timed out" in text.lower() or "timeout" in text.lower():
            raise TimeoutError(
                f"the JAX coordinator at {coordinator_address} did not answer within "
                f"{timeout_s} s (this is process {process_id} of {num_processes}); check the "
                "address, that process 0 was started, and the firewall. Runtime said: "
                f"{text.splitlines()[0] if text else type(e).__name__}"
            ) from e
        raise
    return True
