"""Consoles for people and for log files: a terminal wraps to its width, a file never does."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from rich.console import Console

LOG_WIDTH = 10_000
"""Width given to rich when output is not a terminal: wide enough that nothing wraps or is cut."""


def console(stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr) that does not wrap or truncate in non-terminal output.

    Rich falls back to 80 columns when it writes to a pipe or a file (SLURM logs,
    ``| tee``); tables then fold their cells and ellipsize values. A very wide
    console keeps every line whole; a terminal keeps its own width.
    """
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=LOG_WIDTH, soft_wrap=True)


PACKAGE_DIR = Path(__file__).resolve().parents[1]


def plain_warnings() -> None:
    """Show agilerl's own warnings as one ``warning: <message>`` line.

    Python's default format adds the file, the line number and the source line of
    the ``warnings.warn`` caller: noise on a command line. Warnings from other
    packages keep the default format (their location helps to trace them).
    """
    original = warnings.formatwarning

    def format_warning(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        line: str | None = None,
    ) -> str:
        if Path(filename).resolve().is_relative_to(PACKAGE_DIR):
            return f"warning: {message}\n"
        return original(message, category, filename, lineno, line)

    warnings.formatwarning = format_warning
