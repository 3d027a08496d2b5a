"""The rollout LLM loop (GRPO, LLM REINFORCE, LLM PPO): generate, score, learn, evaluate.

One loop for every rollout regime; single-turn reasoning is ``max_turns=1``.
A *step* is one round: ``batch_size`` prompts, ``group_size`` episodes each,
one :meth:`learn` call per agent. Every ``evaluation_interval`` rounds each
agent completes the held-out prompts greedily (``eval_greedy``) and reports
the mean reward and pass rate (reward at least ``max_reward``); the mean
reward is its fitness. The run directory gets ``rewards.csv`` (the training
reward of every round) and ``samples/step_<n>.jsonl`` (held-out completions
of each evaluation).

Rounds done, fitnesses, every agent's trainable tensors and optimizer state
and the RNG states are checkpointed, so a resumed run generates and learns
exactly as the uninterrupted one would have.

Under ``torchrun`` (a process group is initialised, see
:mod:`agilerl.llm.distributed`) one agent trains data-parallel: each process
rolls out its share of every batch and of the held-out prompts (seeded by
rank), updates are combined across processes, and only rank 0 writes the run
directory. An FSDP-sharded agent's state is gathered whole for rank 0's
checkpoints, in the same format as a one-process run's (``agent_0.pt``; the
``adapter_<i>`` export folders are not written for a sharded agent).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from agilerl.hpo.evolution import Evolution
from agilerl.llm.rollout_env import RolloutEnv
from agilerl.logging.run_dir import CsvTable
from agilerl.training.llm.loop_state import LLMLoopState
from agilerl.training.llm.train_llm_dataset import _context, _export
from agilerl.training.results import LoopResult
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
        {"row": {k: v for k, v in row.items()}, "completion": s.text, "reward": s.reward}
        for row, s in zip(rows, samples, strict=True)
    ]
    return metrics, shown


def train_llm_rollout(
    population: list[Any],
    env: RolloutEnv,
    *,
    max_steps: int = 100,
    evaluation_interval: int = 10,
    checkpoint_steps: int | None = None,
    checkpoint_export: Any = None,
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
    env_factory: Any = None,
) -> LoopResult:
    """Fine-tune a population of rollout agents (GRPO, LLM REINFORCE, LLM PPO).

    Args:
        population: Agents (:class:`~agilerl.algorithms.llm_rollout.RolloutLLMAlgorithm`).
        env: The rollout env (train and held-out rows).
        max_steps: Rounds per agent.
        evaluation_interval: Rounds between held-out evaluations (and one at the end).
        checkpoint_steps: Rounds between checkpoints (one more at the end).
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
        stop_after: Stop (as if interrupted, after a checkpoint) once this many
            rounds are done; for tests and preemption drills.
        env_factory: The trainer's env factory; unused (the env holds every split).

    Returns:
        The loop's result (unpacks as ``population, fitnesses``).
    """
    from agilerl.arena.models.training import CheckpointExportSpec

    export = checkpoint_export or CheckpointExportSpec()
    if max_reward is not None:
        env.max_reward = float(max_reward)
    from agilerl.llm import distributed

    context = _context(run, run_dir, resume)
    rank, world = distributed.rank(), distributed.world_size()
    if world > 1:
        if len(population) != 1:
            raise ValueError("data-parallel training runs one agent (pop_size 1)")
        if rank > 0:  # reads the resume state like rank 0, writes nothing
            context.run_dir, context.checkpoints = None, None
    spec = population[0].spec
    seed = spec.seed
    held_out = env.test[:eval_rows] if eval_rows else env.test
    held_out = distributed.shard(held_out[: len(held_out) - len(held_out) % world])
    state = LLMLoopState.start(context, population, "rounds")
    evolution = Evolution(tournament, mutation) if tournament and mutation else None
    done = state.done
    if world > 1:  # each rank samples its own completions
        torch.manual_seed(seed * 1009 + rank + 100_003 * done)
    rewards_table = CsvTable(context.run_dir.path / "rewards.csv") if context.run_dir else None
    if rewards_table is not None:
        rewards_table.truncate(done)

    def save(final: bool) -> None:
        # Every process gathers (a sharded agent's state is a collective); rank 0 writes.
        states = [a.checkpoint_state() for a in population] if world > 1 else None
        if context.checkpoints is None:
            return
        where = context.checkpoints.save(
            state.done,
            states or [a.checkpoint_state() for a in population],
            state.resume_state(context, len(population)),
        )
        if distributed.is_sharded(population[0].actor):
            return  # adapter folders need whole tensors; agent_0.pt holds them
        _export(population, where, export, final=final, best=state.best_agent())

    def evaluate() -> None:
        rows = []
        for i, agent in enumerate(population):
            metrics, shown = evaluate_agent(agent, env, held_out, greedy=eval_greedy)
            metrics = distributed.reduce_metrics(metrics, ())
            state.fitnesses[i] = metrics["mean_reward"]
            agent.fitness.append(state.fitnesses[i])
            hps = {k: getattr(agent.spec, k) for k in agent.hp_names}
            row = {"step": state.done, "agent": i, **metrics, **hps}
            rows.append({**row, "fitness": state.fitnesses[i]})
            if context.run_dir is not None:
                name = f"step_{state.done:06d}_agent_{i}.jsonl"
                where = context.run_dir.path / "samples" / name
                where.parent.mkdir(parents=True, exist_ok=True)
                where.write_text("".join(json.dumps(r, default=str) + "\n" for r in shown))
        state.record_evaluation(context, rows)

    started, start_done = time.perf_counter(), done
    tokens = 0.0
    while done < max_steps:
        batch = distributed.shard(env.batch(done, spec.batch_size, seed))
        round_rows = []
        for i, agent in enumerate(population):
            samples = agent.rollout(env, batch)
            metrics = agent.learn(samples)
            tokens += sum(s.num_actions for s in samples)
            round_rows.append({"step": done + 1, "agent": i, **metrics})
        state.done += 1
        done = state.done
        if rewards_table is not None:
            rewards_table.append(round_rows)
        best_round = max(round_rows, key=lambda r: r["reward"])
        context.sinks.log({f"train/{k}": float(v) for k, v in best_round.items()}, done)
        if done % evaluation_interval == 0 or done == max_steps:
            evaluate()
            if done < max_steps:
                state.evolve(context, population, evolution, evo_steps or 1)
        if context.progress is not None:
            context.progress.update(done, tokens / max(time.perf_counter() - started, 1e-9))
        stopping = stop_after is not None and done >= stop_after
        stopping = stopping or context.stop_requested is not None or context.out_of_time()
        if world > 1:  # every process stops at the same round
            stopping = distributed.global_sum(float(stopping)) > 0
        if (checkpoint_steps and done % checkpoint_steps == 0) or stopping or done == max_steps:
            save(final=done == max_steps)
        if stopping:
            break
    del start_done
    return state.result(context, population, max_steps, stop_after)
