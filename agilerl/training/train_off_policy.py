"""The off-policy loop (DQN, Rainbow DQN, DDPG, TD3): act, store, learn every learn_step."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agilerl.training.evaluation import PopulationEnvs
from agilerl.training.off_policy_memory import Memory
from agilerl.training.population_loop import PopulationLoop
from agilerl.training.results import LoopResult, mean_metrics
from agilerl.training.run_context import RunContext
from agilerl.training.transitions import EpisodeTracker, real_next_obs


def train_off_policy(
    population: list[Any],
    env: Any,
    env_name: str = "",
    algo: str = "",
    *,
    memory: Any,
    n_step_memory: Any = None,
    max_steps: int = 1_000_000,
    evo_steps: int = 10_000,
    eval_steps: int | None = None,
    eval_loop: int = 1,
    learning_delay: int = 0,
    eps_start: float = 1.0,
    eps_end: float = 0.05,
    eps_decay: float = 0.999,
    target: float | None = None,
    checkpoint: int | None = None,
    checkpoint_path: str | None = None,
    overwrite_checkpoints: bool = False,
    tournament: Any = None,
    mutation: Any = None,
    env_factory: Any = None,
    eval_env: Any = None,
    run: RunContext | None = None,
    save_memory: bool = False,
) -> LoopResult:
    """Train a population of off-policy agents.

    Every vector step each agent acts (epsilon-greedy for DQN, noisy nets for
    Rainbow, exploration noise for DDPG/TD3), the transitions go into the
    replay memory (shared by the population unless ``memory`` is a list, one
    per agent), and the agent learns once per ``learn_step`` env steps once
    the memory holds a batch and ``learning_delay`` steps have passed. PER's
    ``beta`` is annealed to 1 over ``max_steps``. Evaluation, stopping,
    checkpoints and evolution happen every ``evo_steps`` as in the on-policy loop.

    Args:
        population: Agents with ``get_action``, ``learn``, ``test``.
        env: Vector env of agent 0 (SAME_STEP autoreset).
        env_name: Label for logs.
        algo: Label for logs.
        memory: Replay buffer (``init_buffer``), or one per agent.
        n_step_memory: N-step buffer for PER + n-step (``init_n_step_buffer``), or one per agent.
        max_steps: Env steps per agent.
        evo_steps: Env steps per agent between evaluations.
        eval_steps: Step cap per evaluation; ``None`` runs whole episodes.
        eval_loop: Episodes per evaluation.
        learning_delay: Env steps before the first update.
        eps_start: Initial epsilon (DQN).
        eps_end: Final epsilon.
        eps_decay: Multiplicative decay per vector step.
        target: Stop when an evaluation reaches this.
        checkpoint: Population env steps between checkpoints.
        checkpoint_path: Unused locally (checkpoints go to the run directory).
        overwrite_checkpoints: Keep only the newest checkpoint.
        tournament: Selection operator (evolutionary HPO).
        mutation: Mutation operator (evolutionary HPO).
        env_factory: ``factory(seed=, num_envs=)`` for more envs.
        eval_env: Evaluation env; made with ``env_factory`` when omitted.
        run: Run directory, sinks, display and stop conditions.
        save_memory: Store the replay memory in checkpoints.

    Returns:
        The run's result; it unpacks as ``population, fitnesses``.
    """
    run = run or RunContext.ephemeral()
    envs = PopulationEnvs(
        len(population),
        env,
        env_factory,
        eval_env,
        seed=run.seed,
        eval_loop=eval_loop,
        eval_steps=eval_steps,
    )
    shared = not isinstance(memory, list)
    memories = (
        [Memory(memory, n_step_memory)]
        if shared
        else [
            Memory(m, n) for m, n in zip(memory, n_step_memory or [None] * len(memory), strict=True)
        ]
    )
    loop = PopulationLoop(
        population,
        run,
        max_steps=max_steps,
        evo_steps=evo_steps,
        target=target,
        checkpoint_every=checkpoint,
        label=f"{algo} {env_name}".strip(),
    )
    state = run.resume_state
    epsilons = list(loop.epsilons or [eps_start] * len(population))
    if state is not None and state.memory is not None:
        for mem, mem_state in zip(memories, state.memory, strict=True):
            mem.load_state_dict(mem_state)
    if save_memory:
        run.memory_provider = lambda: [m.state_dict() for m in memories]
    observations = [
        e.reset(seed=run.seed + 7919 * loop.generation + i)[0] for i, e in enumerate(envs.train)
    ]
    trackers = [EpisodeTracker(e.num_envs) for e in envs.train]
    learn_credit = [0.0] * len(population)
    try:
        while not loop.finished():
            details = []
            for slot, agent in enumerate(loop.population):
                mem = memories[0 if shared else slot]
                e = envs.train[slot]
                num_envs = e.num_envs
                next_eval = loop.next_evaluation(agent)
                stats: list[dict[str, float]] = []
                beta0 = getattr(agent, "beta", None)
                while agent.steps < next_eval and not loop.interrupted():
                    obs = observations[slot]
                    action = agent.get_action(obs, epsilon=epsilons[slot])
                    next_obs, reward, terminated, truncated, info = e.step(action)
                    ended = terminated | truncated
                    mem.add(
                        obs,
                        action,
                        reward,
                        real_next_obs(next_obs, info, ended),
                        terminated,
                        truncated,
                    )
                    trackers[slot].step(reward, ended)
                    if ended.any() and hasattr(agent, "reset_noise"):
                        agent.reset_noise(np.flatnonzero(ended))
                    observations[slot] = next_obs
                    agent.steps += num_envs
                    loop.advance(num_envs)
                    epsilons[slot] = max(eps_end, epsilons[slot] * eps_decay)
                    if agent.steps < learning_delay or len(mem) < agent.batch_size:
                        continue
                    learn_credit[slot] += num_envs / agent.learn_step
                    while learn_credit[slot] >= 1.0:
                        learn_credit[slot] -= 1.0
                        beta = _annealed_beta(beta0, agent.steps, max_steps)
                        stats.append(mem.learn(agent, agent.batch_size, beta))
                finished = trackers[slot].pop()
                agent.scores.extend(finished)
                details.append(
                    {
                        **mean_metrics(stats),
                        "train_return": float(np.mean(finished)) if finished else math.nan,
                        "epsilon": epsilons[slot]
                        if getattr(agent, "uses_epsilon", False)
                        else math.nan,
                        "memory_size": len(mem),
                    }
                )
            loop.epsilons = list(epsilons)
            fitness = envs.evaluate(loop.population, loop.generation)
            loop.end_generation(fitness, envs.with_eval_stats(details))
            if tournament is not None and mutation is not None and loop.should_evolve():
                loop.evolve(tournament, mutation)
            loop.after_generation()
    finally:
        envs.close()
    return loop.finish()


def _annealed_beta(beta0: float | None, steps: int, max_steps: int) -> float | None:
    if beta0 is None:
        return None
    return beta0 + (1.0 - beta0) * min(1.0, steps / max_steps)
