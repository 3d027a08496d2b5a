"""The multi-agent loops as the trainer calls them: run directory, metrics, checkpoints, result.

:func:`agilerl.training.train_multi_agent.train_multi_agent_on_policy` and
``..._off_policy`` train a population on PettingZoo vector envs; these
adapters give them the trainer's run context: an evaluation env from the
strategy's factory, one ``metrics.csv`` row per member and generation (summed
and per-agent fitness, mean training return), a checkpoint after every
generation, the live display, and a :class:`~agilerl.training.results.LoopResult`.
"""

from __future__ import annotations

import math
from typing import Any

from agilerl.training.checkpointing import ResumeState
from agilerl.training.results import LoopResult
from agilerl.training.run_context import RunContext
from agilerl.training.train_multi_agent import (
    MultiAgentTrainResult,
    train_multi_agent_off_policy,
    train_multi_agent_on_policy,
)

_EVAL_SEED_OFFSET = 99_991


def _hooks(population: list[Any], run: RunContext, target: float | None) -> tuple[Any, Any, dict]:
    """``log`` and ``on_generation`` callbacks writing the run directory, and their state."""
    state: dict[str, Any] = {"best": -math.inf, "solved_at": None, "steps": 0}

    def log(row: dict[str, Any]) -> None:
        steps = int(row["env_steps"])
        rows = []
        for slot, fitness in enumerate(row["fitness"]):
            record: dict[str, Any] = {
                "step": steps,
                "generation": row["generation"],
                "agent": slot,
                "fitness": fitness,
                "train_return": row["mean_score"][slot],
            }
            for agent_id, value in (row["per_agent_fitness"] or [{}] * len(row["fitness"]))[
                slot
            ].items():
                record[f"fitness_{agent_id}"] = value
            rows.append(record)
            if math.isfinite(fitness) and fitness > state["best"]:
                state["best"] = fitness
        if target is not None and state["solved_at"] is None and state["best"] >= target:
            state["solved_at"] = steps
        state["steps"] = steps
        if run.run_dir is not None and rows:
            run.run_dir.append_metrics(rows)
        if run.sinks is not None and rows:
            best = max(rows, key=lambda r: r["fitness"])
            run.sinks.log({"eval/fitness": best["fitness"]}, steps)
        if run.progress is not None:
            run.progress.update(steps, max(row["fitness"]) if row["fitness"] else None)

    def on_generation(result: MultiAgentTrainResult) -> None:
        if run.checkpoints is None:
            return
        best = state["best"] if math.isfinite(state["best"]) else None
        run.checkpoints.save(
            result.env_steps,
            [agent.state_dict() for agent in result.population],
            ResumeState(
                generation=len(result.history),
                total_steps=result.env_steps,
                wall_seconds=run.elapsed(),
                solved_at_step=state["solved_at"],
                best_fitness=best,
                wandb_id=run.wandb_id,
                seed=run.seed,
            ),
        )

    return log, on_generation, state


def _result(result: MultiAgentTrainResult, state: dict[str, Any], run: RunContext) -> LoopResult:
    loop_result = result.to_loop_result()
    loop_result.solved_at_step = state["solved_at"]
    loop_result.status = "target_reached" if state["solved_at"] is not None else "completed"
    loop_result.wall_seconds = run.elapsed()
    run.last_result = loop_result
    return loop_result


def _mutation_probability(mutation: Any) -> float:
    """The share of selected members that mutate an RL hyperparameter."""
    if mutation is None:
        return 0.0
    probabilities = getattr(mutation, "probabilities", None)
    if isinstance(probabilities, dict) and "rl_hp_mut" in probabilities:
        return float(probabilities["rl_hp_mut"])
    return 0.5


def _run(train: Any, population: list[Any], env: Any, **kwargs: Any) -> LoopResult:
    """Run ``train`` with the trainer's context (evaluation env, hooks, result)."""
    run = kwargs.pop("run", None) or RunContext.ephemeral()
    env_factory = kwargs.pop("env_factory", None)
    target, mutation = kwargs.pop("target", None), kwargs.pop("mutation", None)
    eval_env = env_factory(seed=run.seed + _EVAL_SEED_OFFSET) if env_factory else None
    log, on_generation, state = _hooks(population, run, target)
    try:
        result = train(
            population,
            env,
            eval_env=eval_env,
            mutation_probability=_mutation_probability(mutation),
            seed=run.seed,
            log=log,
            on_generation=on_generation,
            **kwargs,
        )
    finally:
        if eval_env is not None:
            eval_env.close()
    return _result(result, state, run)


def run_multi_agent_on_policy(
    population: list[Any],
    env: Any,
    *,
    max_steps: int,
    evo_steps: int,
    eval_loop: int = 1,
    sum_scores: bool = True,
    tournament: Any = None,
    **trainer: Any,
) -> LoopResult:
    """IPPO populations through the trainer (see the module docstring)."""
    return _run(
        train_multi_agent_on_policy,
        population,
        env,
        max_steps=max_steps,
        evo_steps=evo_steps,
        eval_loop=eval_loop,
        sum_scores=sum_scores,
        tournament=tournament,
        **_context(trainer),
    )


def run_multi_agent_off_policy(
    population: list[Any],
    env: Any,
    *,
    max_steps: int,
    evo_steps: int,
    eval_loop: int = 1,
    sum_scores: bool = True,
    tournament: Any = None,
    memory_size: int = 100_000,
    learning_delay: int = 0,
    **trainer: Any,
) -> LoopResult:
    """MADDPG / MATD3 populations through the trainer (see the module docstring)."""
    return _run(
        train_multi_agent_off_policy,
        population,
        env,
        max_steps=max_steps,
        evo_steps=evo_steps,
        eval_loop=eval_loop,
        sum_scores=sum_scores,
        tournament=tournament,
        memory_size=memory_size,
        learning_delay=learning_delay,
        **_context(trainer),
    )


def _context(trainer: dict[str, Any]) -> dict[str, Any]:
    """The trainer's keyword arguments the adapters use (the rest do not apply here)."""
    return {k: trainer[k] for k in ("run", "env_factory", "target", "mutation") if k in trainer}
