"""What a resumed run may change: its budget, not what it is.

A resumed run continues the population, optimisers, RNG streams and metrics
of the stored run. Changing a hyperparameter, the env or the population on
resume would either be ignored or silently make a different run, so only the
fields in :data:`RESUMABLE_FIELDS` may differ from the stored manifest.
"""

from __future__ import annotations

from typing import Any

from agilerl.arena.models.errors import ConfigError, Problem

RESUMABLE_FIELDS = (
    "training.max_steps",
    "training.max_wall_seconds",
    "training.target_score",
    "training.checkpoint_steps",
    "training.overwrite_checkpoints",
    "training.batched_population",
)
"""Manifest fields a resumed run may change."""


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out or {prefix: {}}
    return {prefix: data}


def changed_fields(stored: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Dotted paths whose values differ between two manifests (as plain data)."""
    a, b = _flatten(stored), _flatten(new)
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def check_resume_changes(stored: dict[str, Any], new: dict[str, Any], run_dir: str) -> None:
    """Refuse changes a resumed run cannot apply.

    Raises:
        ConfigError: Listing each refused field and the fields that can change.
    """
    refused = [
        path
        for path in changed_fields(stored, new)
        if not any(path == f or path.startswith(f + ".") for f in RESUMABLE_FIELDS)
    ]
    if refused:
        allowed = ", ".join(RESUMABLE_FIELDS)
        raise ConfigError(
            [
                Problem(path, "cannot change when resuming a run; nothing was written")
                for path in refused
            ]
            + [Problem("", f"a resumed run may change only: {allowed}; start a new run instead")],
            f"resume={run_dir}",
        )


def prepare_resume(
    run_dir: Any,
    checkpoints: Any,
    manifest: Any,
    resume: bool,
    seed: int | None,
) -> tuple[list[dict[str, Any]] | None, dict[str, Any] | None, int]:
    """Every check a (resumed) run needs, before anything is written.

    Args:
        run_dir: The run directory (a :class:`pathlib.Path`).
        checkpoints: Its :class:`~agilerl.training.checkpointing.CheckpointManager`.
        manifest: The validated manifest of this run.
        resume: Continue from the newest checkpoint.
        seed: The seed asked for, or ``None`` (0 for a new run, the stored one on resume).

    Returns:
        The agents' states and loop state to resume from (``None`` for a new
        run) as a :class:`~agilerl.training.checkpointing.ResumeState`, and the
        seed the run uses.

    Raises:
        ConfigError: A new run in a directory that holds checkpoints, a resume
            that changes what cannot change (fields, population size, seed),
            or no usable checkpoint.
    """
    from pathlib import Path

    from agilerl.arena.models.loading import read_manifest_file

    folder = Path(run_dir)
    if not resume:
        if checkpoints.latest_dir() is not None:
            raise ConfigError(
                f"{folder} already holds a run with checkpoints; resume it (resume={folder} / "
                "LocalTrainer(resume=True)) or choose another run_dir"
            )
        return None, None, 0 if seed is None else seed
    stored_file = folder / "manifest.yaml"
    if stored_file.exists():
        check_resume_changes(read_manifest_file(stored_file), manifest.to_dict(), str(folder))
    agent_states, resume_state, _ = checkpoints.load_latest()
    pop_size = manifest.training.pop_size
    if len(agent_states) != pop_size:
        raise ConfigError(
            f"checkpoint holds {len(agent_states)} agents but training.pop_size is {pop_size}"
        )
    stored_seed = resume_state.seed
    if seed is None:
        seed = 0 if stored_seed is None else int(stored_seed)
    elif stored_seed is not None and int(stored_seed) != seed:
        raise ConfigError(
            f"seed={seed}: the run in {folder} was started with seed {stored_seed}; "
            "leave seed out to resume it with its own seed"
        )
    return agent_states, resume_state, seed
