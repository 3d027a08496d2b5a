"""Strategies for single-agent RL: on-policy, off-policy, offline and bandits."""

from __future__ import annotations

from typing import Any, ClassVar

from agilerl.arena.models.algorithms import AlgorithmSpec
from agilerl.arena.models.env import EnvSpecBase
from agilerl.arena.models.training import TrainingSpec
from agilerl.strategies.base import TrainingLoop, TrainingStrategy, rl_trainer_kwargs


def _off_policy_extras(training: TrainingSpec, memory: Any, n_step_memory: Any) -> dict[str, Any]:
    extras: dict[str, Any] = {"memory": memory, "learning_delay": training.learning_delay or 0}
    for key in ("eps_start", "eps_end", "eps_decay"):
        if getattr(training, key) is not None:
            extras[key] = getattr(training, key)
    if n_step_memory is not None:
        extras["n_step_memory"] = n_step_memory
    return extras


class SingleAgentOnPolicyStrategy(TrainingStrategy):
    """On-policy single-agent training (PPO)."""

    default_loop: ClassVar[str | TrainingLoop | None] = (
        "agilerl.training.train_on_policy:train_on_policy"
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
        """The shared RL keyword arguments."""
        return rl_trainer_kwargs(spec, training, env_spec)


class SingleAgentOffPolicyStrategy(TrainingStrategy):
    """Off-policy single-agent training (DQN, Rainbow DQN, DDPG, TD3)."""

    default_loop: ClassVar[str | TrainingLoop | None] = (
        "agilerl.training.train_off_policy:train_off_policy"
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
        """Shared RL kwargs plus memory, learning delay, epsilon and n-step memory (when set)."""
        return {
            **rl_trainer_kwargs(spec, training, env_spec),
            **_off_policy_extras(training, memory, n_step_memory),
        }


class OfflineStrategy(TrainingStrategy):
    """Offline training from a fixed dataset (CQN)."""

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


class BanditStrategy(TrainingStrategy):
    """Contextual bandit training (NeuralTS, NeuralUCB)."""

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
