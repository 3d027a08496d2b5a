"""Population checkpoints: atomic, loadable with ``torch.load(weights_only=True)``, resumable.

Layout under ``<run dir>/checkpoints/``::

    step_000012288/agent_0.pt ...   every agent's state (weights, optimisers, hyperparameters)
    step_000012288/state.pt         loop state (:class:`ResumeState`): counters, RNG states
    step_000012288/memory.pt        replay memories, when the manifest stores them
    latest                          name of the newest complete checkpoint directory

This module is the one writer of checkpoint files: :func:`write_agent_file`
writes an agent's state (with its checksum) for the population checkpoints
and for a single agent's ``save_checkpoint`` alike.

A checkpoint directory is written under a temporary name and renamed when
complete; ``latest`` is replaced atomically after that, and only then is an
older checkpoint removed (a re-save of the same step gets a new name,
``step_<n>_r<k>``). A run killed at any moment therefore leaves ``latest``
pointing at a complete checkpoint. ``latest`` must name a checkpoint
directory inside its own ``checkpoints/``; a corrupt newest checkpoint falls
back to the previous complete one, with a warning.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import random
import re
import shutil
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
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


@dataclass
class ResumeState:
    """What a resumed run needs besides the agents: the loop's counters and RNG states.

    Attributes:
        generation: Evaluations done.
        total_steps: Env steps of the whole population.
        wall_seconds: Wall time spent so far.
        solved_at_step: Total steps when the target was first reached.
        best_fitness: Best finite evaluation so far.
        next_checkpoint: Total steps at which the next checkpoint is due.
        wandb_id: The wandb run to continue.
        seed: The run's seed (a resumed run keeps it).
        operators: Tournament and mutation states (evolutionary HPO).
        epsilons: Each agent's exploration epsilon (epsilon-greedy loops).
        rng: Python, numpy and torch RNG states (:func:`rng_state`).
        extra: A paradigm loop's own plain state (e.g. the bandit loop's regret curves).
        memory: Replay memories' states (from ``memory.pt``; never in ``state.pt``).
    """

    generation: int = 0
    total_steps: int = 0
    wall_seconds: float = 0.0
    solved_at_step: int | None = None
    best_fitness: float | None = None
    next_checkpoint: int | None = None
    wandb_id: str | None = None
    seed: int | None = None
    operators: dict[str, Any] | None = None
    epsilons: list[float] | None = None
    rng: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    memory: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``state.pt`` (the memories go to ``memory.pt``)."""
        data = asdict(self)
        data.pop("memory")
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: Path | str = "state.pt") -> ResumeState:
        """Read what :meth:`to_dict` wrote.

        Raises:
            ConfigError: If ``data`` lacks the counters (a foreign or truncated file).
        """
        known = {f.name for f in fields(cls)}
        if "total_steps" not in data:
            raise ConfigError(f"checkpoint file {where} holds no loop state (total_steps)")
        return cls(**{k: v for k, v in data.items() if k in known})


def state_digest(value: Any, h: Any = None) -> str:
    """Deterministic SHA-256 over nested dicts/lists/tensors/scalars (the checkpoint checksum)."""
    top = h is None
    h = hashlib.sha256() if top else h
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(value, Mapping):
        h.update(b"D")
        for key in sorted(value, key=repr):
            h.update(repr(key).encode())
            state_digest(value[key], h)
    elif isinstance(value, list | tuple):
        h.update(f"L{len(value)}".encode())
        for item in value:
            state_digest(item, h)
    else:
        h.update(repr(value).encode())
    return h.hexdigest() if top else ""


def write_agent_file(state: Mapping[str, Any], path: str | Path) -> None:
    """Write an agent's ``state_dict()`` with its checksum, atomically.

    The one writer of agent checkpoint files: the population checkpoints and
    an algorithm's ``save_checkpoint`` both come here, so there is one format.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = dict(state)
    data.pop("checksum", None)
    data["checksum"] = state_digest(data)
    atomic_torch_save(data, path)


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


OPTIMIZER_KEYS = ("optimizers", "optimizer")
"""Where an agent's state keeps its optimizer state (RL agents, LLM agents)."""


def without_optimizer(state: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` with its optimizer state replaced by ``None`` (the key stays)."""
    return {k: (None if k in OPTIMIZER_KEYS else v) for k, v in state.items()}


def holds_optimizer(state: Mapping[str, Any]) -> bool:
    """Whether an agent's state carries optimizer state (``checkpoint_optimizer`` was on)."""
    return any(state.get(k) is not None for k in OPTIMIZER_KEYS)


class CheckpointManager:
    """Writes and reads a run's population checkpoints."""

    def __init__(
        self, directory: str | Path, *, keep_last_only: bool = False, optimizer: bool = True
    ) -> None:
        """
        Args:
            directory: The run's ``checkpoints`` folder.
            keep_last_only: Delete older checkpoints once a new one is complete.
            optimizer: Store the agents' optimizer state (``training.checkpoint_optimizer``);
                without it a resumed run starts its optimizers fresh.
        """
        self.directory = Path(directory)
        self.keep_last_only = keep_last_only
        self.optimizer = optimizer

    def save(
        self,
        step: int,
        agent_states: list[dict[str, Any]],
        state: ResumeState,
        memories: list[dict[str, Any]] | None = None,
    ) -> Path:
        """Write one complete checkpoint and point ``latest`` at it.

        Args:
            step: Env steps so far (names the directory).
            agent_states: One ``state_dict()`` per agent.
            state: The loop's counters; the RNG states are added here.
            memories: Replay memories' states, stored in ``memory.pt``.

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
        try:
            for index, agent_state in enumerate(agent_states):
                if not self.optimizer:
                    agent_state = without_optimizer(agent_state)
                write_agent_file(agent_state, tmp / f"agent_{index}.pt")
            atomic_torch_save({**state.to_dict(), "rng": rng_state()}, tmp / "state.pt")
            if memories is not None:
                atomic_torch_save({"memories": memories}, tmp / "memory.pt")
            os.replace(tmp, final)
        except BaseException:  # a write failed (full disk, size limit): no partial folder stays
            shutil.rmtree(tmp, ignore_errors=True)
            raise
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

    def load_latest(self) -> tuple[list[dict[str, Any]], ResumeState, Path]:
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
            if not all(holds_optimizer(agent) for agent in loaded[0]):
                warnings.warn(
                    f"{path} holds no optimizer state (training.checkpoint_optimizer=false): "
                    "the agents' optimizers restart fresh (no Adam moments, step count 0)",
                    UserWarning,
                    stacklevel=2,
                )
            return loaded
        assert first_error is not None
        raise first_error

    @staticmethod
    def _load_dir(path: Path) -> tuple[list[dict[str, Any]], ResumeState, Path]:
        state = ResumeState.from_dict(load_file(path / "state.pt"), path / "state.pt")
        agents = sorted(path.glob("agent_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
        if not agents:
            raise ConfigError(f"checkpoint {path} holds no agent_*.pt files")
        if (path / "memory.pt").exists():
            state.memory = load_file(path / "memory.pt")["memories"]
        return [read_agent_file(p) for p in agents], state, path


def read_agent_file(path: Path) -> dict[str, Any]:
    """An agent file written by :func:`write_agent_file`, its checksum verified and removed.

    Raises:
        ConfigError: Naming the file, if it is missing, truncated or corrupt.
    """
    data = load_file(path)
    checksum = data.pop("checksum", None)
    if checksum is not None and checksum != state_digest(data):
        raise ConfigError(
            f"checkpoint file {path} is corrupt (checksum mismatch); "
            "resume from an earlier checkpoint directory or start again"
        )
    return data


def load_file(path: Path) -> dict[str, Any]:
    """``torch.load(path, weights_only=True)`` with an error that names the file."""
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ConfigError(f"checkpoint file missing: {path}") from None
    except Exception as exc:  # torch raises many types for truncated or foreign files
        if isinstance(exc, pickle.UnpicklingError) and "Weights only load failed" in str(exc):
            raise ConfigError(
                f"checkpoint file {path} holds objects other than tensors and plain data, "
                "refused because loading them could run code; use a checkpoint agilerl wrote "
                "(an earlier checkpoint directory of the run)"
            ) from None
        raise ConfigError(
            f"checkpoint file {path} is truncated or corrupt ({type(exc).__name__}); "
            "resume from an earlier checkpoint directory or start again"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"checkpoint file {path} does not hold a state mapping")
    return data
