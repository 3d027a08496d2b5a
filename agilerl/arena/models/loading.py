"""Reading manifest files: YAML or JSON, as data only (no tags that run code)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.safe_yaml import parse_bounded, read_bounded_text


def read_manifest_file(path: str | Path) -> dict[str, Any]:
    """Read a manifest file into a mapping.

    YAML is read with a bounded safe loader (no Python objects, no aliases, no
    duplicate keys, limited depth; see :mod:`agilerl.arena.models.safe_yaml`).
    JSON files (``.json``) get the same limits. Only regular files up to 1 MiB
    are read.

    Raises:
        ConfigError: Naming the file, if it is missing, unreadable, not a
            regular file, too large, not YAML or JSON, or not a mapping.
    """
    file = Path(path)
    text = read_bounded_text(file)
    data = parse_bounded(text, str(file), as_json=file.suffix == ".json")
    if not isinstance(data, dict):
        raise ConfigError(
            f"{file} must hold a mapping of manifest sections (algorithm, environment, ...), "
            f"not {type(data).__name__}"
        )
    return data
