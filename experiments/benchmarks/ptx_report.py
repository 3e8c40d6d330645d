"""Registers, spills and occupancy of compiled GPU kernels, from XLA's PTX dump.

Run a workload with ``XLA_FLAGS=--xla_dump_to=DIR`` (XLA writes each module's PTX,
Pallas/Triton kernels included), then
``python -m experiments.benchmarks.ptx_report --dump_dir=DIR --kernels=tag_`` compiles
each ``*.ptx`` file that defines a matching entry function with ``ptxas -v`` and prints,
per entry function whose name contains one of ``--kernels``: registers per thread,
spill stores and loads (bytes), stack frame, shared memory, and how many warps an SM can
hold by registers alone (`warps_by_registers`; the CTA limit, 32 per SM on Hopper, also
caps one-warp programs). ``--sass_dir``: also writes each matching file's SASS there
(``nvdisasm``, when found). The device has no instruction-level profiler; this is what
says whether a kernel spills or runs at low occupancy.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from typing import Any

from absl import app, flags

__all__ = ["find_tool", "parse_ptxas", "warps_by_registers"]

FLAGS = flags.FLAGS

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def parse_ptxas(text: str) -> dict[str, dict[str, Any]]:
    """``ptxas -v`` output -> ``{entry name: {"arch", "registers", "spill_stores",
    "spill_loads", "stack", "smem"}}`` (byte counts; fields ptxas did not print are
    absent)."""
    out: dict[str, dict[str, Any]] = {}
    current = None
    for line in text.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = out.setdefault(m.group(1), {"arch": m.group(2)})
            continue
        if current is None:
            continue
        m = _FRAME.search(line)
        if m:
            current.update(stack=int(m.group(1)), spill_stores=int(m.group(2)))
            current["spill_loads"] = int(m.group(3))
            continue
        m = _USED.search(line)
        if m:
            current["registers"] = int(m.group(1))
            current["smem"] = int(m.group(2) or 0)
    return out


def warps_by_registers(registers: int, max_warps: int = 64, file_size: int = 65536) -> int:
    """Warps one SM can hold given ``registers`` per thread (allocated per warp in units
    of 256, i.e. rounded up to 8 per thread), at most ``max_warps``."""
    if registers < 1:
        raise ValueError(f"registers must be >= 1, got {registers}")
    per_warp = -(-registers // 8) * 8 * 32
    return min(max_warps, file_size // per_warp)


def find_tool(name: str) -> str | None:
    """Path of a CUDA tool (``ptxas``, ``nvdisasm``): on ``PATH``, in a CUDA install, or
    in the ``nvidia`` pip packages jax's CUDA plugin brings."""
    found = shutil.which(name)
    if found:
        return found
    roots = ["/usr/local/cuda/bin", "/usr/local/cuda-*/bin"]
    try:
        import nvidia  # the CUDA pip wheels' namespace package

        roots += [os.path.join(p, "**", "bin") for p in nvidia.__path__]
    except ImportError:
        pass
    for root in roots:
        for path in sorted(glob.glob(os.path.join(root, name), recursive=True)):
            if os.access(path, os.X_OK):
                return path
    return None


def _arch(ptx: str) -> str:
    m = re.search(r"^\s*\.target\s+(sm_\w+)", ptx, re.M)
    return m.group(1) if m else "sm_90a"


def main(argv: list[str]) -> None:
    del argv
    ptxas = find_tool("ptxas")
    if ptxas is None:
        raise SystemExit("ptxas not found (PATH, /usr/local/cuda, nvidia pip packages)")
    nvdisasm = find_tool("nvdisasm") if FLAGS.sass_dir else None
    files = sorted(glob.glob(os.path.join(FLAGS.dump_dir, "**", "*.ptx"), recursive=True))
    if not files:
        raise SystemExit(f"no *.ptx under {FLAGS.dump_dir!r}")
    print(f"# ptx_report: {len(files)} PTX files, ptxas {ptxas}")
    print(
        f"{'kernel':<48} {'regs':>5} {'warps/SM':>8} {'spill st/ld':>12} {'stack':>6} {'smem':>6}"
    )
    for path in files:
        ptx = open(path).read()
        names = re.findall(r"\.entry\s+(\w+)", ptx)
        if not any(key in name for name in names for key in FLAGS.kernels):
            continue
        arch = _arch(ptx)
        cubin = os.path.join(FLAGS.sass_dir or "/tmp", os.path.basename(path) + ".cubin")
        done = subprocess.run(
            [ptxas, f"-arch={arch}", "-v", path, "-o", cubin], capture_output=True, text=True
        )
        if done.returncode != 0:
            print(f"# ptxas failed on {path}: {done.stderr[-500:]}")
            continue
        for name, info in parse_ptxas(done.stderr + done.stdout).items():
            if not any(key in name for key in FLAGS.kernels) or "registers" not in info:
                continue
            regs = info["registers"]
            spill = f"{info.get('spill_stores', 0)}/{info.get('spill_loads', 0)}"
            print(
                f"{name[:48]:<48} {regs:>5} {warps_by_registers(regs):>8} {spill:>12} "
                f"{info.get('stack', 0):>6} {info.get('smem', 0):>6}"
            )
        if nvdisasm and FLAGS.sass_dir:
            sass = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True)
            with open(cubin[: -len(".cubin")] + ".sass", "w") as f:
                f.write(sass.stdout or sass.stderr)


if __name__ == "__main__":
    flags.DEFINE_string("dump_dir", "", "XLA dump folder (XLA_FLAGS=--xla_dump_to=...)")
    flags.DEFINE_list("kernels", ["tag_"], "substrings of the entry functions to report")
    flags.DEFINE_string("sass_dir", "", "also write the matching files' cubin and SASS here")
    app.run(main)
