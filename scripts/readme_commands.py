"""README.md's shell commands and the comments beside them, as a reader sees them.

``tests/test_readme.py`` runs every command; ``scripts/bench/readme_times.py`` times the
ones that train and writes the times back into the comments.
"""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"

STATED_TIME = re.compile(r"(?:~|-)(\d+(?:\.\d+)?) ?(s|min)\b")
"""A time the README states: ``~30 s``, ``~2 min``, ``3-7 s`` (the upper end)."""


def code_blocks(text: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced block."""
    return [(m[1], m[2]) for m in re.finditer(r"```(\w*)\n(.*?)```", text, re.S)]


def commented_commands(body: str) -> list[tuple[str, str]]:
    """``(command, comment)`` of a bash block: continuations joined, each trailing
    ``  # comment`` of the command's lines kept apart from it."""
    commands, current, comment = [], "", ""
    for line in body.splitlines():
        line, *note = re.split(r"\s{2,}#\s", line, maxsplit=1)
        line = line.rstrip()
        comment += " ".join(note)
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1].strip() + " "
            continue
        commands.append(((current + line.strip()).strip(), comment.strip()))
        current, comment = "", ""
    return commands


def readme_comments(text: str | None = None) -> dict[str, str]:
    """The comment the README writes beside each command of its ``bash`` blocks."""
    text = README.read_text() if text is None else text
    return {
        command: comment
        for lang, body in code_blocks(text)
        if lang == "bash"
        for command, comment in commented_commands(body)
    }


def stated_seconds(comment: str) -> float | None:
    """The wall time a README comment promises, in seconds (``None``: it states none)."""
    found = STATED_TIME.search(comment)
    if found is None:
        return None
    return float(found[1]) * (60 if found[2] == "min" else 1)


def spoken_time(seconds: float) -> str:
    """``~20 s`` / ``~4 min``: how the README writes a measured time."""
    if seconds < 90:
        return f"~{max(1, round(seconds))} s"
    return f"~{round(seconds / 60)} min"
