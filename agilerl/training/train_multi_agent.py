"""Population training loops for multi-agent algorithms on a PettingZoo vector env.

Both loops are plain functions of ``(population, env, ...)``: each generation
trains every agent for ``evo_steps`` env steps, evaluates it (greedy, summed
or averaged over agents), and, when an :class:`~agilerl.hpo.evolution.Evolution`
is given, evolves the population through it (the same tournament, mutation
and lineage as every paradigm). Env steps count agent-env interactions
summed over copies (one vector step of 8 copies is 8 steps).

Every generation starts from env resets seeded by ``(seed, slot, generation)``,
so a run resumed from a generation's checkpoint (``resume=``: the
:attr:`MultiAgentTrainResult.loop_state` saved with it, plus the replay
buffer's state) continues exactly as the uninterrupted run would, given the
agents and the global RNG states of that checkpoint. ``should_stop`` is asked
every vector step: a stop mid-generation drops the partial generation (the
previous generation's checkpoint stands), except in a run's first generation,
which is finished first so that there is a checkpoint to resume from.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agilerl.algorithms.core.multi_agent import MultiAgentAlgorithm
from agilerl.algorithms.ippo import IPPO
from agilerl.components.multi_agent_replay_buffer import MultiAgentReplayBuffer
from agilerl.envs.pettingzoo import PettingZooVectorEnv
from agilerl.hpo.evolution import Evolution, live_hyperparameters
from agilerl.training.evaluation import episode_stats
from agilerl.training.results import LoopResult

__all__ = [
    "EpisodeTracker",
    "MultiAgentTrainResult",
    "evaluate_multi_agent",
    "make_replay_buffer",
    "train_multi_agent_off_policy",
    "train_multi_agent_on_policy",
]

Logger = Callable[[dict[str, Any]], None]
"""Called with each generation's history row (metrics)."""
GenerationHook = Callable[["MultiAgentTrainResult"], None]
"""Called after each generation's evolution (e.g. to write checkpoints)."""
StopCheck = Callable[[], "str | None"]
"""Returns a status (``"interrupted"``, ``"time_limit"``) when the run must stop, else ``None``."""


@dataclass
class MultiAgentTrainResult:
    """What a multi-agent population run produced.

    Attributes:
        population: The final population.
        history: One row per generation: ``generation``, ``env_steps``, and per
            member (in population order) ``index``, ``agent_steps``, ``fitness``,
            ``eval_stats`` (``eval_std``, ``eval_episodes``), ``per_agent_fitness``
            (per agent id), ``mean_score`` (mean summed training return of the
            generation's episodes), ``losses`` (generation means),
            ``hyperparameters`` (``hp_<name>``) and ``mutations``; with evolution,
            ``lineage`` (the ``hpo.csv`` rows of the new population).
        episodes: Per member index, the training episodes as
            ``(env_steps_at_end, summed_return, {agent: return})``.
        env_steps: Env steps taken by the whole population.
        status: ``"completed"``, or the status ``should_stop`` returned.
        loop_state: Plain data that resumes the loop after the latest
            generation (pass it back as ``resume=``): ``generation``,
            ``env_steps``, ``rng`` (the mutation generator) and ``credits``
            (off-policy: learning credit per slot).
        memory: The shared replay buffer (off-policy), for checkpoints.
    """

    population: list[MultiAgentAlgorithm]
    history: list[dict[str, Any]] = field(default_factory=list)
    episodes: dict[int, list[tuple[int, float, dict[str, float]]]] = field(default_factory=dict)
    env_steps: int = 0
    status: str = "completed"
    loop_state: dict[str, Any] = field(default_factory=dict)
    memory: MultiAgentReplayBuffer | None = None

    def to_loop_result(self) -> LoopResult:
        """The run as the :class:`~agilerl.training.results.LoopResult` RL loops return."""
        last = [float(a.fitness[-1]) if a.fitness else float("nan") for a in self.population]
        seen = [f for row in self.history for f in row["fitness"] if math.isfinite(f)]
        finite_last = [f for f in last if math.isfinite(f)]
        return LoopResult(
            population=self.population,
            fitnesses=last,
            total_steps=self.env_steps,
            best_fitness=max(seen) if seen else None,
            final_fitness=max(finite_last) if finite_last else None,
        )

    def recent_return(self, index: int, last_steps: int) -> float:
        """Mean summed training return of member ``index``'s episodes in its last ``last_steps``."""
        episodes = self.episodes.get(index, [])
        if not episodes:
            return float("nan")
        end = episodes[-1][0]
        recent = [r for s, r, _ in episodes if s > end - last_steps]
        return float(np.mean(recent))


class EpisodeTracker:
    """Running per-agent returns of each env copy; emits finished episodes."""

    def __init__(self, agents: Sequence[str], num_envs: int) -> None:
        self.agents = list(agents)
        self.running = {a: np.zeros(num_envs, dtype=np.float64) for a in self.agents}

    def reset(self) -> None:
        """Forget partial episodes."""
        for value in self.running.values():
            value.fill(0.0)

    def step(self, rewards: Mapping[str, np.ndarray], done: np.ndarray) -> list[dict[str, float]]:
        """Add one vector step's rewards; return per-agent returns of copies that finished."""
        for agent in self.agents:
            self.running[agent] += rewards[agent]
        finished = []
        for i in np.flatnonzero(done):
            finished.append({a: float(self.running[a][i]) for a in self.agents})
            for agent in self.agents:
                self.running[agent][i] = 0.0
        return finished


def evaluate_multi_agent_episodes(
    agent: MultiAgentAlgorithm,
    env: PettingZooVectorEnv,
    *,
    loop: int = 1,
    seed: int | None = None,
    greedy: bool = True,
) -> list[dict[str, float]]:
    """The first ``loop`` episodes of every env copy: each episode's return per agent id."""
    obs, _ = env.reset(seed=seed)
    tracker = EpisodeTracker(env.agents, env.num_envs)
    counts = np.zeros(env.num_envs, dtype=np.int64)
    episodes: list[dict[str, float]] = []
    with torch.no_grad():
        while (counts < loop).any():
            obs, rewards, _, _, info = env.step(agent.act(obs, greedy=greedy))
            done = info["episode_done"]
            keep = done & (counts < loop)
            for i, ep in zip(np.flatnonzero(done), tracker.step(rewards, done), strict=True):
                if keep[i]:
                    episodes.append(ep)
            counts += done
    return episodes


def _episode_score(episode: Mapping[str, float], sum_scores: bool) -> float:
    total = float(sum(episode.values()))
    return total if sum_scores else total / len(episode)


def _score_episodes(
    episodes: Sequence[Mapping[str, float]], agents: Sequence[str], sum_scores: bool
) -> tuple[float, dict[str, float]]:
    """``(fitness, {agent_id: mean return})`` of evaluation episodes."""
    per_agent = {a: float(np.mean([ep[a] for ep in episodes])) for a in agents}
    return _episode_score(per_agent, sum_scores), per_agent


def evaluate_multi_agent(
    agent: MultiAgentAlgorithm,
    env: PettingZooVectorEnv,
    *,
    loop: int = 1,
    sum_scores: bool = True,
    seed: int | None = None,
    greedy: bool = True,
    record: bool = True,
) -> tuple[float, dict[str, float]]:
    """Run ``loop`` episodes per env copy and score the agent.

    Args:
        agent: The agent (its :meth:`act` is called greedily by default).
        env: Evaluation vector env.
        loop: Episodes per copy.
        sum_scores: Fitness is the return summed over agents (``True``) or
            the mean of the per-agent returns (``False``).
        seed: Seed of ``env.reset``.
        greedy: Deterministic actions.
        record: Append the fitness to ``agent.fitness``.

    Returns:
        ``(fitness, {agent_id: mean return})``.
    """
    episodes = evaluate_multi_agent_episodes(agent, env, loop=loop, seed=seed, greedy=greedy)
    fitness, per_agent = _score_episodes(episodes, env.agents, sum_scores)
    if record:
        agent.fitness.append(fitness)
    return fitness, per_agent


def _envs_for(population: Sequence[Any], env: Any) -> list[PettingZooVectorEnv]:
    if isinstance(env, Sequence):
        if len(env) != len(population):
            raise ValueError(f"got {len(env)} envs for a population of {len(population)}")
        return list(env)
    return [env] * len(population)


def _obs_tensor(obs: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {a: torch.as_tensor(v, dtype=torch.float32) for a, v in obs.items()}


def _final_obs(obs: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Next observations with finished copies' rows replaced by their final observations."""
    out = {a: v.copy() for a, v in obs.items()}
    for i, final in enumerate(info["final_obs"]):
        if final is not None:
            for agent, value in final.items():
                out[agent][i] = value
    return out


class _Schedule:
    """Generation bookkeeping both loops share (evaluation, history, evolution)."""

    def __init__(
        self,
        population: list[MultiAgentAlgorithm],
        *,
        eval_env: PettingZooVectorEnv | None,
        eval_loop: int,
        sum_scores: bool,
        evolution: Evolution | None,
        seed: int,
        log: Logger | None,
        on_generation: GenerationHook | None = None,
        resume: Mapping[str, Any] | None = None,
        should_stop: StopCheck | None = None,
    ) -> None:
        self.result = MultiAgentTrainResult(population=population)
        self.eval_env = eval_env
        self.eval_loop = eval_loop
        self.sum_scores = sum_scores
        self.evolution = evolution
        self.seed = seed
        self.log = log
        self.on_generation = on_generation
        self.generation = 0
        self.gen_scores: dict[int, list[float]] = {}
        self.gen_losses: dict[int, dict[str, list[float]]] = {}
        self.credits = [0.0] * len(population)
        self.resumed = resume is not None
        if resume is not None:
            self.generation = int(resume["generation"])
            self.result.env_steps = int(resume["env_steps"])
            self.credits = [float(c) for c in resume.get("credits") or self.credits]
        self.should_stop = should_stop
        self.generation_start = self.result.env_steps
        self.stopping: str | None = None

    def begin_generation(self) -> None:
        """Note where the generation starts (a dropped partial generation goes back here)."""
        self.generation_start = self.result.env_steps

    def stop_now(self) -> bool:
        """Whether to stop mid-generation (see the module docstring); records the status."""
        if self.stopping is None and self.should_stop is not None:
            self.stopping = self.should_stop()
        if self.stopping is None or (self.generation == 0 and not self.resumed):
            return False
        self.result.status = self.stopping
        self.result.env_steps = self.generation_start
        return True

    def stop_after_generation(self) -> bool:
        """Whether to stop now that a generation is complete (and checkpointed)."""
        if self.stopping is None and self.should_stop is not None:
            self.stopping = self.should_stop()
        if self.stopping is not None:
            self.result.status = self.stopping
        return self.stopping is not None

    def episode(self, agent: MultiAgentAlgorithm, per_agent: dict[str, float]) -> None:
        total = float(sum(per_agent.values()))
        agent.scores.append(total)
        self.result.episodes.setdefault(agent.index, []).append((agent.steps, total, per_agent))
        self.gen_scores.setdefault(agent.index, []).append(total)

    def learned(self, agent: MultiAgentAlgorithm, losses: Mapping[str, float]) -> None:
        """Note one update's losses (their generation means go to the metrics)."""
        table = self.gen_losses.setdefault(agent.index, {})
        for name, value in losses.items():
            if isinstance(value, int | float) and math.isfinite(value):
                table.setdefault(name, []).append(float(value))

    def end_generation(self) -> None:
        population = self.result.population
        fitness, per_agent, eval_stats = [], [], []
        if self.eval_env is not None:
            for agent in population:
                episodes = evaluate_multi_agent_episodes(
                    agent,
                    self.eval_env,
                    loop=self.eval_loop,
                    seed=self.seed + 10_000 + self.generation,
                )
                score, means = _score_episodes(episodes, self.eval_env.agents, self.sum_scores)
                agent.fitness.append(score)
                fitness.append(score)
                per_agent.append(means)
                eval_stats.append(
                    episode_stats([_episode_score(ep, self.sum_scores) for ep in episodes])
                )
        row: dict[str, Any] = {
            "generation": self.generation,
            "env_steps": self.result.env_steps,
            "index": [a.index for a in population],
            "agent_steps": [int(a.steps) for a in population],
            "fitness": fitness,
            "eval_stats": eval_stats,
            "per_agent_fitness": per_agent,
            "mean_score": [
                float(np.mean(self.gen_scores[a.index])) if self.gen_scores.get(a.index) else None
                for a in population
            ],
            "losses": [
                {k: float(np.mean(v)) for k, v in self.gen_losses.get(a.index, {}).items()}
                for a in population
            ],
            "hyperparameters": [live_hyperparameters(a) for a in population],
            "mutations": [],
        }
        for values in (row["fitness"], row["mean_score"]):
            if any(v is not None and not math.isfinite(v) for v in values):
                raise FloatingPointError(f"non-finite score in generation {self.generation}: {row}")
        if self.evolution is not None and fitness:
            new_population, row["lineage"] = self.evolution.evolve(
                population, generation=self.generation, step=self.result.env_steps
            )
            row["mutations"] = [r["mutation"] for r in row["lineage"]]
            self.result.population = new_population
        self.result.history.append(row)
        self.result.loop_state = {
            "generation": self.generation + 1,
            "env_steps": self.result.env_steps,
            "credits": list(self.credits),
        }
        if self.log is not None:
            self.log(row)
        if self.on_generation is not None:
            self.on_generation(self.result)
        self.generation += 1
        self.gen_scores = {}
        self.gen_losses = {}


def _rollout_steps(agent: IPPO, num_envs: int) -> int:
    return max(1, agent.spec.learn_step // num_envs)


def _collect_ippo(
    agent: IPPO,
    env: PettingZooVectorEnv,
    obs: dict[str, np.ndarray],
    tracker: EpisodeTracker,
    schedule: _Schedule,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """One rollout of ``learn_step // num_envs`` vector steps for :meth:`IPPO.learn`."""
    keys = ("obs", "critic_obs", "action", "log_prob", "value", "reward", "done", "active")
    buf: dict[str, dict[str, list[Any]]] = {k: {a: [] for a in env.agents} for k in keys}
    gamma = agent.spec.gamma
    for _ in range(_rollout_steps(agent, env.num_envs)):
        step = agent.policy_step(obs)
        next_obs, rewards, terminated, truncated, info = env.step(agent.env_actions(step["action"]))
        done = info["episode_done"]
        reward = dict(rewards)
        cut = {a: truncated[a] & ~terminated[a] for a in env.agents}
        bootstrap = done & np.any(list(cut.values()), axis=0)
        if bootstrap.any():
            final_values = agent.values(_final_obs(next_obs, info))
            for a in env.agents:
                mask = bootstrap & cut[a] & info["active"][a]
                reward[a] = rewards[a] + gamma * final_values[a].cpu().numpy() * mask
        for a in env.agents:
            buf["obs"][a].append(step["obs"][a])
            buf["critic_obs"][a].append(step["critic_obs"][a])
            buf["action"][a].append(step["action"][a])
            buf["log_prob"][a].append(step["log_prob"][a])
            buf["value"][a].append(step["value"][a])
            buf["reward"][a].append(reward[a])
            buf["done"][a].append(done | terminated[a] | truncated[a])
            buf["active"][a].append(info["active"][a])
        agent.steps += env.num_envs
        schedule.result.env_steps += env.num_envs
        for per_agent in tracker.step(rewards, done):
            schedule.episode(agent, per_agent)
        obs = next_obs
    rollout: dict[str, Any] = {}
    for k, d in buf.items():
        if k in ("reward", "done", "active"):  # numpy rows: one conversion per rollout
            dtype = torch.bool if k == "active" else torch.float32
            rollout[k] = {
                a: torch.as_tensor(np.stack(v)).to(agent.device, dtype) for a, v in d.items()
            }
        else:
            rollout[k] = {a: torch.stack(v) for a, v in d.items()}
    rollout["last_value"] = agent.values(obs)
    return rollout, obs


def train_multi_agent_on_policy(
    population: list[IPPO],
    env: PettingZooVectorEnv | Sequence[PettingZooVectorEnv],
    *,
    max_steps: int,
    evo_steps: int,
    eval_env: PettingZooVectorEnv | None = None,
    eval_loop: int = 1,
    sum_scores: bool = True,
    evolution: Evolution | None = None,
    seed: int = 0,
    log: Logger | None = None,
    on_generation: GenerationHook | None = None,
    resume: Mapping[str, Any] | None = None,
    should_stop: StopCheck | None = None,
) -> MultiAgentTrainResult:
    """Train a population of IPPO agents (one rollout -> one :meth:`IPPO.learn`).

    Args:
        population: The agents.
        env: One vector env per member, or one shared by all (each member's
            turn starts from a reset, as every generation does).
        max_steps: Env steps per member; a rollout that would pass it is not started.
        evo_steps: Env steps per member between evaluations (and evolution); a
            generation ends after the first rollout that reaches it.
        eval_env: Env for evaluation; ``None`` skips evaluation and evolution.
        eval_loop: Evaluation episodes per eval-env copy.
        sum_scores: Fitness summed over agents, else averaged.
        evolution: Tournament selection and mutation between generations
            (:class:`~agilerl.hpo.evolution.Evolution`; ``None``: no evolution).
        seed: Seeds torch and env resets.
        log: Called with each generation's history row.
        on_generation: Called with the result after each generation's evolution.
        resume: A checkpointed :attr:`MultiAgentTrainResult.loop_state` to continue from
            (the agents and global RNG states restored by the caller; torch is not reseeded).
        should_stop: Asked before every rollout whether to stop.

    Returns:
        The run's :class:`MultiAgentTrainResult`.
    """
    if resume is None:
        torch.manual_seed(seed)
    envs = _envs_for(population, env)
    schedule = _Schedule(
        population,
        eval_env=eval_env,
        eval_loop=eval_loop,
        sum_scores=sum_scores,
        evolution=evolution,
        seed=seed,
        log=log,
        on_generation=on_generation,
        resume=resume,
        should_stop=should_stop,
    )

    def fits(slot: int, agent: IPPO) -> bool:
        # Rollouts are whole: one that would pass max_steps is not started.
        rollout = _rollout_steps(agent, envs[slot].num_envs) * envs[slot].num_envs
        return agent.steps + rollout <= max_steps

    while any(fits(slot, a) for slot, a in enumerate(schedule.result.population)):
        schedule.begin_generation()
        for slot, agent in enumerate(schedule.result.population):
            venv = envs[slot]
            obs, _ = venv.reset(seed=seed + 1000 * slot + schedule.generation)
            tracker = EpisodeTracker(venv.agents, venv.num_envs)
            target = min(agent.steps + evo_steps, max_steps)
            while agent.steps < target and fits(slot, agent):
                if schedule.stop_now():
                    return schedule.result
                rollout, obs = _collect_ippo(agent, venv, obs, tracker, schedule)
                schedule.learned(agent, agent.learn(rollout))
        schedule.end_generation()
        if schedule.stop_after_generation():
            break
    return schedule.result


def make_replay_buffer(
    agent: MultiAgentAlgorithm, max_size: int, seed: int | None = None
) -> MultiAgentReplayBuffer:
    """A replay buffer shaped for ``agent``'s spaces (Discrete actions stored as indices)."""
    action_shapes, dtypes = {}, {}
    for a, space in agent.action_spaces.items():
        discrete = isinstance(space, spaces.Discrete)
        action_shapes[a] = () if discrete else space.shape
        dtypes[a] = torch.int64 if discrete else torch.float32
    return MultiAgentReplayBuffer(
        max_size,
        {a: s.shape for a, s in agent.observation_spaces.items()},
        action_shapes,
        dtypes,
        device=agent.device,
        seed=seed,
    )


def train_multi_agent_off_policy(
    population: list[MultiAgentAlgorithm],
    env: PettingZooVectorEnv | Sequence[PettingZooVectorEnv],
    *,
    max_steps: int,
    evo_steps: int,
    memory_size: int = 100_000,
    learning_delay: int = 0,
    eval_env: PettingZooVectorEnv | None = None,
    eval_loop: int = 1,
    sum_scores: bool = True,
    evolution: Evolution | None = None,
    seed: int = 0,
    log: Logger | None = None,
    on_generation: GenerationHook | None = None,
    resume: Mapping[str, Any] | None = None,
    should_stop: StopCheck | None = None,
) -> MultiAgentTrainResult:
    """Train a population of MADDPG/MATD3 agents from one shared replay buffer.

    One ``learn(batch)`` every ``spec.learn_step`` env steps once the buffer
    holds ``max(learning_delay, batch_size)`` transitions.

    Args:
        population: The agents.
        env: One vector env per member, or one shared by all.
        max_steps: Env steps per member.
        evo_steps: Env steps per member between evaluations.
        memory_size: Replay capacity (joint transitions).
        learning_delay: Env steps collected before learning starts.
        eval_env: Env for evaluation; ``None`` skips evaluation and evolution.
        eval_loop: Evaluation episodes per eval-env copy.
        sum_scores: Fitness summed over agents, else averaged.
        evolution: Tournament selection and mutation between generations
            (:class:`~agilerl.hpo.evolution.Evolution`; ``None``: no evolution).
        seed: Seeds torch, env resets and the buffer.
        log: Called with each generation's history row.
        on_generation: Called with the result after each generation's evolution.
        resume: A checkpointed :attr:`MultiAgentTrainResult.loop_state` to continue from,
            with the buffer's ``state_dict()`` under ``"memory"`` when it was stored
            (else the buffer starts empty and refills before learning resumes).
        should_stop: Asked before every vector step whether to stop.
    """
    if resume is None:
        torch.manual_seed(seed)
    envs = _envs_for(population, env)
    schedule = _Schedule(
        population,
        eval_env=eval_env,
        eval_loop=eval_loop,
        sum_scores=sum_scores,
        evolution=evolution,
        seed=seed,
        log=log,
        on_generation=on_generation,
        resume=resume,
        should_stop=should_stop,
    )
    memory = make_replay_buffer(population[0], memory_size, seed)
    if resume is not None and resume.get("memory") is not None:
        memory.load_state_dict(resume["memory"])
    schedule.result.memory = memory
    credits = schedule.credits
    while min(a.steps for a in schedule.result.population) < max_steps:
        schedule.begin_generation()
        for slot, agent in enumerate(schedule.result.population):
            venv = envs[slot]
            obs, _ = venv.reset(seed=seed + 1000 * slot + schedule.generation)
            agent.reset_noise()
            tracker = EpisodeTracker(venv.agents, venv.num_envs)
            target = min(agent.steps + evo_steps, max_steps)
            while agent.steps < target:
                if schedule.stop_now():
                    return schedule.result
                action = agent.act(obs)
                next_obs, rewards, terminated, _, info = venv.step(action)
                done = info["episode_done"]
                memory.add(
                    obs=obs,
                    action=action,
                    reward=rewards,
                    next_obs=_final_obs(next_obs, info),
                    done=terminated,
                )
                agent.steps += venv.num_envs
                schedule.result.env_steps += venv.num_envs
                if done.any():
                    agent.reset_noise(done)
                for per_agent in tracker.step(rewards, done):
                    schedule.episode(agent, per_agent)
                obs = next_obs
                if len(memory) >= max(learning_delay, agent.spec.batch_size):
                    credits[slot] += venv.num_envs / agent.spec.learn_step
                    while credits[slot] >= 1.0:
                        schedule.learned(agent, agent.learn(memory.sample(agent.spec.batch_size)))
                        credits[slot] -= 1.0
        schedule.end_generation()
        if schedule.stop_after_generation():
            break
    return schedule.result
