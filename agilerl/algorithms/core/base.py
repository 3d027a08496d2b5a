"""Algorithm base classes: identity, counters, cloning, checkpoints and evaluation.

Subclass contract (see :class:`EvolvableAlgorithm`):

* ``network_names`` / ``optimizer_names``: attribute names of the modules and
  optimizers that make up the agent; they are saved, loaded and cloned.
* :meth:`EvolvableAlgorithm.init_kwargs`: the constructor keyword arguments
  (current values, gymnasium spaces allowed) that rebuild an equivalent agent.
* ``hp_names``: the mutable RL hyperparameters (a subset of ``init_kwargs``).
* :meth:`EvolvableAlgorithm.get_action` for :meth:`EvolvableAlgorithm.test`.

Checkpoints are pure dicts of tensors and Python scalars/lists/strings (no
pickled classes, numpy arrays or dataclasses), so they load with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import copy
import hashlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces

from agilerl.networks.spaces import space_from_dict, space_to_dict

CHECKPOINT_FORMAT = "agilerl.algorithm"
CHECKPOINT_VERSION = 1
_REQUIRED_KEYS = ("format", "version", "algorithm", "init_kwargs", "networks", "optimizers")
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
]


# --- serialisation helpers ----------------------------------------------------
def _to_plain(value: Any, where: str) -> Any:
    """Convert a constructor argument to checkpoint-safe plain data."""
    if isinstance(value, spaces.Space):
        return {_SPACE_TAG: space_to_dict(value)}
    if value is None or isinstance(value, bool | int | float | str):
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


def _digest(value: Any, h: Any = None) -> str:
    """Deterministic SHA-256 over nested dicts/lists/tensors/scalars."""
    top = h is None
    h = hashlib.sha256() if top else h
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(value, Mapping):
        h.update(b"D")
        for key in sorted(value, key=repr):
            h.update(repr(key).encode())
            _digest(value[key], h)
    elif isinstance(value, list | tuple):
        h.update(f"L{len(value)}".encode())
        for item in value:
            _digest(item, h)
    else:
        h.update(repr(value).encode())
    return h.hexdigest() if top else ""


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
    checksum = state.pop("checksum", None)
    if checksum is not None and checksum != _digest(state):
        raise ValueError(f"Checkpoint {path} is corrupted: checksum mismatch")
    return state


# --- base classes ---------------------------------------------------------------
class EvolvableAlgorithm:
    """Root of all algorithms.

    Attributes:
        index: Identity within a population (kept by clones unless overridden).
        device: Torch device of the networks.
        steps: Total environment steps this agent has been trained on (summed
            over vector sub-envs); an ``int`` incremented by the collector
            (:func:`agilerl.training.collect.collect_rollouts`).
        num_updates: Gradient updates performed so far.
        fitness: Evaluation scores appended by :meth:`test`.
        scores: Training episode returns (appended by the training loop).
        mut: Name of the last mutation applied, ``None`` if none.
        hp_names: Mutable RL hyperparameters of the algorithm.
    """

    hp_names: ClassVar[tuple[str, ...]] = ()
    network_names: ClassVar[tuple[str, ...]] = ()
    optimizer_names: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _REGISTRY[cls.__name__] = cls

    def __init__(self, index: int = 0, device: str | torch.device = "cpu") -> None:
        self.index = int(index)
        self.device = torch.device(device)
        self.steps = 0
        self.num_updates = 0
        self.fitness: list[float] = []
        self.scores: list[float] = []
        self.mut: str | None = None

    # --- subclass hooks -----------------------------------------------------------
    def init_kwargs(self) -> dict[str, Any]:
        """Constructor kwargs (excluding ``index``/``device``) rebuilding this agent."""
        raise NotImplementedError

    def get_action(self, obs: Any, greedy: bool = False) -> tuple[Any, ...]:
        """Actions for an observation batch; the first element is the env action."""
        raise NotImplementedError

    def _extra_state(self) -> dict[str, Any]:
        """Additional plain state saved by subclasses."""
        return {}

    def _load_extra_state(self, extra: dict[str, Any]) -> None:
        """Restore what :meth:`_extra_state` returned."""

    arch_keys: ClassVar[frozenset[str]] = frozenset()
    """Constructor arguments whose change rebuilds the networks (empty: no in-place rebuild)."""

    def _rebuild(self, kwargs: dict[str, Any]) -> None:
        """Adopt changed constructor ``kwargs``; rebuild if one of ``arch_keys`` changed."""
        if not self.arch_keys:
            raise ValueError(
                f"{type(self).__name__} cannot change its architecture in place; use load()"
            )
        for key, value in kwargs.items():
            setattr(self, key, self._normalise_kwarg(key, value, kwargs))
        if self.arch_keys & set(kwargs):
            self._build()
        self._after_rebuild(set(kwargs))

    def _normalise_kwarg(self, key: str, value: Any, kwargs: dict[str, Any]) -> Any:
        """A constructor argument as the constructor would store it (``net_config`` resolved)."""
        if key == "net_config":
            from agilerl.networks.config import resolve_net_config

            space = kwargs.get("observation_space", getattr(self, "observation_space", None))
            return resolve_net_config(value, space)
        return value

    def _build(self) -> None:
        """(Re)build networks and optimizers from the current attributes."""
        raise NotImplementedError

    def _after_rebuild(self, changed: set[str]) -> None:
        """Hook after :meth:`_rebuild` (e.g. remake exploration noise)."""

    # --- learning rate ----------------------------------------------------------
    def set_lr(self, lr: float) -> None:
        """Set the learning rate of every optimizer (``self.lr`` stays the base value)."""
        for name in self.optimizer_names:
            opt = getattr(self, name)
            for group in opt.param_groups:
                group["lr"] = float(lr)

    # --- state ------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to rebuild the agent, as plain data.

        Returns:
            ``{"format", "version", "algorithm", "init_kwargs", "networks":
            {name: {"config", "state_dict"}}, "optimizers": {name: state},
            "index", "steps", "num_updates", "fitness", "scores", "mut",
            "extra"}``. Tensors are references, not copies.
        """
        return {
            "format": CHECKPOINT_FORMAT,
            "version": CHECKPOINT_VERSION,
            "algorithm": type(self).__name__,
            "init_kwargs": _to_plain(self.init_kwargs(), "init_kwargs"),
            "networks": {
                name: {
                    "config": _to_plain(getattr(getattr(self, name), "config", {}), name),
                    "state_dict": dict(getattr(self, name).state_dict()),
                }
                for name in self.network_names
            },
            "optimizers": {name: getattr(self, name).state_dict() for name in self.optimizer_names},
            "index": self.index,
            "steps": int(self.steps),
            "num_updates": int(self.num_updates),
            "fitness": [float(f) for f in self.fitness],
            "scores": [float(s) for s in self.scores],
            "mut": self.mut,
            "extra": _to_plain(self._extra_state(), "extra"),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore hyperparameters, weights, optimizer state, counters and history.

        Hyperparameters in ``state`` replace the current ones; an architecture
        change (different ``net_config``) rebuilds the networks first.

        Raises:
            ValueError: If ``state`` belongs to another algorithm or does not
                fit the networks.
        """
        if state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError("Not an agilerl algorithm state dict")
        if state["algorithm"] != type(self).__name__:
            raise ValueError(f"State dict is for {state['algorithm']}, not {type(self).__name__}")
        kwargs = _from_plain(state["init_kwargs"])
        current = self.init_kwargs()
        if _to_plain(current, "init_kwargs") != state["init_kwargs"]:
            self._apply_kwargs(kwargs, current)
        for name in self.network_names:
            entry = state["networks"][name]
            try:
                getattr(self, name).load_state_dict(entry["state_dict"])
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
        self._load_extra_state(_from_plain(state.get("extra", {})))

    def _apply_kwargs(self, kwargs: dict[str, Any], current: dict[str, Any]) -> None:
        """Adopt changed constructor kwargs: hyperparameters in place, others via rebuild."""
        changed = {
            k: v for k, v in kwargs.items() if _to_plain(current.get(k), k) != _to_plain(v, k)
        }
        rebuild = {k: v for k, v in changed.items() if k not in self.hp_names}
        if rebuild:
            self._rebuild(rebuild)
        for key in self.hp_names:
            if key in changed:
                setattr(self, key, changed[key])
        if "lr" in changed:
            self.set_lr(changed["lr"])

    @classmethod
    def _from_state(
        cls, state: Mapping[str, Any], device: str | torch.device
    ) -> EvolvableAlgorithm:
        name = state.get("algorithm")
        algo_cls = _REGISTRY.get(name) if name != cls.__name__ else cls
        if algo_cls is None or not issubclass(algo_cls, cls):
            raise ValueError(f"Checkpoint holds a {name}, which is not a {cls.__name__}")
        kwargs = _from_plain(state["init_kwargs"])
        agent = algo_cls(**kwargs, index=int(state.get("index", 0)), device=device)
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

    # --- checkpoints ------------------------------------------------------------
    def save_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Write the state dict (plus a checksum) atomically to ``path``.

        The file is written to a temporary file in the same directory and
        moved over ``path`` with ``os.replace``, so a crash never leaves a
        half-written checkpoint under the final name.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        state = self.state_dict()
        state["checksum"] = _digest(state)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                torch.save(state, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

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

        Hyperparameters, optimizer state and counters keep their current
        values (the spec's), unlike :meth:`load_checkpoint`.

        Raises:
            ValueError: Naming the file, if it is corrupted, holds another
                algorithm, or its weights do not fit these networks.
        """
        state = read_checkpoint(path, self.device)
        if state.get("algorithm") != type(self).__name__:
            raise ValueError(
                f"Checkpoint {path} holds a {state.get('algorithm')}, not a {type(self).__name__}"
            )
        for name in self.network_names:
            try:
                getattr(self, name).load_state_dict(state["networks"][name]["state_dict"])
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
        num_envs = int(getattr(env, "num_envs", 1))
        running = np.zeros(num_envs, dtype=np.float64)
        finished: list[list[float]] = [[] for _ in range(num_envs)]
        remaining = num_envs
        step = 0
        with torch.inference_mode():
            while remaining > 0 and (max_steps is None or step < max_steps):
                action = self.get_action(obs, greedy=greedy)[0]
                obs, reward, terminated, truncated, _ = env.step(action)
                running += reward
                step += 1
                done = np.logical_or(terminated, truncated)
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
        observation_space: Single-env observation space.
        action_space: Single-env action space.
        index: Population index.
        device: Torch device.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        index: int = 0,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__(index=index, device=device)
        for name, space in (
            ("observation_space", observation_space),
            ("action_space", action_space),
        ):
            if not isinstance(space, spaces.Space):
                raise TypeError(f"{name} must be a gymnasium Space, got {type(space).__name__}")
        self.observation_space = observation_space
        self.action_space = action_space


class MultiAgentAlgorithm(EvolvableAlgorithm):
    """Placeholder root of multi-agent algorithms (not implemented yet)."""


class LLMAlgorithm(EvolvableAlgorithm):
    """Placeholder root of LLM fine-tuning algorithms (not implemented yet)."""
