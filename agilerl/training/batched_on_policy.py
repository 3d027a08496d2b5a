"""The on-policy loop for a batched population: stacked members collect and learn together.

The schedule per member is :func:`~agilerl.training.train_on_policy.train_on_policy`'s
(collect ``learn_step`` env steps, learn, repeat until the next evaluation;
the envs restart each generation from seeds of run seed, generation and
slot), but the members of a stacked group (:func:`agilerl.algorithms.batched.make_groups`)
advance in lockstep: one vector env of ``members x envs`` sub-envs, one
forward pass to act for all of them, one rollout buffer, and one stacked
update per minibatch. Members that cannot stack train alone, as in the
sequential loop. Each member draws its action noise and minibatch order from
its own generator, so the result matches the sequential loop within
floating-point error.

At the end of every generation the groups write back into the member
agents; the whole population is then evaluated in one vector env (one
forward per step), and evolution and checkpoints work on plain agents.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from agilerl.algorithms.batched import LoneGroup, batchable, make_groups
from agilerl.algorithms.batched.ppo import PPOGroup
from agilerl.arena.models.training import TrainingSpec
from agilerl.components.rollout_buffer import RolloutBuffer
from agilerl.networks.masking import has_action_mask
from agilerl.training.batched_eval import BatchedMembers
from agilerl.training.collect import collect_rollouts
from agilerl.training.collect_recurrent import collect_recurrent_rollouts
from agilerl.training.engine import bind_training, run_population
from agilerl.training.population_env import PopulationVectorEnv
from agilerl.training.population_loop import PopulationLoop
from agilerl.training.results import LoopResult, mean_metrics
from agilerl.training.run_context import RunContext

__all__ = ["batched_on_policy_reason", "train_on_policy_batched"]


def batched_on_policy_reason(
    population: Sequence[Any], env: Any, env_factory: Any, eval_env: Any = None
) -> str | None:
    """Why this population cannot train batched (``None`` when it can)."""
    if env_factory is None:
        return "the loop has no env_factory to build the population's vector env"
    if eval_env is not None:
        return "the caller's evaluation env serves one member at a time"
    if any(has_action_mask(getattr(agent, "observation_space", None)) for agent in population):
        return "action masks: stacked members act unmasked, so masked members train one by one"
    if not any(batchable(agent) for agent in population):
        return (
            "no member can be stacked (a feed-forward PPO, Discrete or 1-D Box actions, "
            "flat Box obs)"
        )
    if len({int(agent.steps) for agent in population}) > 1:
        return "the members have taken different numbers of steps"
    return None


class _EnvPool:
    """Population vector envs by ``(members, num_envs)``, kept across generations."""

    def __init__(self, factory: Callable[..., Any]) -> None:
        self.factory = factory
        self._free: dict[tuple[int, int], list[PopulationVectorEnv]] = {}
        self._all: list[PopulationVectorEnv] = []

    def take(self, members: int, num_envs: int) -> PopulationVectorEnv:
        free = self._free.setdefault((members, num_envs), [])
        if free:
            return free.pop()
        env = PopulationVectorEnv(self.factory, members, num_envs)
        self._all.append(env)
        return env

    def give_back(self, env: PopulationVectorEnv) -> None:
        self._free.setdefault((env.members, env.num_envs), []).append(env)

    def close(self) -> None:
        for env in self._all:
            env.close()


def train_on_policy_batched(
    population: list[Any],
    env: Any,
    env_name: str = "",
    algo: str = "",
    *,
    training: TrainingSpec,
    tournament: Any = None,
    mutation: Any = None,
    env_factory: Any = None,
    run: RunContext | None = None,
) -> LoopResult:
    """Train an on-policy population batched (see the module docstring).

    Takes :func:`~agilerl.training.train_on_policy.train_on_policy`'s
    arguments but ``eval_env``; the envs are made with ``env_factory``. Check
    :func:`batched_on_policy_reason` first.

    Args:
        population: The agents.
        env: Vector env of agent 0 (gives the sub-envs per member).
        env_name: Label for logs.
        algo: Label for logs.
        training: The validated training spec.
        tournament: Selection operator (evolutionary HPO).
        mutation: Mutation operator (evolutionary HPO).
        env_factory: ``factory(seed=, num_envs=)`` making the population's vector envs.
        run: Run directory, sinks, display and stop conditions.

    Returns:
        The run's result; it unpacks as ``population, fitnesses``.
    """
    run = bind_training(run, training)
    members = BatchedOnPolicyMembers(
        env_factory, len(population), run, eval_loop=training.eval_loop,
        eval_steps=training.eval_steps,
    )  # fmt: skip
    return run_population(
        population, members, run, training, tournament=tournament, mutation=mutation,
        label=f"{algo} {env_name}".strip(),
    )  # fmt: skip


class BatchedOnPolicyMembers(BatchedMembers):
    """The on-policy paradigm, stacked, for :func:`~agilerl.training.engine.run_population`.

    Each generation every group collects and learns in lockstep on a vector
    env of its members' sub-envs (from a pool kept across generations), reset
    from the seeds the sequential loop uses, then writes back into its members.
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
        super().__init__(env_factory, size, run, eval_loop=eval_loop, eval_steps=eval_steps)
        self.pool = _EnvPool(env_factory)

    def train_generation(
        self, population: list[Any], until: list[int], loop: PopulationLoop
    ) -> list[dict[str, Any]]:
        self.groups = make_groups(population)
        metrics: list[dict[str, Any]] = [{} for _ in population]
        for group in self.groups:
            seeds = [self.seed + 7919 * loop.generation + slot for slot in group.slots]
            penv = self.pool.take(len(group), int(group.members[0].spec.num_envs))
            try:
                train = _train_lone if isinstance(group, LoneGroup) else _train_group
                results = train(group, penv, seeds, until[group.slots[0]], loop)
            finally:
                self.pool.give_back(penv)
            for slot, agent, (agent_losses, returns) in zip(
                group.slots, group.members, results, strict=True
            ):
                agent.scores.extend(returns)
                metrics[slot] = mean_metrics(agent_losses) | {
                    "train_return": float(np.mean(returns)) if returns else float("nan"),
                    "lr": float(agent.current_lr(agent.steps)),
                }
        for group in self.groups:
            group.sync()
        return metrics

    def close(self) -> None:
        """Close the pooled training envs and the evaluation env."""
        self.pool.close()
        super().close()


def _train_lone(
    group: LoneGroup, penv: PopulationVectorEnv, seeds: list[int], until: int, loop: PopulationLoop
) -> list[tuple[list[dict[str, float]], list[float]]]:
    """One member that does not stack: the sequential loop's collect and learn."""
    agent = group.members[0]
    env = penv.env
    obs = env.reset(seed=seeds[0])[0]
    buffer = agent.create_rollout_buffer()
    collect = collect_recurrent_rollouts if getattr(agent, "recurrent", False) else collect_rollouts
    agent_losses: list[dict[str, float]] = []
    returns: list[float] = []
    while agent.steps < until and not loop.interrupted():
        agent.update_lr_schedule(agent.steps)
        before = agent.steps
        obs, finished, _ = collect(agent, env, buffer, obs)
        agent_losses.append(agent.learn(buffer))
        returns += finished
        loop.advance(agent.steps - before)
    return [(agent_losses, returns)]


def _train_group(
    group: PPOGroup, penv: PopulationVectorEnv, seeds: list[int], until: int, loop: PopulationLoop
) -> list[tuple[list[dict[str, float]], list[float]]]:
    """A stacked group's generation: lockstep rollouts and stacked updates (its members
    have taken the same steps, so ``until`` is every member's)."""
    members = group.members
    obs = penv.reset(seeds)
    buffer = group.create_rollout_buffer()
    losses: list[list[dict[str, float]]] = [[] for _ in members]
    returns: list[list[float]] = [[] for _ in members]
    while members[0].steps < until and not loop.interrupted():
        obs = _collect(group, penv, buffer, obs, returns)
        steps = buffer.pos * penv.num_envs
        for member in members:
            member.steps += steps
            loop.advance(steps)
        for i, result in enumerate(group.learn(group.member_data(buffer))):
            losses[i].append(result)
    return list(zip(losses, returns, strict=True))


def _collect(
    group: PPOGroup,
    penv: PopulationVectorEnv,
    buffer: RolloutBuffer,
    obs: np.ndarray,
    returns: list[list[float]],
) -> np.ndarray:
    """:func:`~agilerl.training.collect.collect_rollouts` for every member at once."""
    members, per = penv.members, penv.num_envs
    buffer.reset()
    running_returns = buffer.running_returns
    flat_obs_shape = (members * per, *obs.shape[2:])
    with torch.inference_mode():
        for _ in range(buffer.capacity_per_env):
            raw, env_actions, log_prob, value = group.policy_step(obs)
            next_obs, real, reward, terminated, truncated = penv.step(env_actions)
            needs = truncated & ~terminated  # a step flagged both is terminal
            bootstrap = None
            if needs.any():
                bootstrap = np.where(needs, group.values(real), 0.0).astype(np.float32)
                bootstrap = bootstrap.reshape(-1)
            flat_done = (terminated | truncated).reshape(-1)
            flat_reward = reward.reshape(-1)
            buffer.add(
                obs.reshape(flat_obs_shape),
                raw.reshape(members * per, *raw.shape[2:]),
                log_prob.reshape(-1),
                flat_reward,
                value.reshape(-1),
                terminated.reshape(-1),
                truncated.reshape(-1),
                bootstrap,
            )
            running_returns += flat_reward
            if flat_done.any():
                for i in np.flatnonzero(flat_done):
                    returns[i // per].append(float(running_returns[i]))
                    running_returns[i] = 0.0
            obs = next_obs
        last_value = group.values(obs)
    group.compute_advantages(buffer, last_value)
    return obs
