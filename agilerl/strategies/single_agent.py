"""Strategies for single-agent RL on gymnasium vector envs: on-policy and off-policy."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, ClassVar

from agilerl.arena.models.algorithms import AlgorithmSpec
from agilerl.arena.models.env import EnvSpecBase
from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.training import ReplayBufferSpec, TrainingSpec
from agilerl.strategies.base import (
    RL_EVAL_FIELDS,
    EnvSetup,
    PopulationRuntime,
    TrainingLoop,
    TrainingStrategy,
    rl_trainer_kwargs,
)

if TYPE_CHECKING:
    from agilerl.arena.models.manifest import TrainingManifest


EPSILON_FIELDS = ("eps_start", "eps_end", "eps_decay")
"""``training`` fields of epsilon-greedy exploration (algorithms whose spec ``uses_epsilon``)."""


def _memories(memory: Any, n_step_memory: Any) -> dict[str, Any]:
    extras: dict[str, Any] = {"memory": memory}
    if n_step_memory is not None:
        extras["n_step_memory"] = n_step_memory
    return extras


class GymVectorEnvStrategy(TrainingStrategy):
    """Single-agent paradigms trained on gymnasium vector envs."""

    evaluates_episodes = True

    def make_envs(self, manifest: TrainingManifest, *, seed: int) -> EnvSetup:
        """A vector env of ``environment.num_envs`` copies and a factory for more.

        Raises:
            ConfigError: If the environment is not a gymnasium env, or its id is unknown.
        """
        from agilerl.envs.gym import make_vector_env

        env_spec = manifest.environment
        if not hasattr(env_spec, "sync"):
            raise ConfigError(
                f"environment: {manifest.algorithm.name} trains on a gymnasium env, not a "
                f"{env_spec.env_type} env"
            )

        def factory(seed: int | None = None, num_envs: int | None = None) -> Any:
            return make_vector_env(env_spec, num_envs, seed=seed)

        env = factory(seed=seed)
        return EnvSetup(
            env, factory, env.single_observation_space, env.single_action_space, seed=seed
        )

    def build_population(
        self, spec: AlgorithmSpec, builder: Any, envs: EnvSetup, runtime: PopulationRuntime
    ) -> list[Any]:
        """Check the action space fits the algorithm, then build the agents.

        Raises:
            ConfigError: If the algorithm cannot act in the env's action space.
        """
        from agilerl.envs.gym import action_space_kind

        kind = action_space_kind(envs.action_space)
        if kind not in spec.action_space_kinds:
            raise ConfigError(
                f"environment.name: {spec.name} cannot act in this env: it needs a "
                f"{' or '.join(sorted(spec.action_space_kinds))} action space, the env "
                f"has {envs.action_space}"
            )
        return super().build_population(spec, builder, envs, runtime)


class SingleAgentOnPolicyStrategy(GymVectorEnvStrategy):
    """On-policy single-agent training (PPO)."""

    paradigm: ClassVar[str] = "on-policy"
    training_fields: ClassVar[frozenset[str]] = RL_EVAL_FIELDS | {
        "batched_population",
        "eval_max_concurrent_episodes",
        "fast_grad",
    }
    default_loop: ClassVar[str | TrainingLoop | None] = (
        "agilerl.training.population_loops:train_on_policy_population"
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
        """The shared RL keyword arguments (the loop reads ``batched_population`` itself)."""
        return rl_trainer_kwargs(spec, training, env_spec)


def make_memories(
    spec: AlgorithmSpec, manifest: TrainingManifest, envs: EnvSetup, *, device: str
) -> tuple[Any, Any]:
    """Replay memory (and n-step memory) for the population.

    The population shares one memory unless ``training.experience_sharing``
    is false, which gives every agent its own (then both are lists).

    Raises:
        ConfigError: If the buffer does not fit in memory.
    """
    from agilerl.components.memory import InsufficientMemoryError
    from agilerl.models.training import init_buffer, init_n_step_buffer

    buffer_spec = manifest.replay_buffer
    if buffer_spec is None:
        warnings.warn(
            f"{spec.name} has no replay_buffer section: using max_size "
            f"{ReplayBufferSpec().max_size} (choose one with replay_buffer=standard)",
            UserWarning,
            stacklevel=3,
        )
        buffer_spec = ReplayBufferSpec()
    training = manifest.training
    copies = 1 if training.experience_sharing is not False else training.pop_size
    spaces = {"observation_space": envs.observation_space, "action_space": envs.action_space}
    try:
        # Seeded sampling generators: the same seed gives the same run (issue 10, case 27).
        seeds = [envs.seed * 1000 + 500 + copy for copy in range(copies)]
        mains = [init_buffer(buffer_spec, spec, device, seed=s, **spaces) for s in seeds]
        n_steps = [init_n_step_buffer(buffer_spec, spec, device, seed=s, **spaces) for s in seeds]
    except InsufficientMemoryError as exc:
        raise ConfigError(f"replay_buffer.max_size: {exc}") from None
    if copies == 1:
        return mains[0], n_steps[0]
    return mains, (n_steps if n_steps[0] is not None else None)


class SingleAgentOffPolicyStrategy(GymVectorEnvStrategy):
    """Off-policy single-agent training (DQN, Rainbow DQN, DDPG, TD3)."""

    paradigm: ClassVar[str] = "off-policy"
    training_fields: ClassVar[frozenset[str]] = RL_EVAL_FIELDS | {
        "batched_population",
        "eval_max_concurrent_episodes",
        "fast_grad",
        "learning_delay",
        "experience_sharing",
        *EPSILON_FIELDS,
    }
    default_loop: ClassVar[str | TrainingLoop | None] = (
        "agilerl.training.population_loops:train_off_policy_population"
    )

    def acted_training_fields(self, spec: AlgorithmSpec) -> frozenset[str]:
        """The off-policy fields; the epsilon schedule only for epsilon-greedy algorithms."""
        acted = super().acted_training_fields(spec)
        return acted if spec.uses_epsilon else acted - set(EPSILON_FIELDS)

    def loop_kwargs(
        self, spec: AlgorithmSpec, manifest: TrainingManifest, envs: EnvSetup, *, device: str
    ) -> dict[str, Any]:
        """The trainer kwargs with the replay memories and whether checkpoints store them."""
        memory, n_step_memory = make_memories(spec, manifest, envs, device=device)
        kwargs = self.get_trainer_kwargs(
            spec,
            training=manifest.training,
            env_spec=manifest.environment,
            memory=memory,
            n_step_memory=n_step_memory,
        )
        buffer_spec = manifest.replay_buffer or ReplayBufferSpec()
        kwargs["save_memory"] = buffer_spec.store_in_checkpoint
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
        """Shared RL kwargs plus the memory and the n-step memory (when there is one)."""
        return {**rl_trainer_kwargs(spec, training, env_spec), **_memories(memory, n_step_memory)}
