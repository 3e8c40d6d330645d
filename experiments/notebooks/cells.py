"""The two kinds of notebook cell and the first code cell every tutorial shares."""

from __future__ import annotations

import textwrap

__all__ = ["SMALL_CELL", "Cell", "code", "md"]

Cell = tuple[str, str]  # (kind, source)


def md(text: str) -> Cell:
    """A markdown cell (text dedented and stripped)."""
    return ("markdown", textwrap.dedent(text).strip())


def code(text: str) -> Cell:
    """A code cell (text dedented and stripped)."""
    return ("code", textwrap.dedent(text).strip())


#: The start of every notebook's first code cell: ``SMALL`` is True in the test suite.
SMALL_CELL = """import os

# The test suite sets JAXDRIVE_NOTEBOOK_SMALL=1 to run this notebook at tiny sizes.
SMALL = os.environ.get("JAXDRIVE_NOTEBOOK_SMALL") == "1"
"""
