"""The one error type for user mistakes, and its translation from Pydantic.

Every problem carries the dotted path of the offending key and a message
that says what to change. The CLI prints them without a traceback and exits 2.
A :class:`RunFailure` (not the user's doing) is printed the same way and exits 1.
"""

from __future__ import annotations

import contextlib
import difflib
import types
import typing
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

EXIT_USER_ERROR = 2
EXIT_RUN_FAILED = 1


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a config, manifest or command line."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(Exception):
    """A user mistake in a config, manifest, file or command line.

    Attributes:
        problems: Every problem found, each with its dotted path.
        source: The file or command the problems come from, if any.
    """

    def __init__(self, problems: Sequence[Problem] | str, source: str | None = None) -> None:
        if isinstance(problems, str):
            problems = [Problem("", problems)]
        self.problems = list(problems)
        self.source = source
        super().__init__(self.render())

    def render(self) -> str:
        """All problems, one ``error:`` line each."""
        prefix = f"{self.source}: " if self.source else ""
        return "\n".join(f"error: {prefix}{problem}" for problem in self.problems)


@contextlib.contextmanager
def input_errors(what: str, fix: str) -> Iterator[None]:
    """Turn any exception a third-party reader raises for a malformed input into a
    :class:`ConfigError`: ``"<what> (<Type>: <first line>); <fix>"``.

    For readers (transformers, minari, h5py) that raise a dozen exception types for damaged
    files; a :class:`ConfigError` raised inside passes unchanged.
    """
    try:
        yield
    except ConfigError:
        raise
    except Exception as exc:  # the input is at fault: the reader's own message is kept
        detail = str(exc).splitlines()[0][:300] if str(exc) else ""
        raise ConfigError(f"{what} ({type(exc).__name__}: {detail}); {fix}") from None


class RunFailure(RuntimeError):
    """A run that cannot go on for a reason outside its config (an engine process died).

    The training engine checkpoints where the members stand before it passes
    this on (where the paradigm can resume mid-generation); the CLI prints the
    message without a traceback and exits :data:`EXIT_RUN_FAILED`.
    """


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    """The closest candidate to ``name``, if one is close enough."""
    pool = list(candidates)
    matches = difflib.get_close_matches(name, pool, n=1, cutoff=0.6)
    if not matches:
        lowered = {c.lower(): c for c in pool}
        matches = [lowered[m] for m in difflib.get_close_matches(name.lower(), lowered, n=1)]
    return matches[0] if matches else None


def model_classes(annotation: Any) -> list[type[BaseModel]]:
    """Pydantic model classes reachable from a type annotation (unions, Optional, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return model_classes(typing.get_args(annotation)[0])
    if origin is not None or isinstance(annotation, types.UnionType):
        # Unions, Optional, dict[str, X], list[X]: every model among the arguments.
        for arg in typing.get_args(annotation):
            found += model_classes(arg)
    return found


def input_names(name: str, info: Any) -> list[str]:
    """The keys a field accepts on input: its name, alias and older spellings."""
    names = [name]
    if info.alias:
        names.append(info.alias)
    validation = info.validation_alias
    choices = getattr(validation, "choices", [validation] if validation else [])
    names += [c for c in choices if isinstance(c, str)]
    return list(dict.fromkeys(names))


def field_names(model: type[BaseModel]) -> list[str]:
    """Field names and aliases a model accepts."""
    names: list[str] = []
    for name, info in model.model_fields.items():
        names += [n for n in input_names(name, info) if n not in names]
    return names


def _descend(models: list[type[BaseModel]], key: str) -> list[type[BaseModel]]:
    nested: list[type[BaseModel]] = []
    for model in models:
        for name, info in model.model_fields.items():
            if key in input_names(name, info):
                nested += model_classes(info.annotation)
    return nested


def _message(error: dict[str, Any], models: list[type[BaseModel]]) -> str:
    kind = error["type"]
    key = str(error["loc"][-1]) if error["loc"] else ""
    if kind == "extra_forbidden":
        known = [n for m in models for n in field_names(m)]
        guess = did_you_mean(key, known)
        return "unknown field" + (f" (did you mean {guess}?)" if guess else "")
    if kind == "missing":
        return "required field is missing"
    message = error["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    if kind not in ("value_error", "assertion_error", "manifest") and "input" in error:
        shown = repr(error["input"])
        if len(shown) > 60:
            shown = shown[:57] + "..."
        message = f"{message} (got {shown})"
    return message


def _dotted(loc: Sequence[Any]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def problems_from_validation(exc: ValidationError, root_models: Any = None) -> list[Problem]:
    """Translate a Pydantic error into path-named problems with did-you-mean hints.

    Args:
        exc: The validation error.
        root_models: A callable ``(first_key) -> list[model classes]`` or a model
            class, used to find the fields known at an error's parent path.
    """
    problems: list[Problem] = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        parent = loc[:-1]
        if callable(root_models) and not isinstance(root_models, type):
            models = root_models(parent[0]) if parent else root_models(None)
            parent = parent[1:]
        elif root_models is not None:
            models = [root_models]
        else:
            models = []
        for key in parent:
            if isinstance(key, int):
                continue
            models = _descend(models, str(key)) or models
        problems.append(Problem(_dotted(loc), _message(error, models)))
    return problems
