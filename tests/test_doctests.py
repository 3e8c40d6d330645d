"""The ``>>>`` examples in the docstrings of the library modules run and print what they
show (``doctest.testmod`` with ELLIPSIS and NORMALIZE_WHITESPACE).

Every module of jaxdrive, algorithms, environments and experiments whose source holds a
``>>>`` example is collected, so a new example is tested as soon as it is written."""

from __future__ import annotations

import contextlib
import doctest
import importlib
import io
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("jaxdrive", "algorithms", "environments", "experiments")
SKIP_DIRS = {"notebooks", "__pycache__"}  # notebooks/ holds scripts, not modules
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
#: Modules whose examples are the library's front page: they must keep having some.
CORE = ("jaxdrive.spaces", "jaxdrive.vector", "jaxdrive.registry", "jaxdrive.testing")


def modules_with_examples() -> list[str]:
    """Dotted names of the modules under `PACKAGES` whose source holds ``>>>``."""
    names = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if SKIP_DIRS & set(rel.parts[:-1]):
                continue
            if ">>>" not in path.read_text(encoding="utf8"):
                continue
            parts = rel.with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names.append(".".join(parts))
    return names


MODULES = modules_with_examples()


def test_core_modules_have_examples():
    missing = [m for m in CORE if m not in MODULES]
    assert not missing, f"no >>> examples left in {missing}"


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = doctest.testmod(module, optionflags=FLAGS, verbose=False)
    assert result.attempted > 0, f"{name}: '>>>' in its source but no example was collected"
    assert result.failed == 0, f"{name}: {result.failed} example(s) failed\n{out.getvalue()}"
