"""Strategy for offline RL from a fixed dataset (CQN)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from agilerl.arena.models.algorithms import AlgorithmSpec
from agilerl.arena.models.env import EnvSpecBase
from agilerl.arena.models.training import TrainingSpec
from agilerl.strategies.base import EnvSetup, TrainingLoop, rl_trainer_kwargs
from agilerl.strategies.single_agent import GymVectorEnvStrategy, make_memories

if TYPE_CHECKING:
    from agilerl.arena.models.manifest import TrainingManifest


class OfflineStrategy(GymVectorEnvStrategy):
    """Offline training from a fixed dataset (CQN).

    The envs are the gymnasium env the dataset was recorded in (used for
    evaluation only); the replay memory is filled from the dataset by the loop.
    """

    paradigm: ClassVar[str] = "offline"
    default_loop: ClassVar[str | TrainingLoop | None] = (
        "agilerl.training.train_offline:train_offline"
    )

    def loop_kwargs(
        self, spec: AlgorithmSpec, manifest: TrainingManifest, envs: EnvSetup, *, device: str
    ) -> dict[str, Any]:
        """The trainer kwargs with the (dataset-sized) replay memory."""
        memory, _ = make_memories(spec, manifest, envs, device=device)
        return self.get_trainer_kwargs(
            spec, training=manifest.training, env_spec=manifest.environment, memory=memory
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
