"""What both LLM loops (dataset and rollout) keep between steps, save and report.

A loop counts *steps* (batches or rounds), keeps every agent's latest fitness
and the evaluation history; this state is restored from a resume, written
into every checkpoint, logged after each evaluation and turned into the
loop's :class:`~agilerl.training.results.LoopResult`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from agilerl.hpo.evolution import Evolution
from agilerl.training.checkpointing import ResumeState, set_rng_state
from agilerl.training.population_loop import record_lineage
from agilerl.training.results import LoopResult
from agilerl.training.run_context import RunContext


@dataclass
class LLMLoopState:
    """Steps done, fitnesses and evaluation rows of an LLM loop.

    Attributes:
        counter: The key the step count is saved under (``batches``, ``rounds``).
        done: Steps done.
        fitnesses: Every agent's latest fitness.
        history: Every evaluation row so far.
        evolved_at: The step boundary of the last evolution.
    """

    counter: str
    done: int = 0
    fitnesses: list[float] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    evolved_at: int = 0

    @classmethod
    def start(cls, context: RunContext, population: list[Any], counter: str) -> LLMLoopState:
        """A fresh state, or the resumed run's (agents and RNG restored when called directly)."""
        state = cls(counter, fitnesses=[0.0] * len(population))
        resumed = context.resume_state
        if resumed is None:
            return state
        extra = resumed.extra
        if "agents" in extra:  # called directly; the trainer restores the agents itself
            for agent, agent_state in zip(population, extra["agents"], strict=True):
                agent.load_checkpoint_state(agent_state)
        state.done, state.fitnesses = int(extra[counter]), list(extra["fitnesses"])
        state.history = list(extra["history"])
        state.evolved_at = int(extra.get("evolved_at", 0))
        if resumed.rng is not None:
            set_rng_state(resumed.rng)
        return state

    def resume_state(self, context: RunContext, population_size: int) -> ResumeState:
        """The loop state a checkpoint records."""
        return ResumeState(
            generation=len(self.history) // max(1, population_size),
            total_steps=self.done,
            wall_seconds=context.elapsed(),
            best_fitness=max(self.fitnesses) if self.fitnesses else None,
            wandb_id=context.wandb_id,
            operators=context.operators_provider() if context.operators_provider else None,
            extra={
                self.counter: self.done,
                "fitnesses": list(self.fitnesses),
                "history": list(self.history),
                "evolved_at": self.evolved_at,
            },
        )

    def best_agent(self) -> int:
        """Index of the agent with the highest latest fitness."""
        return max(range(len(self.fitnesses)), key=self.fitnesses.__getitem__)

    def record_evaluation(self, context: RunContext, rows: list[dict[str, Any]]) -> None:
        """Keep one evaluation's rows, write them to the run directory, log the best one."""
        self.history.extend(rows)
        if context.run_dir is not None:
            context.run_dir.append_metrics(rows)
        best = rows[max(range(len(rows)), key=lambda j: rows[j]["fitness"])]
        context.sinks.log(
            {f"eval/{k}": float(v) for k, v in best.items() if k != "agent"}, self.done
        )

    def evolve(
        self, context: RunContext, population: list[Any], evolution: Evolution | None, every: int
    ) -> None:
        """Evolve (in place: the members share one base model) once ``every`` steps have passed.

        Called after each evaluation; evolution uses the fresh fitnesses, so
        with ``every`` (``training.evo_steps``) above the evaluation interval
        the population evolves at the first evaluation past each multiple of it.
        """
        if evolution is None or len(population) < 2 or self.done < self.evolved_at + every:
            return
        self.evolved_at = self.done - self.done % every
        generation = len(self.history) // max(1, len(population))
        _, rows = evolution.evolve_in_place(population, generation=generation, step=self.done)
        record_lineage(context, generation, self.done, population, rows)

    def result(
        self, context: RunContext, population: list[Any], total: float, stop_after: int | None
    ) -> LoopResult:
        """The loop's result; also kept on ``context.last_result``."""
        if self.done >= total:
            status = "completed"
        elif context.stop_requested is not None or stop_after is not None:
            status = "interrupted"
        else:
            status = "time_limit"
        best = [row["fitness"] for row in self.history if math.isfinite(row["fitness"])]
        result = LoopResult(
            population=population,
            fitnesses=list(self.fitnesses),
            total_steps=self.done,
            best_fitness=max(best) if best else None,
            final_fitness=max(self.fitnesses) if self.fitnesses else None,
            status=status,
            wall_seconds=context.elapsed(),
        )
        context.last_result = result
        return result
