"""The teacher-forced LLM loop (SFT and DPO) on the population engine.

One loop for both objectives; the algorithm's loss is the only difference.
A *step* is one batch of ``batch_size`` rows (one :meth:`learn` call, which
itself may take several optimizer steps through mini-batches and
``update_epochs``). Training stops after ``max_steps`` batches or
``num_epochs`` passes over the training split, whichever comes first. Every
``evaluation_interval`` batches each member's held-out loss (SFT) or reward
margin (DPO) is its fitness; evolution, checkpoints and ``metrics.csv`` are
the engine's (:func:`~agilerl.training.engine.run_population`).

A member's data position (epoch, batch within the epoch) follows from its
batch count, and every checkpoint holds each member's trainable tensors,
optimizer state and the RNG states, so a resumed run continues exactly where
the interrupted one stopped. Each checkpoint also holds the adapters in
peft's format (``peft.PeftModel.from_pretrained`` loads them) and, per
``CheckpointExportSpec``, a merged model.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from agilerl.arena.models.training import CheckpointExportSpec, TrainingSpec
from agilerl.llm.datasets import LLMDatasetEnv
from agilerl.training.engine import run_population
from agilerl.training.llm.members import EVALUATION_INTERVAL, LLMMembers, llm_run_context
from agilerl.training.population_loop import PopulationLoop
from agilerl.training.results import LoopResult, mean_metrics
from agilerl.training.run_context import RunContext


def fitness_of(agent: Any, metrics: dict[str, float]) -> float:
    """Higher is better: minus the held-out SFT loss; the DPO log-ratio margin (beta removed)."""
    if "reward_margin" in metrics:
        return metrics["reward_margin"] / max(agent.spec.beta, 1e-12)
    return -metrics["loss"]


class DatasetMembers(LLMMembers):
    """SFT/DPO members: learn from the batches of the training split in a seeded order.

    Args:
        env: The dataset env (train and test splits).
        batch_size: Rows per batch (the population's first member's).
        seed: Seed of the per-epoch row order.
        export: Exports beside each checkpoint.
        stop_after: See :class:`LLMMembers`.
    """

    def __init__(
        self,
        env: LLMDatasetEnv,
        batch_size: int,
        seed: int,
        export: CheckpointExportSpec | None,
        stop_after: int | None,
    ) -> None:
        super().__init__(export, stop_after)
        self.env, self.batch_size, self.seed = env, batch_size, seed
        self.per_epoch = math.ceil(len(env.train.rows) / batch_size)
        self._order: tuple[int, list[int]] | None = None

    def rows(self, batch: int) -> list[Any]:
        """The training rows of batch number ``batch`` (epochs wrap around)."""
        epoch, cursor = divmod(batch, self.per_epoch)
        if self._order is None or self._order[0] != epoch:
            self._order = (epoch, self.env.order(epoch, self.seed))
        picked = self._order[1][cursor * self.batch_size : (cursor + 1) * self.batch_size]
        return [self.env.train.rows[j] for j in picked]

    def train(self, slot: int, agent: Any, until: int, loop: PopulationLoop) -> dict[str, Any]:
        """Learn batch after batch until ``until`` batches (or a stop)."""
        stats = []
        while agent.batches < until and not self.stopping(loop):
            stats.append(agent.learn(self.rows(agent.batches), self.env))
            loop.advance(1)
            loop.run.sinks.log(
                {f"agent_{agent.index}/train_{k}": v for k, v in stats[-1].items()},
                loop.total_steps,
            )
        return {f"train_{k}": v for k, v in mean_metrics(stats).items()}

    def evaluate(self, population: list[Any], generation: int) -> list[tuple[float, dict]]:
        """Each member's held-out metrics and fitness (see :func:`fitness_of`)."""
        scored = []
        for agent in population:
            metrics = agent.evaluate(self.env.test.rows, self.env, batch_size=self.batch_size)
            fitness = fitness_of(agent, metrics)
            agent.fitness.append(fitness)
            scored.append((fitness, metrics))
        return scored


def train_llm_dataset(
    population: list[Any],
    env: LLMDatasetEnv,
    *,
    training: TrainingSpec,
    tournament: Any = None,
    mutation: Any = None,
    run: RunContext | None = None,
    run_dir: str | Path | None = None,
    resume: bool = False,
    stop_after: int | None = None,
    env_factory: Any = None,
) -> LoopResult:
    """Fine-tune a population of SFT or DPO agents on a dataset env.

    Read from ``training``: ``max_steps`` (batches per agent) and ``num_epochs``
    (passes over the training split; unset: ``max_steps`` batches), whichever ends
    first; ``evaluation_interval`` (batches between held-out evaluations, and one at
    the end; 10 when unset); ``checkpoint_steps`` (population batches between
    checkpoints, at the first evaluation past each multiple; ``None``: after every
    evaluation); ``checkpoint_export``; ``evo_steps`` (batches between evolutions, at
    the first evaluation past each multiple; ``None``: every evaluation) or
    ``evo_epochs`` (passes between evolutions, in place of ``evo_steps``).

    Args:
        population: Agents (:class:`~agilerl.algorithms.llm_dataset.DatasetLLMAlgorithm`).
        env: The dataset env (train and test splits).
        training: The validated training spec.
        tournament: Selection operator (evolutionary HPO; ``None``: no evolution).
        mutation: Mutation operator, used with ``tournament``.
        run: Run context from the trainer; otherwise one is made for ``run_dir``.
        run_dir: Run directory for metrics and checkpoints when called directly.
        resume: Continue from the newest checkpoint in ``run_dir``.
        stop_after: Stop (as if interrupted, after a checkpoint) once the
            population has taken this many batches; for tests and preemption drills.
        env_factory: The trainer's env factory; unused (the env holds every split).

    Returns:
        The loop's result (unpacks as ``population, fitnesses``).
    """
    del env_factory
    context = llm_run_context(population, run, run_dir, resume)
    context.training = training
    spec = population[0].spec
    members = DatasetMembers(
        env, spec.batch_size, spec.seed, training.checkpoint_export, stop_after
    )
    evolve_every = training.evo_steps
    if training.evo_epochs is not None:
        evolve_every = training.evo_epochs * members.per_epoch
    total = training.max_steps
    if training.num_epochs is not None:
        total = min(total, training.num_epochs * members.per_epoch)
    return run_population(
        population, members, context, training.model_copy(update={"max_steps": total}),
        evaluate_every=training.evaluation_interval or EVALUATION_INTERVAL,
        evolve_every=evolve_every, tournament=tournament, mutation=mutation,
        label=f"{spec.name} dataset",
    )  # fmt: skip
