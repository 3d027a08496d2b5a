"""The teacher-forced LLM loop (SFT and DPO): batches of dataset rows, evaluation, checkpoints.

One loop for both objectives; the algorithm's loss is the only difference.
A *step* is one batch of ``batch_size`` rows (one :meth:`learn` call, which
itself may take several optimizer steps through mini-batches and
``update_epochs``). Training stops after ``max_steps`` batches or
``num_epochs`` passes over the training split, whichever comes first.

The data position (epoch, batch within the epoch), every agent's trainable
tensors and optimizer state, and the RNG states are checkpointed, so a
resumed run continues exactly where the interrupted one stopped. Each
checkpoint also holds the adapters in peft's format
(``peft.PeftModel.from_pretrained`` loads them) and, per
``CheckpointExportSpec``, a merged model.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from agilerl.arena.models.training import CheckpointExportSpec
from agilerl.hpo.evolution import Evolution
from agilerl.llm.datasets import LLMDatasetEnv
from agilerl.logging.run_dir import RunDirectory
from agilerl.training.checkpointing import CheckpointManager
from agilerl.training.llm.loop_state import LLMLoopState
from agilerl.training.results import LoopResult
from agilerl.training.run_context import RunContext


def fitness_of(agent: Any, metrics: dict[str, float]) -> float:
    """Higher is better: minus the held-out SFT loss; the DPO log-ratio margin (beta removed)."""
    if "reward_margin" in metrics:
        return metrics["reward_margin"] / max(agent.spec.beta, 1e-12)
    return -metrics["loss"]


def _batches_per_epoch(env: LLMDatasetEnv, batch_size: int) -> int:
    return math.ceil(len(env.train.rows) / batch_size)


def _context(run: RunContext | None, run_dir: str | Path | None, resume: bool) -> RunContext:
    if run is not None:
        return run
    if run_dir is None:
        return RunContext.ephemeral()
    directory = RunDirectory(run_dir)
    context = RunContext(
        run_dir=directory, checkpoints=CheckpointManager(directory.checkpoints_dir)
    )
    if resume and context.checkpoints.latest_dir() is not None:
        agents, loop_state, _ = context.checkpoints.load_latest()
        loop_state.extra["agents"] = agents
        context.resume_state = loop_state
    return context


def _export(
    population: list[Any], where: Path, export: CheckpointExportSpec, *, final: bool, best: int
) -> None:
    for i, agent in enumerate(population):
        agent.export(where / f"adapter_{i}")
        if export.should_merge(is_final=final, is_best=i == best):
            agent.export(where / f"merged_{i}", merged=True)


def train_llm_dataset(
    population: list[Any],
    env: LLMDatasetEnv,
    *,
    max_steps: int | None = None,
    num_epochs: int | None = 1,
    evaluation_interval: int = 10,
    checkpoint_steps: int | None = None,
    checkpoint_export: CheckpointExportSpec | None = None,
    evo_steps: int | None = None,
    tournament: Any = None,
    mutation: Any = None,
    run: RunContext | None = None,
    run_dir: str | Path | None = None,
    resume: bool = False,
    stop_after: int | None = None,
    env_factory: Any = None,
) -> LoopResult:
    """Fine-tune a population of SFT or DPO agents on a dataset env.

    Args:
        population: Agents (:class:`~agilerl.algorithms.llm_dataset.DatasetLLMAlgorithm`).
        env: The dataset env (train and test splits).
        max_steps: Batches per agent; ``None`` runs ``num_epochs`` passes.
        num_epochs: Passes over the training split; ``None`` runs ``max_steps`` batches.
        evaluation_interval: Batches between held-out evaluations.
        checkpoint_steps: Batches between checkpoints (one more at the end).
        checkpoint_export: Adapter-only or merged exports (default: adapters).
        evo_steps: Batches between evolutions (at the first evaluation past
            each multiple; default: every evaluation).
        tournament: Selection operator (evolutionary HPO; ``None``: no evolution).
        mutation: Mutation operator, used with ``tournament``.
        run: Run context from the trainer; otherwise one is made for ``run_dir``.
        run_dir: Run directory for metrics and checkpoints when called directly.
        resume: Continue from the newest checkpoint in ``run_dir``.
        stop_after: Stop (as if interrupted, after a checkpoint) once this many
            batches are done; for tests and preemption drills.
        env_factory: The trainer's env factory; unused (the env holds every split).

    Returns:
        The loop's result (unpacks as ``population, fitnesses``).
    """
    if max_steps is None and num_epochs is None:
        raise ValueError("set max_steps or num_epochs")
    export = checkpoint_export or CheckpointExportSpec()
    context = _context(run, run_dir, resume)
    batch_size = population[0].spec.batch_size
    per_epoch = _batches_per_epoch(env, batch_size)
    total = min(
        max_steps if max_steps is not None else math.inf,
        num_epochs * per_epoch if num_epochs is not None else math.inf,
    )
    seed = population[0].spec.seed
    state = LLMLoopState.start(context, population, "batches")
    evolution = Evolution(tournament, mutation) if tournament and mutation else None

    def save(final: bool) -> None:
        if context.checkpoints is None:
            return
        where = context.checkpoints.save(
            state.done,
            [a.checkpoint_state() for a in population],
            state.resume_state(context, len(population)),
        )
        _export(population, where, export, final=final, best=state.best_agent())

    def evaluate() -> None:
        rows = []
        for i, agent in enumerate(population):
            metrics = agent.evaluate(env.test.rows, env, batch_size=batch_size)
            state.fitnesses[i] = fitness_of(agent, metrics)
            agent.fitness.append(state.fitnesses[i])
            rows.append({"step": state.done, "agent": i, **metrics, "fitness": state.fitnesses[i]})
        state.record_evaluation(context, rows)

    started, start_done = time.perf_counter(), state.done
    while state.done < total:
        epoch, cursor = divmod(state.done, per_epoch)
        order = env.order(epoch, seed)
        rows = [env.train.rows[j] for j in order[cursor * batch_size : (cursor + 1) * batch_size]]
        for agent in population:
            metrics = agent.learn(rows, env)
        state.done += 1
        done = state.done
        context.sinks.log({f"train/{k}": v for k, v in metrics.items()}, done)
        if done % evaluation_interval == 0 or done == total:
            evaluate()
            if done < total:
                state.evolve(context, population, evolution, evo_steps or 1)
        if context.progress is not None:
            rows_per_second = (done - start_done) * batch_size / (time.perf_counter() - started)
            context.progress.update(done, rows_per_second)
        stopping = stop_after is not None and done >= stop_after
        stopping = stopping or context.stop_requested is not None or context.out_of_time()
        if (checkpoint_steps and done % checkpoint_steps == 0) or stopping or done == total:
            save(final=done == total)
        if stopping:
            break
    return state.result(context, population, total, stop_after)
