"""Strategy for contextual bandits (NeuralTS, NeuralUCB)."""

from __future__ import annotations

from typing import Any, ClassVar

from agilerl.arena.models.algorithms import AlgorithmSpec
from agilerl.arena.models.env import EnvSpecBase
from agilerl.arena.models.training import TrainingSpec
from agilerl.strategies.base import TrainingLoop, TrainingStrategy, rl_trainer_kwargs


class BanditStrategy(TrainingStrategy):
    """Contextual bandit training (NeuralTS, NeuralUCB)."""

    paradigm: ClassVar[str] = "contextual bandit"
    default_loop: ClassVar[str | TrainingLoop | None] = (
        "agilerl.training.train_bandits:train_bandits"
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
        """Shared RL kwargs plus memory and episode_steps."""
        return {
            **rl_trainer_kwargs(spec, training, env_spec),
            "memory": memory,
            "episode_steps": training.episode_steps or 500,
        }
