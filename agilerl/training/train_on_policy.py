"""The on-policy loop (PPO): collect a rollout, learn, evaluate every ``evo_steps``."""

from __future__ import annotations

from typing import Any

import numpy as np

from agilerl.arena.models.training import TrainingSpec
from agilerl.training.collect import collect_rollouts
from agilerl.training.collect_recurrent import collect_recurrent_rollouts
from agilerl.training.engine import EnvMembers, bind_training, run_population
from agilerl.training.evaluation import PopulationEnvs
from agilerl.training.population_loop import PopulationLoop
from agilerl.training.results import LoopResult, mean_metrics
from agilerl.training.run_context import RunContext


def train_on_policy(
    population: list[Any],
    env: Any,
    env_name: str = "",
    algo: str = "",
    *,
    training: TrainingSpec,
    tournament: Any = None,
    mutation: Any = None,
    env_factory: Any = None,
    eval_env: Any = None,
    run: RunContext | None = None,
) -> LoopResult:
    """Train a population of on-policy agents side by side.

    Each agent collects ``learn_step`` env steps, learns, and repeats until it
    has taken ``training.evo_steps`` more steps; then every agent is evaluated
    (greedy, ``training.eval_loop`` episodes of at most ``training.eval_steps``
    steps on a separate env), metrics are written, and (with ``tournament`` and
    ``mutation``) the population evolves. The run stops at ``training.max_steps``
    per agent, when an evaluation reaches ``training.target_score``, after
    ``training.max_wall_seconds``, or on SIGTERM/SIGUSR1 (after a checkpoint).

    Args:
        population: Agents with ``create_rollout_buffer``, ``learn`` and ``test``.
        env: Vector env of agent 0 (SAME_STEP autoreset).
        env_name: Label for logs.
        algo: Label for logs.
        training: The validated training spec (budget, evaluation, target, checkpoints).
        tournament: Selection operator (evolutionary HPO).
        mutation: Mutation operator (evolutionary HPO).
        env_factory: ``factory(seed=, num_envs=)`` making more vector envs
            (other agents, evaluation).
        eval_env: Evaluation env; made with ``env_factory`` when omitted.
        run: Run directory, sinks, display and stop conditions.

    Returns:
        The run's result; it unpacks as ``population, fitnesses``.
    """
    run = bind_training(run, training)
    envs = PopulationEnvs(
        len(population),
        env,
        env_factory,
        eval_env,
        seed=run.seed,
        eval_loop=training.eval_loop,
        eval_steps=training.eval_steps,
        max_concurrent=training.eval_max_concurrent_episodes,
    )
    return run_population(
        population, OnPolicyMembers(envs, run.seed), run, training, tournament=tournament,
        mutation=mutation, label=f"{algo} {env_name}".strip(),
    )  # fmt: skip


class OnPolicyMembers(EnvMembers):
    """The on-policy paradigm for :func:`~agilerl.training.engine.run_population`.

    Each member's turn starts from env resets seeded by (run seed, generation,
    slot) and a fresh rollout buffer, so a run resumed from a generation's
    checkpoint continues exactly as it would have.

    Args:
        envs: The training and evaluation envs.
        seed: The run seed.
    """

    def __init__(self, envs: PopulationEnvs, seed: int) -> None:
        super().__init__(envs)
        self.seed = seed

    def train(self, slot: int, agent: Any, until: int, loop: PopulationLoop) -> dict[str, Any]:
        env = self.envs.train[slot]
        buffer = agent.create_rollout_buffer()
        obs = env.reset(seed=self.seed + 7919 * loop.generation + slot)[0]
        collect = (
            collect_recurrent_rollouts if getattr(agent, "recurrent", False) else collect_rollouts
        )
        losses, returns = [], []
        while agent.steps < until and not loop.interrupted():
            agent.update_lr_schedule(agent.steps)
            before = agent.steps
            obs, finished, _ = collect(agent, env, buffer, obs)
            losses.append(agent.learn(buffer))
            returns += finished
            loop.advance(agent.steps - before)
        agent.scores.extend(returns)
        return mean_metrics(losses) | {
            "train_return": float(np.mean(returns)) if returns else float("nan"),
            "lr": float(agent.current_lr(agent.steps)),
        }
