"""The off-policy loop for a batched population: every member steps, acts and learns together.

The schedule per member is :func:`~agilerl.training.train_off_policy.train_off_policy`'s
(act epsilon-greedily, store, learn every ``learn_step`` env steps once the
memory holds a batch and ``learning_delay`` has passed, evaluate every
``evo_steps``), but the members advance in lockstep: one vector env of
``members x envs`` sub-envs, one forward pass per stacked group to act, and
one stacked update for the members that are due (members with different
batch sizes update in separate calls). With one memory per member
(``training.experience_sharing: false``) each member sees exactly the
transitions and samples it would alone, so the result matches the
sequential loop within floating-point error. With a shared memory the
members fill it step by step together rather than one generation after
another.

At the end of every generation the groups write back into the member
agents; evaluation results, evolution and checkpoints then work on plain
agents, and the next generation stacks the (possibly mutated) population
afresh.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from agilerl.algorithms.batched import batchable, make_groups
from agilerl.components.replay_buffer import (
    MultiStepReplayBuffer,
    PrioritizedReplayBuffer,
    sample_members,
)
from agilerl.training.batched_eval import evaluate_and_evolve, group_actions
from agilerl.training.engine import STATE_KEY
from agilerl.training.evaluation import eval_layout
from agilerl.training.population_env import PopulationVectorEnv
from agilerl.training.population_loop import PopulationLoop
from agilerl.training.results import LoopResult, mean_metrics
from agilerl.training.run_context import RunContext
from agilerl.training.transitions import EpisodeTracker

__all__ = ["batched_off_policy_reason", "train_off_policy_batched"]


def batched_off_policy_reason(
    population: Sequence[Any],
    env: Any,
    memory: Any,
    n_step_memory: Any,
    env_factory: Any,
    eval_env: Any = None,
) -> str | None:
    """Why this population cannot train batched (``None`` when it can)."""
    if env_factory is None:
        return "the loop has no env_factory to build the population's vector env"
    if eval_env is not None:
        return "the caller's evaluation env serves one member at a time"
    if not any(batchable(agent) for agent in population):
        return "no member can be stacked (a plain DQN on a flat Box observation)"
    if len({int(agent.steps) for agent in population}) > 1:
        return "the members have taken different numbers of steps"
    memories = memory if isinstance(memory, list) else [memory]
    if n_step_memory is not None:
        return "prioritised replay with n-step returns samples through the agents"
    if any(isinstance(m, PrioritizedReplayBuffer) for m in memories):
        return "prioritised replay samples through the agents"
    if not isinstance(memory, list) and isinstance(memory, MultiStepReplayBuffer):
        return "a shared n-step buffer would mix the members' trajectories"
    obs = getattr(env, "single_observation_space", None)
    if obs is None or not hasattr(obs, "shape") or obs.shape is None or isinstance(obs.shape, dict):
        return "the observation is not an array"
    return None


def train_off_policy_batched(
    population: list[Any],
    env: Any,
    env_name: str = "",
    algo: str = "",
    *,
    memory: Any,
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
    tournament: Any = None,
    mutation: Any = None,
    env_factory: Any = None,
    run: RunContext | None = None,
    save_memory: bool = False,
) -> LoopResult:
    """Train an off-policy population batched (see the module docstring).

    Takes :func:`~agilerl.training.train_off_policy.train_off_policy`'s
    arguments; ``env`` only gives the sub-envs per member (the population's
    vector env is made with ``env_factory``). Check
    :func:`batched_off_policy_reason` first.
    """

    run = run or RunContext.ephemeral()
    size, num_envs = len(population), int(env.num_envs)
    copies, episodes = eval_layout(eval_loop, run.explicit("eval_max_concurrent_episodes"))
    train_env = PopulationVectorEnv(env_factory, size, num_envs)
    eval_env = PopulationVectorEnv(env_factory, size, copies, per_member=True)
    shared = not isinstance(memory, list)
    memories = [memory] * size if shared else list(memory)
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
    epsilons = list(loop.epsilons or [eps_start] * size)
    owned = [memory] if shared else memories
    if state is not None and state.memory is not None:
        for mem, mem_state in zip(owned, state.memory, strict=True):
            mem.load_state_dict(mem_state["main"])
    run.memory_provider = lambda: [{"main": m.state_dict()} for m in owned]
    run.memory_every_checkpoint = save_memory
    learn_credit = [0.0] * size
    saved_credit = (state.extra.get(STATE_KEY) or {}).get("learn_credit") if state else None
    if saved_credit is not None and len(saved_credit) == size:
        learn_credit = [float(c) for c in saved_credit]
    try:
        while not loop.finished():
            loop.begin_generation()
            agents = loop.population
            # Seeded resets every generation, as the sequential trainer does.
            obs = train_env.reset([run.seed + 7919 * loop.generation + i for i in range(size)])
            trackers = [EpisodeTracker(num_envs) for _ in range(size)]
            for agent in agents:
                if hasattr(agent, "reset_noise"):
                    agent.reset_noise()
            groups = make_groups(agents)
            next_eval = [loop.next_evaluation(agent) for agent in agents]
            stats: list[list[dict[str, float]]] = [[] for _ in range(size)]
            while not loop.interrupted():
                active = [i for i in range(size) if agents[i].steps < next_eval[i]]
                if not active:
                    break
                actions = group_actions(groups, obs, epsilons)
                next_obs, real, reward, terminated, truncated = train_env.step(actions)
                _store(memories, shared, active, obs, actions, reward, real, terminated, truncated)
                for i in active:
                    agent = agents[i]
                    ended = terminated[i] | truncated[i]
                    trackers[i].step(reward[i], ended)
                    if ended.any() and hasattr(agent, "reset_noise"):
                        agent.reset_noise(np.flatnonzero(ended))
                    agent.steps += num_envs
                    loop.advance(num_envs)
                    epsilons[i] = max(eps_end, epsilons[i] * eps_decay)
                    if agent.steps >= learning_delay and len(memories[i]) >= agent.batch_size:
                        learn_credit[i] += num_envs / agent.learn_step
                obs = next_obs
                _learn_due(groups, agents, memories, learn_credit, active, stats, shared)
            for group in groups:
                group.sync()
            partial = any(agents[i].steps < next_eval[i] for i in range(size))
            if partial and save_memory and loop.abandon_generation():
                break  # the resumed run repeats this generation from its checkpoint
            details = []
            for i, agent in enumerate(agents):
                finished = trackers[i].pop()
                agent.scores.extend(finished)
                details.append(
                    {
                        **mean_metrics(stats[i]),
                        "train_return": float(np.mean(finished)) if finished else math.nan,
                        "epsilon": epsilons[i]
                        if getattr(agent, "uses_epsilon", False)
                        else math.nan,
                        "memory_size": len(memories[i]),
                    }
                )
            loop.epsilons = list(epsilons)
            # (under the sequential trainer's key: either mode resumes the other's checkpoint)
            run.extra_state[STATE_KEY] = {"learn_credit": list(learn_credit)}
            evaluate_and_evolve(
                loop,
                groups,
                agents,
                eval_env,
                details,
                episodes=episodes,
                max_steps=eval_steps,
                tournament=tournament,
                mutation=mutation,
            )
    finally:
        train_env.close()
        eval_env.close()
    return loop.finish()


def _store(
    memories: list[Any],
    shared: bool,
    active: list[int],
    obs: np.ndarray,
    actions: list[np.ndarray],
    reward: np.ndarray,
    real: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
) -> None:
    """Add the active members' transitions (in one call when they share a memory)."""
    if shared:
        rows = active if len(active) < len(actions) else slice(None)

        def flat(a: np.ndarray) -> np.ndarray:
            a = a[rows]
            return a.reshape(-1, *a.shape[2:])

        memories[0].add(
            flat(obs),
            np.concatenate([actions[i] for i in active]),
            flat(reward),
            flat(real),
            flat(terminated),
            truncated=flat(truncated),
            is_vectorised=True,
        )
        return
    for i in active:
        memories[i].add(
            obs[i],
            actions[i],
            reward[i],
            real[i],
            terminated[i],
            truncated=truncated[i],
            is_vectorised=True,
        )


def _learn_due(
    groups: list[Any],
    agents: list[Any],
    memories: list[Any],
    credit: list[float],
    active: list[int],
    stats: list[list[dict[str, float]]],
    shared: bool,
) -> None:
    """Run every update that is due, one stacked call per group and batch size."""
    while True:
        due = {i for i in active if credit[i] >= 1.0}
        if not due:
            return
        for i in due:
            credit[i] -= 1.0
        for group in groups:
            by_size: dict[int, list[int]] = {}
            for row, slot in enumerate(group.slots):
                if slot in due:
                    by_size.setdefault(int(agents[slot].batch_size), []).append(row)
            for batch_size, rows in by_size.items():
                slots = [group.slots[r] for r in rows]
                stackable = len(slots) > 1 and getattr(group, "stacked_batches", False)
                batches: Any = None
                if stackable and shared:
                    # One draw for the members sharing the memory, member-major.
                    batches = memories[slots[0]].sample(batch_size * len(slots))
                elif stackable:  # each member's own draw, gathered in one pass
                    batches = sample_members([memories[s] for s in slots], batch_size)
                if batches is None:
                    batches = [memories[s].sample(batch_size) for s in slots]
                for slot, result in zip(slots, group.learn(rows, batches), strict=True):
                    result.pop("priorities", None)
                    stats[slot].append({k: float(v) for k, v in result.items()})
