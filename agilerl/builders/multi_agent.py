"""Builder for multi-agent RL algorithms (IPPO, MADDPG, MATD3)."""

from __future__ import annotations

from typing import Any

from agilerl.arena.models.algorithms import AlgorithmSpec
from agilerl.builders.base import AlgorithmBuilder, build_rl
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
        return build_rl(
            cls,
            spec,
            {"observation_spaces": observation_spaces, "action_spaces": action_spaces},
            runtime,
            networks,
        )
