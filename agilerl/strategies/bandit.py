"""Strategy for contextual bandits (NeuralTS, NeuralUCB)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from agilerl.arena.models.algorithms import AlgorithmSpec
from agilerl.arena.models.env import EnvSpecBase
from agilerl.arena.models.training import TrainingSpec
from agilerl.strategies.base import (
    RL_EVAL_FIELDS,
    EnvSetup,
    TrainingLoop,
    TrainingStrategy,
    rl_trainer_kwargs,
)
from agilerl.strategies.single_agent import make_memories

if TYPE_CHECKING:
    from agilerl.arena.models.manifest import TrainingManifest


class BanditStrategy(TrainingStrategy):
    """Contextual bandit training (NeuralTS, NeuralUCB) on a table of contexts."""

    paradigm: ClassVar[str] = "contextual bandit"
    step_unit: ClassVar[tuple[str, str]] = ("pull", "pulls")
    fitness_name: ClassVar[str] = "greedy reward"
    training_fields: ClassVar[frozenset[str]] = RL_EVAL_FIELDS | {
        "episode_steps",
        "experience_sharing",
    }
    default_loop: ClassVar[str | TrainingLoop | None] = (
        "agilerl.training.train_bandits:train_bandits"
    )

    def make_envs(self, manifest: TrainingManifest, *, seed: int) -> EnvSetup:
        """The bandit the environment section names, and a factory of reseeded copies."""
        from agilerl.envs.bandits import make_bandit_env

        env = make_bandit_env(manifest.environment, seed=seed)

        def factory(seed: int | None = None, num_envs: int | None = None) -> Any:
            return env.copy(seed)

        return EnvSetup(
            env, factory, env.single_observation_space, env.single_action_space, seed=seed
        )

    def loop_kwargs(
        self, spec: AlgorithmSpec, manifest: TrainingManifest, envs: EnvSetup, *, device: str
    ) -> dict[str, Any]:
        """The trainer kwargs with the replay memory of pulled arms."""
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
        """Shared RL kwargs plus the memory (the loop reads ``episode_steps`` itself)."""
        return {**rl_trainer_kwargs(spec, training, env_spec), "memory": memory}
