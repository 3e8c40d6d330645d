"""Reads an Nsight Compute source export: where a kernel's instructions and stalls go.

Nsight Compute (``ncu``) is on the GPU machine (``/usr/local/cuda/bin/ncu``). Profile a
few launches of the Tag kernels, then export the SASS with its per-instruction counters::

    ncu --target-processes all --kernel-name regex:"tag_knn_obs|tag_nearest_k_grid_prep" \\
        --launch-skip 2 --launch-count 3 --set full --import-source no -o rep python3 t.py
    ncu --import rep.ncu-rep --page source --print-source sass --csv > sass.csv
    ncu --import rep.ncu-rep --page raw --csv > raw.csv      # every collected metric

where ``t.py`` runs a few steps (e.g. ``time_env_steps(env, params, 2000, 4, 1)`` on
`experiments.benchmarks.tag_config.make_tag`'s env; no `jax.profiler` trace, whose CUPTI
session conflicts with ncu). Then::

    python -m experiments.benchmarks.ncu_sass --csv=sass.csv --kernel=tag_knn_obs

prints, for that kernel: warp instructions by opcode (share, stall samples), the stall
reasons over all samples, and the ``--top`` instructions by stall samples with their
execution count and L2 sectors (theoretical, and the excess over a coalesced access).

Caution (2026-11-24): ``--set full`` on the grid search kernel did not finish within 400
s twice (the writer, the taggers' writer and the preparation took 190 s together);
give ncu a hard limit that also ends its child (``timeout -s KILL`` on the whole
pipeline) and write its output to a file rather than through ``grep``.
"""

from __future__ import annotations

import collections
import csv
import io
from typing import Any

from absl import app, flags

__all__ = ["read_kernels", "summarize"]

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The script's flags (defined only when run as a program)."""
    flags.DEFINE_string("csv", None, "ncu --page source --print-source sass --csv output")
    flags.DEFINE_string("kernel", None, "kernel name (default: every kernel in the file)")
    flags.DEFINE_integer("top", 20, "hottest instructions to list")


def read_kernels(text: str) -> dict[str, list[dict[str, str]]]:
    """The export's kernels: ``{name: [row per SASS instruction]}`` (rows keyed by the
    CSV header: ``Address``, ``Source``, ``Instructions Executed``, ``stall_*``, ...).
    A repeated name gets ``#2``, ``#3``, ... appended."""
    out: dict[str, list[dict[str, str]]] = {}
    for block in text.split('"Kernel Name",')[1:]:
        head, _, rest = block.partition("\n")
        name = head.strip().strip(",").strip('"')
        key, i = name, 1
        while key in out:
            i += 1
            key = f"{name}#{i}"
        out[key] = list(csv.DictReader(io.StringIO(rest)))
    return out


def _int(v: Any) -> int:
    try:
        return int(float(str(v).replace(",", "")))
    except ValueError:
        return 0


def _opcode(source: str) -> str:
    words = source.split()
    if not words:
        return "?"
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def summarize(rows: list[dict[str, str]], top: int = 20) -> list[str]:
    """Printable lines for one kernel's rows (`read_kernels`): opcode shares of the
    executed warp instructions, stall reasons, and the ``top`` instructions by samples."""
    if not rows:
        return ["(no instructions)"]
    stalls = [k for k in rows[0] if k.startswith("stall_") and "Not Issued" not in k]
    executed = collections.Counter()
    samples_by_op = collections.Counter()
    stall_total = collections.Counter()
    for r in rows:
        op = _opcode(r.get("Source", ""))
        executed[op] += _int(r.get("Instructions Executed"))
        samples_by_op[op] += _int(r.get("Warp Stall Sampling (All Samples)"))
        for k in stalls:
            stall_total[k[len("stall_") :]] += _int(r.get(k))
    total = sum(executed.values()) or 1
    lines = [f"warp instructions executed: {sum(executed.values()):,}", "opcode  share  samples"]
    for op, n in executed.most_common(16):
        lines.append(f"  {op:10s} {100 * n / total:5.1f}%  {samples_by_op[op]:8d}")
    st = sum(stall_total.values()) or 1
    lines.append(
        "stalls: "
        + ", ".join(f"{k} {100 * v / st:.1f}%" for k, v in stall_total.most_common(8) if v)
    )
    lines.append(f"top {top} instructions by stall samples (executed, L2 sectors, excess):")
    hot = sorted(rows, key=lambda r: -_int(r.get("Warp Stall Sampling (All Samples)")))[:top]
    for r in hot:
        why = sorted(((_int(r.get(k)), k[len("stall_") :]) for k in stalls), reverse=True)[:2]
        lines.append(
            f"  {r.get('Address', '')[-5:]:>5s} {r.get('Source', '').strip()[:52]:52s}"
            f" smp {_int(r.get('Warp Stall Sampling (All Samples)')):6d}"
            f" ex {_int(r.get('Instructions Executed')):10,d}"
            f" l2 {_int(r.get('L2 Theoretical Sectors Global')):10,d}"
            f" +{_int(r.get('L2 Theoretical Sectors Global Excessive')):,d}"
            f"  {' '.join(f'{k}:{v}' for v, k in why if v)}"
        )
    return lines


def main(argv: list[str]) -> None:
    del argv
    if not FLAGS.csv:
        raise app.UsageError("--csv is required (ncu --page source --print-source sass --csv)")
    with open(FLAGS.csv, encoding="utf8") as fp:
        kernels = read_kernels(fp.read())
    if FLAGS.kernel is not None and FLAGS.kernel not in kernels:
        raise app.UsageError(f"no kernel {FLAGS.kernel!r} in {FLAGS.csv}; it has {list(kernels)}")
    for name, rows in kernels.items():
        if FLAGS.kernel is None or name == FLAGS.kernel:
            print(f"== {name}")
            print("\n".join(summarize(rows, FLAGS.top)))


if __name__ == "__main__":
    define_flags()
    app.run(main)
