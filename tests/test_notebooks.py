"""The tutorial notebooks of experiments/notebooks: they match their generator, hold no
outputs, and run top to bottom at tiny sizes (``JAXDRIVE_NOTEBOOK_SMALL=1``) in a fresh
``python3`` kernel of this interpreter, in a temporary working folder, with the outputs
that show each tutorial did its job."""

from __future__ import annotations

import importlib
import os
import pathlib
import re
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = pathlib.Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "experiments" / "notebooks"
NAMES = ("01_quickstart", "02_custom_env", "03_tag_training", "04_scaling", "05_population")
CELL_TIMEOUT = 300  # seconds per cell; the tiny sizes take a few seconds each


def _generator():
    return importlib.import_module("experiments.notebooks.build_notebooks")


def test_notebooks_match_their_generator():
    gen = _generator()
    assert tuple(gen.NOTEBOOKS) == NAMES
    assert sorted(p.stem for p in NB_DIR.glob("*.ipynb")) == list(NAMES)
    for name in NAMES:
        text = (NB_DIR / f"{name}.ipynb").read_text(encoding="utf8")
        assert text == gen.render(name), (
            f"{name}.ipynb differs from its generator: run "
            "`python -m experiments.notebooks.build_notebooks`"
        )
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code and all(c.outputs == [] and c.execution_count is None for c in code)
        assert 'os.environ.get("JAXDRIVE_NOTEBOOK_SMALL") == "1"' in code[0].source
    assert gen.main(["--check"]) == 0


def test_generator_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown notebook 'nope'"):
        _generator().build("nope")


def _kernel_env() -> dict[str, str]:
    env = dict(os.environ)
    env["JAXDRIVE_NOTEBOOK_SMALL"] = "1"
    env.setdefault("JAX_PLATFORMS", "cpu")  # one GPU is not shared between test workers
    # Halves XLA's CPU compile time; the tiny programs run as fast either way.
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "")
        + " --xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    ).strip()
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


#: A last cell appended to each notebook run: the kernel prints its interpreter's prefix.
PREFIX_CELL = "import sys; print(sys.prefix)"


def _execute(name: str, workdir: pathlib.Path) -> nbformat.NotebookNode:
    """Runs the notebook with `PREFIX_CELL` appended."""
    nb = nbformat.read(NB_DIR / f"{name}.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PREFIX_CELL))
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}},
    )
    # The kernel spec's "python" is replaced by this interpreter (sys.executable).
    client.execute(env=_kernel_env())
    return nb


def _text(nb) -> str:
    """Everything the notebook printed (streams and text/plain results)."""
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.output_type == "stream" and out.name == "stdout":
                parts.append(out.text)
            elif out.output_type in ("execute_result", "display_data"):
                parts.append(out.get("data", {}).get("text/plain", ""))
    return "".join(parts)


def _count(nb, mime: str) -> int:
    return sum(
        mime in out.get("data", {})
        for cell in nb.cells
        for out in cell.get("outputs", [])
        if out.output_type in ("display_data", "execute_result")
    )


def _numbers(pattern: str, text: str) -> list[tuple[float, ...]]:
    return [tuple(float(x) for x in m) for m in re.findall(pattern, text)]


def check_01_quickstart(nb, text: str, workdir: pathlib.Path) -> None:
    assert "JAX" in text and "on" in text
    assert "ValueError:" in text and "actions must have exactly the groups" in text
    # 64 envs x 10 steps, timed after compiling
    rates = _numbers(r"(\d+) env steps/s, (\d+) agent steps/s", re.sub(r"(\d),(\d)", r"\1\2", text))
    assert rates and all(r[0] > 0 and r[1] == pytest.approx(10 * r[0], rel=1e-3) for r in rates)
    assert "rewards of the taggers, [T, N, A]: (10, 64, 2)" in text
    assert "runners tagged per env" in text
    assert _count(nb, "image/png") >= 1  # the rendered frames


def check_02_custom_env(nb, text: str, workdir: pathlib.Path) -> None:
    assert "check_env passed: {'steps': 34, 'episodes': 1}" in text
    assert "ValueError: unknown override(s) ['num_cell']" in text
    # the trained return beats the random policy in both groups
    pairs = dict(
        (g, (float(a), float(b)))
        for g, a, b in re.findall(r"(walker|jumper): random ([\d.]+) -> trained ([\d.]+)", text)
    )
    assert set(pairs) == {"walker", "jumper"}, text
    assert all(after > before + 0.5 for before, after in pairs.values()), pairs
    assert "return improved over random: True" in text
    assert _count(nb, "image/png") == 1  # the learning curves


def check_03_tag_training(nb, text: str, workdir: pathlib.Path) -> None:
    runs = list((workdir / "runs").iterdir())
    assert len(runs) == 1, runs
    run = runs[0]
    assert {"config.json", "metrics.jsonl", "tb", "checkpoints", "tag.gif", "eval.json"} <= {
        p.name for p in run.iterdir()
    }
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 4  # tiny: 4 iterations
    assert "iteration   2," in text and "iteration   4," in text  # on_chunk, chunks of 2
    assert "restored parameters equal the trained ones: True" in text
    assert "checkpoints after iterations [2, 4]" in text
    assert "before training" in text and "after training" in text
    assert "deterministic episodes" in text  # experiments.evaluate's summary line
    assert _count(nb, "image/png") >= 1  # learning curves
    assert _count(nb, "image/gif") == 1  # the animation


def check_04_scaling(nb, text: str, workdir: pathlib.Path) -> None:
    assert "cpu: " in text or "gpu: " in text
    assert "returns (2, 3)" in text  # [seeds, iterations]
    assert "4 devices:" in text  # the forced host-platform device count
    m = re.search(r"(\d+) measurements; fields: \[(.*)\]", text)
    assert m and int(m.group(1)) == 3, text  # two Tag configs and CartPole, jax path
    assert "'env_steps_per_s'" in m.group(2)
    assert "tag_continuous_env" in text and "cartpole_env" in text
    assert _count(nb, "image/png") == 1


def check_05_population(nb, text: str, workdir: pathlib.Path) -> None:
    assert "varied: ['agent/ent_coef', 'agent/lr']" in text
    assert "round 1: scores" in text and "round 2: scores" in text
    assert "rank 0: score" in text and "leaderboard best" in text
    assert _count(nb, "image/png") == 1


CHECKS = {
    "01_quickstart": check_01_quickstart,
    "02_custom_env": check_02_custom_env,
    "03_tag_training": check_03_tag_training,
    "04_scaling": check_04_scaling,
    "05_population": check_05_population,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs(name, tmp_path):
    nb = _execute(name, tmp_path)
    errors = [
        out for cell in nb.cells for out in cell.get("outputs", []) if out.output_type == "error"
    ]
    assert not errors, errors
    stderr = "".join(
        out.text
        for cell in nb.cells
        for out in cell.get("outputs", [])
        if out.output_type == "stream" and out.name == "stderr"
    )
    assert "Traceback" not in stderr, stderr
    # the kernel ("python3") runs this interpreter: its venv and packages
    printed = nb.cells[-1].outputs[0].text.strip()
    assert printed == sys.prefix, (printed, sys.prefix)
    nb.cells.pop()
    CHECKS[name](nb, _text(nb), tmp_path)
