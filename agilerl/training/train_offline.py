"""The offline loop (CQN): learn from a fixed dataset, evaluate in the live env it names.

Steps are **gradient steps**: ``max_steps`` and ``evo_steps`` count updates
per agent (an offline agent takes no env steps while training), and
``agent.steps`` counts its updates. Every ``evo_steps`` updates each agent
plays ``eval_loop`` greedy episodes in the evaluation env; the run then
records metrics, evolves (tournament + mutation, if given) and checkpoints
like the online loops. The dataset is read once into ``memory`` and read
again on resume (it is not stored in checkpoints).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.training import TrainingSpec
from agilerl.envs.offline import OfflineDataset, check_dataset, load_offline_dataset
from agilerl.training.engine import Members, bind_training, run_population
from agilerl.training.evaluation import eval_layout
from agilerl.training.population_loop import PopulationLoop
from agilerl.training.results import LoopResult, mean_metrics
from agilerl.training.run_context import RunContext


def _eval_env(
    env: Any, eval_env: Any, env_factory: Any, dataset: OfflineDataset, seed: int, copies: int
) -> tuple[Any, bool]:
    """The evaluation env and whether this loop owns (and closes) it."""
    if eval_env is not None:
        return eval_env, False
    if env_factory is not None:
        return env_factory(seed=seed + 99_991, num_envs=copies), True
    if env is not None:
        return env, False
    if dataset.env_id is None:
        raise ConfigError(
            f"environment.name: dataset {dataset.source} names no env to evaluate in; "
            "give the env (environment.name)"
        )
    made = gym.make_vec(dataset.env_id, num_envs=copies, vectorization_mode="sync")
    made.reset(seed=seed + 99_991)
    return made, True


def train_offline(
    population: list[Any],
    env: Any,
    env_name: str = "",
    algo: str = "",
    *,
    training: TrainingSpec,
    memory: Any,
    dataset: OfflineDataset | None = None,
    minari_dataset_id: str | None = None,
    dataset_path: str | None = None,
    remote: bool = False,
    tournament: Any = None,
    mutation: Any = None,
    env_factory: Any = None,
    eval_env: Any = None,
    run: RunContext | None = None,
    save_memory: bool = False,
) -> LoopResult:
    """Train a population of offline agents from one dataset.

    ``training.max_steps`` and ``training.evo_steps`` count gradient steps per agent.

    Args:
        population: Agents with ``learn(batch)``, ``test`` and ``batch_size``.
        env: The live env to evaluate in (a gymnasium vector env), or ``None``
            to make one from the dataset's env id.
        env_name: Label for logs.
        algo: Label for logs.
        training: The validated training spec (budget, evaluation, target, checkpoints).
        memory: Replay buffer to hold the dataset (shared), or one per agent.
        dataset: A loaded dataset; else it is read from ``minari_dataset_id``
            or ``dataset_path``.
        minari_dataset_id: Minari dataset id.
        dataset_path: HDF5/.npz MDP file.
        remote: Download a Minari dataset that is not stored locally.
        tournament: Selection operator (evolutionary HPO).
        mutation: Mutation operator (evolutionary HPO).
        env_factory: ``factory(seed=, num_envs=)`` making the evaluation env.
        eval_env: Evaluation env (owned by the caller).
        run: Run directory, sinks, display and stop conditions.
        save_memory: Ignored: the dataset is re-read on resume.

    Returns:
        The population and each agent's last fitness.

    Raises:
        ConfigError: If the dataset is missing or does not fit the env.
    """
    run = bind_training(run, training)
    if dataset is None:
        dataset = load_offline_dataset(
            minari_dataset_id=minari_dataset_id, dataset_path=dataset_path, remote=remote
        )
    copies, episodes = eval_layout(training.eval_loop, training.eval_max_concurrent_episodes)
    evaluation, owned = _eval_env(env, eval_env, env_factory, dataset, run.seed, copies)
    obs_space = getattr(evaluation, "single_observation_space", evaluation.observation_space)
    act_space = getattr(evaluation, "single_action_space", evaluation.action_space)
    check_dataset(dataset, obs_space, act_space, env_name=env_name or None, algorithm=algo or "CQN")
    memories = memory if isinstance(memory, list) else [memory]
    for mem in memories:
        if len(mem) == 0:
            dataset.fill(mem)
    members = OfflineMembers(memories, evaluation, owned, run.seed, training.eval_steps, episodes)
    return run_population(
        population, members, run, training, tournament=tournament, mutation=mutation,
        label=f"{algo} {env_name}".strip(),
    )  # fmt: skip


class OfflineMembers(Members):
    """The offline paradigm for :func:`~agilerl.training.engine.run_population`.

    A member's steps are gradient steps on batches sampled from the dataset's
    memory; evaluation plays greedy episodes in the live env. A stop keeps the
    partial generation (the memory is the dataset, read again on resume).
    """

    partial_generation = "keep"

    def __init__(
        self,
        memories: list[Any],
        evaluation: Any,
        owned: bool,
        seed: int,
        eval_steps: int | None,
        episodes: int,
    ) -> None:
        self.memories, self.evaluation, self.owned = memories, evaluation, owned
        self.seed, self.eval_steps, self.episodes = seed, eval_steps, episodes

    def train(self, slot: int, agent: Any, until: int, loop: PopulationLoop) -> dict[str, Any]:
        mem = self.memories[0 if len(self.memories) == 1 else slot]
        stats: list[dict[str, float]] = []
        while agent.steps < until and not loop.interrupted():
            stats.append(agent.learn(mem.sample(agent.batch_size)))
            agent.steps += 1
            loop.advance(1)
        return {**mean_metrics(stats), "dataset_size": len(mem)}

    def evaluate(self, population: list[Any], generation: int) -> list[tuple[float, dict]]:
        seed = self.seed + 31 * generation
        return [
            (
                agent.test(
                    self.evaluation, max_steps=self.eval_steps, loop=self.episodes, greedy=True,
                    seed=seed,
                ),
                {},
            )
            for agent in population
        ]  # fmt: skip

    def close(self) -> None:
        if self.owned:
            self.evaluation.close()
