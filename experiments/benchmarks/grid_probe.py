"""Micro-benchmark of the per-query grid search against the sorted search (search alone).

``python -m experiments.benchmarks.grid_probe`` checks, then times, the k-nearest
searches on the default device:

* **check**: `grid_knn.nearest_k_grid_batched` against the plain-JAX `neighbors.nearest_k`
  on `knn_probe.make_states`' states (uniform, clustered, half out, lattice with exact
  ties) and on Tag states (WarpDrive's config, ``--check_envs`` envs after 0 and 60
  random steps), with ``queries="all"`` (every row equal) and ``"in_game"`` (in-game rows
  equal, the others empty). Verdicts as `knn_probe.check_equal`.
* **time**: for each size ``N:M``, Tag states after ``--steps`` random steps (the part
  of an episode the env benchmark times), the sorted search (`kernels` defaults) and the
  grid search for each ``--unrolls`` and both ``queries``; median of ``--repeats``
  compiled calls. ``trips`` is the grid search's candidate loads per block of 32 lanes
  (`grid_knn.grid_search_stats`, mean over blocks of all agents; the sorted search streams
  about 124 per block at 2000 × 1000). ``--repeats`` is the benchmark command's flag.

Rows are appended to ``--probe_out`` as JSON lines. ``--tiny`` runs small sizes (CPU:
interpret mode) as a smoke test.
"""

from __future__ import annotations

import functools
import statistics
from typing import Any

import jax
import jax.numpy as jnp
from absl import app, flags

from environments.tag_continuous import grid_knn, kernels, neighbors
from experiments.benchmarks.knn_obs_probe import check_states, make_env
from experiments.benchmarks.knn_probe import check_equal, make_states
from experiments.benchmarks.timing import append_jsonl, device_info, time_compiled

__all__ = ["check_prep", "check_rows", "define_flags", "probe", "tag_states"]

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The probe's flags (defined only when run as a program)."""
    flags.DEFINE_list("sizes", ["2000:1000"], "N:M sizes timed (Tag: 5 taggers, M - 5 runners)")
    flags.DEFINE_list("unrolls", ["1", "2", "4"], "grid search unrolls U timed")
    flags.DEFINE_integer("k", 10, "neighbours")
    flags.DEFINE_integer("steps", 50, "random Tag steps before the timed states")
    flags.DEFINE_integer("check_envs", 64, "envs of the check states")
    flags.DEFINE_string("probe_out", "", "JSON-lines file to append to (none if empty)")
    flags.DEFINE_bool("tiny", False, "tiny sizes (CPU smoke test)")


def tag_states(n: int, m: int, k: int, steps: tuple[int, ...]) -> dict[str, tuple]:
    """Tag positions after each of ``steps`` random steps: name -> ``(x, y, in_game)``."""
    env, params = make_env(5, m - 5, k, "pallas")
    out = {}
    for s in steps:
        st = check_states(env, params, n, max(s, 1))["stepped" if s else "reset"]
        out[f"tag{s}"] = (st.x, st.y, st.in_game)
    return out


def check_rows(k: int, states: dict[str, tuple], queries: str) -> str:
    """The grid search's verdict against `neighbors.nearest_k` on ``states``."""
    ref = jax.jit(jax.vmap(functools.partial(neighbors.nearest_k, k=k)))
    grid = jax.jit(lambda x, y, g: grid_knn.nearest_k_grid_batched(x, y, g, k, queries=queries))
    results = []
    for x, y, g in states.values():
        ri, rv = ref(x, y, g)
        if queries == "in_game":
            gm = g[:, :, None]
            ri = jnp.where(gm, ri, jnp.arange(x.shape[1], dtype=jnp.int32)[None, :, None])
            rv = rv & gm
        results.append((*grid(x, y, g), ri, rv))
    return check_equal(results, list(states.values()))


def check_prep(x, y, g) -> str:
    """The compiled preparation's outputs against interpret mode's (``prm``'s scale may
    differ in its last bits: the division), ``"equal"`` or what differs. On the CPU both
    sides run in interpret mode (a smoke test of the probe, not of the lowering)."""
    run = lambda interp: jax.jit(lambda a, b, c: grid_knn._grid_prep(a, b, c, interp))(x, y, g)
    names = ("xc", "yc", "oc", "cs", "sat", "prm")
    got, want = run(jax.default_backend() == "cpu"), run(True)
    bad = []
    mp = got[0].shape[1] // 2  # xc, yc, oc: [N, 2·MP], the tail unwritten
    for name, a, b in zip(names, got, want, strict=True):
        if name in ("xc", "yc", "oc"):
            a, b = a[:, :mp], b[:, :mp]
        if name == "prm":
            ok = bool(jnp.allclose(a, b, rtol=1e-6))
        else:
            ok = bool(jnp.array_equal(a, b))
        if not ok:
            bad.append(name)
    return "equal" if not bad else "DIFFER: " + ",".join(bad)


def _ms(fn, args, repeats: int) -> float:
    compiled = jax.jit(fn).lower(*args).compile()
    _, times = time_compiled(lambda: compiled(*args), repeats)
    return 1e3 * statistics.median(times)


def probe(
    sizes: list[str], unrolls: list[int], k: int, steps: int, check_envs: int, repeats: int,
    probe_out: str = "", check_tag_steps: tuple[int, ...] = (0, 60),
) -> list[dict[str, Any]]:  # fmt: skip
    """Checks and times as the module doc says (the Tag check states after each of
    ``check_tag_steps`` random steps); prints the table, returns the records (appended
    to ``probe_out`` too when given)."""
    info = device_info()
    print(f"device: {info['device']}  jax {info['jax']}")
    records: list[dict[str, Any]] = []

    def emit(rec: dict[str, Any]) -> None:
        records.append(rec)
        if probe_out:
            append_jsonl(probe_out, rec)

    check_m = int(sizes[0].split(":")[1])
    states = make_states(jax.random.key(0), check_envs, check_m, 20.0)
    states.update(tag_states(check_envs, check_m, k, check_tag_steps))
    for name, (x, y, g) in states.items():
        verdict = check_prep(x[:4], y[:4], g[:4])
        print(f"prep {name}: {verdict}")
        emit({"probe": "grid_prep", "m": check_m, "state": name, "verdict": verdict, **info})
    for queries in grid_knn.GRID_QUERIES:
        verdict = check_rows(k, states, queries)
        print(f"check M={check_m} k={k} queries={queries}: {verdict}")
        emit({"probe": "grid_check", "m": check_m, "k": k, "queries": queries,
              "verdict": verdict, **info})  # fmt: skip
    print(f"{'N':>6} {'M':>6} {'search':<18} {'ms':>9} {'trips':>7}")
    for size in sizes:
        n, m = (int(v) for v in size.split(":"))
        x, y, g = tag_states(n, m, k, (steps,))[f"tag{steps}"]
        rows: list[tuple[str, float, float | None]] = []
        sorted_fn = functools.partial(kernels._lists_batched, k=k, method="sorted")
        rows.append(("sorted", _ms(sorted_fn, (x, y, g), repeats), None))
        for queries in grid_knn.GRID_QUERIES:
            _, _, trips = grid_knn.grid_search_stats(x, y, g, k, queries=queries)
            per_block = float(jnp.mean(trips))
            for u in unrolls:
                fn = functools.partial(grid_knn._grid_search, k=k, queries=queries, block_cols=u)
                rows.append((f"grid {queries} U={u}", _ms(fn, (x, y, g), repeats), per_block))
        for name, ms, trips in rows:
            t = "-" if trips is None else f"{trips:.1f}"
            print(f"{n:>6} {m:>6} {name:<18} {ms:>9.4f} {t:>7}")
            emit({"probe": "grid_time", "num_envs": n, "m": m, "k": k, "search": name,
                  "ms": ms, "trips": trips, "steps": steps, **info})  # fmt: skip
    return records


def main(argv: list[str]) -> None:
    del argv
    tiny = FLAGS.tiny
    probe(
        ["4:100"] if tiny else FLAGS.sizes, [int(u) for u in FLAGS.unrolls], FLAGS.k,
        FLAGS.steps, 2 if tiny else FLAGS.check_envs, FLAGS.repeats, FLAGS.probe_out,
    )  # fmt: skip


if __name__ == "__main__":
    define_flags()
    app.run(main)
