"""Virtualenvs for benchmark peers whose pins conflict with ours (never used by CI).

Each peer lives in ``.bench_venvs/<name>``, created and filled on first use, so a
benchmark can run the peer side by side with us in one invocation.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENVS = REPO / ".bench_venvs"


def ensure_venv(venv: Path, packages: list[str]) -> Path:
    """Return the python of ``venv``, creating it and installing ``packages`` on first use.

    Args:
        venv: The virtualenv's folder.
        packages: pip requirement strings (pin torch as ``torch==2.13.0`` to get the CPU wheel).

    Returns:
        The virtualenv's ``bin/python``.
    """
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if not marker.exists() or marker.read_text() != "\n".join(packages):
        subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)
        marker.write_text("\n".join(packages))
    return python
