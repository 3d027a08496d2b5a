"""One process per run directory, and only directories that are (or will be) runs.

:func:`claim_run_dir` refuses an existing directory that is not one of our
runs (a user's folder, ``/etc``) before anything is written into it, then
takes an exclusive OS file lock on ``<run dir>/.lock`` for as long as the run
lasts. A second process (a duplicate ``hydra.run.dir``, a second
``resume=``) is refused while the first holds it; the lock goes away with
the process, so a killed run never leaves a stale lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agilerl.arena.models.errors import ConfigError
from agilerl.training.input_fingerprints import INPUTS_FILE

LOCK_FILE = ".lock"
MARKER_FILE = ".agilerl-run"
FRESH_ENTRIES = frozenset({".hydra", "train.log", LOCK_FILE, MARKER_FILE})
"""What a directory may hold and still count as new: Hydra's own files and ours."""

_held: dict[Path, tuple[int, int]] = {}


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` holds a run of ours (our marker, or a manifest with checkpoints)."""
    if (path / MARKER_FILE).is_file():
        return True
    return (path / "manifest.yaml").is_file() and (path / "checkpoints" / "latest").is_file()


def check_run_dir(path: str | Path) -> None:
    """Refuse an existing directory that is neither new nor one of our runs.

    Raises:
        ConfigError: Naming the directory and what to do instead.
    """
    folder = Path(path)
    if not folder.exists():
        return
    if not folder.is_dir():
        raise ConfigError(f"run_dir={folder} is a file, not a directory; choose a new run_dir")
    if is_run_dir(folder):
        return
    try:
        entries = {entry.name for entry in folder.iterdir()}
    except OSError as exc:
        raise ConfigError(f"run_dir={folder} cannot be read ({exc.strerror})") from None
    if entries <= FRESH_ENTRIES:
        return
    shown = ", ".join(sorted(entries - FRESH_ENTRIES)[:5])
    raise ConfigError(
        f"run_dir={folder} already exists and is not a run directory of agilerl (it holds "
        f"{shown}); choose a new or empty run_dir: nothing in it was changed"
    )


def _acquire(folder: Path) -> None:
    key = folder.resolve()
    if key in _held:
        fd, count = _held[key]
        _held[key] = (fd, count + 1)
        return
    fd = try_lock(folder, LOCK_FILE, "run_dir")
    if isinstance(fd, str):
        raise ConfigError(
            f"run_dir={folder} is in use by another process (pid {fd}); wait for it to "
            "end, or choose another run_dir"
        )
    _held[key] = (fd, 1)


def try_lock(folder: Path, name: str, field: str) -> int | str:
    """Create ``folder`` and take an exclusive lock on ``folder/name``, writing our pid.

    Returns:
        The open, locked file descriptor (kept open while the lock is held), or the
        pid another process wrote when it holds the lock.

    Raises:
        ConfigError: If ``folder`` cannot be created (naming ``field``).
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / name, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ConfigError(f"{field}={folder}: cannot create it ({exc.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        owner = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return owner
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _release(folder: Path) -> None:
    key = folder.resolve()
    fd, count = _held[key]
    if count > 1:
        _held[key] = (fd, count - 1)
        return
    del _held[key]
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


@contextmanager
def claim_run_dir(path: str | Path) -> Iterator[Path]:
    """Check ``path`` is a (new or our) run directory, then hold its lock.

    Re-entrant within one process (the launcher and the trainer both claim it). A
    directory this claim created is removed again if the run stopped before it
    trained (nothing in it but the lock, the marker and the manifest it was given).

    Raises:
        ConfigError: If the directory is not a run of ours, or another process holds it.
    """
    folder = Path(path)
    check_run_dir(folder)
    created = not folder.exists()
    _acquire(folder)
    try:
        yield folder
    finally:
        _release(folder)
        if created and folder.resolve() not in _held:
            names = {e.name for e in folder.iterdir()}
            if names <= {LOCK_FILE, MARKER_FILE, "manifest.yaml", INPUTS_FILE}:
                for name in names:
                    (folder / name).unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    folder.rmdir()


def mark_run_dir(path: str | Path, **info: object) -> None:
    """Write the marker that makes ``path`` one of our runs (kept if present)."""
    marker = Path(path) / MARKER_FILE
    if not marker.exists():
        marker.write_text(json.dumps({"agilerl_run": 1, **info}) + "\n")


def remove_if_fresh(path: str | Path) -> bool:
    """Remove a directory that holds nothing but Hydra's files (an unused Hydra output dir),
    or those and what a run writes before it trains (lock, marker, manifest): a run
    that stopped at its start (a missing extra, say) leaves nothing behind.

    Returns:
        Whether it was removed.
    """
    import shutil

    folder = Path(path)
    if not folder.is_dir() or folder.resolve() == Path.cwd().resolve():
        return False
    entries = {entry.name for entry in folder.iterdir()}
    if not entries <= {".hydra", "train.log", LOCK_FILE, MARKER_FILE, "manifest.yaml", INPUTS_FILE}:
        return False
    log = folder / "train.log"
    if log.exists() and log.stat().st_size > 0:
        return False
    shutil.rmtree(folder, ignore_errors=True)
    cwd = Path.cwd().resolve()
    for parent in list(folder.resolve().parents)[:2]:  # runs/<date>/ and runs/, when empty
        if parent == cwd or cwd not in parent.parents:
            break
        try:
            parent.rmdir()
        except OSError:
            break
    return True
