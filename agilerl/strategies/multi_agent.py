"""Strategies for multi-agent RL on PettingZoo parallel envs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from agilerl.arena.models.algorithms import AlgorithmSpec
from agilerl.arena.models.env import EnvSpecBase
from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.training import ReplayBufferSpec, TrainingSpec
from agilerl.strategies.base import (
    RL_EVAL_FIELDS,
    EnvSetup,
    TrainingLoop,
    TrainingStrategy,
    rl_trainer_kwargs,
)

if TYPE_CHECKING:
    from agilerl.arena.models.manifest import TrainingManifest


def multi_agent_kwargs(
    spec: AlgorithmSpec, training: TrainingSpec, env_spec: EnvSpecBase
) -> dict[str, Any]:
    """Keyword arguments both multi-agent loops take: the training spec and the labels."""
    return rl_trainer_kwargs(spec, training, env_spec)


class PettingZooStrategy(TrainingStrategy):
    """Multi-agent paradigms trained on PettingZoo parallel envs, vectorised."""

    evaluates_episodes = True

    requires: ClassVar[tuple[str, ...]] = ("pettingzoo",)
    training_fields: ClassVar[frozenset[str]] = RL_EVAL_FIELDS | {
        "sum_scores",
        "eval_max_concurrent_episodes",
        "fast_grad",
    }

    def make_envs(self, manifest: TrainingManifest, *, seed: int) -> EnvSetup:
        """``environment.num_envs`` copies (in process, or subprocesses with ``sync: false``).

        Raises:
            ConfigError: If the environment is not a PettingZoo env or cannot be made.
        """
        from agilerl.envs.pettingzoo import make_vector_env

        env_spec = manifest.environment
        if getattr(env_spec, "env_type", None) != "pettingzoo":
            raise ConfigError(
                f"environment: {manifest.algorithm.name} trains on a PettingZoo env, not a "
                f"{getattr(env_spec, 'env_type', type(env_spec).__name__)} env"
            )

        def factory(seed: int | None = None, num_envs: int | None = None) -> Any:
            return make_vector_env(
                env_spec.name,
                env_spec.env_config,
                num_envs or env_spec.num_envs,
                env_spec.sync,
                info_masks=env_spec.action_mask == "info",
            )

        env = factory(seed=seed)
        return EnvSetup(env, factory, env.observation_spaces, env.action_spaces)


class MultiAgentOnPolicyStrategy(PettingZooStrategy):
    """On-policy multi-agent training (IPPO)."""

    paradigm: ClassVar[str] = "multi-agent on-policy"
    default_loop: ClassVar[str | TrainingLoop | None] = (
        "agilerl.training.train_multi_agent:train_multi_agent_on_policy"
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
        """The training spec and the labels."""
        return multi_agent_kwargs(spec, training, env_spec)

    def check(self, manifest: TrainingManifest, *, local: bool = True) -> None:
        """Refuse a budget shorter than one rollout (the loop starts whole rollouts only).

        Raises:
            ConfigError: If ``algorithm.learn_step`` (rounded down to whole vector
                steps) is more than ``training.max_steps``: nothing would train.
        """
        spec, num_envs = manifest.algorithm, getattr(manifest.environment, "num_envs", 1)
        rollout = max(1, spec.learn_step // num_envs) * num_envs
        budget = manifest.training.max_steps
        if rollout > budget:
            raise ConfigError(
                f"algorithm.learn_step: one {spec.name} rollout is {rollout:,} env steps "
                f"({num_envs} env copies), more than training.max_steps={budget:,}, so nothing "
                f"would train; lower algorithm.learn_step to at most {budget:,} or raise "
                f"training.max_steps to at least {rollout:,}"
            )


def check_replay_buffer(manifest: TrainingManifest, envs: EnvSetup) -> ReplayBufferSpec:
    """The ``replay_buffer`` section of a multi-agent run, checked against free memory.

    Multi-agent memories are one-step and uniform (as :func:`init_buffer` builds
    them); the manifest refuses ``per_buffer`` and ``n_step_buffer`` for them.

    Raises:
        ConfigError: If ``max_size`` joint transitions of every agent do not fit in memory.
    """
    from agilerl.components.memory import (
        InsufficientMemoryError,
        check_memory,
        estimate_buffer_bytes,
    )

    buffer = manifest.replay_buffer or ReplayBufferSpec()  # PER and n-step refused earlier
    needed = estimate_buffer_bytes(buffer.max_size, envs.observation_space, envs.action_space)
    try:
        check_memory(needed, what=f"MultiAgentReplayBuffer(max_size={buffer.max_size:,})")
    except InsufficientMemoryError as exc:
        raise ConfigError(f"replay_buffer.max_size: {exc}") from None
    return buffer


class MultiAgentOffPolicyStrategy(PettingZooStrategy):
    """Off-policy multi-agent training (MADDPG, MATD3)."""

    paradigm: ClassVar[str] = "multi-agent off-policy"
    training_fields: ClassVar[frozenset[str]] = PettingZooStrategy.training_fields | {
        "learning_delay"
    }
    default_loop: ClassVar[str | TrainingLoop | None] = (
        "agilerl.training.train_multi_agent:train_multi_agent_off_policy"
    )

    def loop_kwargs(
        self, spec: AlgorithmSpec, manifest: TrainingManifest, envs: EnvSetup, *, device: str
    ) -> dict[str, Any]:
        """The trainer kwargs plus the replay capacity and whether checkpoints store the buffer."""
        kwargs = self.get_trainer_kwargs(
            spec, training=manifest.training, env_spec=manifest.environment
        )
        buffer = check_replay_buffer(manifest, envs)
        kwargs["memory_size"] = buffer.max_size
        kwargs["save_memory"] = buffer.store_in_checkpoint
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
        """The multi-agent kwargs (the loop reads ``learning_delay`` itself)."""
        return multi_agent_kwargs(spec, training, env_spec)
