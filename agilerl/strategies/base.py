"""The strategy base: a paradigm's plug-in into the trainer.

A strategy says, for its paradigm, how the envs are made (:meth:`make_envs`),
how the population is built (:meth:`build_population`), which loop trains it
(:meth:`get_training_loop`) and what that loop takes (:meth:`loop_kwargs`).
The trainer calls these and nothing paradigm-specific, so a new paradigm is a
new strategy (and builder), not an edit to the trainer or another paradigm.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from agilerl.arena.models.algorithms import AlgorithmSpec
from agilerl.arena.models.env import EnvSpecBase
from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.training import TrainingSpec
from agilerl.extras import missing_extra

if TYPE_CHECKING:
    from agilerl.arena.models.manifest import TrainingManifest

RUN_FIELDS: frozenset[str] = frozenset(
    {
        "name",
        "max_steps",
        "evo_steps",
        "pop_size",
        "hpo",
        "checkpoint_steps",
        "overwrite_checkpoints",
        "checkpoint_optimizer",
        "max_wall_seconds",
        "reporting_interval",
    }
)
"""``training`` fields the trainer and the population engine act on in every paradigm."""

RL_EVAL_FIELDS: frozenset[str] = frozenset({"eval_steps", "eval_loop", "target_score"})
"""``training`` fields of episode evaluation, read by every RL paradigm."""

TrainingLoop = Callable[..., Any]
"""A training loop: ``loop(population, env, *, training, ..., **trainer_kwargs)`` returning a
:class:`~agilerl.training.results.LoopResult` (it unpacks as ``population, fitnesses``)."""


def resolve_loop(path: str) -> TrainingLoop:
    """Import a loop named ``"package.module:function"``.

    Loops are imported on use so that an install without a paradigm's extras
    can still import every strategy.

    Raises:
        NotImplementedError: If the loop's module or function does not exist.
    """
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise NotImplementedError(f"training loop {path} is not available") from exc
        raise
    try:
        return getattr(module, attr)
    except AttributeError:
        raise NotImplementedError(f"training loop {path} is not available") from None


@dataclass
class EnvSetup:
    """The envs a paradigm trains in, as its loop takes them.

    Attributes:
        env: The training env of population slot 0 (the loop's ``env``).
        factory: ``factory(seed=, num_envs=)`` making more such envs (other slots,
            evaluation); the loop's ``env_factory``.
        observation_space: What one agent observes (a mapping per agent for
            multi-agent paradigms).
        action_space: What one agent acts in (likewise).
        seed: The run's seed (seeds the replay memories' sampling too).
    """

    env: Any
    factory: Callable[..., Any] | None
    observation_space: Any
    action_space: Any
    seed: int = 0

    def close(self) -> None:
        """Close :attr:`env` (the loop closes the envs it made)."""
        close = getattr(self.env, "close", None)
        if callable(close):
            close()


@dataclass(frozen=True)
class PopulationRuntime:
    """Run-time inputs of :meth:`TrainingStrategy.build_population`."""

    pop_size: int
    seed: int
    device: str
    total_steps: int
    rollout_mode: str = "colocated"
    """``training.rollout_mode``: where an LLM rollout's generation engine runs."""


class TrainingStrategy(ABC):
    """Paradigm-keyed run-time orchestration for an algorithm spec.

    Subclasses set ``default_loop`` and implement :meth:`get_trainer_kwargs`;
    a paradigm with more than one loop overrides :meth:`get_training_loop`.
    A paradigm that trains also implements :meth:`make_envs`; until it does,
    :meth:`unavailable_reason` says so and the trainer refuses it cleanly.
    """

    default_loop: ClassVar[str | TrainingLoop | None] = None
    paradigm: ClassVar[str] = ""
    """Label shown by ``agilerl algorithms``."""
    multi_process: ClassVar[bool] = False
    """Whether the loop trains one agent data-parallel over several processes (torchrun)."""
    requires: ClassVar[tuple[str, ...]] = ()
    """Packages the paradigm imports (from one of our extras): missing ones make it unavailable."""

    def get_training_loop(self, spec: AlgorithmSpec | None = None) -> TrainingLoop:
        """Select the training loop for ``spec``.

        Raises:
            NotImplementedError: If the strategy names no loop.
        """
        loop = self.default_loop
        if loop is None:
            raise NotImplementedError(
                f"{type(self).__name__} must set default_loop or override get_training_loop"
            )
        return resolve_loop(loop) if isinstance(loop, str) else loop

    @property
    def loop_name(self) -> str:
        """The loop's function name (for listings), without importing it."""
        loop = self.default_loop
        if loop is None:
            return ""
        return loop.rpartition(":")[2] if isinstance(loop, str) else loop.__name__

    def unavailable_reason(self, spec: AlgorithmSpec | None = None) -> str | None:
        """Why this paradigm cannot train here, or ``None`` if it can.

        A paradigm trains once its loop imports and it makes its envs; both are
        read from the code, so the answer changes when the paradigm lands. With
        a ``spec``, its algorithm class is asked too (it may refuse settings it
        cannot run yet, e.g. a recurrent policy).
        """
        label = self.paradigm or type(self).__name__
        for module in self.requires:
            missing = missing_extra(module)
            if missing is not None:
                return missing
        if type(self).make_envs is TrainingStrategy.make_envs:
            return f"{label} training is not available: its strategy makes no envs"
        try:
            self.get_training_loop(spec)
        except NotImplementedError as exc:
            return f"{label} training is not available ({exc})"
        if spec is not None:
            from agilerl.builders import select_builder

            try:
                algo_cls = select_builder(spec).algo_class(spec)
            except (AttributeError, TypeError) as exc:
                return f"{label} training is not available ({exc})"
            return algo_cls.unsupported_reason(spec)
        return None

    training_fields: ClassVar[frozenset[str]] = frozenset()
    """``training`` fields this paradigm acts on besides :data:`RUN_FIELDS`; any other
    field set to a value other than its default is refused
    (:func:`agilerl.strategies.refuse_unused_training_fields`)."""

    step_unit: ClassVar[tuple[str, str]] = ("step", "env steps")
    """What a step of ``training.max_steps`` is here (singular label, plural), for the
    progress lines and the run-end report."""
    evaluates_episodes: ClassVar[bool] = False
    """Its evaluation plays env episodes (``training.eval_loop`` of them), so a run that
    leaves ``eval_loop`` unset gets :data:`~agilerl.strategies.RUN_EVAL_EPISODES`."""
    fitness_name: ClassVar[str] = "fitness"
    """What a member's fitness measures here (the greedy evaluation return for RL)."""

    smoke_budget: ClassVar[dict[str, int]] = {
        "max_steps": 4096,
        "evo_steps": 2048,
        "pop_size": 1,
        "eval_steps": 500,
        "eval_loop": 1,
        "checkpoint_steps": 2048,
    }
    """``training=smoke`` in this paradigm: a run of seconds (env steps for RL; rounds or
    batches for LLMs). It replaces a preset's budget; fields not listed keep their
    defaults (see :func:`agilerl.launch.smoke.smoke_value`)."""

    def acted_training_fields(self, spec: AlgorithmSpec) -> frozenset[str]:
        """The ``training`` fields a run of ``spec`` in this paradigm acts on."""
        return RUN_FIELDS | self.training_fields

    def check(self, manifest: TrainingManifest, *, local: bool = True) -> None:
        """Refuse a valid manifest that this paradigm could not train usefully.

        Runs in :func:`~agilerl.launch.preflight.preflight` (dry runs,
        ``agilerl validate``, :class:`~agilerl.trainer.LocalTrainer`), before
        anything is written; checks only a paradigm knows (e.g. one on-policy
        rollout longer than the whole budget). The default has none.

        Args:
            manifest: The validated manifest.
            local: The run happens on this machine, so the files it names can be
                checked here (``False`` when a job is submitted to a scheduler).

        Raises:
            ConfigError: Naming the field and the fix.
        """
        return

    @property
    def trainable(self) -> bool:
        """Whether this paradigm trains here (its loop and envs are available)."""
        return self.unavailable_reason() is None

    def make_envs(self, manifest: TrainingManifest, *, seed: int) -> EnvSetup:
        """Make the envs this paradigm trains in.

        Raises:
            NotImplementedError: Until the paradigm provides its envs.
        """
        raise NotImplementedError(f"{type(self).__name__} makes no envs")

    def build_population(
        self, spec: AlgorithmSpec, builder: Any, envs: EnvSetup, runtime: PopulationRuntime
    ) -> list[Any]:
        """``pop_size`` agents from the paradigm's builder, each seeded by its index.

        Raises:
            ConfigError: If the agents cannot act in these envs, or the algorithm does
                not implement what the spec asks for (``NotImplementedError``).
        """
        from agilerl.builders import AlgorithmBuildRuntime

        population = []
        for index in range(runtime.pop_size):
            _seed_torch(runtime.seed * 1000 + index)
            try:
                agent = builder.build(
                    spec,
                    envs.observation_space,
                    envs.action_space,
                    runtime=AlgorithmBuildRuntime(
                        index=index, device=runtime.device, total_steps=runtime.total_steps
                    ),
                )
            except NotImplementedError as exc:
                raise ConfigError(f"algorithm: {spec.name}: {exc}") from None
            population.append(agent)
        return population

    def loop_kwargs(
        self, spec: AlgorithmSpec, manifest: TrainingManifest, envs: EnvSetup, *, device: str
    ) -> dict[str, Any]:
        """Every keyword argument the loop takes besides population, envs and run
        (``training`` among them).

        The default is :meth:`get_trainer_kwargs`; a paradigm with more inputs
        (replay memories) makes them here.
        """
        return self.get_trainer_kwargs(
            spec, training=manifest.training, env_spec=manifest.environment
        )

    @abstractmethod
    def get_trainer_kwargs(
        self,
        spec: AlgorithmSpec,
        *,
        training: TrainingSpec,
        env_spec: EnvSpecBase,
        memory: Any = None,
        n_step_memory: Any = None,
    ) -> dict[str, Any]:
        """Return the extra keyword arguments the training loop takes.

        They are ``training`` (the validated spec, whole: the loop reads its settings
        from it) and the objects the spec does not hold (replay memories, labels,
        values resolved from the algorithm or env spec).

        Args:
            spec: The algorithm spec.
            training: Training specification.
            env_spec: Environment specification.
            memory: Replay buffer instance.
            n_step_memory: N-step replay buffer for combined PER + n-step setups.
        """


def _seed_torch(seed: int) -> None:
    import torch

    torch.manual_seed(seed)


def rl_trainer_kwargs(
    spec: AlgorithmSpec, training: TrainingSpec, env_spec: EnvSpecBase
) -> dict[str, Any]:
    """Keyword arguments every RL loop takes: the training spec whole and the run's labels."""
    return {
        "training": training,
        "env_name": getattr(env_spec, "name", type(env_spec).__name__),
        "algo": spec.name,
    }
