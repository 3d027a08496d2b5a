"""Strategies for multi-agent RL on PettingZoo parallel envs."""

from __future__ import annotations

from typing import Any, ClassVar

from agilerl.arena.models.algorithms import AlgorithmSpec
from agilerl.arena.models.env import EnvSpecBase
from agilerl.arena.models.training import TrainingSpec
from agilerl.strategies.base import TrainingLoop, TrainingStrategy, rl_trainer_kwargs
from agilerl.strategies.single_agent import _off_policy_extras


def _sum_scores(training: TrainingSpec) -> bool:
    return True if training.sum_scores is None else training.sum_scores


class MultiAgentOnPolicyStrategy(TrainingStrategy):
    """On-policy multi-agent training (IPPO)."""

    paradigm: ClassVar[str] = "multi-agent on-policy"
    default_loop: ClassVar[str | TrainingLoop | None] = (
        "agilerl.training.train_multi_agent_on_policy:train_multi_agent_on_policy"
    )

    def get_trainer_kwargs(
        self,
        spec: AlgorithmSpec,
        *,
        training: TrainingSpec,
        env_spec: EnvSpecBase,
        memory: Any = None,
        n_step_memory: Any = None,
    ) -> dict[str, Any]:
        """Shared RL kwargs plus sum_scores."""
        return {**rl_trainer_kwargs(spec, training, env_spec), "sum_scores": _sum_scores(training)}


class MultiAgentOffPolicyStrategy(TrainingStrategy):
    """Off-policy multi-agent training (MADDPG, MATD3)."""

    paradigm: ClassVar[str] = "multi-agent off-policy"
    default_loop: ClassVar[str | TrainingLoop | None] = (
        "agilerl.training.train_multi_agent_off_policy:train_multi_agent_off_policy"
    )

    def get_trainer_kwargs(
        self,
        spec: AlgorithmSpec,
        *,
        training: TrainingSpec,
        env_spec: EnvSpecBase,
        memory: Any = None,
        n_step_memory: Any = None,
    ) -> dict[str, Any]:
        """Shared RL kwargs, off-policy extras and sum_scores."""
        return {
            **rl_trainer_kwargs(spec, training, env_spec),
            **_off_policy_extras(training, memory, n_step_memory),
            "sum_scores": _sum_scores(training),
        }
