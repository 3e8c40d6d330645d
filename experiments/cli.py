"""The experiment scripts' command line: absl flag parsing that reports a bad flag, a
config file that does not load or a ``--config.<key>`` override naming no key in one
``error: ...`` line with exit status 2 (`parse_flags`), and the same for the errors a
run raises (`exit_on_error`). `experiments.common` re-exports them."""

from __future__ import annotations

import os
import warnings
from typing import Any, NoReturn

__all__ = ["error_line", "exit_on_error", "parse_flags", "refuse_extra_args"]


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing (``app.run(main, flags_parser=parse_flags)``) with one
    ``error: ...`` line and exit status 2 for a bad flag value, a ``--config`` file that
    does not exist and a ``--config.<key>`` override naming no config key
    (ml_collections raises a bare ``KeyError``/``AttributeError`` there)."""
    import sys

    from absl import flags

    given = _config_args(argv)
    for name, value in given:  # a missing config file, named before absl's own report
        path = value.split(":", 1)[0]
        if not os.path.isfile(path):
            what = "is a folder" if os.path.isdir(path) else "no such file"
            print(f"error: --{name}={value}: {path}: {what}", file=sys.stderr)
            sys.exit(2)
    where = f"--{given[0][0]}={given[0][1]}" if given else "--config"
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        text = str(e)
        if "Traceback (most recent call last)" in text:  # the config file raised
            last = [ln.strip() for ln in text.splitlines() if ln.strip()][-1]
            print(f"error: {where}: {last}", file=sys.stderr)
        else:
            print(f"error: {text} (--helpshort lists the flags)", file=sys.stderr)
        sys.exit(2)
    except AttributeError as e:
        if "get_config" not in str(e):
            _override_error(e, argv)
        print(f"error: {where}: the file defines no get_config()", file=sys.stderr)
        sys.exit(2)
    except KeyError as e:
        _override_error(e, argv)
    except Exception as e:  # a config file that does not run (SyntaxError, NameError, ...)
        hint = ""
        if where.split(":", 1)[0].endswith(".json"):
            hint = " (a config file is Python with get_config(); a run folder's config.json "
            hint += "is read by resuming with --workdir)"
        print(f"error: {where}: {type(e).__name__}: {e}{hint}", file=sys.stderr)
        sys.exit(2)


def _config_args(argv: list[str]) -> list[tuple[str, str]]:
    """``(flag name, value)`` of every ``--config``/``--config_file`` argument, given as
    ``--config=V`` or as ``--config V``."""
    out = []
    for i, arg in enumerate(argv[1:], 1):
        for name in ("config", "config_file"):
            if arg.startswith(f"--{name}="):
                out.append((name, arg.split("=", 1)[1]))
            elif arg == f"--{name}" and i + 1 < len(argv):
                out.append((name, argv[i + 1]))
    return out


def _override_error(e: BaseException, argv: list[str]) -> NoReturn:
    """Exits 2 with one line naming the ``--config.<key>`` override that names no key."""
    import sys

    inner: BaseException = e  # AttributeError(KeyError("'key'\nDid you mean ..."))
    while inner.args and isinstance(inner.args[0], BaseException):
        inner = inner.args[0]
    text = str(inner.args[0]) if inner.args else str(inner)
    first, _, hint = text.partition("\n")
    key = first.strip("'\"")
    culprits = [
        a.split("=", 1)[0]
        for a in argv[1:]
        if a.startswith("--config.") and key in a.split("=", 1)[0].split(".")
    ]
    where = culprits[0] if culprits else "a --config.<key> override"
    parent = where[len("--") :].rsplit(".", 1)[0] if culprits else "config"
    print(
        f"error: {where} names no config key: {parent} has no key {key!r}. {hint.strip()}".rstrip(),
        file=sys.stderr,
    )
    sys.exit(2)


def error_line(e: BaseException) -> str:
    """One line for a failed command: ``path: cause`` for file-system errors, the
    message's first line otherwise."""
    if isinstance(e, OSError) and e.filename is not None:
        text = f"{e.filename}: {e.strerror or e}"
    else:
        text = str(e) or type(e).__name__
    return text


def exit_on_error(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Calls ``fn``; a ``ValueError`` (bad input, a checkpoint that does not restore),
    an ``OSError`` (a file that cannot be read or written), a held run folder
    (`jaxdrive.runlock.RunLockedError`) or a ``TimeoutError`` is printed as one
    ``error: ...`` line on stderr and exits with status 2."""
    import sys

    from jaxdrive.runlock import RunLockedError

    try:
        return fn(*args, **kwargs)
    except (ValueError, OSError, RunLockedError, TimeoutError) as e:
        print(f"error: {error_line(e)}", file=sys.stderr, flush=True)
        # The line above is the report: what checkpoint writer threads and unawaited
        # coroutines print while the interpreter shuts down is not shown after it.
        import logging as std_logging

        warnings.simplefilter("ignore")
        std_logging.disable(std_logging.CRITICAL)  # asyncio's "never retrieved" reports
        sys.stderr = open(os.devnull, "w")  # open until the process ends
        sys.exit(2)


def refuse_extra_args(argv: list[str]) -> None:
    """Exits with status 2 and one ``error: ...`` line where ``argv`` (absl's, the
    program name first) holds positional arguments, which no script takes."""
    import sys

    if len(argv) > 1:
        print(
            f"error: unexpected arguments {argv[1:]} (flags take the form --name=value)",
            file=sys.stderr,
        )
        sys.exit(2)
