"""Multi-agent paradigms on PettingZoo vector envs, as members of the population engine.

:class:`OnPolicyMembers` (IPPO: one rollout, one :meth:`IPPO.learn`) and
:class:`OffPolicyMembers` (MADDPG/MATD3: one shared replay buffer, one
``learn(batch)`` every ``learn_step`` env steps) are the
:class:`~agilerl.training.engine.MemberTrainer` of their paradigm;
:func:`~agilerl.training.engine.run_population` owns the schedule, evaluation
records, evolution, checkpoints and the result, as for every paradigm. Env
steps count agent-env interactions summed over copies (one vector step of 8
copies is 8 steps).

Each member's turn in a generation starts from an env reset seeded by
``(seed, slot, generation)``, so a run resumed from a generation's checkpoint
continues exactly as the uninterrupted run would; the off-policy checkpoint
carries the learning credits (and, with ``store_in_checkpoint``, the buffer).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agilerl.algorithms.core.multi_agent import MultiAgentAlgorithm
from agilerl.algorithms.ippo import IPPO
from agilerl.arena.models.training import TrainingSpec
from agilerl.components.multi_agent_replay_buffer import MultiAgentReplayBuffer
from agilerl.envs.pettingzoo import PettingZooVectorEnv
from agilerl.networks import masking
from agilerl.training.engine import Members, bind_training, run_population
from agilerl.training.evaluation import episode_stats
from agilerl.training.population_loop import PopulationLoop
from agilerl.training.results import LoopResult
from agilerl.training.run_context import RunContext

__all__ = [
    "EpisodeTracker",
    "OffPolicyMembers",
    "OnPolicyMembers",
    "evaluate_multi_agent",
    "make_replay_buffer",
    "train_multi_agent_off_policy",
    "train_multi_agent_on_policy",
]


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
    max_steps: int | None = None,
) -> list[dict[str, float]]:
    """The first ``loop`` episodes of every env copy: each episode's return per agent id.

    With ``max_steps`` (vector steps) the evaluation stops there; a copy that
    finished no episode by then contributes its partial return, as single-agent
    evaluation does.
    """
    obs, _ = env.reset(seed=seed)
    tracker = EpisodeTracker(env.agents, env.num_envs)
    counts = np.zeros(env.num_envs, dtype=np.int64)
    episodes: list[dict[str, float]] = []
    step = 0
    with torch.no_grad():
        while (counts < loop).any() and (max_steps is None or step < max_steps):
            step += 1
            obs, rewards, _, _, info = env.step(agent.act(obs, greedy=greedy))
            done = info["episode_done"]
            keep = done & (counts < loop)
            for i, ep in zip(np.flatnonzero(done), tracker.step(rewards, done), strict=True):
                if keep[i]:
                    episodes.append(ep)
            counts += done
    for i in np.flatnonzero(counts == 0):  # cut short by max_steps
        episodes.append({a: float(tracker.running[a][i]) for a in env.agents})
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


def _final_obs(obs: Mapping[str, Any], info: Mapping[str, Any]) -> dict[str, Any]:
    """Next observations with finished copies' rows replaced by their final observations
    (an agent's observation may be a dict of arrays, e.g. with its action mask)."""
    out = {a: _copy(v) for a, v in obs.items()}
    for i, final in enumerate(info["final_obs"]):
        if final is not None:
            for agent, value in final.items():
                if isinstance(value, Mapping):
                    for key, part in value.items():
                        out[agent][key][i] = part
                else:
                    out[agent][i] = value
    return out


def _copy(value: Any) -> Any:
    return {k: v.copy() for k, v in value.items()} if isinstance(value, Mapping) else value.copy()


def _rollout_steps(agent: IPPO, num_envs: int) -> int:
    return max(1, agent.spec.learn_step // num_envs)


def _collect_ippo(
    agent: IPPO,
    env: PettingZooVectorEnv,
    obs: dict[str, np.ndarray],
    tracker: EpisodeTracker,
) -> tuple[dict[str, Any], dict[str, np.ndarray], list[dict[str, float]]]:
    """One rollout of ``learn_step // num_envs`` vector steps for :meth:`IPPO.learn`.

    Returns:
        ``(rollout, next observations, finished episodes' returns per agent id)``.
    """
    finished: list[dict[str, float]] = []
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
        for a, mask in step["mask"].items():
            buf.setdefault("mask", {}).setdefault(a, []).append(mask)
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
        finished.extend(tracker.step(rewards, done))
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
    return rollout, obs, finished


def make_replay_buffer(
    agent: MultiAgentAlgorithm, max_size: int, seed: int | None = None
) -> MultiAgentReplayBuffer:
    """A replay buffer shaped for ``agent``'s spaces (Discrete actions stored as indices,
    masked agents' legal actions beside their observations)."""
    action_shapes, dtypes = {}, {}
    for a, space in agent.action_spaces.items():
        discrete = isinstance(space, spaces.Discrete)
        action_shapes[a] = () if discrete else space.shape
        dtypes[a] = torch.int64 if discrete else torch.float32
    return MultiAgentReplayBuffer(
        max_size,
        {a: s.shape for a, s in agent.policy_spaces.items()},
        action_shapes,
        dtypes,
        device=agent.device,
        seed=seed,
        mask_sizes={
            a: int(agent.action_spaces[a].n)
            for a, s in agent.observation_spaces.items()
            if masking.has_action_mask(s)
        },
    )


def _split_masks(obs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per-agent observations without their masks, and the masks of masked agents."""
    parts, masks = {}, {}
    for agent, value in obs.items():
        parts[agent], mask = masking.split_observation(value)
        if mask is not None:
            masks[agent] = mask
    return parts, masks


EVAL_SEED_OFFSET = 99_991
"""The evaluation env is made with the run seed plus this."""


def _finite_mean(rows: list[Mapping[str, float]]) -> dict[str, float]:
    """Mean of each finite value over ``rows`` (losses of the generation's updates)."""
    table: dict[str, list[float]] = {}
    for row in rows:
        for name, value in row.items():
            if isinstance(value, int | float) and math.isfinite(value):
                table.setdefault(name, []).append(float(value))
    return {name: float(np.mean(values)) for name, values in table.items()}


class _Members(Members):
    """What both multi-agent paradigms share: envs, evaluation, training returns."""

    def __init__(
        self,
        population: list[MultiAgentAlgorithm],
        env: PettingZooVectorEnv | Sequence[PettingZooVectorEnv],
        *,
        max_steps: int,
        seed: int,
        eval_env: PettingZooVectorEnv | None,
        env_factory: Any,
        eval_loop: int,
        eval_steps: int | None,
        sum_scores: bool,
        eval_copies: int | None = None,
    ) -> None:
        self.envs = _envs_for(population, env)
        self.eval_steps = eval_steps
        self.max_steps = max_steps
        self.seed = seed
        self.eval_loop = eval_loop
        self.sum_scores = sum_scores
        self._owned: list[PettingZooVectorEnv] = []
        if eval_env is None and env_factory is not None:
            # eval_copies: training.eval_max_concurrent_episodes (None: the training copies)
            eval_env = env_factory(seed=seed + EVAL_SEED_OFFSET, num_envs=eval_copies)
            self._owned.append(eval_env)
        self.eval_env = eval_env

    def can_train(self, agent: MultiAgentAlgorithm) -> bool:
        return agent.steps < self.max_steps

    def evaluate(self, population: list[Any], generation: int) -> list[tuple[float, dict]]:
        """Greedy episodes on the evaluation env: fitness, its spread, per-agent returns."""
        if self.eval_env is None:  # nothing to score against (a benchmark's bare run)
            return [(math.nan, {}) for _ in population]
        out = []
        for agent in population:
            episodes = evaluate_multi_agent_episodes(
                agent,
                self.eval_env,
                loop=self.eval_loop,
                seed=self.seed + 10_000 + generation,
                max_steps=self.eval_steps,
            )
            score, means = _score_episodes(episodes, self.eval_env.agents, self.sum_scores)
            if not math.isfinite(score):
                raise FloatingPointError(f"non-finite evaluation return in generation {generation}")
            agent.fitness.append(score)
            stats = episode_stats([_episode_score(ep, self.sum_scores) for ep in episodes])
            out.append((score, {**stats, **{f"fitness_{a}": v for a, v in means.items()}}))
        return out

    def _episodes(self, agent: MultiAgentAlgorithm, finished: list[dict[str, float]]) -> float:
        """Record finished training episodes (summed returns) and return their mean."""
        totals = [float(sum(ep.values())) for ep in finished]
        if any(not math.isfinite(t) for t in totals):
            raise FloatingPointError("non-finite training return")
        agent.scores.extend(totals)
        return float(np.mean(totals)) if totals else math.nan

    def close(self) -> None:
        for env in self._owned:
            env.close()


class OnPolicyMembers(_Members):
    """IPPO members: whole rollouts of ``learn_step`` env steps, one update each."""

    def can_train(self, agent: IPPO) -> bool:
        """A rollout is whole: one that would pass ``max_steps`` is not started."""
        num_envs = self.envs[0].num_envs
        return agent.steps + _rollout_steps(agent, num_envs) * num_envs <= self.max_steps

    def train(self, slot: int, agent: IPPO, until: int, loop: PopulationLoop) -> dict[str, Any]:
        venv = self.envs[slot]
        obs, _ = venv.reset(seed=self.seed + 1000 * slot + loop.generation)
        tracker = EpisodeTracker(venv.agents, venv.num_envs)
        losses, finished = [], []
        while agent.steps < until and self.can_train(agent) and not loop.interrupted():
            before = agent.steps
            rollout, obs, episodes = _collect_ippo(agent, venv, obs, tracker)
            losses.append(agent.learn(rollout))
            finished.extend(episodes)
            loop.advance(agent.steps - before)
        return {**_finite_mean(losses), "train_return": self._episodes(agent, finished)}


class OffPolicyMembers(_Members):
    """MADDPG/MATD3 members: one shared replay buffer, learning credits per slot.

    Args:
        memory: The shared replay buffer.
        learning_delay: Transitions collected before learning starts.
        exact_stops: Every checkpoint carries the buffer (see ``save_memory``).
        **members: See :class:`_Members`.
    """

    def __init__(
        self, *args: Any, memory: Any, learning_delay: int, exact_stops: bool, **members: Any
    ) -> None:
        super().__init__(*args, **members)
        self.memory = memory
        # A dropped generation is repeated from its checkpoint: only exact with the buffer in it.
        self.partial_generation = "drop" if exact_stops else "keep"
        self.learning_delay = learning_delay
        self.credits = [0.0] * len(self.envs)

    def train(
        self, slot: int, agent: MultiAgentAlgorithm, until: int, loop: PopulationLoop
    ) -> dict[str, Any]:
        venv, memory = self.envs[slot], self.memory
        obs, _ = venv.reset(seed=self.seed + 1000 * slot + loop.generation)
        agent.reset_noise()
        tracker = EpisodeTracker(venv.agents, venv.num_envs)
        losses, finished = [], []
        while agent.steps < until and not loop.interrupted():
            action = agent.act(obs)
            next_obs, rewards, terminated, _, info = venv.step(action)
            done = info["episode_done"]
            stored, masks = _split_masks(obs)
            stored_next, next_masks = _split_masks(_final_obs(next_obs, info))
            extra = {"action_mask": masks, "next_action_mask": next_masks} if masks else {}
            memory.add(
                obs=stored,
                action=action,
                reward=rewards,
                next_obs=stored_next,
                done=terminated,
                **extra,
            )
            agent.steps += venv.num_envs
            loop.advance(venv.num_envs)
            if done.any():
                agent.reset_noise(done)
            finished.extend(tracker.step(rewards, done))
            obs = next_obs
            if len(memory) >= max(self.learning_delay, agent.spec.batch_size):
                self.credits[slot] += venv.num_envs / agent.spec.learn_step
                while self.credits[slot] >= 1.0:
                    losses.append(agent.learn(memory.sample(agent.spec.batch_size)))
                    self.credits[slot] -= 1.0
        return {
            **_finite_mean(losses),
            "train_return": self._episodes(agent, finished),
            "memory_size": len(memory),
        }

    def state_dict(self) -> dict[str, Any]:
        return {"credits": list(self.credits)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.credits = [float(c) for c in state.get("credits") or self.credits]


def train_multi_agent_on_policy(
    population: list[IPPO],
    env: PettingZooVectorEnv | Sequence[PettingZooVectorEnv],
    env_name: str = "",
    algo: str = "",
    *,
    training: TrainingSpec,
    tournament: Any = None,
    mutation: Any = None,
    env_factory: Any = None,
    eval_env: PettingZooVectorEnv | None = None,
    run: RunContext | None = None,
) -> LoopResult:
    """Train a population of IPPO agents (see the module docstring).

    A rollout that would pass ``training.max_steps`` is not started; the fitness
    is summed over agents unless ``training.sum_scores`` is false (then averaged).

    Args:
        population: The agents.
        env: One vector env per member, or one shared by all (each member's
            turn starts from a reset).
        env_name: Label for logs.
        algo: Label for logs.
        training: The validated training spec (budget, evaluation, target, checkpoints).
        tournament: Selection operator (evolutionary HPO).
        mutation: Mutation operator (evolutionary HPO).
        env_factory: Makes the evaluation env (``factory(seed=)``) unless ``eval_env``
            is given; with neither, members are not evaluated (fitness NaN).
        eval_env: Evaluation env (owned by the caller).
        run: Run directory, sinks, display, stop conditions and resume state.

    Returns:
        The run's result; it unpacks as ``population, fitnesses``.
    """
    run = bind_training(run, training)
    if run.resume_state is None:
        torch.manual_seed(run.seed)
    members = OnPolicyMembers(
        population, env, max_steps=training.max_steps, seed=run.seed, eval_env=eval_env,
        env_factory=env_factory, eval_loop=training.eval_loop, eval_steps=training.eval_steps,
        sum_scores=training.sum_scores is not False,
        eval_copies=training.eval_max_concurrent_episodes,
    )  # fmt: skip
    return run_population(
        population, members, run, training, tournament=tournament, mutation=mutation,
        label=f"{algo} {env_name}".strip(),
    )  # fmt: skip


def train_multi_agent_off_policy(
    population: list[MultiAgentAlgorithm],
    env: PettingZooVectorEnv | Sequence[PettingZooVectorEnv],
    env_name: str = "",
    algo: str = "",
    *,
    training: TrainingSpec,
    memory_size: int = 100_000,
    save_memory: bool = False,
    tournament: Any = None,
    mutation: Any = None,
    env_factory: Any = None,
    eval_env: PettingZooVectorEnv | None = None,
    run: RunContext | None = None,
) -> LoopResult:
    """Train a population of MADDPG/MATD3 agents from one shared replay buffer.

    One ``learn(batch)`` every ``spec.learn_step`` env steps once the buffer
    holds ``max(training.learning_delay, batch_size)`` transitions.

    Args:
        population: The agents.
        env: One vector env per member, or one shared by all.
        env_name: Label for logs.
        algo: Label for logs.
        training: The validated training spec (budget, evaluation, target, checkpoints,
            learning delay, ``sum_scores``).
        memory_size: Replay capacity (joint transitions; ``replay_buffer.max_size``).
        save_memory: Every checkpoint stores the replay buffer, and a stop drops
            the partial generation (a resume equals the uninterrupted run).
            Otherwise only a checkpoint made as the run stops early stores it.
        tournament: Selection operator (evolutionary HPO).
        mutation: Mutation operator (evolutionary HPO).
        env_factory: Makes the evaluation env unless ``eval_env`` is given.
        eval_env: Evaluation env (owned by the caller).
        run: Run directory, sinks, display, stop conditions and resume state.

    Returns:
        The run's result; it unpacks as ``population, fitnesses``.
    """
    run = bind_training(run, training)
    if run.resume_state is None:
        torch.manual_seed(run.seed)
    memory = make_replay_buffer(population[0], memory_size, run.seed)
    stored = run.resume_state.memory if run.resume_state is not None else None
    if stored:
        memory.load_state_dict(stored[0])
    run.memory_provider = lambda: [memory.state_dict()]
    run.memory_every_checkpoint = save_memory
    members = OffPolicyMembers(
        population, env, memory=memory, learning_delay=training.learning_delay or 0,
        max_steps=training.max_steps, exact_stops=save_memory,
        seed=run.seed, eval_env=eval_env, env_factory=env_factory, eval_loop=training.eval_loop,
        eval_steps=training.eval_steps, sum_scores=training.sum_scores is not False,
        eval_copies=training.eval_max_concurrent_episodes,
    )  # fmt: skip
    return run_population(
        population, members, run, training, tournament=tournament, mutation=mutation,
        label=f"{algo} {env_name}".strip(),
    )  # fmt: skip
