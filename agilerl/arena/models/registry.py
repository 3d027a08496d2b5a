"""The algorithm registry: maps a manifest's ``algorithm.name`` to its spec class."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from agilerl.arena.models.algorithms.base import AlgorithmSpec

    AlgoSpec = AlgorithmSpec

SpecT = TypeVar("SpecT", bound=type)


class AlgorithmRegistry:
    """Maps the manifest's ``algorithm.name`` to the spec class that validates it."""

    def __init__(self) -> None:
        self._specs: dict[str, type[AlgorithmSpec]] = {}

    def add(self, name: str, spec_cls: type[AlgoSpec]) -> None:
        """Register ``spec_cls`` under ``name``.

        Args:
            name: Algorithm name (e.g. ``"DQN"``).
            spec_cls: The spec class to register. Registering an existing name
                replaces it with a warning.
        """
        if name in self._specs and self._specs[name] is not spec_cls:
            warnings.warn(
                f"overriding registered algorithm {name!r} "
                f"({self._specs[name].__name__} -> {spec_cls.__name__})",
                stacklevel=2,
            )
        self._specs[name] = spec_cls

    def get(self, name: str) -> type[AlgoSpec]:
        """Look up a spec class by algorithm name.

        Args:
            name: Algorithm name.

        Returns:
            The registered spec class.

        Raises:
            KeyError: If ``name`` is not registered; the message lists every
                registered name.
        """
        try:
            return self._specs[name]
        except KeyError:
            raise KeyError(
                f"{name!r} is not a registered algorithm; registered: {', '.join(self.names())}"
            ) from None

    def create(self, name: str, /, **fields: Any) -> AlgoSpec:
        """Build a spec from the registry name and field values.

        A name may imply field values (``"RecurrentPPO"`` implies
        ``recurrent=True``); passing a contradicting value is an error.

        Args:
            name: Algorithm name.
            **fields: Field values for the spec.

        Returns:
            The spec instance.

        Raises:
            KeyError: If ``name`` is not registered.
            ValueError: If ``fields`` contradict what ``name`` implies.
        """
        spec_cls = self.get(name)
        for field, value in spec_cls.alias_implies.get(name, {}).items():
            if field in fields and fields[field] != value:
                raise ValueError(
                    f"algorithm name {name!r} implies {field}={value!r}, "
                    f"but {field}={fields[field]!r} was given"
                )
            fields[field] = value
        spec = spec_cls(**fields)
        spec._registry_name = name
        return spec

    def items(self) -> list[tuple[str, type[AlgoSpec]]]:
        """Return every ``(name, spec class)`` pair, sorted by name."""
        return sorted(self._specs.items())

    def names(self) -> list[str]:
        """Return every registered algorithm name, sorted."""
        return sorted(self._specs)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __len__(self) -> int:
        return len(self._specs)


MANIFEST_REGISTRY = AlgorithmRegistry()
"""Maps the manifest's ``algorithm.name`` to the spec class that validates it."""


def register(name: str | None = None) -> Callable[[SpecT], SpecT]:
    """Class decorator registering a spec in :data:`MANIFEST_REGISTRY`.

    Args:
        name: Registry key; defaults to the class name without its ``Spec`` suffix.
            Stack the decorator to register aliases.
    """

    def decorator(cls: SpecT) -> SpecT:
        key = name or cls.__name__.removesuffix("Spec")
        MANIFEST_REGISTRY.add(key, cls)
        return cls

    return decorator
