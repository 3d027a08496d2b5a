"""The multi-agent loops as the trainer calls them: run directory, metrics, checkpoints, result.

:func:`agilerl.training.train_multi_agent.train_multi_agent_on_policy` and
``..._off_policy`` train a population on PettingZoo vector envs; these
adapters give them the trainer's run context: an evaluation env from the
strategy's factory, one ``metrics.csv`` row per member and generation (summed
and per-agent fitness, mean training return), a checkpoint after every
generation, the live display, and a :class:`~agilerl.training.results.LoopResult`.

Checkpoints carry the loop's own state (``ResumeState.extra["multi_agent"]``:
generation, env steps, mutation generator, learning credits) and, when
``replay_buffer.store_in_checkpoint`` is set, the replay buffer; with the
agents and RNG states the trainer restores, a resumed run continues exactly
as the uninterrupted run. Stop signals and ``max_wall_seconds`` stop the run
(see :mod:`agilerl.training.train_multi_agent` for where).
"""

from __future__ import annotations

import math
from typing import Any

from agilerl.hpo.evolution import Evolution
from agilerl.training.checkpointing import ResumeState
from agilerl.training.results import LoopResult
from agilerl.training.run_context import RunContext
from agilerl.training.train_multi_agent import (
    MultiAgentTrainResult,
    train_multi_agent_off_policy,
    train_multi_agent_on_policy,
)

_EVAL_SEED_OFFSET = 99_991
LOOP_STATE_KEY = "multi_agent"
"""Key of the loop's state in ``ResumeState.extra``."""


def _hooks(run: RunContext, target: float | None, save_memory: bool) -> tuple[Any, Any, dict]:
    """``log`` and ``on_generation`` callbacks writing the run directory, and their state."""
    state: dict[str, Any] = {"best": -math.inf, "solved_at": None, "steps": 0, "reached": False}
    resumed = run.resume_state
    if resumed is not None:
        if resumed.best_fitness is not None:
            state["best"] = float(resumed.best_fitness)
        state["solved_at"] = resumed.solved_at_step
        state["steps"] = resumed.total_steps

    def log(row: dict[str, Any]) -> None:
        steps = int(row["env_steps"])
        wall = round(run.elapsed(), 3)
        rows = []
        for slot, fitness in enumerate(row["fitness"]):
            record: dict[str, Any] = {
                "step": steps,
                "agent_steps": row["agent_steps"][slot],
                "wall_seconds": wall,
                "generation": row["generation"],
                "agent": row["index"][slot],
                "fitness": fitness,
                **row["eval_stats"][slot],
                "train_return": row["mean_score"][slot],
                **row["losses"][slot],
                **row["hyperparameters"][slot],
            }
            for agent_id, value in row["per_agent_fitness"][slot].items():
                record[f"fitness_{agent_id}"] = value
            rows.append(record)
            if math.isfinite(fitness) and fitness > state["best"]:
                state["best"] = fitness
        if target is not None and state["solved_at"] is None and state["best"] >= target:
            state["solved_at"] = steps
        finite = [f for f in row["fitness"] if math.isfinite(f)]
        if target is not None and finite and max(finite) >= target:
            state["reached"] = True  # the run stops after this generation, as single-agent runs
        state["steps"] = steps
        if run.run_dir is not None and rows:
            run.run_dir.append_metrics(rows)
        if run.run_dir is not None and row.get("lineage"):
            run.run_dir.append_lineage(row["lineage"])
        if run.progress is not None and row.get("lineage"):
            run.progress.population(row["generation"], row["lineage"])
        if run.sinks is not None and rows:
            for record in rows:  # as the single-agent loops: agent_<index>/<metric>
                run.sinks.log(
                    {
                        f"agent_{record['agent']}/{k}": float(v)
                        for k, v in record.items()
                        if isinstance(v, int | float) and k not in ("step", "agent")
                    },
                    steps,
                )
            best = max(rows, key=lambda r: r["fitness"])
            run.sinks.log(
                {"eval/fitness": best["fitness"], "population/best_fitness": best["fitness"]},
                steps,
            )
        if run.progress is not None:
            run.progress.update(steps, max(row["fitness"]) if row["fitness"] else None)

    def on_generation(result: MultiAgentTrainResult) -> None:
        if run.checkpoints is None:
            return
        best = state["best"] if math.isfinite(state["best"]) else None
        memories = None
        if save_memory and result.memory is not None:
            memories = [result.memory.state_dict()]
        run.checkpoints.save(
            result.env_steps,
            [agent.state_dict() for agent in result.population],
            ResumeState(
                generation=int(result.loop_state["generation"]),
                total_steps=result.env_steps,
                wall_seconds=run.elapsed(),
                solved_at_step=state["solved_at"],
                best_fitness=best,
                wandb_id=run.wandb_id,
                seed=run.seed,
                operators=run.operators_provider() if run.operators_provider else None,
                extra={**run.extra_state, LOOP_STATE_KEY: dict(result.loop_state)},
            ),
            memories=memories,
        )

    return log, on_generation, state


def _result(result: MultiAgentTrainResult, state: dict[str, Any], run: RunContext) -> LoopResult:
    loop_result = result.to_loop_result()
    loop_result.solved_at_step = state["solved_at"]
    if result.status != "completed":
        loop_result.status = result.status
    else:
        loop_result.status = "target_reached" if state["solved_at"] is not None else "completed"
    loop_result.wall_seconds = run.elapsed()
    run.last_result = loop_result
    return loop_result


def _resume(run: RunContext) -> dict[str, Any] | None:
    """The loop state to continue from (with the stored replay buffer), or ``None``."""
    stored = run.resume_state
    if stored is None:
        return None
    # A checkpoint without the loop's state (older versions) resumes its counters only.
    counters = {"generation": stored.generation, "env_steps": stored.total_steps}
    resume = dict(stored.extra.get(LOOP_STATE_KEY) or counters)
    if stored.memory:
        resume["memory"] = stored.memory[0]
    return resume


def _should_stop(run: RunContext, state: dict[str, Any]) -> Any:
    def check() -> str | None:
        if run.stop_requested is not None:
            return "interrupted"
        if state["reached"]:  # an evaluation of this run reached training.target_score
            return "target_reached"
        return "time_limit" if run.out_of_time() else None

    return check


def _run(train: Any, population: list[Any], env: Any, **kwargs: Any) -> LoopResult:
    """Run ``train`` with the trainer's context (evaluation env, hooks, result)."""
    run = kwargs.pop("run", None) or RunContext.ephemeral()
    env_factory = kwargs.pop("env_factory", None)
    target, mutation = kwargs.pop("target", None), kwargs.pop("mutation", None)
    tournament = kwargs.pop("tournament", None)
    evolution = Evolution(tournament, mutation) if tournament and mutation else None
    save_memory = bool(kwargs.pop("save_memory", False))
    eval_env = env_factory(seed=run.seed + _EVAL_SEED_OFFSET) if env_factory else None
    log, on_generation, state = _hooks(run, target, save_memory)
    try:
        result = train(
            population,
            env,
            eval_env=eval_env,
            evolution=evolution,
            seed=run.seed,
            log=log,
            on_generation=on_generation,
            resume=_resume(run),
            should_stop=_should_stop(run, state),
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
    names = ("run", "env_factory", "target", "mutation", "save_memory")
    return {k: trainer[k] for k in names if k in trainer}
