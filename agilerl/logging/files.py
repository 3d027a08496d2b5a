"""Atomic file writes: a reader never sees a half-written file.

A full disk (or quota), or a file past the process's file-size limit, is
reported as a :class:`ConfigError` naming the directory, instead of a
torch-internal message inside a double traceback.
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

_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _full_errno(exc: BaseException | None) -> int | None:
    """The errno if ``exc`` (or an exception it was raised from or during) is a full
    disk, a full quota or a file-size limit, else ``None``."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in _FULL:
            return exc.errno
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def _disk_full(exc: BaseException | None) -> bool:
    return _full_errno(exc) is not None


def _file_size_limit() -> str:
    import resource

    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return "unlimited" if soft == resource.RLIM_INFINITY else f"{soft:,} bytes"


def _full_error(target: Path, exc: BaseException | None = None) -> Exception:
    from agilerl.arena.models.errors import ConfigError

    if _full_errno(exc) == errno.EFBIG:
        return ConfigError(
            f"{target.name} in {target.parent} would pass this process's file-size limit "
            f"({_file_size_limit()}; ulimit -f); raise the limit, or write less "
            "(e.g. replay_buffer.store_in_checkpoint=false), then resume: the checkpoints "
            "already written are intact"
        )
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
            raise _full_error(Path(path), exc) from None
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
            raise _full_error(target, exc) from None
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
            raise _full_error(target, exc) from None
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
