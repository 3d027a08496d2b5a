"""Greedy evaluation of a whole population, with one forward per step for all its members.

Each member plays ``copies`` sub-envs seeded exactly like the shared
evaluation env of :class:`~agilerl.training.evaluation.PopulationEnvs`, and its
fitness is computed as :meth:`EvolvableAlgorithm.test` computes it: the
first ``loop`` episodes of every sub-env (a sub-env that finished none adds
its partial return), stepping until every sub-env has finished ``loop``
episodes or ``max_steps`` vector steps have passed. Members that finish early
stop there when ``env`` has one vector env per member (``per_member``);
otherwise they keep stepping (their extra episodes are ignored) until the
last one is done.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from agilerl.training.engine import Members
from agilerl.training.evaluation import episode_stats, eval_layout
from agilerl.training.population_env import PopulationVectorEnv
from agilerl.training.run_context import RunContext

__all__ = ["BatchedMembers", "evaluate_population", "group_actions", "use_batched"]


def group_actions(
    groups: Sequence[Any], obs: np.ndarray, epsilons: Sequence[float], greedy: bool = False
) -> list[np.ndarray]:
    """Every member's env actions for its block of ``obs`` (``[members, envs, ...]``)."""
    actions: list[Any] = [None] * obs.shape[0]
    for group in groups:
        slots = group.slots
        acts = group.act(obs[slots], [epsilons[s] for s in slots], greedy=greedy)
        for slot, action in zip(slots, acts, strict=True):
            actions[slot] = action
    return actions


def evaluate_population(
    groups: Sequence[Any],
    population: Sequence[Any],
    env: PopulationVectorEnv,
    *,
    seed: int,
    loop: int,
    max_steps: int | None,
) -> tuple[list[float], list[dict[str, float | int]]]:
    """Greedy mean return of every member (appended to its ``fitness``) and its episode stats.

    Args:
        groups: The population's groups (:func:`agilerl.algorithms.batched.make_groups`).
        population: The members, by slot.
        env: ``members x copies`` evaluation sub-envs.
        seed: The evaluation seed (the same for every member).
        loop: Episodes per sub-env.
        max_steps: Cap on vector steps.
    """
    members, copies = env.members, env.num_envs
    obs = env.reset([seed] * members)
    running = np.zeros((members, copies), dtype=np.float64)
    finished: list[list[list[float]]] = [[[] for _ in range(copies)] for _ in range(members)]
    remaining = [copies] * members  # sub-envs still short of ``loop`` episodes, per member
    playing = list(range(members))
    zeros = [0.0] * members
    step = 0
    while playing and (max_steps is None or step < max_steps):
        obs, _real, reward, terminated, truncated = env.step(
            group_actions(groups, obs, zeros, greedy=True),
            playing if env.envs is not None else None,
        )
        running += reward
        step += 1
        for i, j in np.argwhere(np.logical_or(terminated, truncated)):
            episodes = finished[i][j]
            if len(episodes) < loop:
                episodes.append(float(running[i, j]))
                if len(episodes) == loop:
                    remaining[i] -= 1
            running[i, j] = 0.0
        playing = [i for i in playing if remaining[i] > 0]
    fitness, stats = [], []
    for i, agent in enumerate(population):
        returns = [r for env_returns in finished[i] for r in env_returns]
        returns += [float(running[i, j]) for j in range(copies) if not finished[i][j]]
        score = float(np.mean(returns)) if returns else 0.0
        agent.fitness.append(score)
        fitness.append(score)
        stats.append(episode_stats(returns))
    return fitness, stats


class BatchedMembers(Members):
    """What the stacked populations share as :class:`~agilerl.training.engine.MemberTrainer` s:
    the groups of the generation (:func:`agilerl.algorithms.batched.make_groups`, set
    by :meth:`train_generation`) and one evaluation env with ``copies`` sub-envs per
    member, played with one forward per step for all of them.

    Args:
        env_factory: ``factory(seed=, num_envs=)`` making vector envs.
        size: Members in the population.
        run: The run (its seed, and ``training.eval_max_concurrent_episodes``).
        eval_loop: Greedy episodes per member and evaluation.
        eval_steps: Step cap per evaluation.
    """

    def __init__(
        self,
        env_factory: Callable[..., Any],
        size: int,
        run: RunContext,
        *,
        eval_loop: int,
        eval_steps: int | None,
    ) -> None:
        copies, self.episodes = eval_layout(eval_loop, run.explicit("eval_max_concurrent_episodes"))
        self.eval_env = PopulationVectorEnv(env_factory, size, copies, per_member=True)
        self.eval_steps, self.seed = eval_steps, run.seed
        self.groups: list[Any] = []

    def evaluate(self, population: list[Any], generation: int) -> list[tuple[float, dict]]:
        """Every member's greedy mean return and episode stats, on the shared seeds."""
        fitness, stats = evaluate_population(
            self.groups,
            population,
            self.eval_env,
            seed=self.seed + 31 * generation,
            loop=self.episodes,
            max_steps=self.eval_steps,
        )
        return list(zip(fitness, stats, strict=True))

    def close(self) -> None:
        """Close the evaluation env."""
        self.eval_env.close()


def use_batched(reason: str | None, mode: bool | str) -> bool:
    """Whether a population trains batched, given why it cannot (``None``: it can).

    Args:
        reason: What stops batching, or ``None``.
        mode: ``training.batched_population``: ``True`` (asked for: a fallback
            warns with the reason) or ``"auto"`` (batched where possible, quietly).
    """
    if reason is not None and mode is True:
        warnings.warn(
            f"training.batched_population: members train one after another: {reason}",
            UserWarning,
            stacklevel=3,
        )
    return reason is None
