"""MuJoCo MJX benchmark suites: ``--suite=locomotion`` (env-only throughput) and
``--suite=mujoco_parity`` (the long Gymnasium v5 comparison).

``locomotion``: env-only steps/s of our Humanoid-v5 and Ant-v5 (the ``"mjx"`` model)
at each ``--locomotion_envs`` count, random actions drawn inside the scan
(`experiments.benchmarks.timing.time_env_steps`, auto-reset on), beside

* ``mjx_raw``: a `lax.scan` of ``vmap(mjx.step)`` on the same edited model, ``frame_skip``
  physics steps per env step, uniform random controls drawn in the scan (MJX's own
  loop: no observation, reward or reset);
* ``brax`` (when ``brax`` is importable): Brax's MJX-backed ``humanoid``/``ant`` with
  its training wrappers (vmap, episode length 1000, auto-reset), random actions in
  ``[-1, 1]`` drawn in the scan, as the anchor script ``bench_mjx_brax.py`` runs them.

``mujoco_parity``: for each locomotion env, ``--parity_states`` states of random-action
walks of Gymnasium's env on the same model, then one step of both from each state
(`environments.mujoco.reference.compare`): the largest differences of the observation
and of each reward term, and the termination flags that differ with their distance to
the health threshold.
"""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["run_locomotion_suite", "run_parity_suite"]

_ENVS = ("Humanoid", "Ant")
_BRAX = {"Humanoid": "humanoid", "Ant": "ant"}
_PARITY_ENVS = ("Hopper", "HalfCheetah", "Walker2d", "Ant", "Humanoid")


def _timed(fn: Any, *args: Any, repeats: int) -> tuple[float, float]:
    """``(median seconds of `repeats` calls, first-call seconds)``."""
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), first


def time_raw_mjx(env: Any, num_envs: int, num_steps: int, repeats: int) -> dict[str, Any]:
    """Env steps/s of ``vmap(mjx.step)`` × ``frame_skip`` on ``env``'s model, random
    controls drawn in the scan."""
    from mujoco import mjx

    m = env.mjx_model
    lo, hi = np.asarray(env.mj_model.actuator_ctrlrange, np.float32).T
    nu = env.mj_model.nu
    data = jax.jit(jax.vmap(lambda k: env.reset(k)[0].data))(
        jax.random.split(jax.random.key(0), num_envs)
    )

    @jax.jit
    def run(data, key):
        def one(d, k):
            u = jax.random.uniform(k, (num_envs, nu), jnp.float32, lo, hi)
            d = d.replace(ctrl=u)
            d = jax.lax.fori_loop(
                0, env.frame_skip, lambda _, x: jax.vmap(mjx.step, (None, 0))(m, x), d
            )
            return d, None

        return jax.lax.scan(one, data, jax.random.split(key, num_steps))[0].qpos

    sec, first = _timed(run, data, jax.random.key(1), repeats=repeats)
    return {"env_steps_per_s": num_envs * num_steps / sec, "compile_s": round(first - sec, 2)}


def time_brax(name: str, num_envs: int, num_steps: int, repeats: int) -> dict[str, Any] | None:
    """Env steps/s of Brax's MJX env ``name`` with its training wrappers (``None`` when
    ``brax`` is not installed)."""
    try:
        from brax import envs
    except ImportError:
        return None
    env = envs.training.wrap(envs.get_environment(name, backend="mjx"), episode_length=1000)
    # Brax reads batch shapes off raw uint32 keys (jax.random.PRNGKey)
    state = jax.jit(env.reset)(jax.random.split(jax.random.PRNGKey(0), num_envs))

    @jax.jit
    def run(s, key):
        def one(s, k):
            a = jax.random.uniform(k, (num_envs, env.action_size), minval=-1.0, maxval=1.0)
            s = env.step(s, a)
            return s, None

        return jax.lax.scan(one, s, jax.random.split(key, num_steps))[0].obs

    sec, first = _timed(run, state, jax.random.key(1), repeats=repeats)
    return {"env_steps_per_s": num_envs * num_steps / sec, "compile_s": round(first - sec, 2)}


def run_locomotion_suite(
    num_envs: tuple[int, ...], num_steps: int, repeats: int, reset_mode: str = "auto"
) -> list[dict[str, Any]]:
    """The ``locomotion`` suite (module docstring); prints a row per measurement and
    returns the records (``bench="locomotion_env"``, ``impl`` one of ``jaxdrive``,
    ``mjx_raw``, ``brax``)."""
    from environments.mujoco import locomotion
    from experiments.benchmarks.timing import device_info, time_env_steps

    info = device_info()
    records = []
    for name in _ENVS:
        env = getattr(locomotion, name)()
        for n in num_envs:
            rows = {
                "jaxdrive": time_env_steps(
                    env,
                    env.default_params,
                    n,
                    num_steps,
                    repeats,
                    reset_mode=reset_mode,
                    fold=False,
                ),
                "mjx_raw": time_raw_mjx(env, n, num_steps, repeats),
                "brax": time_brax(_BRAX[name], n, num_steps, repeats),
            }
            for impl, rec in rows.items():
                if rec is None:
                    print(f"{name:<9} {n:>6} envs  {impl:<9} brax is not installed: skipped")
                    continue
                rec = {
                    "bench": "locomotion_env",
                    "env": f"{name}-v5",
                    "impl": impl,
                    "model": "mjx",
                    "num_envs": n,
                    "num_steps": num_steps,
                    "env_steps_per_s": rec["env_steps_per_s"],
                    "compile_s": rec["compile_s"],
                    **info,
                }
                records.append(rec)
                rate = rec["env_steps_per_s"]
                print(f"{name:<9} {n:>6} envs  {impl:<9} {rate:>14,.0f} env steps/s", flush=True)
    return records


def run_parity_suite(
    num_states: int, model: str = "mjx", envs: tuple[str, ...] = _PARITY_ENVS
) -> list[dict[str, Any]]:
    """The ``mujoco_parity`` suite (module docstring); returns one record per env
    (``bench="mujoco_parity"``)."""
    from environments.mujoco import locomotion
    from environments.mujoco.reference import compare, gymnasium_env, random_states, summarize

    records = []
    for name in envs:
        env = getattr(locomotion, name)(model=model)
        ref = gymnasium_env(env)
        qpos, qvel = random_states(ref, num_states, seed=0)
        rng = np.random.default_rng(1)
        acts = rng.uniform(
            ref.action_space.low, ref.action_space.high, (num_states, env.mj_model.nu)
        )
        t0 = time.perf_counter()
        out = compare(env, qpos, qvel, acts, ref=ref)
        rec = {
            "bench": "mujoco_parity",
            "env": f"{name}-v5",
            "model": model,
            "num_states": num_states,
            "seconds": round(time.perf_counter() - t0, 1),
            "terminated_mismatches": len(out["terminated_mismatch"]),
            "terminated_mismatch_margin": float(out["terminated_mismatch_margin"]),
            "differences": summarize(out),
        }
        records.append(rec)
        print(f"{name}-v5, {num_states} states, model={model!r}:")
        for k, q in rec["differences"].items():
            print(f"  {k:<20} median {q[0.5]:.2e}  p99 {q[0.99]:.2e}  max {q[1.0]:.2e}")
        print(
            f"  termination flags differing: {rec['terminated_mismatches']} (largest "
            f"distance to a threshold {rec['terminated_mismatch_margin']:.2e})",
            flush=True,
        )
    return records
