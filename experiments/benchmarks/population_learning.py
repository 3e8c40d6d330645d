"""PBT learning benchmark (``--suite=population_learning``): PBT against a
fixed-hyper-parameter population of the same size and budget.

Task: DDPG on Pendulum-v1 (`experiments.configs.population`'s ``pendulum`` preset:
`experiments.configs.pendulum`'s settings, actor and critic learning rates, τ and
exploration noise drawn from wide ranges, members scored by deterministic evaluation
episodes). Both populations start from the same key, so from the same members with the
same hyper-parameters; they run the same compiled chunk program (``iterations_per_chunk``
iterations of every member, then their evaluation scores); PBT adds a selection round
(exploit and explore) every ``pbt.interval_chunks`` chunks (1: after every chunk but the
last), the fixed population none.
``--popl_seeds`` whole experiments run at once, vmapped over a seed axis.

After every chunk the host reads the scores ``[S, P]`` (the one transfer per chunk) and
notes the wall time since training started (compile excluded; reported apart). Per
seed:

* **time to target**: PBT's is the first chunk end at which its best member's score
  reaches ``--popl_target``; the fixed population's median member's is the median over
  members of each member's first such time (``None``: not reached), its best member's
  the earliest;
* **final return**: every member plays ``--popl_final_episodes`` fresh deterministic
  episodes; a population's best member is the one with the highest last score (chosen
  before the final episodes), its median the median over members (a diverged member,
  NaN, counted as the lowest; ``None`` where that is the median).

One JSON record with both curves (best and median score per chunk and seed, against
wall time) and the figures above; one printed line per population and per summary.

**Self-play on Tag** (``--popl_parts=league``, `league_records`): two leagues
(`algorithms.population.make_league`) on Tag (the ``advnorm`` preset in bfloat16,
``--popl_league_envs`` envs × 100 steps), one drawing each turn's opponent from the
other side's pool by ``--popl_league_sampling``, one always playing the opponent's
latest snapshot, each for ``--popl_league_env_steps`` env steps in turns of
``--popl_league_turn_iterations`` iterations, ``--popl_seeds`` seeds vmapped, the same
keys for both; side by side on two devices where there are two or more. Then each
run's taggers play one episode of ``--popl_league_eval_envs`` envs against every
held-out runner set: a randomly initialised one and the final runners of the other
seeds of both leagues (runners neither tagger trained against); the record holds runners
tagged per episode per set, their mean per seed, and the mean and standard deviation
over seeds.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

import algorithms
from experiments.benchmarks.timing import device_info

__all__ = [
    "PARTS",
    "league_records",
    "learning_config",
    "population_learning_records",
    "run_population",
    "summarize",
]

PARTS = ("pbt", "league")

FLAGS = flags.FLAGS
flags.DEFINE_integer("popl_members", 8, "members of each population", lower_bound=2)
flags.DEFINE_integer("popl_seeds", 3, "seeds of the whole experiment (vmapped)", lower_bound=1)
flags.DEFINE_integer("popl_env_steps", 100_000, "env steps per member", lower_bound=1)
flags.DEFINE_float("popl_target", -200.0, "target evaluation return")
flags.DEFINE_integer("popl_final_episodes", 32, "final evaluation episodes per member")
flags.DEFINE_list("popl_parts", ["pbt"], f"parts of --suite=population_learning, of {list(PARTS)}")
flags.DEFINE_enum(
    "popl_league_sampling", "prioritized", ["uniform", "prioritized"], "the league's opponents"
)
flags.DEFINE_integer("popl_league_env_steps", 20_000_000, "env steps of each league run")
flags.DEFINE_integer("popl_league_envs", 1000, "Tag envs of the league runs")
flags.DEFINE_integer("popl_league_turn_iterations", 10, "iterations per league turn")
flags.DEFINE_integer("popl_league_pool", 8, "snapshots in each side's pool")
flags.DEFINE_integer("popl_league_eval_envs", 64, "envs of each held-out evaluation episode")


def learning_config(members: int, env_steps: int, tiny: bool = False) -> Any:
    """The ``pendulum`` population config with ``members`` members training
    ``env_steps`` env steps each (``tiny``: its tiny sizes, for tests)."""
    from experiments.configs import population

    c = population.get_config("pendulum,tiny" if tiny else "pendulum")
    c.population.size = members
    c.population.tournament.leaderboard_size = 0
    c.total_env_steps = env_steps
    return c


@dataclasses.dataclass(frozen=True)
class _Programs:
    """The experiment's compiled programs, each over a leading seed axis ``S``."""

    init: Any  # keys [S, 2] -> PopulationState
    chunk: Any  # state -> state (a chunk of every member, then scores)
    select: Any  # state -> state (one PBT round)
    final: Any  # (state, keys [S, 2]) -> [S, P] final evaluation returns
    lower_s: float
    compile_s: float


def _compile(pop: Any, seeds: int, iterations: int, final_episodes: int) -> _Programs:
    """``pop``'s programs vmapped over ``seeds``, traced and lowered in turn from
    abstract arguments, then compiled concurrently."""
    final_pop = dataclasses.replace(
        pop, spec=dataclasses.replace(pop.spec, eval_episodes=final_episodes)
    )

    def chunk(state):
        state, metrics = pop.chunk(state, iterations)
        return pop.score(state, metrics)

    keys = jax.ShapeDtypeStruct((seeds, 2), jnp.uint32)
    t0 = time.perf_counter()
    shape = jax.eval_shape(jax.vmap(pop.init), keys)
    lowered = [
        jax.jit(jax.vmap(pop.init)).lower(keys),
        jax.jit(jax.vmap(chunk)).lower(shape),
        jax.jit(jax.vmap(pop.select)).lower(shape),
        jax.jit(jax.vmap(final_pop.evaluate)).lower(shape, keys),
    ]
    lower_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(lowered)) as ex:
        progs = list(ex.map(lambda low: low.compile(), lowered))
    compile_s = time.perf_counter() - t0
    return _Programs(*progs, lower_s=round(lower_s, 2), compile_s=round(compile_s, 2))


def run_population(
    progs: _Programs,
    keys: jax.Array,
    final_keys: jax.Array,
    num_chunks: int,
    pbt: bool,
    interval: int = 1,
) -> dict[str, np.ndarray]:
    """One vmapped experiment: ``num_chunks`` chunks (PBT: a selection round after every
    ``interval`` chunks, but not after the last). Returns ``times [C]`` (seconds since
    training started, at each chunk's end), ``scores [C, S, P]`` (each chunk's, before
    its selection round) and ``final [S, P]`` (the final evaluation)."""
    state = jax.block_until_ready(progs.init(keys))
    times, scores = [], []
    t0 = time.perf_counter()
    for c in range(num_chunks):
        state = progs.chunk(state)
        scores.append(np.asarray(state.scores))  # the loop's only transfer
        times.append(time.perf_counter() - t0)
        if pbt and (c + 1) % interval == 0 and c + 1 < num_chunks:
            state = progs.select(state)  # timed with the next chunk, which needs it
    final = np.asarray(progs.final(state, final_keys))
    return {"times": np.asarray(times), "scores": np.stack(scores), "final": final}


def _first_times(times: np.ndarray, scores: np.ndarray, target: float) -> np.ndarray:
    """``[S, P]`` the first time each member's score reaches ``target`` (inf: never)."""
    hit = np.nan_to_num(scores, nan=-np.inf) >= target  # [C, S, P]
    first = np.where(hit.any(0), hit.argmax(0), -1)
    return np.where(first >= 0, times[np.maximum(first, 0)], np.inf)


def _median(x: np.ndarray) -> np.ndarray:
    """Median over the last axis, a NaN (a diverged member) counted as the lowest."""
    return np.median(np.nan_to_num(x, nan=-np.inf), -1)


def _finite(x: np.ndarray) -> list[float | None]:
    return [None if not np.isfinite(v) else round(float(v), 3) for v in np.ravel(x)]


def summarize(pbt: dict, fixed: dict, target: float) -> dict[str, Any]:
    """Per-seed times to target and final returns of PBT (its best member), the fixed
    population's median member and its best member (see the module docstring)."""
    t_pbt = _first_times(pbt["times"], pbt["scores"], target).min(1)  # best member's
    t_fixed = _first_times(fixed["times"], fixed["scores"], target)  # [S, P]
    seeds = np.arange(t_fixed.shape[0])

    def best_final(run):
        last = np.nan_to_num(run["scores"][-1], nan=-np.inf)
        return run["final"][seeds, last.argmax(1)]

    return {
        "time_to_target_s": {
            "pbt": _finite(t_pbt),
            "fixed_median_member": _finite(np.median(t_fixed, 1)),
            "fixed_best_member": _finite(t_fixed.min(1)),
        },
        "final_return": {
            "pbt_best": _finite(best_final(pbt)),
            "pbt_median": _finite(_median(pbt["final"])),
            "fixed_best": _finite(best_final(fixed)),
            "fixed_median": _finite(_median(fixed["final"])),
        },
    }


def _curve(run: dict) -> dict[str, Any]:
    s = np.nan_to_num(run["scores"], nan=-np.inf)
    return {
        "wall_s": _finite(run["times"]),
        "best": [_finite(x) for x in s.max(2)],  # [C][S]
        "median": [_finite(x) for x in _median(s)],
        "training_s": round(float(run["times"][-1]), 3),
    }


def pbt_record(
    members: int, seeds: int, env_steps: int, target: float, final_episodes: int, tiny: bool
) -> dict[str, Any]:
    """The PBT part's record (see the module docstring)."""
    config = learning_config(members, env_steps, tiny)
    pop = algorithms.make_population_train(config)
    iters = int(config.run.iterations_per_chunk)
    num_chunks = max(1, pop.trainer.num_iterations // iters)
    progs = _compile(pop, seeds, iters, final_episodes)
    root = jax.random.key(int(config.seed))
    keys = jax.random.key_data(jax.random.split(root, seeds))
    final_keys = jax.random.key_data(jax.random.split(jax.random.fold_in(root, 1), seeds))
    run_population(progs, keys, final_keys, 2, pbt=True)  # warm-up: every program's first call
    runs = {}
    for name in ("pbt", "fixed"):
        runs[name] = run_population(
            progs, keys, final_keys, num_chunks, name == "pbt", pop.spec.interval_chunks
        )
        print(
            f"population_learning {name:<5} {members} members x {seeds} seeds  "
            f"{num_chunks} chunks in {runs[name]['times'][-1]:.1f} s  best final "
            f"{_finite(np.nanmax(runs[name]['final'], 1))}",
            flush=True,
        )
    rec = {
        "bench": "population_learning",
        "env": config.env_name,
        "algorithm": config.algorithm,
        "members": members,
        "seeds": seeds,
        "env_steps_per_member": num_chunks * iters * pop.trainer.env_steps_per_iteration,
        "chunk_iterations": iters,
        "eval_episodes": pop.spec.eval_episodes,
        "final_episodes": final_episodes,
        "hparams": {s.label: [s.range.low, s.range.high, s.range.scale] for s in pop.slots},
        "target": target,
        "lower_s": progs.lower_s,
        "compile_s": progs.compile_s,
        **summarize(runs["pbt"], runs["fixed"], target),
        "curves": {name: _curve(run) for name, run in runs.items()},
    }
    for what in ("time_to_target_s", "final_return"):
        for k, v in rec[what].items():
            print(f"population_learning {what:<16} {k:<20} {v}", flush=True)
    return rec


def _train_league(league: Any, keys: jax.Array, turns: int, iterations: int) -> tuple[Any, float]:
    """``turns`` turns of ``league`` (sides alternating, the first side first) on the
    seeds of ``keys [S, 2]`` (on the device ``keys`` are committed to); returns the final
    state and the wall seconds (compile included)."""
    t0 = time.perf_counter()
    state = jax.jit(jax.vmap(league.init))(keys)
    programs = {
        side: jax.jit(jax.vmap(lambda st, side=side: league.chunk(st, iterations, side)[0]))
        for side in league.sides
    }
    for t in range(turns):
        state = programs[league.sides[t % 2]](state)
    jax.block_until_ready(state)
    return state, time.perf_counter() - t0


def _train_leagues(
    leagues: dict[str, Any], keys: jax.Array, turns: dict[str, int], iterations: int
) -> dict[str, tuple[Any, float]]:
    """`_train_league` for each of ``leagues``: side by side, one per device, where
    there are as many devices as leagues (each league's wall time is then its own,
    measured while the other runs); one after the other on the first device otherwise.
    The final states come back on the first device."""
    devices = jax.devices()
    first = devices[0]
    if len(devices) < len(leagues):
        return {n: _train_league(lg, keys, turns[n], iterations) for n, lg in leagues.items()}

    def run(i: int, name: str) -> tuple[Any, float]:
        with jax.default_device(devices[i]):
            keys_i = jax.device_put(keys, devices[i])
            state, wall = _train_league(leagues[name], keys_i, turns[name], iterations)
        return jax.device_put(state, first), wall

    with ThreadPoolExecutor(len(leagues)) as ex:
        futures = {n: ex.submit(run, i, n) for i, n in enumerate(leagues)}
        return {n: f.result() for n, f in futures.items()}


def league_records(
    sampling: str,
    seeds: int,
    env_steps: int,
    num_envs: int,
    turn_iterations: int,
    pool_size: int,
    eval_envs: int,
    tiny: bool = False,
) -> dict[str, Any]:
    """The self-play part's record (see the module docstring); ``tiny``: Tag's tiny
    preset (CPUs)."""
    import jaxdrive
    from algorithms.population import make_league
    from experiments.benchmarks.training import evaluate_tag_tagging, load_config

    preset = "tiny" if tiny else "advnorm"
    over: dict[str, Any] = {}
    if not tiny:  # the learning suite's Tag run: mixed precision
        over = {"num_envs": num_envs, "num_steps": 100}
        over.update({f"policies.{p}.compute_dtype": "bfloat16" for p in ("tagger", "runner")})
    config = load_config("tag_continuous", preset, total_env_steps=env_steps, **over)
    env, env_params = jaxdrive.make(config.env_name, **dict(config.env_kwargs))
    keys = jax.random.key_data(jax.random.split(jax.random.key(int(config.seed)), seeds))
    leagues = {
        name: make_league(config, env, env_params, pool_size=pool_size, sampling=name)
        for name in ("latest", sampling)
    }
    per_turn = turn_iterations * leagues["latest"].trainers["tagger"].env_steps_per_iteration
    turns = {name: max(2, env_steps // per_turn) for name in leagues}
    trained = _train_leagues(leagues, keys, turns, turn_iterations)
    runs: dict[str, dict[str, Any]] = {}
    for name, (state, wall) in trained.items():
        runs[name] = {"league": leagues[name], "state": state, "wall": wall, "turns": turns[name]}
        print(
            f"population_learning league {name:<11} {turns[name]} turns in {wall:.1f} s", flush=True
        )
    evaluator = runs["latest"]["league"].trainers["tagger"]  # one tagging program for all

    def side(name: str, s: int, policy: str) -> dict[str, Any]:
        ps = jax.tree.map(lambda x: x[s], runs[name]["state"].live[policy])
        return {"params": ps.params, "obs_norm": ps.obs_norm}

    fresh = evaluator.init(jax.random.PRNGKey(10_000)).policies["runner"]
    held = {"random": lambda s: {"params": fresh.params, "obs_norm": fresh.obs_norm}}
    for name in runs:
        for j in range(seeds):
            held[f"{name}/seed{j}"] = lambda s, name=name, j=j: side(name, j, "runner")
    out: dict[str, Any] = {}
    for name in runs:
        per_seed = []
        for s in range(seeds):
            sets = [k for k in held if not k.endswith(f"/seed{s}")]
            tags = {
                k: evaluate_tag_tagging(
                    env, env_params, evaluator,
                    {"tagger": side(name, s, "tagger"), "runner": held[k](s)},
                    eval_envs, seed=s,
                )["tags_per_episode_trained_taggers"]
                for k in sets
            }  # fmt: skip
            per_seed.append({"mean": float(np.mean(list(tags.values()))), "by_runners": tags})
        means = [p["mean"] for p in per_seed]
        out[name] = {
            "tags_per_episode_mean": float(np.mean(means)),
            "tags_per_episode_std": float(np.std(means)),
            "per_seed": per_seed,
            "wall_s_incl_compile": round(runs[name]["wall"], 2),
            "turns": runs[name]["turns"],
        }
        print(
            f"population_learning league {name:<11} taggers vs held-out runners: "
            f"{np.mean(means):.2f} ± {np.std(means):.2f} tags per episode "
            f"(per seed {[round(m, 2) for m in means]})",
            flush=True,
        )
    return {
        "bench": "population_learning_league",
        "env": config.env_name,
        "num_envs": int(config.num_envs),
        "env_steps_per_run": env_steps,
        "seeds": seeds,
        "pool_size": pool_size,
        "turn_iterations": turn_iterations,
        "eval_envs": eval_envs,
        "leagues": out,
    }


def population_learning_records(
    members: int | None = None,
    seeds: int | None = None,
    env_steps: int | None = None,
    target: float | None = None,
    final_episodes: int | None = None,
    tiny: bool = False,
    parts: tuple[str, ...] = ("pbt",),
) -> list[dict[str, Any]]:
    """The suite's records (see the module docstring), one per part of ``parts`` (the
    ``--popl_parts`` flag when run by `experiments.benchmarks.run`); ``None`` arguments
    come from the ``--popl_*`` flags; ``tiny``: the configs' tiny sizes (CPUs, tests)."""
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise ValueError(f"--popl_parts: unknown {unknown}; known: {list(PARTS)}")
    seeds = seeds or FLAGS.popl_seeds
    info = device_info()
    records = []
    if "pbt" in parts:
        rec = pbt_record(
            members or FLAGS.popl_members,
            seeds,
            env_steps or FLAGS.popl_env_steps,
            FLAGS.popl_target if target is None else target,
            final_episodes or FLAGS.popl_final_episodes,
            tiny,
        )
        records.append({**rec, **info})
    if "league" in parts:
        rec = league_records(
            FLAGS.popl_league_sampling,
            seeds,
            FLAGS.popl_league_env_steps,
            FLAGS.popl_league_envs,
            FLAGS.popl_league_turn_iterations,
            FLAGS.popl_league_pool,
            FLAGS.popl_league_eval_envs,
            tiny,
        )
        records.append({**rec, **info})
    return records
