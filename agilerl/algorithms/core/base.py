"""Algorithm base classes: spec, identity, counters, cloning, checkpoints and evaluation.

An algorithm is constructed from its validated spec, the single source of
every hyperparameter's default, range and description::

    agent = DQN(DQNSpec(lr=1e-3), observation_space, action_space, index=0)
    agent.lr                      # 0.001, read from agent.spec
    agent.lr = 5e-4               # validated through the spec; reaches the optimizer

Subclass contract (see :class:`EvolvableAlgorithm`):

* ``spec_class``: the spec the algorithm is built from; every field of it
  reads (and writes, validated) as an attribute of the agent.
* ``network_names`` / ``optimizer_names``: attribute names of the modules and
  optimizers that make up the agent; they are saved, loaded and cloned.
* ``hp_names``: the mutable hyperparameters, derived from the spec (its
  fields declared with ``mutable_field``; never listed by hand);
  ``lr_optimizers`` maps learning-rate fields to the optimizer they drive;
  ``rebuild_fields``: spec fields whose change rebuilds the networks.
* :meth:`EvolvableAlgorithm._build` (networks and optimizers from
  ``self.spec``) and :meth:`EvolvableAlgorithm.act` (env actions).

Checkpoints are pure dicts of tensors and Python scalars/lists/strings: the
spec as ``spec.model_dump(mode="json")``, the spaces as plain dicts, weights
and optimizer state as tensors. They load with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces

from agilerl.arena.models.algorithms import (
    AlgorithmSpec,
    LLMAlgorithmSpec,
    MultiAgentAlgorithmSpec,
    SingleAgentAlgorithmSpec,
)
from agilerl.networks.masking import has_action_mask, policy_space
from agilerl.networks.spaces import space_from_dict, space_to_dict

CHECKPOINT_FORMAT = "agilerl.algorithm"
CHECKPOINT_VERSION = 2
_REQUIRED_KEYS = ("format", "version", "algorithm", "spec", "args", "networks", "optimizers")
_SPACE_TAG = "__space__"

_REGISTRY: dict[str, type[EvolvableAlgorithm]] = {}

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_VERSION",
    "EvolvableAlgorithm",
    "LLMAlgorithm",
    "MultiAgentAlgorithm",
    "SingleAgentAlgorithm",
    "read_checkpoint",
    "space_from_dict",
    "space_to_dict",
    "updated_spec",
]


# --- serialisation helpers ----------------------------------------------------
def _to_plain(value: Any, where: str) -> Any:
    """Convert a constructor argument to checkpoint-safe plain data."""
    if isinstance(value, spaces.Space):
        return {_SPACE_TAG: space_to_dict(value)}
    if value is None or isinstance(value, bool | int | float | str | torch.Tensor):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, torch.device):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _to_plain(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise TypeError(f"Cannot store {where} of type {type(value).__name__} in a checkpoint")


def _from_plain(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {_SPACE_TAG}:
            return space_from_dict(value[_SPACE_TAG])
        return {k: _from_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_plain(v) for v in value]
    return value


def read_checkpoint(path: str | os.PathLike[str], device: str | torch.device = "cpu") -> dict:
    """Load and validate a checkpoint file written by ``save_checkpoint``.

    Args:
        path: Checkpoint file.
        device: ``map_location`` for the tensors.

    Returns:
        The checkpoint dict.

    Raises:
        FileNotFoundError: If the file does not exist.
        ValueError: Naming the file, if it is truncated, corrupted (checksum
            mismatch) or not an agilerl algorithm checkpoint.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Checkpoint {path} does not exist")
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:
        raise ValueError(
            f"Checkpoint {path} is corrupted or truncated and cannot be read "
            f"({type(exc).__name__}: {exc})"
        ) from exc
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"Checkpoint {path} is not an agilerl algorithm checkpoint")
    missing = [key for key in _REQUIRED_KEYS if key not in state]
    if missing:
        raise ValueError(f"Checkpoint {path} is incomplete: missing {missing}")
    if state["version"] > CHECKPOINT_VERSION:
        raise ValueError(
            f"Checkpoint {path} has format version {state['version']}, newer than "
            f"this agilerl supports ({CHECKPOINT_VERSION})"
        )
    from agilerl.training.checkpointing import state_digest

    checksum = state.pop("checksum", None)
    if checksum is not None and checksum != state_digest(state):
        raise ValueError(f"Checkpoint {path} is corrupted: checksum mismatch")
    return state


# --- specs ----------------------------------------------------------------------
def updated_spec(spec: AlgorithmSpec, changes: Mapping[str, Any]) -> AlgorithmSpec:
    """A new spec with ``changes`` applied, validated like a manifest section.

    Raises:
        pydantic.ValidationError: Naming the field, if a value is out of range.
    """
    data = spec.model_dump()
    data.update(changes)
    new = type(spec).model_validate(data)
    new._registry_name = spec._registry_name
    return new


def _set_lr(optimizer: Any, lr: float) -> None:
    """Set the learning rate of a :class:`FlatAdam` or any ``torch.optim`` optimizer."""
    if hasattr(optimizer, "set_lr"):
        optimizer.set_lr(lr)
    else:
        for group in optimizer.param_groups:
            group["lr"] = lr


class _SpecField:
    """An agent attribute that reads its spec's field and writes through :meth:`set_hp`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return getattr(obj.spec, self.name)

    def __set__(self, obj: Any, value: Any) -> None:
        obj.set_hp(**{self.name: value})


# --- base classes ---------------------------------------------------------------
class EvolvableAlgorithm:
    """Root of all algorithms.

    Args:
        spec: The validated algorithm spec (an instance of ``spec_class``).
        index: Identity within a population (kept by clones unless overridden).
        device: Torch device of the networks.
        total_steps: Env steps of the whole run (learning-rate schedules); not a
            hyperparameter.
        **overrides: Spec fields to change, validated through the spec.

    Attributes:
        spec: The current spec; mutations replace it with a new validated spec.
        steps: Total environment steps this agent has been trained on (summed
            over vector sub-envs), incremented by the collectors.
        num_updates: Gradient updates performed so far.
        fitness: Evaluation scores appended by :meth:`test`.
        scores: Training episode returns (appended by the training loop).
        mut: Name of the last mutation applied, ``None`` if none.
    """

    spec_class: ClassVar[type[AlgorithmSpec]] = AlgorithmSpec
    hp_names: ClassVar[tuple[str, ...]] = ()
    network_names: ClassVar[tuple[str, ...]] = ()
    optimizer_names: ClassVar[tuple[str, ...]] = ()
    lr_optimizers: ClassVar[dict[str, str]] = {}
    rebuild_fields: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _REGISTRY[cls.__name__] = cls
        # The mutable hyperparameters are the spec's (fields declared with mutable_field).
        cls.hp_names = tuple(cls.spec_class.mutation_ranges())
        for name in cls.spec_class.model_fields:
            if not any(name in klass.__dict__ for klass in cls.__mro__):
                setattr(cls, name, _SpecField(name))

    def __init__(
        self,
        spec: AlgorithmSpec,
        *,
        index: int = 0,
        device: str | torch.device = "cpu",
        total_steps: int | None = None,
        **overrides: Any,
    ) -> None:
        if not isinstance(spec, self.spec_class):
            raise TypeError(
                f"{type(self).__name__} is built from a {self.spec_class.__name__}, "
                f"got {type(spec).__name__}"
            )
        self.spec = updated_spec(spec, overrides) if overrides else spec
        self.index = int(index)
        self.device = torch.device(device)
        self.total_steps = None if total_steps is None else int(total_steps)
        self.steps = 0
        self.num_updates = 0
        self.fitness: list[float] = []
        self.scores: list[float] = []
        self.mut: str | None = None

    # --- subclass hooks -----------------------------------------------------------
    @classmethod
    def unsupported_reason(cls, spec: AlgorithmSpec) -> str | None:
        """Why this version cannot train ``spec`` (``None`` when it can)."""
        return None

    def init_args(self) -> dict[str, Any]:
        """Constructor arguments besides the spec and runtime (e.g. the spaces)."""
        return {}

    def act(self, obs: Any, greedy: bool = False) -> np.ndarray:
        """Env actions for an observation batch (what ``env.step`` takes)."""
        raise NotImplementedError(f"{type(self).__name__} must implement act()")

    def reset_state(self, done: Any = None) -> None:
        """Start episodes over for :meth:`act`: all (``done=None``) or the sub-envs flagged in
        ``done``. A no-op unless the policy is recurrent."""

    def _build(self) -> None:
        """(Re)build networks and optimizers from ``self.spec``."""

    def _on_hp_change(self, changed: set[str]) -> None:
        """Hook after :meth:`set_hp` changed ``changed`` (e.g. remake exploration noise)."""

    def _networks(self) -> dict[str, Any]:
        """The modules saved, loaded and cloned, by name (default: ``network_names``)."""
        return {name: getattr(self, name) for name in self.network_names}

    def _optimizers(self) -> dict[str, Any]:
        """The optimizers saved and loaded, by name (default: ``optimizer_names``)."""
        return {name: getattr(self, name) for name in self.optimizer_names}

    def _extra_state(self) -> dict[str, Any]:
        """Additional plain state saved by subclasses."""
        return {}

    def _load_extra_state(self, extra: dict[str, Any]) -> None:
        """Restore what :meth:`_extra_state` returned."""

    # --- hyperparameters ------------------------------------------------------------
    def set_hp(self, **changes: Any) -> set[str]:
        """Change spec fields, validated through the spec; learning rates reach the optimizers.

        A change of one of ``rebuild_fields`` rebuilds the networks (fresh
        weights); use :func:`agilerl.hpo.architecture.rebuild_agent` to keep them.

        Returns:
            The names whose value changed.

        Raises:
            pydantic.ValidationError: If a value is invalid for the spec.
        """
        old = self.spec
        new = updated_spec(old, changes)
        changed = {k for k in changes if getattr(old, k) != getattr(new, k)}
        if not changed:
            return changed
        self.spec = new
        if changed & self.rebuild_fields:
            self._build()
        else:
            for name in changed & set(self.lr_optimizers):
                _set_lr(getattr(self, self.lr_optimizers[name]), float(getattr(new, name)))
        self._on_hp_change(changed)
        return changed

    def set_lr(self, lr: float) -> None:
        """Set the learning rate of every optimizer (the spec's ``lr`` stays the base value)."""
        for opt in self._optimizers().values():
            _set_lr(opt, float(lr))

    def hyperparameters(self) -> dict[str, Any]:
        """The current values of ``hp_names``."""
        return {name: getattr(self.spec, name) for name in self.hp_names}

    # --- state ------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to rebuild the agent, as plain data.

        Returns:
            ``{"format", "version", "algorithm", "spec_name", "spec", "args",
            "total_steps", "networks": {name: state_dict}, "optimizers": {name:
            state}, "index", "steps", "num_updates", "fitness", "scores", "mut",
            "extra"}``. Tensors are references, not copies.
        """
        return {
            "format": CHECKPOINT_FORMAT,
            "version": CHECKPOINT_VERSION,
            "algorithm": type(self).__name__,
            "spec_name": self.spec.name,
            "spec": self.spec.model_dump(mode="json"),
            "args": _to_plain(self.init_args(), "args"),
            "total_steps": self.total_steps,
            "networks": {name: dict(net.state_dict()) for name, net in self._networks().items()},
            "optimizers": {name: opt.state_dict() for name, opt in self._optimizers().items()},
            "index": self.index,
            "steps": int(self.steps),
            "num_updates": int(self.num_updates),
            "fitness": [float(f) for f in self.fitness],
            "scores": [float(s) for s in self.scores],
            "mut": self.mut,
            "extra": _to_plain(self._extra_state(), "extra"),
        }

    @classmethod
    def _spec_from_state(cls, state: Mapping[str, Any]) -> AlgorithmSpec:
        spec = cls.spec_class.model_validate(state["spec"])
        spec._registry_name = state.get("spec_name")
        return spec

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the spec, weights, optimizer state, counters and history.

        A different architecture in the stored spec rebuilds the networks first.

        Raises:
            ValueError: If ``state`` belongs to another algorithm or does not
                fit the networks.
        """
        if state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError("Not an agilerl algorithm state dict")
        if state["algorithm"] != type(self).__name__:
            raise ValueError(f"State dict is for {state['algorithm']}, not {type(self).__name__}")
        spec = self._spec_from_state(state)
        if spec.model_dump() != self.spec.model_dump():
            self.set_hp(**{k: getattr(spec, k) for k in type(spec).model_fields})
        self.spec = spec
        for name, net in self._networks().items():
            try:
                net.load_state_dict(state["networks"][name])
            except (RuntimeError, KeyError) as exc:
                raise ValueError(f"Weights of {name!r} do not fit the network: {exc}") from exc
        optimizers = state["optimizers"]  # None: saved without (checkpoint_optimizer=false)
        for name, opt in self._optimizers().items():
            if optimizers is not None:
                opt.load_state_dict(optimizers[name])
        self.index = int(state.get("index", self.index))
        self.steps = int(state.get("steps", 0))
        self.num_updates = int(state.get("num_updates", 0))
        self.fitness = [float(f) for f in state.get("fitness", [])]
        self.scores = [float(s) for s in state.get("scores", [])]
        self.mut = state.get("mut")
        self._load_extra_state(_from_plain(state.get("extra", {})))

    @classmethod
    def _from_state(
        cls, state: Mapping[str, Any], device: str | torch.device
    ) -> EvolvableAlgorithm:
        name = state.get("algorithm")
        algo_cls = _REGISTRY.get(name) if name != cls.__name__ else cls
        if algo_cls is None or not issubclass(algo_cls, cls):
            raise ValueError(f"Checkpoint holds a {name}, which is not a {cls.__name__}")
        agent = algo_cls(
            algo_cls._spec_from_state(state),
            **_from_plain(state["args"]),
            index=int(state.get("index", 0)),
            device=device,
            total_steps=state.get("total_steps"),
        )
        agent.load_state_dict(state)
        return agent

    def clone(self, index: int | None = None) -> EvolvableAlgorithm:
        """An independent deep copy (networks, optimizer state, hyperparameters, history).

        Args:
            index: Index of the clone (defaults to this agent's).
        """
        state = copy.deepcopy(self.state_dict())
        agent = type(self)._from_state(state, self.device)
        if index is not None:
            agent.index = int(index)
        return agent

    def with_spec(self, spec: AlgorithmSpec, seed: int | None = None) -> EvolvableAlgorithm:
        """A fresh agent of this class, built from ``spec`` with the same spaces and runtime.

        Args:
            spec: The new spec.
            seed: Seeds torch's RNG (forked) while the networks are initialised.
        """
        from agilerl.networks.heads import seeded

        with seeded(seed):
            return type(self)(
                spec,
                **self.init_args(),
                index=self.index,
                device=self.device,
                total_steps=self.total_steps,
            )

    # --- checkpoints ------------------------------------------------------------
    def save_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Write the state dict (plus a checksum) atomically to ``path``.

        The one checkpoint writer, :func:`agilerl.training.checkpointing.write_agent_file`,
        writes it: a crash never leaves a half-written file under the final name.
        """
        from agilerl.training.checkpointing import write_agent_file

        write_agent_file(self.state_dict(), path)

    def load_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Load a checkpoint into this agent (see :meth:`load_state_dict`).

        Raises:
            ValueError: Naming the file, if it is corrupted, truncated, for
                another algorithm, or does not fit.
        """
        state = read_checkpoint(path, self.device)
        try:
            self.load_state_dict(state)
        except (ValueError, KeyError) as exc:
            raise ValueError(f"Checkpoint {path} cannot be loaded: {exc}") from exc

    def load_weights(self, path: str | os.PathLike[str]) -> None:
        """Load only the networks' weights from a checkpoint.

        The spec, optimizer state and counters keep their current values,
        unlike :meth:`load_checkpoint`.

        Raises:
            ValueError: Naming the file, if it is corrupted, holds another
                algorithm, or its weights do not fit these networks.
        """
        state = read_checkpoint(path, self.device)
        if state.get("algorithm") != type(self).__name__:
            raise ValueError(
                f"Checkpoint {path} holds a {state.get('algorithm')}, not a {type(self).__name__}"
            )
        for name, net in self._networks().items():
            try:
                net.load_state_dict(state["networks"][name])
            except (RuntimeError, KeyError) as exc:
                message = f"Checkpoint {path}: weights of {name!r} do not fit: {exc}"
                raise ValueError(message) from exc

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], device: str | torch.device = "cpu"
    ) -> EvolvableAlgorithm:
        """Build an agent from a checkpoint alone.

        Called on the base class it dispatches on the stored algorithm name.

        Raises:
            ValueError: Naming the file, if it is corrupted, truncated or
                holds another algorithm.
        """
        state = read_checkpoint(path, device)
        try:
            return cls._from_state(state, device)
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"Checkpoint {path} cannot be loaded: {exc}") from exc

    # --- evaluation -------------------------------------------------------------
    def test(
        self,
        env: Any,
        max_steps: int | None = None,
        loop: int = 1,
        greedy: bool = True,
        seed: int | None = None,
    ) -> float:
        """Mean episode return on a gymnasium vector env; appended to ``fitness``.

        Every sub-env runs until it has finished ``loop`` episodes (extra
        episodes of early finishers are ignored), or until ``max_steps``
        vector steps when given; a sub-env that finished no episode by then
        contributes its partial return. Works with either autoreset mode (a
        ``NEXT_STEP`` reset step has reward 0).

        Args:
            env: Gymnasium vector env.
            max_steps: Cap on vector steps.
            loop: Episodes per sub-env.
            greedy: Deterministic (mode) actions.
            seed: Seed for ``env.reset``.

        Returns:
            The mean return over the collected episodes.
        """
        obs, _ = env.reset(seed=seed)
        self.reset_state()
        num_envs = int(getattr(env, "num_envs", 1))
        running = np.zeros(num_envs, dtype=np.float64)
        finished: list[list[float]] = [[] for _ in range(num_envs)]
        remaining = num_envs
        step = 0
        with torch.inference_mode():
            while remaining > 0 and (max_steps is None or step < max_steps):
                action = self.act(obs, greedy=greedy)
                obs, reward, terminated, truncated, _ = env.step(action)
                running += reward
                step += 1
                done = np.logical_or(terminated, truncated)
                if done.any():
                    self.reset_state(done)
                for i in np.flatnonzero(done):
                    if len(finished[i]) < loop:
                        finished[i].append(float(running[i]))
                        if len(finished[i]) == loop:
                            remaining -= 1
                    running[i] = 0.0
        returns = [r for env_returns in finished for r in env_returns]
        returns += [float(running[i]) for i in range(num_envs) if not finished[i]]
        fitness = float(np.mean(returns)) if returns else 0.0
        self.fitness.append(fitness)
        return fitness


class SingleAgentAlgorithm(EvolvableAlgorithm):
    """Algorithms acting in one gymnasium (vector) env.

    Args:
        spec: The validated algorithm spec.
        observation_space: Single-env observation space.
        action_space: Single-env action space.
        index: Population index.
        device: Torch device.
        total_steps: Env steps of the whole run.
        **kwargs: Pre-built networks (``actor_network``, ``critic_network``, ...,
            handed to :meth:`_build` and used as given) and spec fields to
            change (validated through the spec).

    Raises:
        ValueError: For an action space the algorithm cannot act in.
    """

    spec_class: ClassVar[type[AlgorithmSpec]] = SingleAgentAlgorithmSpec
    action_space_types: ClassVar[tuple[type[spaces.Space], ...]] = ()
    rebuild_fields: ClassVar[frozenset[str]] = frozenset({"net_config", "normalize_images"})
    reads_action_masks: ClassVar[bool] = False
    """Acts and learns within the ``action_mask`` of its observations
    (:mod:`agilerl.networks.masking`); others refuse masked observations."""

    def __init__(
        self,
        spec: AlgorithmSpec,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        *,
        index: int = 0,
        device: str | torch.device = "cpu",
        total_steps: int | None = None,
        **kwargs: Any,
    ) -> None:
        networks = {k: kwargs.pop(k) for k in list(kwargs) if k.endswith(("_network", "_networks"))}
        super().__init__(spec, index=index, device=device, total_steps=total_steps, **kwargs)
        for name, space in (
            ("observation_space", observation_space),
            ("action_space", action_space),
        ):
            if not isinstance(space, spaces.Space):
                raise TypeError(f"{name} must be a gymnasium Space, got {type(space).__name__}")
        if self.action_space_types and not isinstance(action_space, self.action_space_types):
            kinds = " or ".join(t.__name__ for t in self.action_space_types)
            raise ValueError(
                f"{type(self).__name__} needs a {kinds} action space, "
                f"got {type(action_space).__name__}"
            )
        if has_action_mask(observation_space) and not self.reads_action_masks:
            raise ValueError(
                f"{type(self).__name__} does not take action masks, but the observations "
                "carry an 'action_mask'; use DQN, Rainbow DQN or PPO"
            )
        self.observation_space = observation_space
        self.action_space = action_space
        self._net_key: Any = ()
        self._net_config: dict[str, Any] = {}
        self._check()
        self._build(**networks)

    def _check(self) -> None:
        """Hook before the first build: refuse settings the algorithm cannot run."""

    def init_args(self) -> dict[str, Any]:
        """The spaces (with the spec and runtime, enough to rebuild the agent)."""
        return {"observation_space": self.observation_space, "action_space": self.action_space}

    @property
    def net_config(self) -> dict[str, Any]:
        """The spec's network section, resolved for the observation space (a plain dict)."""
        section = self.spec.net_config
        if self._net_key is not section:
            from agilerl.networks.config import resolve_net_config

            self._net_config = resolve_net_config(section, self.policy_space)
            self._net_key = section
        return self._net_config

    @property
    def policy_space(self) -> spaces.Space:
        """The observation space the networks read (without an action mask)."""
        return policy_space(self.observation_space)


class MultiAgentAlgorithm(EvolvableAlgorithm):
    """Root of multi-agent algorithms (PettingZoo parallel envs)."""

    spec_class: ClassVar[type[AlgorithmSpec]] = MultiAgentAlgorithmSpec


class LLMAlgorithm(EvolvableAlgorithm):
    """Root of LLM fine-tuning algorithms."""

    spec_class: ClassVar[type[AlgorithmSpec]] = LLMAlgorithmSpec
