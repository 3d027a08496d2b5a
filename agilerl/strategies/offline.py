"""Strategy for offline RL from a fixed dataset (CQN)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from agilerl.arena.models.algorithms import AlgorithmSpec
from agilerl.arena.models.env import EnvSpecBase
from agilerl.arena.models.training import ReplayBufferSpec, TrainingSpec
from agilerl.strategies.base import RL_EVAL_FIELDS, EnvSetup, TrainingLoop, rl_trainer_kwargs
from agilerl.strategies.single_agent import GymVectorEnvStrategy, make_memories

if TYPE_CHECKING:
    from agilerl.arena.models.manifest import TrainingManifest


class OfflineStrategy(GymVectorEnvStrategy):
    """Offline training from a fixed dataset (CQN).

    The envs are the gymnasium env the dataset was recorded in (used for
    evaluation only); the replay memory is filled from the dataset by the loop.
    """

    paradigm: ClassVar[str] = "offline"
    step_unit: ClassVar[tuple[str, str]] = ("gradient step", "gradient steps")
    training_fields: ClassVar[frozenset[str]] = RL_EVAL_FIELDS | {
        "eval_max_concurrent_episodes",
        "experience_sharing",
        "fast_grad",
    }
    default_loop: ClassVar[str | TrainingLoop | None] = (
        "agilerl.training.train_offline:train_offline"
    )

    def check(self, manifest: TrainingManifest, *, local: bool = True) -> None:
        """Refuse a ``dataset_path`` that is missing or not an MDP file, before anything is written.

        Raises:
            ConfigError: Naming the path and how to record a dataset.
        """
        from agilerl.envs.offline import check_mdp_path

        path = getattr(manifest.environment, "dataset_path", None)
        if local and path is not None:
            check_mdp_path(path)

    def loop_kwargs(
        self, spec: AlgorithmSpec, manifest: TrainingManifest, envs: EnvSetup, *, device: str
    ) -> dict[str, Any]:
        """The trainer kwargs with the dataset, read once, and its replay memory.

        Without a ``replay_buffer`` section the memory holds exactly the dataset.
        """
        from agilerl.envs.offline import load_offline_dataset

        env_spec = manifest.environment
        dataset = load_offline_dataset(
            minari_dataset_id=getattr(env_spec, "minari_dataset_id", None),
            dataset_path=getattr(env_spec, "dataset_path", None),
            remote=getattr(env_spec, "remote", False),
        )
        if manifest.replay_buffer is None:
            sized = ReplayBufferSpec(max_size=max(1, len(dataset)))
            manifest = manifest.model_copy(update={"replay_buffer": sized})
        dataset.check_fits(manifest.replay_buffer.max_size)  # before the run writes metrics
        memory, _ = make_memories(spec, manifest, envs, device=device)
        kwargs = self.get_trainer_kwargs(
            spec, training=manifest.training, env_spec=env_spec, memory=memory
        )
        kwargs["dataset"] = dataset
        return kwargs

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
