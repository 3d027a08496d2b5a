"""Bookkeeping every RL loop shares: generations, stopping, metrics, checkpoints, summary.

A loop owns its schedule (collect, learn); this object owns what happens
around it, so the on- and off-policy loops stay short and behave alike.
"""

from __future__ import annotations

import math
import time
from typing import Any

from agilerl.training.run_context import RunContext, finite_or_none


class PopulationLoop:
    """The state of a population's run between two evaluations.

    Args:
        population: The agents (each with ``steps``, ``fitness``, ``index``, ``state_dict``).
        run: Where metrics and checkpoints go and when to stop.
        max_steps: Env steps per agent.
        evo_steps: Env steps per agent between evaluations.
        target: Evaluation return that ends the run.
        checkpoint_every: Population env steps between checkpoints (``None``: only at the end).
        label: Name shown in the display.
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
    ) -> None:
        self.population = population
        self.run = run
        self.max_steps = max_steps
        self.evo_steps = evo_steps
        self.target = target
        self.checkpoint_every = checkpoint_every
        self.label = label
        state = run.resume_state or {}
        self.generation: int = int(state.get("generation", 0))
        self.solved_at_step: int | None = state.get("solved_at_step")
        self.best_fitness: float | None = state.get("best_fitness")
        self.next_checkpoint: int | None = state.get(
            "next_checkpoint", self._after(self.total_steps, checkpoint_every)
        )
        self.status: str | None = None
        self.last_checkpoint_step: int | None = None
        self._start_time = time.perf_counter()
        self._start_steps = self.total_steps

    @staticmethod
    def _after(steps: int, every: int | None) -> int | None:
        return None if every is None else (steps // every + 1) * every

    @property
    def total_steps(self) -> int:
        """Env steps taken by the whole population."""
        return int(sum(agent.steps for agent in self.population))

    def steps_per_second(self) -> float:
        """Env steps per second in this process (evaluation time included)."""
        elapsed = time.perf_counter() - self._start_time
        return (self.total_steps - self._start_steps) / elapsed if elapsed > 0 else 0.0

    def next_evaluation(self, agent: Any) -> int:
        """The agent's step count at which it is next evaluated."""
        return min(self.max_steps, (agent.steps // self.evo_steps + 1) * self.evo_steps)

    def interrupted(self) -> bool:
        """A stop signal arrived or the wall-time budget is spent."""
        return self.run.stop_requested is not None or self.run.out_of_time()

    def advance(self, _seconds: float = 0.0) -> None:
        """Refresh the display after a chunk of env steps."""
        if self.run.progress is not None:
            self.run.progress.update(self.total_steps, self.steps_per_second())

    def finished(self) -> bool:
        """Whether the run should stop (and why, in :attr:`status`)."""
        if self.status is None:
            if self.run.stop_requested is not None:
                self.status = "interrupted"
            elif self.run.out_of_time():
                self.status = "time_limit"
            elif all(agent.steps >= self.max_steps for agent in self.population):
                self.status = "completed"
        return self.status is not None

    def end_generation(self, fitness: list[float], details: list[dict[str, float]]) -> None:
        """Record an evaluation of every agent: metrics, display, target, checkpoint."""
        self.generation += 1
        total = self.total_steps
        wall = self.run.elapsed()
        rows = []
        for agent, score, extra in zip(self.population, fitness, details, strict=True):
            row = {
                "step": total,
                "agent_steps": int(agent.steps),
                "wall_seconds": round(wall, 3),
                "generation": self.generation,
                "agent": agent.index,
                "fitness": score,
                **{k: v for k, v in extra.items()},
                **_hyperparameters(agent),
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
        if self.run.progress is not None:
            self.run.progress.evaluation(total, fitness, self.steps_per_second())
        if self.target is not None and best_now >= self.target:
            if self.solved_at_step is None:
                self.solved_at_step = total
            self.status = "target_reached"
        if self.next_checkpoint is not None and total >= self.next_checkpoint:
            self.save_checkpoint()
            self.next_checkpoint = self._after(total, self.checkpoint_every)
        if self.status is None and self.interrupted():
            self.finished()

    def evolve(self, tournament: Any, mutation: Any) -> None:
        """Tournament selection then mutation of the population."""
        _elite, population = tournament.select(self.population)
        self.population = mutation.mutation(population)

    def loop_state(self) -> dict[str, Any]:
        """What a resumed run needs besides the agents (plain data)."""
        return {
            "generation": self.generation,
            "total_steps": self.total_steps,
            "solved_at_step": self.solved_at_step,
            "best_fitness": finite_or_none(self.best_fitness),
            "next_checkpoint": self.next_checkpoint,
            "wall_seconds": self.run.elapsed(),
            **{k: v for k, v in self.run.extra_state.items() if k != "summary"},
        }

    def save_checkpoint(self) -> None:
        """Checkpoint every agent and the loop state (if the run has a checkpoint manager)."""
        if self.run.checkpoints is None:
            return
        extra = {}
        if self.run.memory_provider is not None:
            extra["memory.pt"] = {"memories": self.run.memory_provider()}
        self.run.checkpoints.save(
            self.total_steps,
            [agent.state_dict() for agent in self.population],
            self.loop_state(),
            extra_files=extra,
        )
        self.last_checkpoint_step = self.total_steps

    def finish(self) -> None:
        """Final checkpoint and the summary the trainer writes."""
        self.finished()
        if self.last_checkpoint_step != self.total_steps:
            self.save_checkpoint()
        finals = [agent.fitness[-1] for agent in self.population if agent.fitness]
        self.run.extra_state["summary"] = {
            "total_steps": self.total_steps,
            "best_fitness": self.best_fitness,
            "final_fitness": max(finals) if finals else None,
            "solved_at_step": self.solved_at_step,
            "status": self.status or "completed",
        }


def _hyperparameters(agent: Any) -> dict[str, Any]:
    values = {}
    for name in getattr(agent, "hp_names", ()):
        value = getattr(agent, name, None)
        if isinstance(value, int | float) and not isinstance(value, bool):
            values[f"hp_{name}"] = value
    return values
