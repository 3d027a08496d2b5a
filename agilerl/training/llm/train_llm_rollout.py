"""The rollout LLM loop (GRPO, LLM REINFORCE, LLM PPO) on the population engine.

One loop for every rollout regime; single-turn reasoning is ``max_turns=1``.
A *step* is one round: ``batch_size`` prompts, ``group_size`` episodes each,
one :meth:`learn` call. Every ``evaluation_interval`` rounds each member
completes the held-out prompts greedily (``eval_greedy``) and reports the
mean reward and pass rate (reward at least ``max_reward``); the mean reward
is its fitness. Evolution, checkpoints and ``metrics.csv`` are the engine's
(:func:`~agilerl.training.engine.run_population`). The run directory also
gets ``rewards.csv`` (the training reward of every member's every round) and
``samples/step_<n>_agent_<i>.jsonl`` (held-out completions of each evaluation).

A member's prompts follow from its round count, and every checkpoint holds
each member's trainable tensors, optimizer state and the RNG states, so a
resumed run generates and learns exactly as the uninterrupted one would have.

Under ``torchrun`` (a process group is initialised, see
:mod:`agilerl.llm.distributed`) one agent trains data-parallel: each process
rolls out its share of every batch and of the held-out prompts (seeded by
rank), updates are combined across processes, the processes agree on when
to stop, and only rank 0 writes the run directory. An FSDP-sharded agent's
state is gathered whole for rank 0's checkpoints, in the same format as a
one-process run's (``agent_0.pt``; the ``adapter_<i>`` export folders are
not written for a sharded agent).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from agilerl.arena.models.training import CheckpointExportSpec
from agilerl.llm import distributed
from agilerl.llm.rollout_env import RolloutEnv
from agilerl.logging.run_dir import CsvTable
from agilerl.training.engine import run_population
from agilerl.training.llm.members import LLMMembers, llm_run_context
from agilerl.training.population_loop import PopulationLoop
from agilerl.training.results import LoopResult, mean_metrics
from agilerl.training.run_context import RunContext


def evaluate_agent(
    agent: Any, env: RolloutEnv, rows: list[dict[str, Any]], *, greedy: bool = True
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Mean reward and pass rate of one completion per held-out row.

    Returns:
        ``(metrics, samples)``: the metrics and one ``{prompt, completion, reward}`` per row.
    """
    samples = agent.rollout(env, rows, greedy=greedy, group_size=1)
    rewards = [s.reward for s in samples]
    passed = [r >= env.max_reward - 1e-9 for r in rewards]
    metrics = {
        "mean_reward": sum(rewards) / len(rewards),
        "pass_rate": sum(passed) / len(passed),
        "completion_tokens": sum(s.num_actions for s in samples) / len(samples),
    }
    shown = [
        {"row": dict(row), "completion": s.text, "reward": s.reward}
        for row, s in zip(rows, samples, strict=True)
    ]
    return metrics, shown


class RolloutMembers(LLMMembers):
    """GRPO/REINFORCE/LLM PPO members: roll out a round of prompts, then learn from it.

    Args:
        env: The rollout env (train and held-out rows).
        held_out: This process's share of the held-out rows.
        batch_size: Prompts per round (the population's first member's).
        seed: Seed of the prompt order.
        greedy: Greedy decoding for evaluation.
        run_dir: Where ``rewards.csv`` and ``samples/`` go (``None``: nowhere).
        export: Exports beside each checkpoint.
        stop_after: See :class:`LLMMembers`.
        weight_sync_interval: Sampling rounds a member's vLLM engine may serve one
            version of its adapter (see :meth:`VLLMGenerator.serve`); HF ``generate``
            always uses the live weights.
    """

    def __init__(
        self,
        env: RolloutEnv,
        held_out: list[dict[str, Any]],
        *,
        batch_size: int,
        seed: int,
        greedy: bool,
        run_dir: Path | None,
        export: CheckpointExportSpec | None,
        stop_after: int | None,
        weight_sync_interval: int = 1,
    ) -> None:
        super().__init__(export, stop_after)
        self.env, self.held_out, self.batch_size, self.seed = env, held_out, batch_size, seed
        self.greedy, self.run_dir = greedy, run_dir
        self.weight_sync_interval = weight_sync_interval
        self.generators: list[Any] = []
        """The population's vLLM engines, stopped when the run ends."""
        self.rewards = CsvTable(run_dir / "rewards.csv") if run_dir is not None else None

    def forget_rounds_after(self, population: list[Any]) -> None:
        """Drop ``rewards.csv`` rows of rounds past each member's checkpointed count."""
        if self.rewards is None or not self.rewards.rows:
            return
        done = {slot: agent.batches for slot, agent in enumerate(population)}
        self.rewards.keep(lambda row: int(row["step"]) <= done.get(int(row["agent"]), -1))

    def train(self, slot: int, agent: Any, until: int, loop: PopulationLoop) -> dict[str, Any]:
        """Roll out and learn round after round until ``until`` rounds (or a stop)."""
        stats = []
        agent.weight_sync_interval = self.weight_sync_interval
        while agent.batches < until and not self.stopping(loop):
            record = self.round(slot, agent)
            stats.append(record)
            loop.advance(1)
            if self.rewards is not None:
                self.rewards.append([{"step": agent.batches, "agent": slot, **record}])
            loop.run.sinks.log(
                {f"agent_{agent.index}/train_{k}": float(v) for k, v in record.items()},
                loop.total_steps,
            )
        return {f"train_{k}": v for k, v in mean_metrics(stats).items()}

    def round(self, slot: int, agent: Any) -> dict[str, float]:
        """One round: roll out a batch of prompts, learn from it; metrics with timings.

        Besides the update's metrics: seconds spent generating (``rollout_seconds``)
        and learning (``learn_seconds``), generated tokens per second of rollout,
        and with vLLM the weight version that generated the samples and its
        staleness (optimizer steps behind the live weights).
        """
        batch = distributed.shard(self.env.batch(agent.batches, self.batch_size, self.seed))
        started = time.perf_counter()
        samples = agent.rollout(self.env, batch)
        rolled = time.perf_counter()
        extra: dict[str, float] = {}
        if agent.generator is not None:
            extra["weight_version"] = float(agent.generator.versions.get(slot, 0))
            extra["staleness"] = float(agent.generator.staleness(agent))
        metrics = agent.learn(samples)
        learnt = time.perf_counter()
        tokens = sum(s.num_actions for s in samples)
        return {
            **metrics,
            **extra,
            "rollout_seconds": rolled - started,
            "learn_seconds": learnt - rolled,
            "tokens_per_second": tokens / max(rolled - started, 1e-9),
        }

    def evaluate(self, population: list[Any], generation: int) -> list[tuple[float, dict]]:
        """Each member's held-out mean reward (its fitness) and pass rate; samples to disk."""
        scored = []
        for slot, agent in enumerate(population):
            metrics, shown = evaluate_agent(agent, self.env, self.held_out, greedy=self.greedy)
            metrics = distributed.reduce_metrics(metrics, ())
            agent.fitness.append(metrics["mean_reward"])
            scored.append((metrics["mean_reward"], metrics))
            if self.run_dir is not None:
                where = self.run_dir / "samples" / f"step_{agent.batches:06d}_agent_{slot}.jsonl"
                where.parent.mkdir(parents=True, exist_ok=True)
                where.write_text("".join(json.dumps(r, default=str) + "\n" for r in shown))
        return scored

    def exports(self, population: list[Any]) -> bool:
        """Adapter folders need whole tensors; a sharded agent's ``agent_0.pt`` holds them."""
        return not distributed.is_sharded(population[0].actor)

    def close(self) -> None:
        """Stop the population's vLLM engine, if it has one."""
        for generator in self.generators:
            generator.close()


def train_llm_rollout(
    population: list[Any],
    env: RolloutEnv,
    *,
    max_steps: int = 100,
    evaluation_interval: int = 10,
    checkpoint_steps: int | None = None,
    checkpoint_export: CheckpointExportSpec | None = None,
    max_reward: float | None = None,
    evo_steps: int | None = None,
    tournament: Any = None,
    mutation: Any = None,
    eval_rows: int | None = 32,
    eval_greedy: bool = True,
    run: RunContext | None = None,
    run_dir: str | Path | None = None,
    resume: bool = False,
    stop_after: int | None = None,
    weight_sync_interval: int | None = None,
    reuse_prefix_cache_across_syncs: bool = False,
    env_factory: Any = None,
) -> LoopResult:
    """Fine-tune a population of rollout agents (GRPO, LLM REINFORCE, LLM PPO).

    Args:
        population: Agents (:class:`~agilerl.algorithms.llm_rollout.RolloutLLMAlgorithm`).
        env: The rollout env (train and held-out rows).
        max_steps: Rounds per agent.
        evaluation_interval: Rounds between held-out evaluations (and one at the end).
        checkpoint_steps: Population rounds between checkpoints, at the first
            evaluation past each multiple (``None``: after every evaluation).
        checkpoint_export: Adapter-only or merged exports (default: adapters).
        max_reward: A completion scoring at least this passes (default: the env's).
        evo_steps: Rounds between evolutions (at the first evaluation past
            each multiple; default: every evaluation).
        tournament: Selection operator (evolutionary HPO; ``None``: no evolution).
        mutation: Mutation operator, used with ``tournament``.
        eval_rows: Held-out rows per evaluation (``None``: all).
        eval_greedy: Greedy decoding for evaluation.
        run: Run context from the trainer; otherwise one is made for ``run_dir``.
        run_dir: Run directory for metrics and checkpoints when called directly.
        resume: Continue from the newest checkpoint in ``run_dir``.
        stop_after: Stop (as if interrupted, after a checkpoint) once the
            population has taken this many rounds; for tests and preemption drills.
        weight_sync_interval: Rounds between weight syncs to a vLLM engine
            (``None``: every round, on-policy).
        reuse_prefix_cache_across_syncs: Keep vLLM's prefix cache across rounds and
            weight syncs: faster prefills, but samples then depend on the engine's
            history (a resumed run samples differently).
        env_factory: The trainer's env factory; unused (the env holds every split).

    Returns:
        The loop's result (unpacks as ``population, fitnesses``).

    Raises:
        ValueError: If a multi-process run is given more than one agent.
    """
    del env_factory
    if max_reward is not None:
        env.max_reward = float(max_reward)
    context = llm_run_context(population, run, run_dir, resume)
    rank, world = distributed.rank(), distributed.world_size()
    spec = population[0].spec
    if world > 1:
        if len(population) != 1:
            raise ValueError("data-parallel training runs one agent (pop_size 1)")
        if rank > 0:  # reads the resume state like rank 0, writes nothing
            context.run_dir, context.checkpoints = None, None
        context.stop_agreement = lambda local: distributed.global_sum(float(local)) > 0
        # each process samples its own completions
        torch.manual_seed(spec.seed * 1009 + rank + 100_003 * population[0].batches)
    held_out = env.test[:eval_rows] if eval_rows else env.test
    held_out = distributed.shard(held_out[: len(held_out) - len(held_out) % world])
    members = RolloutMembers(
        env, held_out, batch_size=spec.batch_size, seed=spec.seed, greedy=eval_greedy,
        run_dir=context.run_dir.path if context.run_dir is not None else None,
        export=checkpoint_export, stop_after=stop_after,
        weight_sync_interval=weight_sync_interval or 1,
    )  # fmt: skip
    engines = {id(a.generator): a.generator for a in population if a.generator is not None}
    members.generators = list(engines.values())
    for engine in members.generators:
        engine.reuse_prefix_cache = reuse_prefix_cache_across_syncs
    members.forget_rounds_after(population)
    return run_population(
        population, members, context, max_steps=max_steps, evo_steps=evaluation_interval,
        checkpoint=checkpoint_steps, tournament=tournament, mutation=mutation,
        evolve_every=evo_steps, label=f"{spec.name} rollout",
    )  # fmt: skip
