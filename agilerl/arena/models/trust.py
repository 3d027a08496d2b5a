"""Which manifest fields would run code, and the opt-in that allows them.

A manifest is data. Some fields name code that a run would import or execute:
an env ``entrypoint`` (and the ``path`` added to ``sys.path`` for it),
gymnasium's ``module:EnvId`` names (importing ``module`` runs it), wrappers
given as ``module:Class``, PettingZoo modules outside the known packages, and
reward/rubric Python files. Such a run needs the user's explicit opt-in
(``trust_code=true`` on ``train.py``, ``--trust-code`` on ``agilerl``,
``LocalTrainer(trust_code=True)``), the way ``trust_remote_code`` works in
transformers. A manifest read back from a run directory gets no more trust
than the command line that reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agilerl.arena.models.errors import ConfigError, Problem
from agilerl.arena.models.images import KNOWN_GYM_MODULES

TRUST_HINT = "trust_code=true (train.py), --trust-code (agilerl) or LocalTrainer(trust_code=True)"
KNOWN_PETTINGZOO_PACKAGES = ("pettingzoo.", "mpe2.")
"""PettingZoo module prefixes importable without the opt-in (installed env suites)."""


@dataclass(frozen=True)
class CodeField:
    """A manifest field whose value names code a run would import or execute."""

    path: str
    value: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}={self.value!r} ({self.why})"


def code_fields(environment: Any) -> list[CodeField]:
    """The fields of an environment spec that would run code.

    Args:
        environment: A validated environment spec (any ``env_type``).
    """
    found: list[CodeField] = []
    env_type = str(getattr(environment, "env_type", ""))
    entrypoint = getattr(environment, "entrypoint", None)
    if entrypoint:
        found.append(CodeField("environment.entrypoint", entrypoint, "imports and calls it"))
    path = getattr(environment, "path", None)
    if path:
        found.append(CodeField("environment.path", path, "added to sys.path"))
    name = getattr(environment, "name", None)
    module = name.split(":", 1)[0] if isinstance(name, str) and ":" in name else None
    if env_type in ("gym", "offline") and module and module not in KNOWN_GYM_MODULES:
        found.append(CodeField("environment.name", name, f"gymnasium imports module {module!r}"))
    known = isinstance(name, str) and name.startswith(KNOWN_PETTINGZOO_PACKAGES)
    if env_type == "pettingzoo" and isinstance(name, str) and not known:
        found.append(CodeField("environment.name", name, "imports this module"))
    for index, wrapper in enumerate(getattr(environment, "env_wrappers", None) or []):
        wrapper_name = wrapper if isinstance(wrapper, str) else wrapper[0]
        if ":" in wrapper_name or "." in wrapper_name:
            found.append(
                CodeField(f"environment.env_wrappers[{index}]", wrapper_name, "imports it")
            )
    reward = getattr(environment, "reward", None)
    if isinstance(reward, str) and ":" in reward:
        found.append(CodeField("environment.reward", reward, "imports it"))
    rubric = getattr(environment, "rubric_file_path", None)
    if rubric:
        found.append(CodeField("environment.rubric_file_path", rubric, "executes the file"))
    return found


def require_trust(environment: Any, trusted: bool, source: str | None = None) -> list[CodeField]:
    """Refuse a run whose manifest would run code, unless the user opted in.

    Args:
        environment: The validated environment spec.
        trusted: The opt-in of this run (never read from the manifest itself).
        source: The file or command named in the error.

    Returns:
        The fields that run code (empty for a plain data manifest).

    Raises:
        ConfigError: Naming every such field and the opt-in flag.
    """
    fields = code_fields(environment)
    if fields and not trusted:
        raise ConfigError(
            [
                Problem(f.path, f"{f.value!r} runs code ({f.why}); refused without {TRUST_HINT}")
                for f in fields
            ],
            source,
        )
    return fields
