"""Automatic sizing: the largest env batch whose compiled training chunk fits in memory.

`autoscale` compiles (never runs) the trainer's chunk for candidate ``num_envs`` values
and reads XLA's ``memory_analysis()`` of each executable: argument + output + temporary
bytes per device (arguments and outputs counted apart: the loop donates the state but a
conservative sum is the safe choice). The budget is the device's ``bytes_limit``
(GPU/TPU ``memory_stats``) times ``fraction``; on a CPU, or when a device reports none,
a ``memory_budget_bytes`` argument or a fraction of the host's available memory.

Search: ``num_envs`` starts at the config's (halved down to ``min_envs`` while it does
not fit), then doubles (multiples of the device count) until a
candidate does not fit or ``max_envs`` is reached, then a binary search over multiples of
``granularity`` between the last fit and the first miss. Nothing is executed, so nothing
runs out of memory. Optionally several ``num_steps`` values are searched and the one
with the largest ``num_envs·num_steps`` batch kept.

Example (CPU, a 64 MiB budget; ``make_trainer(config) -> Trainer`` builds the env and
the trainer of a config, e.g. from ``algorithms``)::

    import algorithms
    from algorithms.common.config import make_env
    from jaxdrive.autoscale import autoscale

    def make_trainer(config):
        return algorithms.make_train(config, *make_env(config))

    res = autoscale(config, make_trainer, memory_budget_bytes=64 * 2**20)
    print(res.table())
    config = res.config   # num_envs set to the largest size that fits
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax

__all__ = ["AutoscaleResult", "Trial", "autoscale", "chunk_memory_bytes", "device_memory_budget"]


@dataclasses.dataclass
class Trial:
    """One compiled candidate."""

    num_envs: int
    num_steps: int
    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    total_bytes: int  # argument + output + temp, per device
    fits: bool
    compile_seconds: float
    error: str = ""  # a compile failure (counted as not fitting)


@dataclasses.dataclass
class AutoscaleResult:
    """The chosen config and every trial, with the budget they were held to."""

    config: Any  # a copy of the input config with num_envs (and num_steps) chosen
    num_envs: int
    num_steps: int
    budget_bytes: int
    budget_source: str
    trials: list[Trial]
    reason: str

    def table(self) -> str:
        """A text table of the tried sizes, their bytes and the verdict."""
        mib = 2**20
        lines = [
            f"budget {self.budget_bytes / mib:,.1f} MiB ({self.budget_source})",
            f"{'num_envs':>10} {'num_steps':>9} {'args MiB':>10} {'out MiB':>10} "
            f"{'temp MiB':>10} {'total MiB':>10}  fits",
        ]
        for t in self.trials:
            lines.append(
                f"{t.num_envs:>10} {t.num_steps:>9} {t.argument_bytes / mib:>10.2f} "
                f"{t.output_bytes / mib:>10.2f} {t.temp_bytes / mib:>10.2f} "
                f"{t.total_bytes / mib:>10.2f}  {'yes' if t.fits else 'no'}"
                + (f" ({t.error})" if t.error else "")
            )
        lines.append(f"chosen: num_envs={self.num_envs}, num_steps={self.num_steps}: {self.reason}")
        return "\n".join(lines)


def _host_available_bytes() -> int:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:  # pragma: no cover - psutil is a dependency of the dev tools
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    raise ValueError("cannot tell the host's memory: pass memory_budget_bytes")


def device_memory_budget(
    memory_budget_bytes: int | None = None, fraction: float = 0.9, device: Any = None
) -> tuple[int, str]:
    """``(bytes, source)``: the explicit budget, else ``fraction`` of the device's
    ``bytes_limit``, else (CPU) ``fraction`` of the host's available memory."""
    if not 0.0 < float(fraction) <= 1.0:
        raise ValueError(f"fraction must lie in (0, 1], got {fraction}")
    if memory_budget_bytes is not None:
        if int(memory_budget_bytes) <= 0:
            raise ValueError(f"memory_budget_bytes must be > 0, got {memory_budget_bytes}")
        return int(memory_budget_bytes), "given"
    device = device or jax.local_devices()[0]
    stats = None
    try:
        stats = device.memory_stats()
    except Exception:  # CPU devices may not implement it
        stats = None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"] * fraction), f"{fraction:g} of {device.device_kind} limit"
    return int(_host_available_bytes() * fraction), f"{fraction:g} of host available memory"


def chunk_memory_bytes(trainer: Any, iterations: int = 1) -> dict[str, int]:
    """Per-device bytes of ``trainer.chunk(state, iterations)`` compiled (not run):
    ``argument``, ``output``, ``temp``, ``total``."""
    state = jax.eval_shape(trainer.init, jax.random.PRNGKey(0))
    compiled = jax.jit(trainer.chunk, static_argnums=1).lower(state, int(iterations)).compile()
    ma = compiled.memory_analysis()
    if ma is None:
        raise ValueError("this backend reports no memory analysis for compiled programs")
    arg = int(getattr(ma, "argument_size_in_bytes", 0))
    out = int(getattr(ma, "output_size_in_bytes", 0))
    tmp = int(getattr(ma, "temp_size_in_bytes", 0))
    return {"argument": arg, "output": out, "temp": tmp, "total": arg + out + tmp}


def _with_size(config: Any, num_envs: int, num_steps: int) -> Any:
    c = copy.deepcopy(config)
    c["num_envs"] = int(num_envs)
    c["num_steps"] = int(num_steps)
    c["total_env_steps"] = max(int(config["total_env_steps"]), int(num_envs) * int(num_steps))
    return c


def autoscale(
    config: Any,
    make_trainer: Callable[[Any], Any],
    *,
    memory_budget_bytes: int | None = None,
    fraction: float = 0.9,
    min_envs: int | None = None,
    max_envs: int = 1 << 20,
    num_steps_options: Sequence[int] | None = None,
    granularity: int | None = None,
    refine_steps: int = 3,
    log: Callable[[str], Any] | None = None,
) -> AutoscaleResult:
    """The largest ``num_envs`` (and, with ``num_steps_options``, ``num_steps``) whose
    compiled chunk fits the memory budget; see the module docstring.

    ``make_trainer(config) -> Trainer``: builds the env and the trainer (an object with
    ``init(key)`` and ``chunk(state, iterations)``) of a config; it is called with copies
    of ``config`` whose ``num_envs``/``num_steps`` are the candidates'.
    ``min_envs``/``granularity`` default to the device count of ``config.num_devices``.
    Raises ``ValueError`` when even ``min_envs`` does not fit.
    """
    from jaxdrive.distributed import resolve_num_devices

    get = config.get if hasattr(config, "get") else (lambda k, d=None: d)
    n_dev = resolve_num_devices(get("num_devices", 1))
    gran = int(granularity or n_dev)
    if gran % n_dev:
        raise ValueError(f"granularity={gran} must be a multiple of the device count {n_dev}")
    start = max(gran, int(config["num_envs"]) // gran * gran)  # search from the config's size
    lo = int(min_envs or gran)
    if lo < 1 or lo % n_dev:
        raise ValueError(f"min_envs={lo} must be a positive multiple of the device count {n_dev}")
    if int(max_envs) < lo:
        raise ValueError(f"max_envs={max_envs} is below min_envs={lo}")
    budget, source = device_memory_budget(memory_budget_bytes, fraction)
    steps_list = [int(s) for s in (num_steps_options or [int(config["num_steps"])])]
    trials: list[Trial] = []
    cache: dict[tuple[int, int], Trial] = {}

    def trial(n: int, t: int) -> Trial:
        if (n, t) in cache:
            return cache[(n, t)]
        t0 = time.perf_counter()
        try:
            b = chunk_memory_bytes(make_trainer(_with_size(config, n, t)))
            err = ""
        except ValueError:
            raise
        except Exception as e:  # XLA refusing to compile (e.g. a buffer too large)
            b = {"argument": 0, "output": 0, "temp": 0, "total": 0}
            err = f"{type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"
        tr = Trial(
            n, t, b["argument"], b["output"], b["temp"], b["total"],
            fits=not err and b["total"] <= budget,
            compile_seconds=time.perf_counter() - t0, error=err,
        )  # fmt: skip
        cache[(n, t)] = tr
        trials.append(tr)
        if log is not None:
            log(
                f"autoscale: num_envs={n} num_steps={t}: {tr.total_bytes / 2**20:.1f} MiB "
                f"{'fits' if tr.fits else 'does not fit'}"
            )
        return tr

    best: tuple[int, int] | None = None
    for t in steps_list:
        n = max(start, lo)
        while not trial(n, t).fits and n > lo:  # halve down to a size that fits
            n = max(lo, n // 2 // gran * gran)
        if not trial(n, t).fits:
            continue
        good, bad = n, None
        while n * 2 <= max_envs:
            n *= 2
            if trial(n, t).fits:
                good = n
            else:
                bad = n
                break
        for _ in range(int(refine_steps)):  # binary search over multiples of gran
            if bad is None:
                break
            mid = (good + bad) // 2 // gran * gran
            if mid <= good:
                break
            if trial(mid, t).fits:
                good = mid
            else:
                bad = mid
        if best is None or good * t > best[0] * best[1]:
            best = (good, t)
    if best is None:
        raise ValueError(
            f"even num_envs={lo} does not fit the memory budget of {budget / 2**20:.1f} MiB "
            f"({source}); smallest tried needs "
            f"{min(t.total_bytes for t in trials) / 2**20:.1f} MiB"
        )
    n, t = best
    fit = cache[(n, t)]
    limit = "max_envs reached" if n * 2 > max_envs and n == max_envs else "next size does not fit"
    reason = (
        f"largest tried size within {budget / 2**20:.1f} MiB ({source}): needs "
        f"{fit.total_bytes / 2**20:.1f} MiB per device; {limit}"
    )
    return AutoscaleResult(
        config=_with_size(config, n, t),
        num_envs=n,
        num_steps=t,
        budget_bytes=budget,
        budget_source=source,
        trials=trials,
        reason=reason,
    )
