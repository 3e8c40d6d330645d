"""MuJoCo MJX benchmark suites: ``--suite=locomotion`` (env-only throughput) and
``--suite=mujoco_parity`` (the long Gymnasium v5 comparison).

``locomotion``: env-only steps/s of our Humanoid-v5 and Ant-v5 (``--locomotion_names``;
also HalfCheetah, Hopper, Walker2d; the ``"mjx"`` model) at each ``--locomotion_envs``
count, random actions drawn inside the scan (`experiments.benchmarks.timing.
EnvStepTimer`, auto-reset on), as

* ``jaxdrive``: v5's semantics (contact forces in the observation and the reward, a
  fresh random start state for every reset);

beside

* ``mjx_raw``: a `lax.scan` of ``vmap(mjx.step)`` on the same edited model, ``frame_skip``
  physics steps per env step, uniform random controls drawn in the scan (MJX's own
  loop: no observation, reward or reset);
* ``brax`` (when ``brax`` is importable): Brax's MJX-backed env of the same name with
  its training wrappers (vmap, episode length 1000, auto-reset), random actions in
  ``[-1, 1]`` drawn in the scan, as the anchor script ``bench_mjx_brax.py`` runs them.

Each program returns what its scan carries, the envs' whole state (as a training loop
carries it from one call to the next). The ``*_obs`` rows (``jaxdrive_obs``,
``mjx_raw_obs``, ``brax_obs``) return only the last observations (``qpos`` for raw MJX),
so XLA drops whatever of the carried state no observation depends on: Brax's MJX env,
for one, carries the whole `mjx.Data` and its first state for the auto-reset, which
then need not be stored. The anchor's script (``bench_mjx_brax.py``) keeps even less: its
scans return only each step's mean reward (Brax) or mean height (raw MJX).

Each program is compiled ahead of time (``lower().compile()``, its seconds reported)
and timed apart from its compile. The measurements of one env run in a worker process
(``python -m experiments.benchmarks.locomotion SPEC``), which prints each row as it is
done; a compile that runs past ``compile_limit_s`` ends the worker (its row says it was
skipped) and a new worker goes on with the rest, so one slow compile cannot take the
whole call. Workers allocate device memory on demand (``XLA_PYTHON_CLIENT_PREALLOCATE``
false unless set), so they run beside a parent that holds the device.

``mujoco_parity``: for each locomotion env, ``--parity_states`` states of random-action
walks of Gymnasium's env on the same model, then one step of both from each state
(`environments.mujoco.reference.compare`): the largest differences of the observation
and of each reward term, and the termination flags that differ with their distance to
the health threshold.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np

__all__ = ["run_locomotion_suite", "run_parity_suite"]

_ENVS = ("Humanoid", "Ant")  # the default
_ALL_ENVS = ("Humanoid", "Ant", "HalfCheetah", "Hopper", "Walker2d")
_IMPLS = ("jaxdrive", "mjx_raw", "brax", "jaxdrive_obs", "mjx_raw_obs", "brax_obs")
_BRAX = {
    "Humanoid": "humanoid",
    "Ant": "ant",
    "HalfCheetah": "halfcheetah",
    "Hopper": "hopper",
    "Walker2d": "walker2d",
}
_PARITY_ENVS = ("Hopper", "HalfCheetah", "Walker2d", "Ant", "Humanoid")
_MARK = "@@locomotion "  # prefix of the worker's protocol lines on its stdout
_SKIP_EXIT = 3  # the worker's exit status after a compile ran past its limit
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _say(**msg: Any) -> None:
    print(_MARK + json.dumps(msg), flush=True)


class _Watchdog:
    """Ends the process (status `_SKIP_EXIT`) when an armed compile outlives ``limit_s``
    (``<= 0``: never), after saying which job was skipped."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self._timer: threading.Timer | None = None

    def arm(self, job: list[Any]) -> None:
        if self.limit_s > 0:
            self._timer = threading.Timer(self.limit_s, self._expire, (job,))
            self._timer.daemon = True
            self._timer.start()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self, job: list[Any]) -> None:
        _say(skipped=job, limit_s=self.limit_s)
        os._exit(_SKIP_EXIT)


def _time_compiled(compiled: Any, args: tuple[Any, ...], repeats: int) -> float:
    """Median seconds of ``repeats`` calls (after one warm-up call)."""
    import jax

    jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _raw_program(
    env: Any, num_envs: int, num_steps: int, obs_only: bool
) -> tuple[Any, tuple[Any, ...]]:
    """``(jitted scan, args)``: ``vmap(mjx.step)`` × ``frame_skip`` on ``env``'s model,
    random controls drawn in the scan; returns the `mjx.Data` (``obs_only``: its
    ``qpos``)."""
    import jax
    import jax.numpy as jnp
    from mujoco import mjx

    m = env.mjx_model
    lo, hi = np.asarray(env.mj_model.actuator_ctrlrange, np.float32).T
    nu = env.mj_model.nu
    data = jax.jit(jax.vmap(lambda k: env.mjx_data(env.reset(k)[0].data)))(
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

        data = jax.lax.scan(one, data, jax.random.split(key, num_steps))[0]
        return data.qpos if obs_only else data

    return run, (data, jax.random.key(1))


def _brax_program(
    name: str, num_envs: int, num_steps: int, obs_only: bool
) -> tuple[Any, tuple[Any, ...]]:
    """``(jitted scan, args)`` of Brax's MJX env ``name`` with its training wrappers
    (raises ``ImportError`` without ``brax``); returns its state (``obs_only``: its
    observations)."""
    import jax
    from brax import envs

    env = envs.training.wrap(envs.get_environment(name, backend="mjx"), episode_length=1000)
    # Brax reads batch shapes off raw uint32 keys (jax.random.PRNGKey)
    state = jax.jit(env.reset)(jax.random.split(jax.random.PRNGKey(0), num_envs))

    @jax.jit
    def run(s, key):
        def one(s, k):
            a = jax.random.uniform(k, (num_envs, env.action_size), minval=-1.0, maxval=1.0)
            return env.step(s, a), None

        s = jax.lax.scan(one, s, jax.random.split(key, num_steps))[0]
        return s.obs if obs_only else s

    return run, (state, jax.random.key(1))


def _measure(
    name: str, n: int, impl: str, spec: dict[str, Any], watchdog: _Watchdog
) -> dict[str, Any]:
    """One row: ``{"env_steps_per_s", "compile_s"}`` of ``impl`` at ``n`` envs; the
    watchdog is armed from the start of the job to the end of its compile."""
    from environments.mujoco import locomotion
    from experiments.benchmarks.timing import EnvStepTimer

    steps, repeats = spec["num_steps"], spec["repeats"]
    obs_only = impl.endswith("_obs")
    watchdog.arm([n, impl])
    try:
        env = getattr(locomotion, name)()
        if impl.startswith("jaxdrive"):
            timer = EnvStepTimer(
                env, env.default_params, n, steps, reset_mode=spec["reset_mode"], fold=False,
                obs_only=obs_only,
            )  # fmt: skip
            watchdog.disarm()
            rec = timer.time(repeats)
            return {"env_steps_per_s": rec["env_steps_per_s"], "compile_s": rec["compile_s"]}
        if impl.startswith("mjx_raw"):
            fn, args = _raw_program(env, n, steps, obs_only)
        else:
            fn, args = _brax_program(_BRAX[name], n, steps, obs_only)
        t0 = time.perf_counter()
        compiled = fn.lower(*args).compile()
        compile_s = time.perf_counter() - t0
    finally:
        watchdog.disarm()
    sec = _time_compiled(compiled, args, repeats)
    return {"env_steps_per_s": n * steps / sec, "compile_s": round(compile_s, 3)}


def _worker(spec: dict[str, Any]) -> None:
    """Runs ``spec["jobs"]`` (``[num_envs, impl]`` pairs) of ``spec["env"]``, saying each
    job's start and its record (or that ``brax`` is missing) on stdout (`_MARK` lines)."""
    from experiments.benchmarks.timing import device_info

    name = spec["env"]
    info = device_info()
    watchdog = _Watchdog(float(spec["compile_limit_s"]))
    for n, impl in spec["jobs"]:
        _say(start=[n, impl])
        try:
            out = _measure(name, n, impl, spec, watchdog)
        except ImportError as e:
            if not impl.startswith("brax"):
                raise
            _say(missing=[n, impl], why=str(e))
            continue
        rec = {
            "bench": "locomotion_env",
            "env": f"{name}-v5",
            "impl": impl,
            "model": "mjx",
            "num_envs": n,
            "num_steps": spec["num_steps"],
            **out,
            **info,
        }
        _say(record=rec)


def _row(name: str, n: int, impl: str, text: str) -> str:
    return f"{name:<9} {n:>6} envs  {impl:<13} {text}"


def _run_env(name: str, jobs: list[list[Any]], spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Runs ``jobs`` of env ``name`` in workers (a new one after each skipped compile or
    crash); prints a line per job; returns the records."""
    env_vars = dict(os.environ, PYTHONUNBUFFERED="1")
    env_vars.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    records: list[dict[str, Any]] = []
    pending = [list(j) for j in jobs]
    while pending:
        arg = json.dumps({**spec, "env": name, "jobs": pending})
        cmd = [sys.executable, "-m", "experiments.benchmarks.locomotion", arg]
        current = None
        with subprocess.Popen(
            cmd, cwd=_ROOT, env=env_vars, stdout=subprocess.PIPE, text=True
        ) as proc:
            for line in proc.stdout:
                if not line.startswith(_MARK):
                    print(line, end="", flush=True)
                    continue
                msg = json.loads(line[len(_MARK) :])
                if "start" in msg:
                    current = msg["start"]
                    continue
                job = msg.get("skipped") or msg.get("missing") or [
                    msg["record"]["num_envs"], msg["record"]["impl"]
                ]  # fmt: skip
                pending.remove(job)
                current = None
                if "skipped" in msg:
                    text = f"compile ran past {msg['limit_s']:g} s: skipped"
                elif "missing" in msg:
                    text = f"brax is not installed: skipped ({msg['why']})"
                else:
                    rec = msg["record"]
                    records.append(rec)
                    text = (
                        f"{rec['env_steps_per_s']:>14,.0f} env steps/s  "
                        f"compile {rec['compile_s']:.1f} s"
                    )
                print(_row(name, *job, text), flush=True)
        if proc.returncode not in (0, _SKIP_EXIT) and current is not None:
            print(_row(name, *current, f"failed (worker exit status {proc.returncode})"))
            pending.remove(current)
        elif proc.returncode not in (0, _SKIP_EXIT):
            raise RuntimeError(f"the {name} worker failed (exit status {proc.returncode})")
    return records


def run_locomotion_suite(
    num_envs: tuple[int, ...],
    num_steps: int,
    repeats: int,
    reset_mode: str = "auto",
    envs: tuple[str, ...] = _ENVS,
    compile_limit_s: float = 240.0,
    impls: tuple[str, ...] = _IMPLS,
) -> list[dict[str, Any]]:
    """The ``locomotion`` suite (module docstring) for ``envs`` (of ``Humanoid``,
    ``Ant``, ``HalfCheetah``, ``Hopper``, ``Walker2d``) and ``impls`` (of ``jaxdrive``,
    ``mjx_raw``, ``brax`` and their ``*_obs`` forms); prints a row per measurement as it is
    done and returns the records (``bench="locomotion_env"``, ``impl``, ``compile_s``
    each). ``compile_limit_s``: the longest a compile may run before it is skipped
    (``<= 0``: no limit)."""
    for what, given, known in (("envs", envs, _ALL_ENVS), ("impls", impls, _IMPLS)):
        unknown = [e for e in given if e not in known]
        if unknown:
            raise ValueError(f"locomotion {what} must be among {known}, got {unknown}")
    spec = {
        "num_steps": int(num_steps),
        "repeats": int(repeats),
        "reset_mode": reset_mode,
        "compile_limit_s": float(compile_limit_s),
    }
    records = []
    for name in envs:
        jobs = [[int(n), impl] for n in num_envs for impl in impls]
        records += _run_env(name, jobs, spec)
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


if __name__ == "__main__":  # a worker of `run_locomotion_suite`
    _worker(json.loads(sys.argv[1]))
