"""The algorithm registry: maps a manifest's ``algorithm.name`` to its spec class."""

from __future__ import annotations

import importlib
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
        self._lazy: dict[str, str] = {}

    def add_lazy(self, name: str, module: str) -> None:
        """Declare that importing ``module`` registers ``name``; it is imported on first use.

        Validating a manifest then imports only its own algorithm's spec module.
        ``names`` and ``in`` need no import; ``get`` imports the one module and
        ``items`` imports them all.
        """
        if name not in self._specs:
            self._lazy[name] = module

    def _load(self, name: str) -> None:
        module = self._lazy.pop(name, None)
        if module is not None:
            importlib.import_module(module)
            if name not in self._specs:
                raise ImportError(f"{module} was expected to register algorithm {name!r}")

    def _load_all(self) -> None:
        for name in list(self._lazy):
            self._load(name)

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
        self._lazy.pop(name, None)

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
        self._load(name)
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
        self._load_all()
        return sorted(self._specs.items())

    def names(self) -> list[str]:
        """Return every registered algorithm name, sorted."""
        return sorted({*self._specs, *self._lazy})

    def __contains__(self, name: object) -> bool:
        return name in self._specs or name in self._lazy

    def __len__(self) -> int:
        return len({*self._specs, *self._lazy})


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
