"""Builder for single-agent RL algorithms (PPO, DQN, DDPG, TD3, CQN, bandits)."""

from __future__ import annotations

from typing import Any

from agilerl.arena.models.algorithms import AlgorithmSpec
from agilerl.builders.base import AlgorithmBuilder, build_rl
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
        return build_rl(
            cls,
            spec,
            {"observation_space": observation_space, "action_space": action_space},
            runtime,
            networks,
        )
