"""Micro-benchmark of TagContinuous's k-nearest kernels: brute force against sorted.

``python -m experiments.benchmarks.knn_probe`` builds random positions on the default
device for each ``(N envs, M agents)`` size (uniform in ``[0, L]²``, all in the game),
checks on a few states (uniform, clustered, half out of the game, coarse lattice with
exact ties) that the brute-force kernel (`kernels.nearest_k_brute_batched`) returns
what the plain-JAX search (`neighbors.nearest_k`) returns and the sorted search
(`kernels.nearest_k_sorted_batched`) what the brute-force kernel returns, then times (jitted
and compiled ahead, compile excluded, median of ``--repeats`` calls each ended by
``block_until_ready``) the brute-force kernel, the sorted search for each block
configuration, and the sorted search's preparation alone (curve sort, candidate
partition, chunk boxes). It prints one table row per (size, method, configuration).

Columns: ``ms`` median time of one call (all ``N`` envs); ``x brute`` speed-up over
the brute-force kernel; ``pairs`` query/candidate pairs the sorted kernel streamed
over ``M²`` on the uniform state (`kernels.sorted_search_stats`); ``check``: ``exact``
(``idx`` and ``valid`` equal on every check state), ``near-tie(n)`` (``n`` rows differ,
each only where the two picks are within 1e-5 relative in distance: FMA contraction
can differ between the two kernels), or ``MISMATCH(n)``.

Configurations ``--configs`` are ``BM:BC:U:T[:O[:P]]`` (query rows per program,
candidates per chunk, unroll, tie_check 1/0, chunk order 0 curve / 1 best-first / 2 keyed,
packed keys 0/1; ``U = 0`` and absent fields take the defaults); ``--brute_configs``
are ``BM:U:W[:P]`` (rows, unroll, warps, packed keys; 0: default block). ``--tiny`` runs small sizes
(CPU: interpret mode) as a smoke test.
"""

from __future__ import annotations

import functools
import statistics
from typing import Any

import jax
import jax.numpy as jnp
from absl import app, flags

from environments.tag_continuous import kernels, neighbors
from experiments.benchmarks.timing import device_info, time_compiled

__all__ = ["check_equal", "define_flags", "make_states", "parse_configs"]

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the probe's flags (only when run as a program: other probes and the
    benchmark command use some of the same names, and the tests import them all)."""
    flags.DEFINE_list("sizes", ["2000:1000", "1000:110", "10:10100"], "N:M sizes")
    flags.DEFINE_list(
        "configs",
        ["32:16:8:1", "32:8:8:1", "32:32:8:1", "64:16:8:1", "32:16:8:0"],
        "sorted-search configurations BM:BC:U:tie_check[:order[:packed]] (U = 0: default;"
        " order 0 curve, 1 best-first, 2 keyed; packed 0 exact insertion, 1 packed keys)",
    )
    flags.DEFINE_list(
        "brute_configs",
        [],
        "other brute-force kernel blocks BM:U:W[:P] (query rows, unroll, warps; 0: default;"
        " P packed keys 0/1), timed and checked against the default one, e.g. 32:8:1:0",
    )
    flags.DEFINE_integer("k", 10, "neighbours per agent")
    flags.DEFINE_float("grid_length", 20.0, "side L of the square the agents live in")
    flags.DEFINE_integer("repeats", 5, "timed calls per measurement (median reported)")
    flags.DEFINE_bool("check", True, "check sorted == brute force on a few states")
    flags.DEFINE_bool("stats", True, "report the fraction of pairs the sorted kernel streamed")
    flags.DEFINE_integer("seed", 0, "random seed")
    flags.DEFINE_bool("tiny", False, "small sizes and configurations (CPU smoke test)")


_TINY_SIZES = ["2:300", "8:40"]
_TINY_CONFIGS = ["32:16:0:1", "32:8:0:0"]


def parse_configs(specs: list[str]) -> list[dict[str, Any]]:
    """``["BM:BC:U:T[:O[:P]]", ...]`` -> keyword options of
    `kernels.nearest_k_sorted_batched` (``O``: chunk order, 0 ``"curve"``, 1 ``"best"``,
    2 ``"keyed"``; default `kernels.CHUNK_ORDER`; ``P``: packed keys 0/1, default automatic)."""
    out = []
    for spec in specs:
        vals = [int(v) for v in spec.split(":")]
        bm, bc, u, t = vals[:4]
        opts = dict(block_rows=bm, chunk_size=bc, block_cols=u or None, tie_check=bool(t))
        opts["chunk_order"] = kernels.CHUNK_ORDERS[vals[4]] if len(vals) > 4 else None
        opts["packed_keys"] = bool(vals[5]) if len(vals) > 5 else None
        out.append(opts)
    return out


def make_states(key: jax.Array, n: int, m: int, length: float) -> dict[str, tuple]:
    """Check/timing states on the device: name -> ``(x, y, in_game)``, each ``[N, M]``.

    ``uniform`` (the timed one): uniform in ``[0, L]²``, all in the game. ``cluster``:
    everyone within ``1e-3`` of one point. ``half_out``: uniform, about half out of
    the game. ``lattice``: a coarse lattice (many exact distance ties), 80% in.
    """
    kx, ky, kg, kl = jax.random.split(key, 4)
    x = jax.random.uniform(kx, (n, m), jnp.float32, 0.0, length)
    y = jax.random.uniform(ky, (n, m), jnp.float32, 0.0, length)
    ones = jnp.ones((n, m), bool)
    u = jax.random.uniform(kg, (n, m))
    lat = jax.random.randint(kl, (2, n, m), 0, 16).astype(jnp.float32) * (length / 16)
    return {
        "uniform": (x, y, ones),
        "cluster": (7.0 + x * (1e-3 / length), 3.0 + y * (1e-3 / length), ones),
        "half_out": (x, y, u < 0.5),
        "lattice": (lat[0], lat[1], u < 0.8),
    }


@jax.jit
def _diff_rows(x, y, idx_a, valid_a, idx_b, valid_b):
    """Rows that differ, and how many of them differ beyond a near-tie."""
    rows_differ = jnp.any((idx_a != idx_b) | (valid_a != valid_b), axis=-1)  # [N, M]

    def d2(idx):
        dx = x[:, :, None] - jnp.take_along_axis(x[:, None, :], idx, axis=2)
        dy = y[:, :, None] - jnp.take_along_axis(y[:, None, :], idx, axis=2)
        return dx * dx + dy * dy

    da, db = d2(idx_a), d2(idx_b)
    near = jnp.abs(da - db) <= 1e-5 * jnp.maximum(jnp.abs(da), jnp.abs(db))
    bad = jnp.any((valid_a != valid_b) | (valid_a & (idx_a != idx_b) & ~near), axis=-1)
    return jnp.sum(rows_differ), jnp.sum(bad)


def check_equal(results: list[tuple], states: list[tuple]) -> str:
    """``results``: ``[(idx_a, valid_a, idx_b, valid_b)]`` per state -> a verdict."""
    differ = bad = 0
    for (ia, va, ib, vb), (x, y, _) in zip(results, states, strict=True):
        d, b = _diff_rows(x, y, ia, va, ib, vb)
        differ += int(d)
        bad += int(b)
    if bad:
        return f"MISMATCH({bad})"
    return f"near-tie({differ})" if differ else "exact"


def _compile(fn, *args):
    return jax.jit(fn).lower(*args).compile()


def _median_ms(compiled, args, repeats) -> tuple[float, float]:
    first, times = time_compiled(lambda: compiled(*args), repeats)
    return first, 1e3 * statistics.median(times)


def _time_and_check(fn, args, repeats, check_states, brute_out) -> tuple[float, str]:
    """``fn`` compiled on ``args``: its median ms, and (with ``--check``) the verdict of
    its lists against the default brute-force kernel's on ``check_states``."""
    compiled = _compile(fn, *args)
    _, ms = _median_ms(compiled, args, repeats)
    if not FLAGS.check:
        return ms, "-"
    res = [(*compiled(*s), *b) for s, b in zip(check_states, brute_out, strict=True)]
    return ms, check_equal(res, check_states)


def main(argv: list[str]) -> None:
    del argv
    sizes = _TINY_SIZES if FLAGS.tiny else FLAGS.sizes
    configs = parse_configs(_TINY_CONFIGS if FLAGS.tiny else FLAGS.configs)
    repeats = 2 if FLAGS.tiny else FLAGS.repeats
    k = FLAGS.k
    info = device_info()
    print(f"# knn_probe on {info['device']} ({info['backend']}, jax {info['jax']}), k = {k}, "
          f"L = {FLAGS.grid_length}, median of {repeats}", flush=True)  # fmt: skip
    header = f"{'N':>6} {'M':>6} {'method':<12} {'BM':>4} {'BC':>4} {'U':>3} {'tie':>4}"
    header += f" {'ms':>9} {'x brute':>8} {'pairs':>6}  check"
    print(header, flush=True)
    key = jax.random.key(FLAGS.seed)
    for size in sizes:
        n, m = (int(v) for v in size.split(":"))
        key, sub = jax.random.split(key)
        states = make_states(sub, n, m, FLAGS.grid_length)
        args = states["uniform"]
        check_states = list(states.values())

        brute = _compile(functools.partial(kernels.nearest_k_brute_batched, k=k), *args)
        _, brute_ms = _median_ms(brute, args, repeats)
        brute_out = [brute(*s) for s in check_states] if FLAGS.check else []
        verdict = "-"
        if FLAGS.check:  # the brute-force kernel against the plain-JAX search
            ref = jax.jit(jax.vmap(lambda x, y, g: neighbors.nearest_k(x, y, g, k)))
            res = [(*b, *ref(*s)) for s, b in zip(check_states, brute_out, strict=True)]
            verdict = check_equal(res, check_states)
        row = f"{n:>6} {m:>6} {'brute':<12} {'':>4} {'':>4} {'':>3} {'':>4}"
        print(f"{row} {brute_ms:>9.3f} {1.0:>8.2f} {1.0:>6.3f}  {verdict}", flush=True)

        for spec in FLAGS.brute_configs:  # other blocks of the brute-force kernel
            bm, u, w, *p = (int(v) for v in spec.split(":"))
            fn = functools.partial(
                kernels.nearest_k_brute_batched, k=k, block_rows=bm or None, block_cols=u or None,
                num_warps=w or None, packed_keys=bool(p[0]) if p else None,
            )  # fmt: skip
            ms, verdict = _time_and_check(fn, args, repeats, check_states, brute_out)
            name = f"brute w{w or '-'}" + (f" p{p[0]}" if p else "")
            row = f"{n:>6} {m:>6} {name:<12} {bm:>4} {'':>4} {u:>3} {'':>4}"
            print(f"{row} {ms:>9.3f} {brute_ms / ms:>8.2f} {1.0:>6.3f}  {verdict}", flush=True)

        for i, opts in enumerate(configs):
            fn = functools.partial(kernels.nearest_k_sorted_batched, k=k, **opts)
            ms, verdict = _time_and_check(fn, args, repeats, check_states, brute_out)
            pairs = float("nan")
            if FLAGS.stats:
                stats_fn = _compile(
                    functools.partial(kernels.sorted_search_stats, k=k, **opts), *args
                )
                pairs = float(jnp.mean(stats_fn(*args)[2]))
            u = opts["block_cols"] or 0
            name = "sorted" if opts["chunk_order"] is None else f"sorted-{opts['chunk_order']}"
            if opts["packed_keys"] is not None:
                name += f" p{int(opts['packed_keys'])}"
            row = f"{n:>6} {m:>6} {name:<12} {opts['block_rows']:>4} "
            row += f"{opts['chunk_size']:>4} {u:>3} {int(opts['tie_check']):>4}"
            print(f"{row} {ms:>9.3f} {brute_ms / ms:>8.2f} {pairs:>6.3f}  {verdict}", flush=True)
            if i == 0:  # the preparation alone (XLA: curve sort, partition, boxes)
                bm, bc = opts["block_rows"], opts["chunk_size"]
                sort_only = _compile(lambda x, y, g: kernels.spatial_order(x, y), *args)
                _, sort_ms = _median_ms(sort_only, args, repeats)
                prep = _compile(lambda x, y, g: kernels.sorted_inputs(x, y, g, bm, bc), *args)
                _, prep_ms = _median_ms(prep, args, repeats)
                for name, t in (("sort", sort_ms), ("prep", prep_ms)):
                    row = f"{n:>6} {m:>6} {name:<12} {bm:>4} {bc:>4} {'':>3} {'':>4}"
                    print(f"{row} {t:>9.3f} {'':>8} {'':>6}  -", flush=True)


if __name__ == "__main__":
    define_flags()
    app.run(main)
