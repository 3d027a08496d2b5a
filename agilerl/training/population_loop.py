"""The population engine's bookkeeping: generations, stopping, metrics, evolution, checkpoints.

:func:`agilerl.training.engine.run_population` drives it for every RL
paradigm (the batched loops drive it themselves). One generation is: train
every agent for ``evo_steps`` -> :meth:`end_generation` (evaluate, record,
decide whether to stop) -> :meth:`evolve` (selection and mutation, with
lineage, through :class:`~agilerl.hpo.evolution.Evolution`) ->
:meth:`after_generation` (checkpoint).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agilerl.arena.models.training import TrainingSpec
from agilerl.hpo.evolution import Evolution, live_hyperparameters
from agilerl.training.checkpointing import ResumeState
from agilerl.training.results import LoopResult
from agilerl.training.run_context import RunContext, finite_or_none

DISPLAY_EVERY: int = TrainingSpec.model_fields["reporting_interval"].default
"""Env steps between progress reports unless ``training.reporting_interval`` says otherwise."""
FINAL_STATUSES = ("completed", "target_reached", "pruned")
"""A run that ends so is over for good: it does not evolve or resume further."""


class PopulationLoop:
    """The state of a population's run between two evaluations.

    Args:
        population: The agents (each with ``steps``, ``fitness``, ``index``, ``state_dict``).
        run: Where metrics and checkpoints go and when to stop.
        max_steps: Env steps per agent.
        evo_steps: Env steps per agent between evaluations.
        target: Evaluation return that ends the run.
        checkpoint_every: Population env steps between checkpoints (``None``: after
            every generation, so a killed run loses at most one generation).
        label: Name shown in the display.
        trainable: Whether a member still has budget (default: fewer than ``max_steps``
            env steps); the run is complete when no member has.
        progress: A member's step count (default: its ``steps``, env steps); an LLM
            member counts batches or rounds.
        display_every: Steps between progress reports (display refresh and a
            ``progress/steps_per_second`` scalar to the sinks), unless the manifest
            sets ``training.reporting_interval``.
        on_checkpoint: Called with each checkpoint's directory and whether it is the
            run's last (e.g. to export adapters beside it).
    """

    def __init__(
        self,
        population: list[Any],
        run: RunContext,
        *,
        max_steps: int,
        evo_steps: int,
        target: float | None,
        checkpoint_every: int | None,
        label: str = "",
        trainable: Callable[[Any], bool] | None = None,
        progress: Callable[[Any], int] | None = None,
        display_every: int = DISPLAY_EVERY,
        on_checkpoint: Callable[[Path, bool], None] | None = None,
    ) -> None:
        self.population = population
        self.trainable = trainable
        self.progress = progress or _env_steps
        self.display_every = run.explicit("reporting_interval") or display_every
        self.on_checkpoint = on_checkpoint
        self.run = run
        self.max_steps = max_steps
        self.evo_steps = evo_steps
        self.target = target
        self.checkpoint_every = checkpoint_every
        self.label = label
        state = run.resume_state
        self.env_steps: int = (
            state.total_steps if state else sum(self.progress(agent) for agent in population)
        )
        self.generation: int = state.generation if state else 0
        self.solved_at_step: int | None = state.solved_at_step if state else None
        self.best_fitness: float | None = state.best_fitness if state else None
        self.next_checkpoint: int | None = (
            state.next_checkpoint if state else self._after(self.env_steps, checkpoint_every)
        )
        self.epsilons: list[float] | None = state.epsilons if state else None
        """Exploration epsilons of an epsilon-greedy loop (checkpointed when set)."""
        self.status: str | None = None
        if state and self._target_was_reached(state):
            self.status = "target_reached"  # resumed after its end: nothing more to train
        self.last_eval: dict[int, tuple[float | None, int | None]] = {}
        # A resumed run starts at its checkpoint: that step is already saved.
        self.last_checkpoint_step: int | None = self.env_steps if run.resume_state else None
        self.generation_start_steps: int = self.env_steps
        self.abandoned = False
        self._start_time = time.perf_counter()
        self._start_steps = self.env_steps
        self._shown_steps = self.env_steps

    def _target_was_reached(self, state: ResumeState) -> bool:
        """Whether the checkpointed run had already reached this run's target."""
        return (
            self.target is not None
            and state.solved_at_step is not None
            and state.best_fitness is not None
            and state.best_fitness >= self.target
        )

    @staticmethod
    def _after(steps: int, every: int | None) -> int | None:
        return None if every is None else (steps // every + 1) * every

    @property
    def total_steps(self) -> int:
        """Env steps the whole population has taken (clones do not count twice)."""
        return self.env_steps

    def steps_per_second(self) -> float:
        """Env steps per second in this process (evaluation time included)."""
        elapsed = time.perf_counter() - self._start_time
        return (self.env_steps - self._start_steps) / elapsed if elapsed > 0 else 0.0

    def next_evaluation(self, agent: Any) -> int:
        """The agent's step count at which it is next evaluated."""
        done = self.progress(agent)
        return min(self.max_steps, (done // self.evo_steps + 1) * self.evo_steps)

    def evolution_due(self, every: int | None) -> bool:
        """Whether the generation just ended crossed a multiple of ``every`` steps.

        ``None`` evolves after every generation; otherwise the population
        evolves at the first evaluation past each multiple of ``every``.
        """
        if every is None:
            return True
        done = max(self.progress(agent) for agent in self.population)
        started = (done - 1) // self.evo_steps * self.evo_steps
        return done // every > started // every

    def interrupted(self) -> bool:
        """A stop signal arrived or the wall-time budget is spent (checked between steps)."""
        return self._stopping()

    def _stopping(self) -> bool:
        """Whether to stop now; in a multi-process run (``run.stop_agreement`` set) the
        processes agree: one that stops makes them all stop at the same step."""
        local = self.run.stop_requested is not None or self.run.out_of_time()
        if self.run.stop_agreement is None:
            return local
        agreed = self.run.stop_agreement(local)
        if agreed and not local:
            self.run.stop_requested = "peer"
        return agreed

    def advance(self, steps: int) -> None:
        """Count ``steps`` env steps just taken; report progress every ``display_every``."""
        self.env_steps += steps
        if self.env_steps - self._shown_steps >= self.display_every:
            self._shown_steps = self.env_steps
            rate = self.steps_per_second()
            if self.run.progress is not None:
                self.run.progress.update(self.env_steps, rate)
            self.run.sinks.log({"progress/steps_per_second": rate}, self.env_steps)

    def finished(self) -> bool:
        """Whether the run should stop (and why, in :attr:`status`)."""
        if self.status is None:
            if self._stopping():
                self.status = "interrupted" if self.run.stop_requested else "time_limit"
            elif not any(self._has_budget(agent) for agent in self.population):
                self.status = "completed"
        return self.status is not None

    def _has_budget(self, agent: Any) -> bool:
        if self.progress(agent) >= self.max_steps:
            return False
        return self.trainable(agent) if self.trainable is not None else True

    def end_generation(self, fitness: list[float], details: list[dict[str, float]]) -> None:
        """Record an evaluation of every agent: metrics, display, target, stop conditions."""
        self.generation += 1
        total = self.env_steps
        wall = self.run.elapsed()
        rows = []
        for agent, score, extra in zip(self.population, fitness, details, strict=True):
            row = {
                "step": total,
                "agent_steps": self.progress(agent),
                "wall_seconds": round(wall, 3),
                "generation": self.generation,
                "agent": agent.index,
                "fitness": score,
                **extra,
                **hyperparameters(agent),
            }
            rows.append(row)
            metrics = {
                f"agent_{agent.index}/{k}": float(v)
                for k, v in row.items()
                if isinstance(v, int | float) and k not in ("step", "agent")
            }
            self.run.sinks.log(metrics, total)
        best_now = max(fitness)
        self.run.sinks.log(
            {
                "population/best_fitness": best_now,
                "population/steps_per_second": self.steps_per_second(),
            },
            total,
        )
        if self.run.run_dir is not None:
            self.run.run_dir.append_metrics(rows)
        if math.isfinite(best_now):
            self.best_fitness = (
                best_now if self.best_fitness is None else max(self.best_fitness, best_now)
            )
        spread = [(extra.get("eval_std"), extra.get("eval_episodes")) for extra in details]
        self.last_eval = {
            int(agent.index): stats for agent, stats in zip(self.population, spread, strict=True)
        }
        if self.run.progress is not None:
            self.run.progress.evaluation(total, fitness, self.steps_per_second(), spread=spread)
        if self.target is not None and best_now >= self.target:
            if self.solved_at_step is None:
                self.solved_at_step = total
            self.status = "target_reached"
        self._report_evaluation()
        self.finished()
        self.run.last_result = self.result()

    def evaluation_step(self) -> int:
        """The step of this evaluation on the evaluation grid (per member): the multiple of
        ``evo_steps`` the members reached, or ``max_steps`` at the end, so runs whose
        rollouts overshoot differently report at the same steps."""
        reached = max((self.progress(agent) for agent in self.population), default=0)
        if reached >= self.max_steps:
            return self.max_steps
        return reached // self.evo_steps * self.evo_steps

    def _report_evaluation(self) -> None:
        """Hand the run's best fitness to ``run.on_evaluation``, which may prune the run
        (unless it is ending anyway: target reached, or no budget left)."""
        hook = self.run.on_evaluation
        if hook is None or self.best_fitness is None:
            return
        if self.run.stop_agreement is not None:  # one process cannot stop the others
            return
        stop = hook(self.evaluation_step(), self.best_fitness)
        if stop and self.status is None and any(map(self._has_budget, self.population)):
            self.status = "pruned"

    def should_evolve(self) -> bool:
        """Evolve unless the run is over for good (a stopped run evolves, so resuming is exact)."""
        return self.status not in FINAL_STATUSES

    def evolve(self, tournament: Any, mutation: Any, *, in_place: bool = False) -> None:
        """Tournament selection then mutation; the lineage goes to ``hpo.csv`` and the display.

        Args:
            tournament: Selection operator.
            mutation: Mutation operator.
            in_place: Members keep their objects and slots and load their parents'
                states (members sharing one base model); otherwise winners are cloned.
        """
        evolution = Evolution(tournament, mutation)
        evolve = evolution.evolve_in_place if in_place else evolution.evolve
        population, rows = evolve(self.population, generation=self.generation, step=self.env_steps)
        record_lineage(self.run, self.generation, self.env_steps, population, rows)
        self.population = population

    def begin_generation(self) -> None:
        """Note where this generation starts (see :meth:`abandon_generation`)."""
        self.generation_start_steps = self.env_steps

    def abandon_generation(self) -> bool:
        """On a stop signal mid-generation, drop the partial generation if it is safe.

        When the generation's start is checkpointed, the run stops without
        evaluating, recording or checkpointing the partial generation: a
        resumed run then repeats it exactly as an uninterrupted run would
        (no extra evaluation row, same env seeds). Otherwise the partial
        generation is kept and checkpointed, losing nothing.

        Returns:
            Whether the generation was dropped (the loop should stop now).
        """
        if self.run.stop_requested is None:
            return False
        if self.last_checkpoint_step != self.generation_start_steps:
            return False
        self.abandoned = True
        self.status = "interrupted"
        return True

    def stop_mid_generation(self) -> None:
        """Stop now, checkpointing where every member stands (the generation unevaluated).

        For members whose next step depends only on their step count and the
        RNG: a resumed run trains the members that had not reached the
        evaluation on to it, exactly as an uninterrupted run would have.
        """
        self.status = "interrupted" if self.run.stop_requested else "time_limit"
        self.checkpoint_where_members_stand()

    def checkpoint_where_members_stand(self) -> None:
        """Checkpoint now unless the last checkpoint is at this step (see
        :meth:`stop_mid_generation`; also before a :class:`RunFailure` is passed on)."""
        if self.last_checkpoint_step != self.env_steps:
            self.save_checkpoint()

    def after_generation(self) -> None:
        """Checkpoint after every generation, or each time steps cross ``checkpoint_every``."""
        if self.checkpoint_every is None:
            self.save_checkpoint()
        elif self.next_checkpoint is not None and self.env_steps >= self.next_checkpoint:
            self.save_checkpoint()
            self.next_checkpoint = self._after(self.env_steps, self.checkpoint_every)

    def loop_state(self) -> ResumeState:
        """What a resumed run needs besides the agents."""
        return ResumeState(
            generation=self.generation,
            total_steps=self.env_steps,
            wall_seconds=self.run.elapsed(),
            solved_at_step=self.solved_at_step,
            best_fitness=finite_or_none(self.best_fitness),
            next_checkpoint=self.next_checkpoint,
            wandb_id=self.run.wandb_id,
            seed=self.run.seed,
            operators=self.run.operators_provider() if self.run.operators_provider else None,
            epsilons=list(self.epsilons) if self.epsilons is not None else None,
            extra=dict(self.run.extra_state),
        )

    def save_checkpoint(self) -> None:
        """Checkpoint every agent and the loop state (if the run has a checkpoint manager).

        In a multi-process run every process gathers the agents' states (a
        sharded agent's state is a collective); the one with the manager writes.
        """
        collective = self.run.stop_agreement is not None
        if self.run.checkpoints is None and not collective:
            return
        states = [agent.state_dict() for agent in self.population]
        if self.run.checkpoints is None:
            self.last_checkpoint_step = self.env_steps  # as the writing process records it
            return
        memories = self.run.memory_provider() if self._memory_due() else None
        where = self.run.checkpoints.save(
            self.env_steps, states, self.loop_state(), memories=memories
        )
        self.last_checkpoint_step = self.env_steps
        if self.on_checkpoint is not None:
            self.on_checkpoint(where, self.status in FINAL_STATUSES)

    def _memory_due(self) -> bool:
        """Whether this checkpoint carries the replay memory: every one when the manifest
        stores it, else one made as the run stops early (so a preempted run loses nothing)."""
        if self.run.memory_provider is None:
            return False
        stopping_early = self.status is not None and self.status not in FINAL_STATUSES
        return self.run.memory_every_checkpoint or stopping_early

    def result(self) -> LoopResult:
        """The run's outcome so far (final fitness: the best agent's last evaluation)."""
        finals = [agent.fitness[-1] if agent.fitness else -math.inf for agent in self.population]
        best_slot = max(range(len(finals)), key=finals.__getitem__) if finals else None
        std, episodes = (None, None)
        if best_slot is not None:
            std, episodes = self.last_eval.get(int(self.population[best_slot].index), (None, None))
        final = finals[best_slot] if best_slot is not None else None
        return LoopResult(
            population=self.population,
            fitnesses=[a.fitness[-1] if a.fitness else math.nan for a in self.population],
            total_steps=self.env_steps,
            best_fitness=finite_or_none(self.best_fitness),
            final_fitness=finite_or_none(final) if final is not None else None,
            final_fitness_std=finite_or_none(std) if std is not None else None,
            eval_episodes=episodes,
            solved_at_step=self.solved_at_step,
            status=self.status or "completed",
            wall_seconds=self.run.elapsed(),
        )

    def finish(self) -> LoopResult:
        """Final checkpoint; returns the run's result."""
        self.finished()
        if self.abandoned:  # the partial generation is dropped: the run stands at its checkpoint
            self.env_steps = self.generation_start_steps
        elif self.last_checkpoint_step != self.env_steps:
            self.save_checkpoint()
        self.run.last_result = self.result()
        return self.run.last_result


def _env_steps(agent: Any) -> int:
    return int(agent.steps)


def hyperparameters(agent: Any) -> dict[str, Any]:
    """The agent's live mutable hyperparameters, as ``hp_<name>`` columns."""
    return live_hyperparameters(agent)


def record_lineage(
    run: RunContext, generation: int, step: int, population: list[Any], rows: list[dict]
) -> None:
    """Write an evolution's lineage: ``hpo.csv``, per-member scalars and the display."""
    for slot, agent in enumerate(population):
        run.sinks.log(
            {f"member_{slot}/{k}": float(v) for k, v in live_hyperparameters(agent).items()},
            step,
        )
    if run.run_dir is not None:
        run.run_dir.append_lineage(rows)
    if run.progress is not None:
        run.progress.population(generation, rows)
