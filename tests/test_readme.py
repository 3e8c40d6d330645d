"""The README's front door: its quick start runs as written on a CPU within the memory
it promises, and its links and the docs' links point at files that exist."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MARKER = "<!-- quickstart -->"
PEAK_RSS_LIMIT_MIB = 2048  # the README promises under 1 GB; 2 GB is the hard ceiling
TIMEOUT_S = 240  # the README promises under a minute unloaded; CI runs beside other tests

# Prints the child's own peak resident set size (KiB) after the quick start: VmHWM of
# /proc/self/status belongs to the process's own address space, made anew at exec (the
# rusage maximum would also count the pages of the test worker it was forked from).
_EPILOGUE = """
import re as _re
with open("/proc/self/status") as _f:
    print("PEAK_RSS_KIB", _re.search(r"VmHWM:\\s*(\\d+)", _f.read()).group(1))
"""


def quickstart_code(text: str) -> str:
    """The fenced ``python`` block right after the quick-start marker."""
    after = text.split(MARKER, 1)[1]
    m = re.match(r"\s*```python\n(.*?)\n```", after, re.S)
    assert m, "the quick-start marker must be followed by a ```python block"
    return m.group(1)


def test_quickstart_runs_on_a_cpu_in_bounded_memory():
    code = quickstart_code(README.read_text(encoding="utf8"))
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", code + _EPILOGUE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = done.stdout
    assert "(100, 64, 10)" in out, out  # [steps, envs, taggers] of the rollout's rewards
    peak_mib = int(re.search(r"PEAK_RSS_KIB (\d+)", out).group(1)) / 1024
    assert peak_mib < PEAK_RSS_LIMIT_MIB, f"quick start peaked at {peak_mib:.0f} MiB"


def _links(path: pathlib.Path) -> list[str]:
    text = path.read_text(encoding="utf8")
    return [t for t in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text) if "://" not in t]


def test_readme_and_docs_link_to_files_that_exist():
    pages = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    missing = [
        f"{page.relative_to(ROOT)} -> {target}"
        for page in pages
        for target in _links(page)
        if not (page.parent / target).exists()
    ]
    assert not missing, missing


def test_front_door_stays_a_front_door():
    text = README.read_text(encoding="utf8")
    assert len(text) <= 16_000, len(text)  # a ten-minute read
    for page in [README, *(ROOT / "docs").rglob("*.md")]:
        body = page.read_text(encoding="utf8")
        assert "/work/" not in body and "../shared" not in body, page  # no machine paths
