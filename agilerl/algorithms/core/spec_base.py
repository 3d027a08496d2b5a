"""Algorithms built from their validated spec: hyperparameters live in ``self.spec``.

:class:`SpecAlgorithm` is the shape new single-agent algorithms take
(``Algo(spec, observation_space, action_space, *, index=0, device="cpu")``):

* every hyperparameter is read from ``self.spec``; ``hp_names`` become
  attributes that read the spec and, when set (by a mutation), replace it with
  a validated copy (:meth:`SpecAlgorithm.update_spec`);
* checkpoints record ``spec.model_dump(mode="json")``, the spaces, weights
  and optimizer states as plain tensors and dicts, so they load with
  ``torch.load(weights_only=True)`` and :meth:`SpecAlgorithm.from_state_dict`
  rebuilds the agent from them alone.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces

from agilerl.algorithms.core.base import (
    CHECKPOINT_FORMAT,
    EvolvableAlgorithm,
    SingleAgentAlgorithm,
)
from agilerl.networks.spaces import space_from_dict, space_to_dict

SPEC_CHECKPOINT_VERSION = 2


def _spec_property(name: str) -> property:
    def getter(self: SpecAlgorithm) -> Any:
        return getattr(self.spec, name)

    def setter(self: SpecAlgorithm, value: Any) -> None:
        self.update_spec(**{name: value})

    return property(getter, setter, doc=f"``spec.{name}`` (setting it validates a new spec).")


class SpecAlgorithm(SingleAgentAlgorithm):
    """A single-agent algorithm whose hyperparameters are its validated spec.

    Subclasses set ``spec_class``, ``network_names``, ``optimizer_names`` and
    ``hp_names`` and implement :meth:`_build` (networks and optimizers from
    ``self.spec``), ``get_action`` and ``learn``.

    Args:
        spec: The validated algorithm spec.
        observation_space: Single-env observation space.
        action_space: Single-env action space.
        index: Population index.
        device: Torch device.
    """

    spec_class: ClassVar[type] = object
    arch_fields: ClassVar[frozenset[str]] = frozenset({"net_config", "normalize_images"})
    """Spec fields whose change rebuilds the networks."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in cls.hp_names:
            if name not in cls.__dict__:
                setattr(cls, name, _spec_property(name))

    def __init__(
        self,
        spec: Any,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        *,
        index: int = 0,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__(observation_space, action_space, index=index, device=device)
        if not isinstance(spec, self.spec_class):
            raise TypeError(
                f"{type(self).__name__} needs a {self.spec_class.__name__}, "
                f"got {type(spec).__name__}"
            )
        self.spec = spec

    # --- hyperparameters --------------------------------------------------------------
    def update_spec(self, **updates: Any) -> None:
        """Replace the spec with a validated copy carrying ``updates``.

        A changed learning rate reaches the optimizers; a changed ``arch_fields``
        entry rebuilds the networks.

        Raises:
            pydantic.ValidationError: If a value is outside its field's range.
        """
        old = self.spec
        data = {**old.model_dump(), **updates}
        new = type(old).model_validate(data)
        new._registry_name = old._registry_name
        self.spec = new
        if self.arch_fields & set(updates):
            self._build()
        elif "lr" in updates:
            self.set_lr(new.lr)

    def network_config(self) -> dict[str, Any] | None:
        """The spec's network settings as the plain dict the network builders take."""
        net = getattr(self.spec, "net_config", None)
        return None if net is None else net.model_dump()

    def init_kwargs(self) -> dict[str, Any]:
        """Constructor arguments besides ``index``/``device`` (the spec and the spaces)."""
        return {
            "spec": self.spec,
            "observation_space": self.observation_space,
            "action_space": self.action_space,
        }

    def _build(self) -> None:
        raise NotImplementedError

    # --- acting -----------------------------------------------------------------------
    def test(
        self,
        env: Any,
        max_steps: int | None = None,
        loop: int = 1,
        greedy: bool = True,
        seed: int | None = None,
    ) -> float:
        """Mean episode return on a gymnasium vector env (appended to ``fitness``)."""
        return EvolvableAlgorithm.test(
            _TupleActions(self),  # type: ignore[arg-type]
            env,
            max_steps=max_steps,
            loop=loop,
            greedy=greedy,
            seed=seed,
        )

    # --- state ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Spec, spaces, weights, optimizer states, counters and history as plain data."""
        return {
            "format": CHECKPOINT_FORMAT,
            "version": SPEC_CHECKPOINT_VERSION,
            "algorithm": type(self).__name__,
            "spec": self.spec.model_dump(mode="json"),
            "spec_name": self.spec.name,
            "observation_space": space_to_dict(self.observation_space),
            "action_space": space_to_dict(self.action_space),
            "networks": {n: dict(getattr(self, n).state_dict()) for n in self.network_names},
            "optimizers": {n: getattr(self, n).state_dict() for n in self.optimizer_names},
            "index": self.index,
            "steps": int(self.steps),
            "num_updates": int(self.num_updates),
            "fitness": [float(f) for f in self.fitness],
            "scores": [float(s) for s in self.scores],
            "mut": self.mut,
            "extra": self._extra_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore spec, weights, optimizer state, counters and history.

        Raises:
            ValueError: If ``state`` belongs to another algorithm or does not fit the networks.
        """
        if state.get("format") != CHECKPOINT_FORMAT or "spec" not in state:
            raise ValueError(f"Not a {type(self).__name__} state dict")
        if state["algorithm"] != type(self).__name__:
            raise ValueError(f"State dict is for {state['algorithm']}, not {type(self).__name__}")
        spec = self.spec_class.model_validate(state["spec"])
        spec._registry_name = state.get("spec_name", self.spec._registry_name)
        rebuild = any(
            getattr(spec, f, None) != getattr(self.spec, f, None) for f in self.arch_fields
        )
        self.spec = spec
        if rebuild:
            self._build()
        for name in self.network_names:
            try:
                getattr(self, name).load_state_dict(state["networks"][name])
            except RuntimeError as exc:
                raise ValueError(f"Weights of {name!r} do not fit the network: {exc}") from exc
        for name in self.optimizer_names:
            getattr(self, name).load_state_dict(state["optimizers"][name])
        self.index = int(state.get("index", self.index))
        self.steps = int(state.get("steps", 0))
        self.num_updates = int(state.get("num_updates", 0))
        self.fitness = [float(f) for f in state.get("fitness", [])]
        self.scores = [float(s) for s in state.get("scores", [])]
        self.mut = state.get("mut")
        self._load_extra_state(state.get("extra", {}))

    @classmethod
    def from_state_dict(
        cls, state: Mapping[str, Any], device: str | torch.device = "cpu"
    ) -> SpecAlgorithm:
        """Rebuild an agent from :meth:`state_dict` output (e.g. a loaded checkpoint)."""
        spec = cls.spec_class.model_validate(state["spec"])
        spec._registry_name = state.get("spec_name")
        agent = cls(
            spec,
            space_from_dict(state["observation_space"]),
            space_from_dict(state["action_space"]),
            index=int(state.get("index", 0)),
            device=device,
        )
        agent.load_state_dict(state)
        return agent

    def clone(self, index: int | None = None) -> SpecAlgorithm:
        """An independent deep copy (weights, optimizer state, spec, history)."""
        agent = type(self).from_state_dict(copy.deepcopy(self.state_dict()), self.device)
        if index is not None:
            agent.index = int(index)
        return agent


class _TupleActions:
    """An agent whose ``get_action`` returns an array, seen as the base ``test`` expects."""

    def __init__(self, agent: SpecAlgorithm) -> None:
        self._agent = agent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._agent, name)

    def get_action(self, obs: Any, greedy: bool = False) -> tuple[np.ndarray]:
        return (self._agent.get_action(obs, greedy=greedy),)
