"""Atomic file writes: a reader never sees a half-written file."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write ``path`` through a temp file in the same directory, then rename over it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """Atomically write UTF-8 text."""
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


def atomic_write_json(path: str | Path, data: Any) -> None:
    """Atomically write JSON (indented, keys in insertion order)."""
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    """Atomically ``torch.save`` an object (tensors, numbers, strings, containers)."""
    import torch

    atomic_write(path, lambda handle: torch.save(obj, handle))
