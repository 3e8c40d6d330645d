"""The ``adapters`` benchmark suite (``python -m experiments.benchmarks.run --suite=adapters``).

1. **Inward overhead**: env-only stepping of JaxMARL's ``MPE_simple_spread_v3`` through
   `jaxdrive.adapters.from_jaxmarl` (batched by `jaxdrive.vectorize`, auto-reset on)
   against JaxMARL's own env (``jax.vmap`` of its ``step``, which resets inside), in the
   same process and by the same harness: one jitted `lax.scan` of ``T`` steps whose
   per-step actions are one ``randint`` draw ``[N, A]``, with every output (observations,
   rewards, dones, state) carried out of the program so nothing is dead code; compile
   excluded, median over timed calls (`experiments.benchmarks.timing.time_compiled`).
   The record's ``ratio`` is the adapter's env steps/s over JaxMARL's (1.0: no overhead).
2. **Outward host loop**: `jaxdrive.adapters.to_gymnasium` of CartPole with ``N`` envs
   driven step by step from Python with host NumPy actions (one jitted call and one
   device-to-host copy per step), against the same env stepped on the device alone
   (`experiments.benchmarks.timing.time_env_steps`).
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["ADAPTER_SIZES", "run_adapters_suite", "time_gymnasium_loop", "time_mpe_pair"]

# (MPE env counts, to_gymnasium CartPole env counts)
ADAPTER_SIZES = {"adapters": ([1_000, 10_000, 100_000], [1024]), "tiny": ([8], [8])}


def _time_scan(
    init: Callable[[jax.Array], Any],
    step: Callable[[jax.Array, Any, jax.Array], Any],
    action_shape: tuple[int, int],
    num_actions: int,
    num_steps: int,
    repeats: int,
) -> dict[str, float]:
    """Times a jitted scan of ``num_steps`` calls ``carry = step(key, carry, actions)``
    from ``init(key)``, actions ``randint [N, A]`` in ``[0, num_actions)``."""
    from experiments.benchmarks.timing import time_compiled

    carry = jax.block_until_ready(jax.jit(init)(jax.random.key(0)))

    @functools.partial(jax.jit, donate_argnums=(1,))
    def run(key, carry):
        def body(c, k):
            actions = jax.random.randint(k[0], action_shape, 0, num_actions)
            return step(k[1], c, actions), None

        return jax.lax.scan(body, carry, jax.random.split(key, (num_steps, 2)))[0]

    key = jax.random.key(1)
    t0 = time.perf_counter()
    compiled = run.lower(key, carry).compile()
    compile_s = time.perf_counter() - t0
    _, times = time_compiled(
        lambda c: compiled(key, c), repeats, prepare=lambda: jax.tree.map(jnp.copy, carry)
    )
    med = statistics.median(times)
    return {
        "env_steps_per_s": action_shape[0] * num_steps / med,
        "seconds_median": med,
        "compile_s": round(compile_s, 3),
    }


def time_mpe_pair(num_envs: int, num_steps: int, repeats: int) -> dict[str, Any]:
    """One record: ``from_jaxmarl(MPE_simple_spread_v3)`` and JaxMARL's own env at
    ``num_envs`` envs (module docstring, item 1)."""
    import jaxmarl

    import jaxdrive
    from jaxdrive.adapters import from_jaxmarl

    lib = jaxmarl.make("MPE_simple_spread_v3")
    env = from_jaxmarl(lib)
    agents, n = lib.agents, lib.action_space(lib.agents[0]).n
    shape = (num_envs, len(agents))
    venv = jaxdrive.vectorize(env, num_envs)
    params = env.default_params

    def ours_init(key):
        return venv.reset(key, params)

    def ours_step(key, carry, actions):
        return venv.step(key, carry[0], {"agent": actions}, params)

    def theirs_step(key, carry, actions):
        named = {a: actions[:, i] for i, a in enumerate(agents)}
        obs, state, rew, dones, _ = jax.vmap(lib.step)(
            jax.random.split(key, num_envs), carry[1], named
        )
        return obs, state, rew, dones

    def theirs_init(key):
        obs, state = jax.vmap(lib.reset)(jax.random.split(key, num_envs))
        first = jax.eval_shape(theirs_step, key, (obs, state), jnp.zeros(shape, jnp.int32))
        return obs, state, *jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), first[2:])

    ours = _time_scan(ours_init, ours_step, shape, n, num_steps, repeats)
    theirs = _time_scan(theirs_init, theirs_step, shape, n, num_steps, repeats)
    return {
        "bench": "adapter_jaxmarl_mpe_spread",
        "num_envs": num_envs,
        "num_steps": num_steps,
        "repeats": repeats,
        "env_steps_per_s": ours["env_steps_per_s"],
        "jaxmarl_env_steps_per_s": theirs["env_steps_per_s"],
        "ratio": ours["env_steps_per_s"] / theirs["env_steps_per_s"],
        "compile_s": ours["compile_s"],
        "jaxmarl_compile_s": theirs["compile_s"],
    }


def time_gymnasium_loop(num_envs: int, num_steps: int, repeats: int) -> dict[str, Any]:
    """One record: ``to_gymnasium(CartPole-v1, num_envs)`` stepped from a Python loop,
    beside the same env stepped on the device alone (module docstring, item 2)."""
    import jaxdrive
    from experiments.benchmarks.timing import time_env_steps
    from jaxdrive.adapters import to_gymnasium

    env, params = jaxdrive.make("CartPole-v1")
    venv = to_gymnasium(env, params, num_envs=num_envs)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, (num_steps, num_envs))
    venv.reset(seed=0)
    venv.step(actions[0])  # compile
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for a in actions:
            venv.step(a)
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    device = time_env_steps(env, params, num_envs, num_steps, repeats, fold=False)
    return {
        "bench": "adapter_gymnasium_cartpole_host_loop",
        "num_envs": num_envs,
        "num_steps": num_steps,
        "repeats": repeats,
        "env_steps_per_s": num_envs * num_steps / med,
        "ms_per_host_step": 1e3 * med / num_steps,
        "device_only_env_steps_per_s": device["env_steps_per_s"],
    }


def run_adapters_suite(
    num_steps: int, repeats: int, sizes: str = "adapters"
) -> list[dict[str, Any]]:
    """The suite's records at ``ADAPTER_SIZES[sizes]``; prints one line per record."""
    from experiments.benchmarks.timing import device_info

    info = device_info()
    mpe_sizes, gym_sizes = ADAPTER_SIZES[sizes]
    records = []
    for n in mpe_sizes:
        rec = {**time_mpe_pair(n, num_steps, repeats), **info}
        records.append(rec)
        print(
            f"adapters from_jaxmarl(MPE spread) {n:>8} envs {rec['env_steps_per_s']:>16,.0f} "
            f"env/s  JaxMARL {rec['jaxmarl_env_steps_per_s']:>16,.0f} env/s  "
            f"ratio {rec['ratio']:.3f}",
            flush=True,
        )
    for n in gym_sizes:
        rec = {**time_gymnasium_loop(n, num_steps, repeats), **info}
        records.append(rec)
        print(
            f"adapters to_gymnasium(CartPole) {n:>8} envs {rec['env_steps_per_s']:>16,.0f} "
            f"env/s host loop ({rec['ms_per_host_step']:.3f} ms/step)  device only "
            f"{rec['device_only_env_steps_per_s']:>16,.0f} env/s",
            flush=True,
        )
    return records
