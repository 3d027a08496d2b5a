"""The population engine: one schedule of generations, whatever the paradigm.

A generation is: every member trains until its next evaluation step ->
the population is evaluated -> ``metrics.csv`` rows, display, target check ->
evolution (tournament selection and mutation, ``hpo.csv``) -> checkpoint.
:class:`~agilerl.training.population_loop.PopulationLoop` keeps that
bookkeeping; :func:`run_population` drives it. A paradigm plugs in through a
:class:`MemberTrainer`, which knows only what the paradigm knows: how to
train one member up to a step count, how to evaluate the population, and the
state of its own that a checkpoint must carry (replay memories, learning
credits). Adding a paradigm means writing one ``MemberTrainer``; nothing here
changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from agilerl.arena.models.errors import RunFailure
from agilerl.arena.models.training import TrainingSpec
from agilerl.training.population_loop import DISPLAY_EVERY, PopulationLoop
from agilerl.training.results import LoopResult
from agilerl.training.run_context import RunContext

__all__ = ["EnvMembers", "MemberTrainer", "Members", "bind_training", "run_population"]

STATE_KEY = "member_trainer"
"""Key of the paradigm's own state in ``ResumeState.extra``."""


class MemberTrainer(Protocol):
    """What a paradigm supplies to :func:`run_population`.

    Attributes:
        partial_generation: What a stop signal mid-generation does with the
            partial generation. ``"drop"``: drop it when its start is
            checkpointed (a resumed run repeats it exactly: paradigms whose
            members start every generation from seeded env resets), else keep
            it. ``"keep"``: evaluate and checkpoint it (state carried across
            generations, e.g. live observations, would not repeat).
            ``"resume"``: checkpoint where every member stands, unevaluated; a
            resumed run finishes the generation exactly (members whose next
            step depends only on their step count and the RNG, e.g. LLM batches).
        evolves_in_place: Members share one base model: evolution loads the
            parents' states into the members' own objects instead of cloning.
        display_every: Steps between display refreshes.
    """

    partial_generation: str
    evolves_in_place: bool
    display_every: int

    def progress(self, agent: Any) -> int:
        """A member's step count, in the unit of ``max_steps`` and ``evo_steps``."""
        ...

    def after_checkpoint(self, where: Path, population: list[Any], final: bool) -> None:
        """Write what the paradigm keeps beside a checkpoint (e.g. adapter exports)."""
        ...

    def can_train(self, agent: Any) -> bool:
        """Whether ``agent`` has budget left (e.g. a whole rollout still fits ``max_steps``)."""
        ...

    def train(self, slot: int, agent: Any, until: int, loop: PopulationLoop) -> dict[str, Any]:
        """Train member ``slot`` until it has taken ``until`` env steps (or the run stops).

        Counts its env steps with ``loop.advance`` and stops early once
        ``loop.interrupted()``; returns the member's generation metrics
        (mean losses, training return, ...) for ``metrics.csv``.
        """
        ...

    def train_generation(
        self, population: list[Any], until: list[int], loop: PopulationLoop
    ) -> list[dict[str, Any]]:
        """Train every member ``i`` until ``until[i]``; each member's generation metrics.

        :class:`Members` calls :meth:`train` member by member; a paradigm whose
        members train together (a stacked population) does it here instead.
        """
        ...

    def evaluate(self, population: list[Any], generation: int) -> list[tuple[float, dict]]:
        """``(fitness, evaluation metrics)`` of every member."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """The paradigm's own state a checkpoint carries (plain data)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (a resumed run)."""
        ...

    def close(self) -> None:
        """Release envs the trainer made."""
        ...


class Members:
    """Defaults a :class:`MemberTrainer` may inherit: steps are env steps, no budget rule
    beyond ``max_steps``, no state of its own, nothing to close; a partial generation is
    dropped on a stop; winners are cloned."""

    partial_generation = "drop"
    evolves_in_place = False
    display_every = DISPLAY_EVERY

    def progress(self, agent: Any) -> int:
        """Env steps the member has taken."""
        return int(agent.steps)

    def after_checkpoint(self, where: Path, population: list[Any], final: bool) -> None:
        """Nothing beside the checkpoint."""

    def can_train(self, agent: Any) -> bool:
        """Every member trains until ``max_steps`` (the engine's own rule)."""
        return True

    def train_generation(
        self, population: list[Any], until: list[int], loop: PopulationLoop
    ) -> list[dict[str, Any]]:
        """One member after another, each through :meth:`train`."""
        return [
            self.train(slot, agent, end, loop)
            for slot, (agent, end) in enumerate(zip(population, until, strict=True))
        ]

    def state_dict(self) -> dict[str, Any]:
        """No state of its own."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore."""

    def close(self) -> None:
        """Nothing to release."""


class EnvMembers(Members):
    """Members trained in :class:`~agilerl.training.evaluation.PopulationEnvs`: one
    training env per slot, greedy evaluation on the shared evaluation env."""

    def __init__(self, envs: Any) -> None:
        self.envs = envs

    def evaluate(self, population: list[Any], generation: int) -> list[tuple[float, dict]]:
        """Each member's greedy mean return with the episodes' spread and count."""
        fitness = self.envs.evaluate(population, generation)
        return list(zip(fitness, self.envs.last_stats, strict=True))

    def close(self) -> None:
        """Close the envs made for the other slots and the evaluation."""
        self.envs.close()


def bind_training(run: RunContext | None, training: TrainingSpec) -> RunContext:
    """``run`` (an ephemeral context when ``None``) reading its settings from ``training``.

    The engine and :class:`~agilerl.training.population_loop.PopulationLoop` read the
    settings that have no argument of their own (``reporting_interval``, ...) from
    ``run.training``; a loop binds the spec it was given so both read the same one.
    """
    run = run or RunContext.ephemeral()
    run.training = training
    return run


def run_population(
    population: list[Any],
    trainer: MemberTrainer,
    run: RunContext | None,
    training: TrainingSpec,
    *,
    evaluate_every: int | None = None,
    evolve_every: int | None = None,
    tournament: Any = None,
    mutation: Any = None,
    label: str = "",
) -> LoopResult:
    """Train a population generation by generation until its budget, target or a stop.

    The schedule is ``training``'s: ``max_steps`` per member, an evaluation every
    ``evo_steps`` (every ``max_steps`` when unset), a stop once an evaluation
    reaches ``target_score``, a checkpoint every ``checkpoint_steps`` population
    steps (``None``: every generation).

    Args:
        population: The agents.
        trainer: The paradigm's :class:`MemberTrainer`.
        run: Run directory, sinks, display and stop conditions (``None``: an ephemeral one).
        training: The validated training spec (steps count in the paradigm's unit,
            see :meth:`MemberTrainer.progress`).
        evaluate_every: Steps per member between evaluations, where the paradigm's
            differ from ``training.evo_steps`` (the LLM loops' ``evaluation_interval``).
        evolve_every: Steps per member between evolutions, at the first evaluation
            past each multiple (``None``: after every evaluation).
        tournament: Selection operator (evolution needs it and ``mutation``).
        mutation: Mutation operator.
        label: Name shown in the display.

    Returns:
        The run's result; it unpacks as ``population, fitnesses``.
    """
    run = run or RunContext.ephemeral()
    max_steps = training.max_steps
    evo_steps = evaluate_every or training.evo_steps or max_steps
    loop = PopulationLoop(
        population,
        run,
        max_steps=max_steps,
        evo_steps=evo_steps,
        target=training.target_score,
        checkpoint_every=training.checkpoint_steps,
        label=label,
        trainable=trainer.can_train,
        progress=trainer.progress,
        display_every=trainer.display_every,
        on_checkpoint=lambda where, final: trainer.after_checkpoint(where, loop.population, final),
    )
    if run.resume_state is not None and STATE_KEY in run.resume_state.extra:
        trainer.load_state_dict(run.resume_state.extra[STATE_KEY])
    run.extra_state[STATE_KEY] = trainer.state_dict()
    try:
        while not loop.finished():
            loop.begin_generation()
            until = [loop.next_evaluation(agent) for agent in loop.population]
            try:
                metrics = trainer.train_generation(loop.population, until, loop)
            except RunFailure:
                if trainer.partial_generation == "resume":
                    run.extra_state[STATE_KEY] = trainer.state_dict()
                    loop.checkpoint_where_members_stand()
                raise
            partial = any(
                trainer.progress(agent) < end and trainer.can_train(agent)
                for agent, end in zip(loop.population, until, strict=True)
            )
            if partial and trainer.partial_generation == "resume":
                run.extra_state[STATE_KEY] = trainer.state_dict()
                loop.stop_mid_generation()
                break
            if partial and trainer.partial_generation == "drop" and loop.abandon_generation():
                break
            scored = trainer.evaluate(loop.population, loop.generation)
            fitness = [score for score, _ in scored]
            details = [{**m, **extra} for (_, extra), m in zip(scored, metrics, strict=True)]
            run.extra_state[STATE_KEY] = trainer.state_dict()  # what this checkpoint carries
            loop.end_generation(fitness, details)
            evolving = tournament is not None and mutation is not None
            if evolving and loop.should_evolve() and loop.evolution_due(evolve_every):
                loop.evolve(tournament, mutation, in_place=trainer.evolves_in_place)
            loop.after_generation()
        run.extra_state[STATE_KEY] = trainer.state_dict()
    finally:
        trainer.close()
    return loop.finish()
