"""The strategy base: which training loop a paradigm uses and what extra arguments it takes."""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

from agilerl.arena.models.algorithms import AlgorithmSpec
from agilerl.arena.models.env import EnvSpecBase
from agilerl.arena.models.training import TrainingSpec

TrainingLoop = Callable[..., Any]
"""A training loop: ``loop(population, env, ..., **trainer_kwargs) -> (population, fitnesses)``."""


def resolve_loop(path: str) -> TrainingLoop:
    """Import a loop named ``"package.module:function"``.

    Loops are imported on use so that an install without a paradigm's extras
    can still import every strategy.

    Raises:
        NotImplementedError: If the loop's module or function does not exist.
    """
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise NotImplementedError(f"training loop {path} is not available") from exc
        raise
    try:
        return getattr(module, attr)
    except AttributeError:
        raise NotImplementedError(f"training loop {path} is not available") from None


class TrainingStrategy(ABC):
    """Paradigm-keyed run-time orchestration for an algorithm spec.

    Subclasses set ``default_loop`` and implement :meth:`get_trainer_kwargs`;
    a paradigm with more than one loop overrides :meth:`get_training_loop`.
    """

    default_loop: ClassVar[str | TrainingLoop | None] = None

    def get_training_loop(self, spec: AlgorithmSpec) -> TrainingLoop:
        """Select the training loop for ``spec``.

        Raises:
            NotImplementedError: If the strategy names no loop.
        """
        loop = self.default_loop
        if loop is None:
            raise NotImplementedError(
                f"{type(self).__name__} must set default_loop or override get_training_loop"
            )
        return resolve_loop(loop) if isinstance(loop, str) else loop

    @abstractmethod
    def get_trainer_kwargs(
        self,
        spec: AlgorithmSpec,
        *,
        training: TrainingSpec,
        env_spec: EnvSpecBase,
        memory: Any = None,
        n_step_memory: Any = None,
    ) -> dict[str, Any]:
        """Return the extra keyword arguments the training loop takes.

        Args:
            spec: The algorithm spec.
            training: Training specification.
            env_spec: Environment specification.
            memory: Replay buffer instance.
            n_step_memory: N-step replay buffer for combined PER + n-step setups.
        """


def rl_trainer_kwargs(
    spec: AlgorithmSpec, training: TrainingSpec, env_spec: EnvSpecBase
) -> dict[str, Any]:
    """Keyword arguments every RL loop takes."""
    return {
        "env_name": getattr(env_spec, "name", type(env_spec).__name__),
        "algo": spec.name,
        "eval_steps": training.eval_steps,
        "eval_loop": training.eval_loop,
        "target": training.target_score,
        "checkpoint": training.checkpoint_steps,
        "checkpoint_path": training.checkpoint_path,
        "overwrite_checkpoints": training.overwrite_checkpoints,
    }
