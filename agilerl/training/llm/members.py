"""What the two LLM paradigms (dataset and rollout) share on the population engine.

An LLM member's step is one :meth:`learn` call (a dataset batch or a rollout
round), counted by the agent's ``batches``. Members are adapters on one
shared base model, so evolution loads parents' states in place. A stop
signal mid-generation checkpoints where every member stands: a member's next
batch depends only on its batch count and the RNG, so a resumed run finishes
the generation exactly as an uninterrupted one would. Each checkpoint gets
the adapters in peft's format beside it (and merged models per
``CheckpointExportSpec``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agilerl.arena.models.training import CheckpointExportSpec
from agilerl.logging.run_dir import RunDirectory
from agilerl.training.checkpointing import CheckpointManager, set_rng_state
from agilerl.training.engine import Members
from agilerl.training.population_loop import PopulationLoop
from agilerl.training.run_context import RunContext

STOP_AFTER = "stop_after"
"""``run.stop_requested`` once a drill's ``stop_after`` steps are done."""


EVALUATION_INTERVAL = 10
"""Steps between held-out evaluations when ``training.evaluation_interval`` is unset."""


class LLMMembers(Members):
    """The shared part of the LLM paradigms' :class:`~agilerl.training.engine.MemberTrainer`.

    Args:
        export: Adapter-only or merged exports beside each checkpoint.
        stop_after: Stop as on a stop signal once the population has taken this
            many steps (batches of all members together); for tests and drills.
    """

    partial_generation = "resume"
    evolves_in_place = True
    display_every = 1

    def __init__(self, export: CheckpointExportSpec | None, stop_after: int | None) -> None:
        self.export = export or CheckpointExportSpec()
        self.stop_after = stop_after

    def progress(self, agent: Any) -> int:
        """Batches (or rounds) the member has learnt from."""
        return int(agent.batches)

    def stopping(self, loop: PopulationLoop) -> bool:
        """Whether to stop before the next batch (a stop signal, the time limit, ``stop_after``)."""
        run = loop.run
        if self.stop_after is not None and loop.total_steps >= self.stop_after:
            run.stop_requested = run.stop_requested or STOP_AFTER
        return loop.interrupted()

    def exports(self, population: list[Any]) -> bool:
        """Whether adapters can be exported (they cannot from a sharded agent's pieces)."""
        return True

    def after_checkpoint(self, where: Path, population: list[Any], final: bool) -> None:
        """``adapter_<i>`` beside the checkpoint; ``merged_<i>`` as the export spec asks."""
        if not self.exports(population):
            return
        fitness = [agent.fitness[-1] if agent.fitness else float("-inf") for agent in population]
        best = max(range(len(population)), key=fitness.__getitem__)
        for i, agent in enumerate(population):
            agent.export(where / f"adapter_{i}")
            if self.export.should_merge(is_final=final, is_best=i == best):
                agent.export(where / f"merged_{i}", merged=True)


def llm_run_context(
    population: list[Any], run: RunContext | None, run_dir: str | Path | None, resume: bool
) -> RunContext:
    """The trainer's context, or one for a direct call (``run_dir``, optionally resumed).

    A direct call that resumes restores the agents and the RNG states here
    (the trainer does both itself).
    """
    if run is not None:
        return run
    if run_dir is None:
        return RunContext.ephemeral(population[0].spec.seed)
    directory = RunDirectory(run_dir)
    context = RunContext(
        run_dir=directory,
        checkpoints=CheckpointManager(directory.checkpoints_dir),
        seed=population[0].spec.seed,
    )
    if resume and context.checkpoints.latest_dir() is not None:
        agents, loop_state, _ = context.checkpoints.load_latest()
        for agent, state in zip(population, agents, strict=True):
            agent.load_checkpoint_state(state)
        if loop_state.rng is not None:
            set_rng_state(loop_state.rng)
        directory.truncate_metrics(loop_state.total_steps)
        context.resume_state = loop_state
    return context
