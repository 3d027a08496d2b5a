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
sequential loop within floating-point error; that includes prioritised and
n-step memories (Rainbow DQN), whose draws, PER exponents and priority
updates go member by member around the stacked update. With a shared memory
the members fill it step by step together rather than one generation after
another (a shared prioritised or n-step memory is not batched).

At the end of every generation the groups write back into the member
agents; evaluation results, evolution and checkpoints then work on plain
agents, and the next generation stacks the (possibly mutated) population
afresh.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from agilerl.algorithms.batched import batchable, make_groups
from agilerl.arena.models.training import TrainingSpec
from agilerl.components.replay_buffer import (
    MultiStepReplayBuffer,
    PrioritizedReplayBuffer,
    sample_members,
)
from agilerl.networks.masking import has_action_mask
from agilerl.training.batched_eval import BatchedMembers, group_actions
from agilerl.training.engine import bind_training, run_population
from agilerl.training.off_policy_memory import Memory, annealed_beta
from agilerl.training.population_env import PopulationVectorEnv
from agilerl.training.population_loop import PopulationLoop
from agilerl.training.results import LoopResult, mean_metrics
from agilerl.training.run_context import RunContext
from agilerl.training.train_off_policy import epsilon_schedule
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
    if any(has_action_mask(getattr(agent, "observation_space", None)) for agent in population):
        return "action masks: stacked members act unmasked, so masked members train one by one"
    if not any(batchable(agent) for agent in population):
        return "no member can be stacked (a plain DQN, DDPG, TD3 or SAC on a flat Box observation)"
    if len({int(agent.steps) for agent in population}) > 1:
        return "the members have taken different numbers of steps"
    if not isinstance(memory, list):
        if n_step_memory is not None or isinstance(memory, PrioritizedReplayBuffer):
            return (
                "a prioritised memory shared by the population updates its priorities member "
                "by member (training.experience_sharing: false gives each member its own)"
            )
        if isinstance(memory, MultiStepReplayBuffer):
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
    training: TrainingSpec,
    memory: Any,
    n_step_memory: Any = None,
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

    Args:
        population: The agents.
        env: Vector env of agent 0 (gives the sub-envs per member).
        env_name: Label for logs.
        algo: Label for logs.
        training: The validated training spec.
        memory: The shared replay memory, or one per member.
        n_step_memory: One n-step memory per member (PER + n-step), or ``None``.
        tournament: Selection operator (evolutionary HPO).
        mutation: Mutation operator (evolutionary HPO).
        env_factory: ``factory(seed=, num_envs=)`` making the population's vector envs.
        run: Run directory, sinks, display and stop conditions.
        save_memory: Whether checkpoints carry the replay memories.

    Returns:
        The run's result; it unpacks as ``population, fitnesses``.
    """
    run = bind_training(run, training)
    eps_start, eps_end, eps_decay = epsilon_schedule(training)
    members = BatchedOffPolicyMembers(
        env_factory, len(population), int(env.num_envs), memory, run,
        n_step_memory=n_step_memory, max_steps=training.max_steps,
        eval_loop=training.eval_loop, eval_steps=training.eval_steps,
        learning_delay=training.learning_delay or 0, eps_start=eps_start, eps_end=eps_end,
        eps_decay=eps_decay, exact_stops=save_memory,
    )  # fmt: skip
    return run_population(
        population, members, run, training, tournament=tournament, mutation=mutation,
        label=f"{algo} {env_name}".strip(),
    )  # fmt: skip


class BatchedOffPolicyMembers(BatchedMembers):
    """The off-policy paradigm, stacked, for :func:`~agilerl.training.engine.run_population`.

    The members step one vector env of ``members x envs`` sub-envs together
    (reset from seeded resets every generation, as the sequential loop's are);
    stops, memories in checkpoints, epsilons and learning credits follow
    :class:`~agilerl.training.train_off_policy.OffPolicyMembers` (the credits
    under the same key, so either mode resumes the other's checkpoint).
    """

    def __init__(
        self,
        env_factory: Callable[..., Any],
        size: int,
        num_envs: int,
        memory: Any,
        run: RunContext,
        *,
        n_step_memory: Any = None,
        max_steps: int = 0,
        eval_loop: int,
        eval_steps: int | None,
        learning_delay: int,
        eps_start: float,
        eps_end: float,
        eps_decay: float,
        exact_stops: bool = False,
    ) -> None:
        super().__init__(env_factory, size, run, eval_loop=eval_loop, eval_steps=eval_steps)
        self.train_env = PopulationVectorEnv(env_factory, size, num_envs)
        self.num_envs, self.learning_delay = num_envs, learning_delay
        self.eps_start, self.eps_end, self.eps_decay = eps_start, eps_end, eps_decay
        self.partial_generation = "drop" if exact_stops else "keep"
        self.shared = not isinstance(memory, list)
        if self.shared:
            owned = [Memory(memory)]
            self.memories = owned * size
        else:
            n_steps = n_step_memory or [None] * size
            owned = self.memories = [Memory(m, n) for m, n in zip(memory, n_steps, strict=True)]
        self.max_steps = max_steps
        state = run.resume_state
        if state is not None and state.memory is not None:
            for mem, mem_state in zip(owned, state.memory, strict=True):
                mem.load_state_dict(mem_state)
        run.memory_provider = lambda: [m.state_dict() for m in owned]
        run.memory_every_checkpoint = exact_stops
        self.learn_credit = [0.0] * size

    def state_dict(self) -> dict[str, Any]:
        """The learning credits (fractions of an update carried to the next step)."""
        return {"learn_credit": list(self.learn_credit)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        credit = state.get("learn_credit")
        if credit is not None and len(credit) == len(self.learn_credit):
            self.learn_credit = [float(c) for c in credit]

    def train_generation(
        self, population: list[Any], until: list[int], loop: PopulationLoop
    ) -> list[dict[str, Any]]:
        size, num_envs, memories = len(population), self.num_envs, self.memories
        if loop.epsilons is None:
            loop.epsilons = [self.eps_start] * size
        epsilons, credit = loop.epsilons, self.learn_credit
        obs = self.train_env.reset([self.seed + 7919 * loop.generation + i for i in range(size)])
        trackers = [EpisodeTracker(num_envs) for _ in range(size)]
        betas = [getattr(agent, "beta", None) for agent in population]
        for agent in population:
            if hasattr(agent, "reset_noise"):
                agent.reset_noise()
        self.groups = groups = make_groups(population)
        stats: list[list[dict[str, float]]] = [[] for _ in range(size)]
        learning = Learning(population, memories, stats, betas, self.max_steps, self.shared)
        while not loop.interrupted():
            active = [i for i in range(size) if population[i].steps < until[i]]
            if not active:
                break
            actions = group_actions(groups, obs, epsilons)
            next_obs, real, reward, terminated, truncated = self.train_env.step(actions)
            _store(memories, self.shared, active, obs, actions, reward, real, terminated, truncated)
            for i in active:
                agent = population[i]
                ended = terminated[i] | truncated[i]
                trackers[i].step(reward[i], ended)
                if ended.any() and hasattr(agent, "reset_noise"):
                    agent.reset_noise(np.flatnonzero(ended))
                agent.steps += num_envs
                loop.advance(num_envs)
                epsilons[i] = max(self.eps_end, epsilons[i] * self.eps_decay)
                if agent.steps >= self.learning_delay and len(memories[i]) >= agent.batch_size:
                    credit[i] += num_envs / agent.learn_step
            obs = next_obs
            learning.run_due(groups, credit, active)
        for group in groups:
            group.sync()
        details = []
        for i, agent in enumerate(population):
            finished = trackers[i].pop()
            agent.scores.extend(finished)
            details.append(
                {
                    **mean_metrics(stats[i]),
                    "train_return": float(np.mean(finished)) if finished else math.nan,
                    "epsilon": epsilons[i] if getattr(agent, "uses_epsilon", False) else math.nan,
                    "memory_size": len(memories[i]),
                }
            )
        return details

    def close(self) -> None:
        """Close the training and evaluation envs."""
        self.train_env.close()
        super().close()


def _store(
    memories: list[Memory],
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
            flat(truncated),
        )
        return
    for i in active:
        memories[i].add(obs[i], actions[i], reward[i], real[i], terminated[i], truncated[i])


class Learning:
    """The updates of one env step: which members are due, how each group's batches are drawn.

    Args:
        agents: The population.
        memories: Every member's :class:`Memory` (one object repeated when shared).
        stats: Every member's update statistics (appended to).
        betas: Every member's initial PER exponent (``None`` without PER).
        max_steps: The run's step budget (PER's exponent reaches 1 there).
        shared: Whether the members share one memory.
    """

    def __init__(
        self,
        agents: list[Any],
        memories: list[Memory],
        stats: list[list[dict[str, float]]],
        betas: list[float | None],
        max_steps: int,
        shared: bool,
    ) -> None:
        self.agents, self.memories, self.stats = agents, memories, stats
        self.betas, self.max_steps, self.shared = betas, max_steps, shared

    def run_due(self, groups: list[Any], credit: list[float], active: list[int]) -> None:
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
                        by_size.setdefault(int(self.agents[slot].batch_size), []).append(row)
                for batch_size, rows in by_size.items():
                    self._learn(group, rows, batch_size)

    def _learn(self, group: Any, rows: list[int], batch_size: int) -> None:
        slots = [group.slots[r] for r in rows]
        memories = [self.memories[s] for s in slots]
        if memories[0].has_extras:  # PER / n-step: each member's draw, priorities after
            betas = [
                annealed_beta(self.betas[s], self.agents[s].steps, self.max_steps) for s in slots
            ]
            draws = [m.draw(batch_size, b) for m, b in zip(memories, betas, strict=True)]
            results = group.learn(
                rows,
                [d.batch for d in draws],
                [d.n_step_batch for d in draws],
                [d.weights for d in draws],
            )
            for slot, mem, draw, result in zip(slots, memories, draws, results, strict=True):
                self.stats[slot].append(mem.settle(draw, result))
            return
        stackable = len(slots) > 1 and getattr(group, "stacked_batches", False)
        batches: Any = None
        if stackable and self.shared:
            # One draw for the members sharing the memory, member-major.
            batches = memories[0].main.sample(batch_size * len(slots))
        elif stackable:  # each member's own draw, gathered in one pass
            batches = sample_members([m.main for m in memories], batch_size)
        if batches is None:
            batches = [m.main.sample(batch_size) for m in memories]
        for slot, result in zip(slots, group.learn(rows, batches), strict=True):
            result.pop("priorities", None)
            self.stats[slot].append({k: float(v) for k, v in result.items()})
