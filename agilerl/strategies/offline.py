"""Strategy for offline RL from a fixed dataset (CQN)."""

from __future__ import annotations

from typing import Any, ClassVar

from agilerl.arena.models.algorithms import AlgorithmSpec
from agilerl.arena.models.env import EnvSpecBase
from agilerl.arena.models.training import TrainingSpec
from agilerl.strategies.base import TrainingLoop, TrainingStrategy, rl_trainer_kwargs


class OfflineStrategy(TrainingStrategy):
    """Offline training from a fixed dataset (CQN)."""

    paradigm: ClassVar[str] = "offline"
    default_loop: ClassVar[str | TrainingLoop | None] = (
        "agilerl.training.train_offline:train_offline"
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
        """Shared RL kwargs plus memory and the dataset source."""
        kwargs = {**rl_trainer_kwargs(spec, training, env_spec), "memory": memory}
        kwargs["minari_dataset_id"] = getattr(env_spec, "minari_dataset_id", None)
        kwargs["remote"] = getattr(env_spec, "remote", False)
        kwargs["dataset_path"] = getattr(env_spec, "dataset_path", None)
        return kwargs
