"""The MPE benchmark suites of ``experiments.benchmarks.run``.

``--suite=mpe``: env-only stepping of ``simple_spread`` (3 agents) and ``simple_tag``
(3 adversaries + 1 good agent) at 1e3, 1e4 and 1e5 envs, ours and, when ``jaxmarl`` is
importable, JaxMARL's ``MPE_simple_spread_v3`` / ``MPE_simple_tag_v3`` in the same
process, timed the same way (JaxMARL's anchor script's scheme): one jitted program resets
``N`` envs, then scans ``T = 1000`` steps, each drawing every agent's action uniformly by
its action space inside the scan, stepping all envs with auto-reset, and folding the sums
of every observation, reward and done flag into a scalar carry (nothing is
dead-code-eliminated). The figure is the median of ``repeats`` calls after a warm-up call
(compile excluded); the ratio ours / JaxMARL is printed.

``--suite=mpe_learning``: the runs of ``--mpe_runs`` (default IPPO, recurrent MAPPO and
feed-forward MAPPO on ``simple_spread``; any scenario preset of
`experiments/configs/mpe.py`, presets joined by ``+``) with JaxMARL's published
hyper-parameters and budget (``--mpe_overrides`` changes config keys of every run), 10
seeds vmapped in one program: final return per seed (the mean of the episodes that
ended in the last 5 iterations), over seeds the mean, the interquartile mean and its 95%
bootstrap interval, and wall time (compile included, and compile alone). Returns are also given in
JaxMARL's logged units (its ``MPELogWrapper`` multiplies each agent's reward by the
number of agents). With ``--mpe_reference_returns=RUN=R,…`` (JaxMARL units: the final
return of JaxMARL's own script, run beside ours), that run's record adds the wall time at
which the seeds' mean training return (5-iteration window) first reaches ``R``.

``--suite=mpe_parity``: every scenario, discrete (mpe2's counts) and continuous (other
counts): `jaxdrive.testing.check_env` (it raises on failure) and 10⁴ transitions from
injected states against mpe2 (`environments.mpe.reference.parity_errors`); records the
largest differences and whether all are within ``1e-5``.
"""

from __future__ import annotations

import ast
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from absl import flags

import jaxdrive

flags.DEFINE_list(
    "mpe_runs",
    ["spread", "spread+mappo", "spread+mappo+ff"],
    "--suite=mpe_learning: the runs, each `experiments/configs/mpe.py` presets joined by '+'",
)
flags.DEFINE_list(
    "mpe_overrides",
    [],
    "--suite=mpe_learning: dotted config overrides KEY=LITERAL applied to every run "
    "(e.g. algo.reward_scale=0.1,total_env_steps=10000000)",
)
flags.DEFINE_list(
    "mpe_reference_returns",
    [],
    "--suite=mpe_learning: RUN=RETURN pairs (JaxMARL's units, e.g. spread=-60.7): per run, "
    "a return whose first crossing time to report",
)

__all__ = ["ENV_SIZES", "learning_runs", "run_mpe_suite", "time_jaxmarl", "time_ours"]

ENV_SIZES = {"mpe": (1_000, 10_000, 100_000), "mpe_quick": (16,)}
_SCENARIOS = ("MPE_simple_spread_v3", "MPE_simple_tag_v3")
_STEPS = 1000
_SEEDS = 10  # JaxMARL's NUM_SEEDS
_PARITY_TOL = 1e-5


def _median_time(rollout: Callable[[jax.Array], Any], repeats: int) -> tuple[float, float]:
    """``(compile + first call s, median s)`` of ``rollout(key)`` over ``repeats`` calls."""
    t0 = time.perf_counter()
    jax.block_until_ready(rollout(jax.random.key(0)))
    first = time.perf_counter() - t0
    times = []
    for r in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(rollout(jax.random.key(r + 1)))
        times.append(time.perf_counter() - t0)
    return first, statistics.median(times)


def time_ours(name: str, num_envs: int, num_steps: int, repeats: int) -> dict[str, Any]:
    """Env-only stepping of our ``name`` (module docstring); a result record."""
    env, params = jaxdrive.make(name)
    venv = jaxdrive.vectorize(env, num_envs)

    @jax.jit
    def rollout(key):
        key, k0 = jax.random.split(key)
        state, _ = venv.reset(k0, params)

        def body(carry, _):
            state, key, acc = carry
            key, k_step, *k_act = jax.random.split(key, 2 + len(env.groups))
            actions = {
                g: env.action_space(g).sample(k, (num_envs, env.num_agents(g)))
                for g, k in zip(env.groups, k_act, strict=True)
            }
            state, ts = venv.step(k_step, state, actions, params)
            acc = acc + sum(jnp.sum(o) for o in ts.obs.values())
            acc = acc + sum(jnp.sum(r) for r in ts.reward.values()) + jnp.sum(ts.done)
            return (state, key, acc), None

        (_, _, acc), _ = jax.lax.scan(body, (state, key, jnp.float32(0)), None, num_steps)
        return acc

    return _record("jaxdrive", name, env.total_agents, num_envs, num_steps, rollout, repeats)


def time_jaxmarl(name: str, num_envs: int, num_steps: int, repeats: int) -> dict[str, Any]:
    """The same rollout of JaxMARL's ``name`` (its ``MultiAgentEnv`` API: agent dicts,
    per-agent ``action_space(a).sample``, auto-reset inside ``step``); a result record."""
    import jaxmarl

    env = jaxmarl.make(name)
    agents = list(env.agents)
    samplers = [jax.vmap(env.action_space(a).sample) for a in agents]

    @jax.jit
    def rollout(key):
        key, k0 = jax.random.split(key)
        _, state = jax.vmap(env.reset)(jax.random.split(k0, num_envs))

        def body(carry, _):
            state, key, acc = carry
            key, k_step, *k_act = jax.random.split(key, 2 + len(agents))
            actions = {
                a: s(jax.random.split(k, num_envs))
                for a, s, k in zip(agents, samplers, k_act, strict=True)
            }
            obs, state, reward, dones, _ = jax.vmap(env.step)(
                jax.random.split(k_step, num_envs), state, actions
            )
            acc = acc + sum(jnp.sum(obs[a]) for a in agents)
            acc = acc + sum(jnp.sum(reward[a]) for a in agents) + jnp.sum(dones["__all__"])
            return (state, key, acc), None

        (_, _, acc), _ = jax.lax.scan(body, (state, key, jnp.float32(0)), None, num_steps)
        return acc

    return _record("jaxmarl", name, len(agents), num_envs, num_steps, rollout, repeats)


def _record(impl, name, agents, num_envs, num_steps, rollout, repeats) -> dict[str, Any]:
    first, med = _median_time(rollout, repeats)
    return {
        "bench": "mpe_env",
        "impl": impl,
        "env": name,
        "num_envs": num_envs,
        "num_agents": agents,
        "num_steps": num_steps,
        "repeats": repeats,
        "first_call_s": round(first, 3),
        "seconds_median": med,
        "env_steps_per_s": num_envs * num_steps / med,
        "agent_steps_per_s": num_envs * num_steps * agents / med,
    }


def _env_suite(sizes: tuple[int, ...], num_steps: int, repeats: int) -> list[dict[str, Any]]:
    try:
        import jaxmarl  # noqa: F401

        anchor = True
    except ImportError:
        anchor = False
        print("jaxmarl is not importable: timing ours only", flush=True)
    records = []
    for name in _SCENARIOS:
        for n in sizes:
            ours = time_ours(name, n, num_steps, repeats)
            records.append(ours)
            line = f"mpe_env {name:<22} {n:>7} envs  ours {ours['env_steps_per_s']:>14,.0f} env/s"
            if anchor:
                theirs = time_jaxmarl(name, n, num_steps, repeats)
                ours["ratio_vs_jaxmarl"] = ours["env_steps_per_s"] / theirs["env_steps_per_s"]
                records.append(theirs)
                line += (
                    f"  jaxmarl {theirs['env_steps_per_s']:>14,.0f} env/s"
                    f"  ratio {ours['ratio_vs_jaxmarl']:.2f}x"
                )
            print(line, flush=True)
    return records


def learning_runs() -> tuple[dict[str, Any], dict[str, float]]:
    """``--mpe_runs``' configs and ``--mpe_reference_returns``, checked before any work."""
    from experiments.benchmarks.training import load_config, set_dotted

    runs = flags.FLAGS.mpe_runs
    references = {}
    for pair in flags.FLAGS.mpe_reference_returns:
        run, sep, value = pair.partition("=")
        try:
            if not sep or run not in runs:
                raise ValueError
            references[run] = float(value)
        except ValueError:
            raise ValueError(
                f"--mpe_reference_returns: {pair!r} is not RUN=RETURN with RUN one of "
                f"--mpe_runs {runs}"
            ) from None
    configs = {}
    for run in runs:
        try:
            configs[run] = load_config("mpe", run.replace("+", ","))
        except ValueError as e:
            raise ValueError(f"--mpe_runs: {run!r}: {e}") from None
    for item in flags.FLAGS.mpe_overrides:
        dotted, sep, literal = item.partition("=")
        try:
            value = ast.literal_eval(literal)
            for config in configs.values():
                node = config
                for part in dotted.split(".")[:-1]:
                    node = node[part]
                if not sep or dotted.split(".")[-1] not in node:
                    raise KeyError
                set_dotted(config, dotted, value)
        except (ValueError, SyntaxError, KeyError):
            raise ValueError(
                f"--mpe_overrides: {item!r} is not KEY=LITERAL with KEY a key of the MPE config"
            ) from None
    return configs, references


def _learning_suite(
    num_seeds: int,
    configs: dict[str, Any],
    references: dict[str, float],
    info: dict[str, Any],
    sink: Any,
) -> list[dict[str, Any]]:
    from experiments.benchmarks.training import learning_run, time_to_return

    records = []
    for run, config in configs.items():
        preset = run.replace("+", ",")
        reference = references.get(run)
        out = learning_run(config, num_seeds=num_seeds)
        for k in ("_runner_state", "_trainer", "_env"):
            out.pop(k)
        curves = out.pop("_curves")
        # JaxMARL's MPELogWrapper logs each agent's reward times the number of agents
        agents = jaxdrive.make(config.env_name, **dict(config.env_kwargs))[0].total_agents
        returns = out["final_returns"]
        mean = {k: sum(v) / len(v) for k, v in returns.items()}
        jaxmarl_units = {k: round(v * agents, 2) for k, v in mean.items()}
        out.update(bench="mpe_learning", preset=preset, return_in_jaxmarl_units=jaxmarl_units)
        run_s = out["wall_s_incl_compile"] - out["compile_s"]
        if reference is not None:
            out["reference_return"] = reference
            out["wall_s_to_reference"] = {
                k: time_to_return(c, reference / agents, out["compile_s"], run_s)
                for k, c in curves.items()
            }
        out.update(info)
        records.append(out)
        if sink is not None:
            sink.add(out)
        iqm = {
            k: f"{v['iqm']:.2f} [{v['iqm_ci95'][0]:.2f}, {v['iqm_ci95'][1]:.2f}]"
            for k, v in out["summary"].items()
        }
        print(
            f"mpe_learning {preset:<14} {num_seeds} seeds  {out['total_env_steps']:,} env steps"
            f"  wall {out['wall_s_incl_compile']:.1f}s (compile {out['compile_s']:.1f}s)  "
            f"final return per agent IQM [95% CI] {iqm} (JaxMARL's units, mean: "
            f"{jaxmarl_units})  to the reference: {out.get('wall_s_to_reference')}",
            flush=True,
        )
    return records


def _parity_suite(transitions: int) -> list[dict[str, Any]]:
    from environments.mpe import SCENARIOS
    from environments.mpe.reference import parity_errors, parity_variants
    from jaxdrive.testing import check_env

    records = []
    for name in SCENARIOS:
        for env in parity_variants(name):
            t0 = time.perf_counter()
            check_env(env, num_steps=env.max_cycles + 1, num_envs=2)
            (errors,) = parity_errors([env], seed=11, batch=transitions)
            ok = all(v <= _PARITY_TOL for v in errors.values())
            records.append(
                dict(bench="mpe_parity", env=repr(env), transitions=transitions, ok=ok, **errors)
            )
            worst = max(errors, key=errors.get)
            print(
                f"mpe_parity {env!r:<110} check_env ok, parity {'ok' if ok else 'FAIL'}  "
                f"worst {worst} {errors[worst]:.1e}  {time.perf_counter() - t0:.1f}s",
                flush=True,
            )
    return records


def run_mpe_suite(
    suite: str, repeats: int, runs: tuple | None = None, sink: Any = None
) -> list[dict[str, Any]]:
    """The records of ``suite``: ``mpe``, ``mpe_learning`` or ``mpe_parity`` (module
    docstring); ``mpe_quick`` is ``mpe`` at 16 envs × 20 steps (tests, CPUs). ``runs``:
    `learning_runs`' result when the caller checked the flags already; ``sink``
    (`experiments.benchmarks.run.RecordSink`) gets each learning record when finished."""
    from experiments.benchmarks.timing import device_info

    runs = runs or (learning_runs() if suite == "mpe_learning" else None)
    info = device_info()
    if suite in ENV_SIZES:
        steps = _STEPS if suite == "mpe" else 20
        records = _env_suite(ENV_SIZES[suite], steps, repeats)
    elif suite == "mpe_learning":
        records = _learning_suite(_SEEDS, *runs, info, sink)
    elif suite == "mpe_parity":
        records = _parity_suite(10_000)
    else:
        raise ValueError(f"unknown MPE suite {suite!r}")
    if suite != "mpe_learning":  # `_learning_suite` added it before handing each to the sink
        for rec in records:
            rec.update(info)
    return records
