"""Bounded reading of manifest files: a file is data, and a small one.

YAML is read with a safe loader that also refuses what a hostile file uses to
hang or mislead the reader: aliases (``*name``, the "billion laughs" bomb),
duplicate keys (a second ``algorithm:`` block silently winning) and deep
nesting (a recursion error instead of a message). JSON gets the same duplicate
key and depth checks. Only regular files of at most :data:`MAX_BYTES` are read,
so ``/dev/zero`` or a named pipe cannot exhaust memory or block.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from agilerl.arena.models.errors import ConfigError

MAX_BYTES = 1 << 20
"""Largest manifest file read (1 MiB; real manifests are a few KiB)."""

MAX_DEPTH = 32
"""Deepest nesting of mappings and lists accepted."""


class _BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` without aliases or duplicate keys, and with a depth limit."""

    def __init__(self, stream: str, source: str) -> None:
        super().__init__(stream)
        self._source = source
        self._depth = 0

    def _fail(self, message: str, mark: Any) -> None:
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"{message}{where}", self._source)

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            self._fail(
                f"YAML alias *{event.anchor} is not allowed in a manifest; write the values out",
                event.start_mark,
            )
        if self.check_event(yaml.MappingStartEvent, yaml.SequenceStartEvent):
            self._depth += 1
            if self._depth > MAX_DEPTH:
                self._fail(f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
            try:
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                self._fail(
                    f"duplicate key {key!r} (first at line {seen[key].line + 1}); keep one of them",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


_BoundedLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _BoundedLoader.construct_mapping
)


def _json_pairs(source: str) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise ConfigError(f"duplicate key {key!r}; keep one of them", source)
            out[key] = value
        return out

    return hook


def _json_depth(text: str) -> int:
    """Deepest bracket nesting outside strings (checked before parsing, which recurses)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def read_bounded_text(path: str | Path) -> str:
    """The UTF-8 text of a regular file of at most :data:`MAX_BYTES`.

    Raises:
        ConfigError: Naming the file if it is missing, a directory, not a
            regular file (device, pipe, socket), too large or unreadable.
    """
    file = Path(path)
    try:
        info = file.stat()
    except FileNotFoundError:
        raise ConfigError(f"manifest file not found: {file} (check the path)") from None
    except OSError as exc:
        raise ConfigError(f"cannot read manifest file {file}: {exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"{file} is a directory; pass a manifest .yaml or .json file")
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{file} is not a regular file (a device, pipe or socket); pass a file")
    if info.st_size > MAX_BYTES:
        raise ConfigError(
            f"{file} is {info.st_size:,} bytes; a manifest may be at most {MAX_BYTES:,} bytes"
        )
    try:
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read manifest file {file}: {exc}") from None
    if len(raw) > MAX_BYTES:
        raise ConfigError(f"{file} is larger than {MAX_BYTES:,} bytes, the limit for a manifest")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read manifest file {file}: not UTF-8 text ({exc})") from None


def parse_bounded(text: str, source: str, *, as_json: bool) -> Any:
    """Parse manifest text as JSON or YAML with the limits of this module.

    Raises:
        ConfigError: Naming ``source`` for a syntax error, an alias, a
            duplicate key or too deep nesting.
    """
    if as_json:
        if _json_depth(text) > MAX_DEPTH:
            raise ConfigError(f"nested deeper than {MAX_DEPTH} levels", source)
        try:
            return json.loads(text, object_pairs_hook=_json_pairs(source))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"not valid JSON: {exc}", source) from None
        except ValueError as exc:  # an integer of more than 4,300 digits
            raise ConfigError(f"a value cannot be read: {exc}", source) from None
    try:
        loader = _BoundedLoader(text, source)  # its reader refuses control characters
    except yaml.YAMLError as exc:
        detail = str(exc).replace("\n", " ")
        raise ConfigError(f"not valid YAML: {detail}", source) from None
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        detail = str(exc).replace("\n", " ")
        raise ConfigError(f"not valid YAML: {detail}", source) from None
    except (ValueError, OverflowError) as exc:  # e.g. an integer of more than 4,300 digits
        raise ConfigError(f"a value cannot be read: {exc}", source) from None
    finally:
        loader.dispose()
