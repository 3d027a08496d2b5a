"""Builder for single-agent RL algorithms (PPO, DQN, DDPG, TD3, CQN, bandits)."""

from __future__ import annotations

from typing import Any

from agilerl.arena.models.algorithms import AlgorithmSpec
from agilerl.builders.base import (
    AlgorithmBuilder,
    apply_checkpoint,
    constructor_kwargs,
    spec_kwargs,
)
from agilerl.builders.runtime import AlgorithmBuildRuntime


class SingleAgentBuilder(AlgorithmBuilder):
    """Single-agent reinforcement learning."""

    required_base = "SingleAgentAlgorithm"

    @classmethod
    def build(
        cls,
        spec: AlgorithmSpec,
        observation_space: Any = None,
        action_space: Any = None,
        *,
        runtime: AlgorithmBuildRuntime | None = None,
        **networks: Any,
    ) -> Any:
        """Build a single-agent algorithm.

        Args:
            spec: The algorithm spec.
            observation_space: Observation space.
            action_space: Action space.
            runtime: Population slot, device, HPO, and optional checkpoint.
            **networks: Pre-built modules for the constructor, e.g. ``actor_network``.

        Raises:
            ValueError: If ``observation_space``, ``action_space`` or ``runtime.index`` is None.
        """
        runtime = runtime or AlgorithmBuildRuntime()
        missing = [
            name
            for name, value in (
                ("observation_space", observation_space),
                ("action_space", action_space),
                ("runtime.index", runtime.index),
            )
            if value is None
        ]
        if missing:
            raise ValueError(f"SingleAgentBuilder.build needs {', '.join(missing)}")
        algo_cls = cls.checked_class(spec)
        kwargs = spec_kwargs(spec, runtime.hp_config)
        kwargs.update(
            observation_space=observation_space,
            action_space=action_space,
            index=runtime.index,
            device=runtime.device,
        )
        if runtime.accelerator is not None:
            kwargs["accelerator"] = runtime.accelerator
        if runtime.total_steps is not None:
            kwargs["total_steps"] = runtime.total_steps
        kwargs.update({k: v for k, v in networks.items() if v is not None})
        algo = algo_cls(**constructor_kwargs(algo_cls, kwargs))
        return apply_checkpoint(algo, spec, runtime)
