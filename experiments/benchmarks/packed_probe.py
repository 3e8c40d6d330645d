"""Packed-key against exact insertion in the k-nearest kernels, timed inside the device.

``python -m experiments.benchmarks.packed_probe`` times `kernels.nearest_k_brute_batched`
and `kernels.nearest_k_sorted_batched` with ``packed_keys=False`` (the ``(d, j)`` lists:
five operations per slot) and ``True`` (integer keys: two per slot, `kernels._packed_lists`
to resolve), and the packed search with its resolution skipped (``no-resolve``: not exact,
the floor of the packed stream alone), on uniform positions and on Tag states after
``--env_steps`` random-action steps (agents piled against the walls make exact and near
ties, which cost the packed search re-sorts and re-searches). Each measurement is
``--inner`` calls in one `lax.scan` (each call's input depends on the previous output,
so nothing is hoisted; no host round trip between calls), median of ``--repeats``, per
call; the variants run interleaved twice in one process. ``equal`` says whether the
packed and exact lists agree on that state. ``--extra_slots`` and ``--brute_blocks``
add packed rows for other `kernels.PACKED_EXTRA_SLOTS` values and brute-force blocks
(``BM:warps``), ``--networks`` for other `kernels.PACKED_NETWORK` values, timed between
the two exact rows.
"""

from __future__ import annotations

import functools
import statistics
import time

import jax
import jax.numpy as jnp
from absl import app, flags
from jax import lax

from environments.tag_continuous import kernels
from experiments.benchmarks.timing import device_info
from jaxdrive import make

__all__ = ["define_flags", "env_states", "looped"]

FLAGS = flags.FLAGS
VARIANTS = ("exact", "packed", "no-resolve", "exact", "packed")


def define_flags() -> None:
    """The probe's flags (defined only when run as a program)."""
    flags.DEFINE_list("sizes", ["1000:10:100", "2000:5:995"], "N:taggers:runners")
    flags.DEFINE_list("env_steps", ["50", "90"], "Tag states after this many random steps")
    flags.DEFINE_integer("k", 10, "neighbours per agent")
    flags.DEFINE_integer("inner", 50, "calls per timed scan")
    flags.DEFINE_integer("repeats", 7, "timed scans (median reported)")
    flags.DEFINE_integer("brute_max_agents", 200, "brute force on env states up to this M")
    flags.DEFINE_list("extra_slots", [], "other PACKED_EXTRA_SLOTS values to time (packed)")
    flags.DEFINE_list("brute_blocks", [], "other brute-force blocks BM:warps to time (packed)")
    flags.DEFINE_list("networks", [], "other PACKED_NETWORK values to time (packed)")
    flags.DEFINE_bool("tiny", False, "tiny sizes (CPU smoke test)")


def looped(fn, inner: int):
    """``(x, y, g) -> scalar``: ``fn`` called ``inner`` times in one scan, each input
    shifted by a carry that depends on the previous call's lists (always ``+0``)."""

    def run(x, y, g):
        def body(c, _):
            idx, _ = fn(x + c, y, g)
            return c + (idx[0, 0, 0] == -7).astype(jnp.float32), None

        return lax.scan(body, jnp.float32(0), None, length=inner)[0]

    return jax.jit(run)


def _median_s(f, args, repeats: int) -> float:
    f(*args).block_until_ready()  # compile and warm up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        f(*args).block_until_ready()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def env_states(n: int, taggers: int, runners: int, steps: int, seed: int = 0):
    """``(x, y, in_game)`` ``[N, M]`` of Tag envs after ``steps`` random-action steps."""
    env, params = make("tag_continuous", num_taggers=taggers, num_runners=runners)
    state, _ = jax.vmap(lambda k: env.reset(k, params))(jax.random.split(jax.random.key(seed), n))

    @jax.jit
    def run(state, key):
        def body(s, k):
            ks = jax.random.split(k, n)
            a = jax.vmap(env.sample_actions)(ks)
            s, _ = jax.vmap(lambda s, a, k: env.step(k, s, a, params))(s, a, ks)
            return s, None

        return lax.scan(body, state, jax.random.split(key, steps))[0]

    s = run(state, jax.random.key(seed + 1))
    return s.x, s.y, s.in_game


def _no_resolve(lk, k, bits, dist):
    """`kernels._packed_lists` without the re-sort and the ambiguity test (timing only)."""
    del dist
    low = (1 << bits) - 1
    lists = tuple(jnp.where(key < kernels._INF_KEY, key & low, -1) for key in lk[:k])
    return lists, jnp.zeros(lk[0].shape, bool)


def main(argv: list[str]) -> None:
    del argv
    sizes = ["4:2:10"] if FLAGS.tiny else FLAGS.sizes
    inner, repeats = (2, 2) if FLAGS.tiny else (FLAGS.inner, FLAGS.repeats)
    info = device_info()
    print(f"# packed_probe on {info['device']} ({info['backend']}, jax {info['jax']}), "
          f"k = {FLAGS.k}, {inner} calls per scan, median of {repeats}; us per call")  # fmt: skip
    resolve = kernels._packed_lists
    for size in sizes:
        n, nt, nr = (int(v) for v in size.split(":"))
        m = nt + nr
        kx, ky = jax.random.split(jax.random.key(3))
        length = 20.0
        states = {
            "uniform": (
                jax.random.uniform(kx, (n, m)) * length,
                jax.random.uniform(ky, (n, m)) * length,
                jnp.ones((n, m), bool),
            )
        }
        for steps in FLAGS.env_steps:
            states[f"env{steps}"] = env_states(n, nt, nr, int(steps))
        for name, args in states.items():
            for method in ("brute", "sorted"):
                if method == "brute" and name != "uniform" and m > FLAGS.brute_max_agents:
                    continue
                base = (
                    kernels.nearest_k_brute_batched
                    if method == "brute"
                    else kernels.nearest_k_sorted_batched
                )
                times: dict[str, list[float]] = {}
                outs = {}
                default_extra = kernels.PACKED_EXTRA_SLOTS
                default_net = kernels.PACKED_NETWORK
                runs = [(v, {}, default_extra) for v in VARIANTS[:3]]
                for e in FLAGS.extra_slots:
                    runs.append((f"extra={e}", {}, int(e)))
                for net in FLAGS.networks:
                    runs.append((f"net={net}", {}, default_extra))
                for blk in FLAGS.brute_blocks if method == "brute" else []:
                    bm, w = (int(v) for v in blk.split(":"))
                    runs.append((f"BM={bm},w={w}", dict(block_rows=bm, num_warps=w), default_extra))
                runs += [(v, {}, default_extra) for v in VARIANTS[3:]]
                try:
                    for var, opts, extra in runs:
                        kernels._packed_lists = _no_resolve if var == "no-resolve" else resolve
                        kernels.PACKED_EXTRA_SLOTS = extra
                        net = var[4:] if var.startswith("net=") else default_net
                        kernels.PACKED_NETWORK = net
                        fn = functools.partial(base, k=FLAGS.k, packed_keys=var != "exact", **opts)
                        t = _median_s(looped(fn, inner), args, repeats)
                        times.setdefault(var, []).append(1e6 * t / inner)
                        if var in ("exact", "packed") and var not in outs:
                            outs[var] = jax.jit(fn)(*args)
                finally:
                    kernels._packed_lists = resolve
                    kernels.PACKED_EXTRA_SLOTS = default_extra
                    kernels.PACKED_NETWORK = default_net
                equal = all(
                    bool(jnp.array_equal(a, b))
                    for a, b in zip(outs["exact"], outs["packed"], strict=True)
                )
                cells = "  ".join(
                    f"{v} " + "/".join(f"{t:.1f}" for t in ts) for v, ts in times.items()
                )
                print(f"{n}x{m} {name:<8} {method:<6} {cells}  equal={equal}", flush=True)


if __name__ == "__main__":
    define_flags()
    app.run(main)
