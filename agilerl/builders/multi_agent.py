"""Builder for multi-agent RL algorithms (IPPO, MADDPG, MATD3)."""

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


class MultiAgentBuilder(AlgorithmBuilder):
    """Multi-agent reinforcement learning."""

    required_base = "MultiAgentAlgorithm"

    @classmethod
    def build(
        cls,
        spec: AlgorithmSpec,
        observation_spaces: dict[str, Any] | None = None,
        action_spaces: dict[str, Any] | None = None,
        *,
        runtime: AlgorithmBuildRuntime | None = None,
        **networks: Any,
    ) -> Any:
        """Build a multi-agent algorithm.

        Args:
            spec: The algorithm spec.
            observation_spaces: Per-agent observation spaces.
            action_spaces: Per-agent action spaces.
            runtime: Population slot, device, HPO, and optional checkpoint.
            **networks: Pre-built modules, e.g. ``actor_networks``.

        Raises:
            ValueError: If ``observation_spaces``, ``action_spaces`` or ``runtime.index`` is None.
        """
        runtime = runtime or AlgorithmBuildRuntime()
        missing = [
            name
            for name, value in (
                ("observation_spaces", observation_spaces),
                ("action_spaces", action_spaces),
                ("runtime.index", runtime.index),
            )
            if value is None
        ]
        if missing:
            raise ValueError(f"MultiAgentBuilder.build needs {', '.join(missing)}")
        algo_cls = cls.checked_class(spec)
        kwargs = spec_kwargs(spec, runtime.hp_config)
        kwargs.update(
            observation_spaces=observation_spaces,
            action_spaces=action_spaces,
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
