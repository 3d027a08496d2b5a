"""Atomic file writes: a reader never sees a half-written file.

A full disk (or quota) is reported as a :class:`ConfigError` naming the
directory, instead of a torch-internal message inside a double traceback.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

_FULL = (errno.ENOSPC, errno.EDQUOT)


def _disk_full(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it was raised from or during) is a full disk."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in _FULL:
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _full_error(target: Path) -> Exception:
    from agilerl.arena.models.errors import ConfigError

    return ConfigError(
        f"no space left on the device holding {target.parent} (writing {target.name}); "
        "free some space there or choose another run_dir, then resume"
    )


@contextmanager
def disk_full_guard(path: str | Path) -> Iterator[None]:
    """Turn a full disk while writing ``path`` (by any library) into a :class:`ConfigError`."""
    try:
        yield
    except (OSError, RuntimeError) as exc:
        if _disk_full(exc):
            raise _full_error(Path(path)) from None
        raise


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write ``path`` through a temp file in the same directory, then rename over it.

    Raises:
        ConfigError: If the disk (or quota) holding ``path`` is full.
    """
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as exc:
        if _disk_full(exc):
            raise _full_error(target) from None
        raise
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if _disk_full(exc):
            raise _full_error(target) from None
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
