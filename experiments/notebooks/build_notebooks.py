"""Writes the tutorial notebooks of ``experiments/notebooks`` from their cell sources.

    python -m experiments.notebooks.build_notebooks          # (re)write the .ipynb files
    python -m experiments.notebooks.build_notebooks --check  # exit 1 when one is stale

Each notebook's cells are the ``CELLS`` list of its module (`quickstart`, `custom_env`,
`tag_training`, `scaling`, `population`), made by `cells.md` (markdown) and `cells.code`. The files
hold no outputs and fixed cell ids (``<notebook>-<index>``), so a rebuild gives the same
bytes; ``tests/test_notebooks.py`` checks that and executes every notebook at tiny sizes
(``JAXDRIVE_NOTEBOOK_SMALL=1``). Code cells must stay ``ruff format``-clean: ruff checks
the notebooks with the rest of the repository.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import nbformat

from experiments.notebooks import custom_env, population, quickstart, scaling, tag_training
from experiments.notebooks.cells import Cell

__all__ = ["NOTEBOOKS", "build", "main", "render"]

HERE = pathlib.Path(__file__).resolve().parent

NOTEBOOKS: dict[str, list[Cell]] = {
    "01_quickstart": quickstart.CELLS,
    "02_custom_env": custom_env.CELLS,
    "03_tag_training": tag_training.CELLS,
    "04_scaling": scaling.CELLS,
    "05_population": population.CELLS,
}


def build(name: str) -> nbformat.NotebookNode:
    """The notebook ``name`` (a key of `NOTEBOOKS`): no outputs, fixed cell ids."""
    if name not in NOTEBOOKS:
        raise ValueError(f"unknown notebook {name!r}; known: {sorted(NOTEBOOKS)}")
    cells = []
    for i, (kind, source) in enumerate(NOTEBOOKS[name]):
        cid = f"{name}-{i}"
        if kind == "code":
            cells.append(nbformat.v4.new_code_cell(source, id=cid))
        else:
            cells.append(nbformat.v4.new_markdown_cell(source, id=cid))
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    }
    nbformat.validate(nb)
    return nb


def render(name: str) -> str:
    """The file text of notebook ``name``, as written to ``<name>.ipynb``."""
    return nbformat.writes(build(name)) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Writes (or with ``--check`` compares) every notebook; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a notebook is stale")
    parser.add_argument("--out", default=str(HERE), help="folder to write into")
    args = parser.parse_args(argv)
    stale = []
    for name in NOTEBOOKS:
        path = pathlib.Path(args.out) / f"{name}.ipynb"
        text = render(name)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf8") != text:
                stale.append(str(path))
        else:
            path.write_text(text, encoding="utf8")
            print("wrote", path)
    if stale:
        print("stale notebooks (run python -m experiments.notebooks.build_notebooks):", *stale)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
