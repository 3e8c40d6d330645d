"""Timing helpers for the benchmarks: env-only stepping and training throughput.

Env-only stepping: one jitted program resets ``N`` envs (outside the timed region),
then runs a `lax.scan` of ``T`` steps; the ``[T, G + 1]`` per-step keys (each of the ``G``
groups' actions, the env) are split once before the scan, in the same program (no split
kernel per step). Each step draws uniform random actions on the device
(`experiments.benchmarks.random_actions.random_policy`: every group's draw in one
kernel), steps every env (auto-reset on), and carries the state and the whole timestep
(observations, rewards, flags, extras) to the next step and out of the program, so
nothing the env computes is dead-code-eliminated: every step's outputs are
materialised. With ``fold=True`` (the CartPole rows, as gymnax's benchmark does) it also
sums the rewards, the observations' last column and the done flags into a scalar of
the carry: extra reductions that are the harness's work, not the env's; ``fold=False``
(the Tag rows) times the env's own work only. With ``obs_only=True`` the program
returns only the last step's observations, so XLA may drop whatever of the carried
state no observation depends on (the MuJoCo suite's ``*_obs`` rows, which time the
anchors' envs the same way).
Compile is excluded; the figure is the median over ``repeats`` timed calls, each ended by
``block_until_ready``. No host transfer happens inside a timed call. The program donates
its initial carry (the reset state and timestep), so the scan does not copy it first;
each call gets its own device copy, made before its clock starts.
"""

from __future__ import annotations

import datetime
import functools
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

import jaxdrive
from experiments.benchmarks import random_actions

__all__ = [
    "EnvStepTimer",
    "device_info",
    "peak_memory_bytes",
    "profile_call",
    "time_compiled",
    "time_env_steps",
]


def device_info() -> dict[str, Any]:
    """Device kind, count, backend, jax version, host, date (UTC)."""
    d = jax.devices()[0]
    return {
        "device": getattr(d, "device_kind", str(d)),
        "backend": jax.default_backend(),
        "num_devices": jax.device_count(),
        "jax": jax.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def peak_memory_bytes() -> int | None:
    """Peak bytes in use on device 0 so far (None where the backend does not say)."""
    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:  # CPU backends may not implement it
        return None
    return None if not stats else int(stats.get("peak_bytes_in_use", 0))


def time_compiled(
    fn: Callable[..., Any], repeats: int, prepare: Callable[[], Any] | None = None
) -> tuple[float, list[float]]:
    """Calls ``fn`` once (compile + warm-up) then ``repeats`` times; returns
    ``(first_call_seconds, [seconds per timed call])``.

    The timed calls run under ``jax.transfer_guard("disallow")``: a host↔device copy
    inside them (an argument built on the host, a value read back) raises instead of
    being timed. ``fn`` should call an AOT-compiled executable, which cannot retrace.
    With ``prepare``, each call is ``fn(prepare())``, and ``prepare()`` (e.g. fresh
    copies of arguments that ``fn`` donates) runs and completes before the clock starts.
    """

    def ready() -> tuple[Any, ...]:
        return () if prepare is None else (jax.block_until_ready(prepare()),)

    args = ready()
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    times = []
    with jax.transfer_guard("disallow"):
        for _ in range(repeats):
            args = ready()
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*args))
            times.append(time.perf_counter() - t0)
    return first, times


def profile_call(
    fn: Callable[..., Any], profile_dir: str | None, prepare: Callable[[], Any] | None = None
) -> None:
    """Calls ``fn`` (``fn(prepare())`` with ``prepare``, prepared before the trace) once
    more under `jax.profiler.trace` into ``profile_dir`` (no-op when ``None``);
    `experiments.benchmarks.profile` summarises the trace."""
    if profile_dir is None:
        return
    args = () if prepare is None else (jax.block_until_ready(prepare()),)
    with jax.profiler.trace(profile_dir):
        jax.block_until_ready(fn(*args))


class EnvStepTimer:
    """Env-only stepping compiled once, timed as often as asked (`time_env_steps` is one
    `time` of a new timer). Building it resets the envs and compiles the ``T``-step scan
    once; `time` runs the compiled program ``repeats`` times and returns a result
    record. ``reset_pool``: auto-reset from these start states (`jaxdrive.vectorize`);
    ``obs_only``: return only the last observations (module docstring)."""

    def __init__(
        self,
        env: jaxdrive.Env,
        params: Any,
        num_envs: int,
        num_steps: int,
        seed: int = 0,
        auto_reset: bool = True,
        reset_mode: str = "auto",
        fold: bool = True,
        reset_pool: Any = None,
        obs_only: bool = False,
    ) -> None:
        venv = jaxdrive.vectorize(
            env, num_envs, auto_reset=auto_reset, reset_mode=reset_mode, reset_pool=reset_pool
        )
        policy = random_actions.random_policy(env)

        @jax.jit
        def reset(key):
            return venv.reset(key, params)

        # The initial carry is donated: the scan updates it in place instead of first
        # copying it (the observations of every env); `time` hands each call its own
        # copy, made before the clock starts (not with ``obs_only``: nothing to reuse it).
        @functools.partial(jax.jit, donate_argnums=() if obs_only else (1, 2))
        def run(key, state, ts):
            def body(carry, k):
                state, ts, *acc = carry  # acc: the fold's scalar, only with `fold`
                ka, ke = k
                actions = policy(ka, ts.obs)
                state, ts = venv.step(ke, state, actions, params)
                if fold:
                    a = acc[0] + sum(jnp.sum(r) for r in ts.reward.values())
                    a = a + sum(jnp.sum(o[:, :, -1]) for o in ts.obs.values())
                    acc = [a + jnp.sum(ts.done)]
                return (state, ts, *acc), None

            # [T, G + 1]: each group's action key and the env's, per step, split once here
            groups = len(env.groups)
            keys = jax.random.split(key, (num_steps, groups + 1))
            akeys, ekeys = keys[:, :groups], keys[:, groups]
            init = (state, ts, jnp.zeros((), jnp.float32)) if fold else (state, ts)
            carry, _ = jax.lax.scan(body, init, (akeys, ekeys))
            if obs_only:
                return carry[1].obs, jnp.zeros((), jnp.float32)
            return carry if fold else (*carry, jnp.zeros((), jnp.float32))

        self._state, self._ts = jax.block_until_ready(reset(jax.random.key(seed)))
        t0 = time.perf_counter()
        self._compiled = run.lower(jax.random.key(seed + 1), self._state, self._ts).compile()
        self.compile_s = time.perf_counter() - t0
        self._seed = seed
        self._env, self._num_envs, self._num_steps, self._fold = env, num_envs, num_steps, fold
        self._obs_only = bool(obs_only)

    def time(self, repeats: int = 5, profile_dir: str | None = None) -> dict[str, Any]:
        """Times ``repeats`` calls of the compiled scan (after one warm-up call), each
        from the same reset state with its own key; with ``profile_dir``, one more call is
        traced there. Returns the result record (`time_env_steps`'s)."""
        # keys made on the device up front: no host transfer inside the timed calls
        keys = jax.random.split(jax.random.key(self._seed + 1), repeats + 2)
        keys = [keys[i] for i in range(repeats + 2)]
        holder = {"i": 0}

        def fresh():  # the donated carry: a copy of the reset state per call
            return jax.tree.map(jnp.copy, (self._state, self._ts))

        def call(carry):
            holder["i"] = (holder["i"] + 1) % len(keys)
            return self._compiled(keys[holder["i"]], *carry)

        _, times = time_compiled(call, repeats, prepare=fresh)
        profile_call(call, profile_dir, prepare=fresh)
        med = statistics.median(times)
        n, t, agents = self._num_envs, self._num_steps, self._env.total_agents
        return {
            "num_envs": n,
            "num_agents": agents,
            "num_steps": t,
            "repeats": repeats,
            "compile_s": round(self.compile_s, 3),
            "seconds_median": med,
            "seconds_all": [round(x, 6) for x in times],
            "env_steps_per_s": n * t / med,
            "agent_steps_per_s": n * t * agents / med,
            "ms_per_batch_step": 1e3 * med / t,
            "peak_memory_bytes": peak_memory_bytes(),
            "fold": bool(self._fold),
            "obs_only": self._obs_only,
            **({"_hlo": self._compiled.as_text()} if profile_dir else {}),
        }


def time_env_steps(
    env: jaxdrive.Env,
    params: Any,
    num_envs: int,
    num_steps: int,
    repeats: int = 5,
    seed: int = 0,
    profile_dir: str | None = None,
    auto_reset: bool = True,
    reset_mode: str = "auto",
    fold: bool = True,
) -> dict[str, Any]:
    """Times env-only stepping (see the module docstring); returns a result record.

    With ``profile_dir``, one extra call (after the timed ones) is traced there;
    ``auto_reset=False`` times the step without the batch's reset check; ``fold``: also
    sum outputs into a scalar each step (module docstring). One `EnvStepTimer`, timed
    once."""
    timer = EnvStepTimer(
        env, params, num_envs, num_steps, seed, auto_reset=auto_reset, reset_mode=reset_mode,
        fold=fold,
    )  # fmt: skip
    return timer.time(repeats, profile_dir)
