"""Reading manifest files: YAML or JSON, as data only (no tags that run code)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agilerl.arena.models.errors import ConfigError


def read_manifest_file(path: str | Path) -> dict[str, Any]:
    """Read a manifest file into a mapping.

    YAML is read with the safe loader, so a file cannot construct Python
    objects. JSON files (``.json``) are read with :mod:`json`.

    Raises:
        ConfigError: Naming the file, if it is missing, unreadable, not YAML or
            JSON, or not a mapping.
    """
    import yaml

    file = Path(path)
    if not file.exists():
        raise ConfigError(f"manifest file not found: {file} (check the path)")
    if file.is_dir():
        raise ConfigError(f"{file} is a directory; pass a manifest .yaml or .json file")
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read manifest file {file}: {exc}") from None
    try:
        data = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        kind = "JSON" if file.suffix == ".json" else "YAML"
        detail = str(exc).replace("\n", " ")
        raise ConfigError(f"{file} is not valid {kind}: {detail}") from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{file} must hold a mapping of manifest sections (algorithm, environment, ...), "
            f"not {type(data).__name__}"
        )
    return data
