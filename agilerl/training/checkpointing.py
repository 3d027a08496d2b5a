"""Population checkpoints: atomic, loadable with ``torch.load(weights_only=True)``, resumable.

Layout under ``<run dir>/checkpoints/``::

    step_000012288/agent_0.pt ...   every agent's state (weights, optimisers, hyperparameters)
    step_000012288/state.pt         loop state: counters, fitness history, RNG states
    latest                          name of the newest complete checkpoint directory

A checkpoint directory is written under a temporary name and renamed when
complete; ``latest`` is replaced atomically after that, and only then is an
older checkpoint removed (a re-save of the same step gets a new name,
``step_<n>_r<k>``). A run killed at any moment therefore leaves ``latest``
pointing at a complete checkpoint. ``latest`` must name a checkpoint
directory inside its own ``checkpoints/``; a corrupt newest checkpoint falls
back to the previous complete one, with a warning.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agilerl.arena.models.errors import ConfigError
from agilerl.logging.files import atomic_torch_save, atomic_write_text

LATEST = "latest"
_NAME = re.compile(r"^step_(\d{12})(?:_r(\d+))?$")


def _order(path: Path) -> tuple[int, int]:
    match = _NAME.match(path.name)
    assert match is not None
    return int(match.group(1)), int(match.group(2) or 0)


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch RNG states as plain data."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": [list(x) if isinstance(x, tuple) else x for x in random.getstate()],
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    numpy_state = state["numpy"]
    np.random.set_state(
        (
            numpy_state["kind"],
            numpy_state["keys"].numpy().astype(np.uint32),
            numpy_state["pos"],
            numpy_state["has_gauss"],
            numpy_state["cached"],
        )
    )
    torch.set_rng_state(state["torch"])


class CheckpointManager:
    """Writes and reads a run's population checkpoints."""

    def __init__(self, directory: str | Path, *, keep_last_only: bool = False) -> None:
        self.directory = Path(directory)
        self.keep_last_only = keep_last_only

    def save(
        self,
        step: int,
        agent_states: list[dict[str, Any]],
        loop_state: dict[str, Any],
        extra_files: dict[str, dict[str, Any]] | None = None,
    ) -> Path:
        """Write one complete checkpoint and point ``latest`` at it.

        Args:
            step: Env steps so far (names the directory).
            agent_states: One ``state_dict()`` per agent.
            loop_state: Counters, histories and RNG states of the loop.
            extra_files: More states to store beside them (e.g. ``memory.pt``).

        Returns:
            The checkpoint directory.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"step_{step:012d}"
        final = self.directory / name
        revision = 0
        while final.exists():  # never delete a complete checkpoint before its successor exists
            revision += 1
            name = f"step_{step:012d}_r{revision}"
            final = self.directory / name
        tmp = self.directory / f".tmp_{name}_{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for index, state in enumerate(agent_states):
            atomic_torch_save(state, tmp / f"agent_{index}.pt")
        atomic_torch_save({**loop_state, "rng": rng_state()}, tmp / "state.pt")
        for file_name, state in (extra_files or {}).items():
            atomic_torch_save(state, tmp / file_name)
        os.replace(tmp, final)
        atomic_write_text(self.directory / LATEST, name + "\n")
        same_step = [p for p in self.complete_dirs() if p != final and _order(p)[0] == step]
        older = [p for p in self.complete_dirs() if p != final] if self.keep_last_only else []
        for stale in {*same_step, *older}:
            shutil.rmtree(stale, ignore_errors=True)
        return final

    def complete_dirs(self) -> list[Path]:
        """Complete checkpoint directories, oldest first."""
        if not self.directory.is_dir():
            return []
        found = [p for p in self.directory.iterdir() if p.is_dir() and _NAME.match(p.name)]
        return sorted(found, key=_order)

    def latest_dir(self) -> Path | None:
        """The newest complete checkpoint directory, or ``None``."""
        pointer = self.directory / LATEST
        if not pointer.is_file():
            return None
        name = pointer.read_text(errors="replace").strip()
        if not _NAME.match(name):
            raise ConfigError(
                f"{pointer} names {name[:80]!r}, not a checkpoint directory of this run "
                "(step_<n>); fix or delete it"
            )
        path = self.directory / name
        return path if path.is_dir() else None

    def load_latest(self) -> tuple[list[dict[str, Any]], dict[str, Any], Path]:
        """Read the newest checkpoint.

        Returns:
            The agents' states, the loop state and the checkpoint directory.

        Raises:
            ConfigError: If there is no checkpoint, or a file is truncated or corrupt
                (the message names the file).
        """
        newest = self.latest_dir()
        candidates = self.complete_dirs()
        if newest is not None:
            candidates = [p for p in candidates if _order(p) <= _order(newest)]
        if not candidates:
            raise ConfigError(
                f"no checkpoint in {self.directory} (checkpoints/latest is missing): "
                "this run never reached its first checkpoint; start it again instead of resuming"
            )
        first_error: ConfigError | None = None
        for path in reversed(candidates):
            try:
                loaded = self._load_dir(path)
            except ConfigError as error:
                first_error = first_error or error
                continue
            if first_error is not None:
                warnings.warn(
                    f"{first_error}; resuming from the previous checkpoint {path.name} instead",
                    UserWarning,
                    stacklevel=2,
                )
            return loaded
        assert first_error is not None
        raise first_error

    @staticmethod
    def _load_dir(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any], Path]:
        loop_state = load_file(path / "state.pt")
        agents = sorted(path.glob("agent_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
        if not agents:
            raise ConfigError(f"checkpoint {path} holds no agent_*.pt files")
        if (path / "memory.pt").exists():
            loop_state["memory"] = load_file(path / "memory.pt")["memories"]
        return [load_file(p) for p in agents], loop_state, path


def load_file(path: Path) -> dict[str, Any]:
    """``torch.load(path, weights_only=True)`` with an error that names the file."""
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ConfigError(f"checkpoint file missing: {path}") from None
    except Exception as exc:  # torch raises many types for truncated or foreign files
        raise ConfigError(
            f"checkpoint file {path} is truncated or corrupt ({type(exc).__name__}); "
            "resume from an earlier checkpoint directory or start again"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"checkpoint file {path} does not hold a state mapping")
    return data
