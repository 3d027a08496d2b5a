"""Fingerprints of the files a run reads (base model, datasets, reward code).

A run records them in ``inputs.json`` when it starts; a resume recomputes them and
refuses a changed file: an adapter trained on one base model continued on another, or
a dataset replaced under the same path, would silently mix two runs. The user may
accept the change explicitly (``accept_changed_inputs=true``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from agilerl.arena.models.errors import ConfigError

INPUTS_FILE = "inputs.json"
INPUT_FIELDS = (
    ("algorithm", "pretrained_model_name_or_path", "network.pretrained_model_name_or_path"),
    ("environment", "dataset", "environment.dataset"),
    ("environment", "dataset_path", "environment.dataset_path"),
    ("environment", "features", "environment.features"),
    ("environment", "targets", "environment.targets"),
    ("environment", "rubric_file_path", "environment.rubric_file_path"),
)
"""(manifest section, field, the name users know it by) of every local input file."""
_CHUNK = 1 << 20


def input_files(manifest: Any) -> dict[str, Path]:
    """The local files and folders the manifest names, by manifest path."""
    found = {}
    for section, field, label in INPUT_FIELDS:
        value = getattr(getattr(manifest, section, None), field, None)
        if isinstance(value, str) and value and Path(value).exists():
            found[label] = Path(value)
    return found


def fingerprint(path: Path) -> str:
    """SHA-256 over a file's bytes, or over a folder's relative file names and bytes."""
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        if path.is_dir():
            digest.update(str(file.relative_to(path)).encode() + b"\0")
        with file.open("rb") as handle:
            for chunk in iter(lambda handle=handle: handle.read(_CHUNK), b""):
                digest.update(chunk)
    return digest.hexdigest()


def fingerprints(manifest: Any) -> dict[str, dict[str, str]]:
    """``{manifest path: {"path", "sha256"}}`` of every input file."""
    return {
        label: {"path": str(path), "sha256": fingerprint(path)}
        for label, path in input_files(manifest).items()
    }


def record_inputs(run_dir: Path, manifest: Any) -> None:
    """Write ``inputs.json`` for a new run."""
    (Path(run_dir) / INPUTS_FILE).write_text(json.dumps(fingerprints(manifest), indent=2) + "\n")


def check_inputs(run_dir: Path, manifest: Any, *, accept_changed: bool = False) -> None:
    """Refuse to resume on input files that changed since the run recorded them.

    Raises:
        ConfigError: Naming each changed input, unless ``accept_changed``.
    """
    stored_file = Path(run_dir) / INPUTS_FILE
    if accept_changed or not stored_file.is_file():
        return
    try:
        stored = json.loads(stored_file.read_text())
    except (OSError, ValueError):
        raise ConfigError(f"resume={run_dir}: {stored_file} is unreadable") from None
    now = fingerprints(manifest)
    changed = []
    for label, before in stored.items():
        after = now.get(label)
        if after is None:
            changed.append(f"{label} {before.get('path')} is gone")
        elif after["sha256"] != before.get("sha256"):
            changed.append(
                f"{label} {after['path']} changed (sha256 {str(before.get('sha256'))[:12]}… "
                f"now {after['sha256'][:12]}…)"
            )
    if changed:
        raise ConfigError(
            f"resume={run_dir}: {'; '.join(changed)} since the run started: its checkpoints "
            "were trained on the old files. Restore them, or resume with "
            "accept_changed_inputs=true to continue on the new ones; nothing was written"
        )
