"""The off-policy loop (DQN, Rainbow DQN, DDPG, TD3): act, store, learn every learn_step."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agilerl.arena.models.training import TrainingSpec
from agilerl.training.engine import EnvMembers, bind_training, run_population
from agilerl.training.evaluation import PopulationEnvs
from agilerl.training.off_policy_memory import Memory, annealed_beta
from agilerl.training.population_loop import PopulationLoop
from agilerl.training.results import LoopResult, mean_metrics
from agilerl.training.run_context import RunContext
from agilerl.training.transitions import EpisodeTracker, real_next_obs

EPSILON_DEFAULTS = {"eps_start": 1.0, "eps_end": 0.05, "eps_decay": 0.999}
"""The epsilon-greedy schedule of a training spec that leaves ``eps_*`` unset."""


def epsilon_schedule(training: TrainingSpec) -> tuple[float, float, float]:
    """``(eps_start, eps_end, eps_decay)`` of ``training``, defaults where unset."""
    start, end, decay = (
        default if getattr(training, name) is None else getattr(training, name)
        for name, default in EPSILON_DEFAULTS.items()
    )
    return start, end, decay


def train_off_policy(
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
    eval_env: Any = None,
    run: RunContext | None = None,
    save_memory: bool = False,
) -> LoopResult:
    """Train a population of off-policy agents.

    Every vector step each agent acts (epsilon-greedy for DQN, noisy nets for
    Rainbow, exploration noise for DDPG/TD3), the transitions go into the
    replay memory (shared by the population unless ``memory`` is a list, one
    per agent), and the agent learns once per ``learn_step`` env steps once
    the memory holds a batch and ``training.learning_delay`` steps have passed.
    PER's ``beta`` is annealed to 1 over ``training.max_steps``. Evaluation,
    stopping, checkpoints and evolution happen every ``training.evo_steps`` as
    in the on-policy loop.

    Args:
        population: Agents with ``get_action``, ``learn``, ``test``.
        env: Vector env of agent 0 (SAME_STEP autoreset).
        env_name: Label for logs.
        algo: Label for logs.
        training: The validated training spec (budget, evaluation, target, checkpoints,
            learning delay and the epsilon schedule: :data:`EPSILON_DEFAULTS` where unset).
        memory: Replay buffer (``init_buffer``), or one per agent.
        n_step_memory: N-step buffer for PER + n-step (``init_n_step_buffer``), or one per agent.
        tournament: Selection operator (evolutionary HPO).
        mutation: Mutation operator (evolutionary HPO).
        env_factory: ``factory(seed=, num_envs=)`` for more envs.
        eval_env: Evaluation env; made with ``env_factory`` when omitted.
        run: Run directory, sinks, display and stop conditions.
        save_memory: Store the replay memory in checkpoints.

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
    shared = not isinstance(memory, list)
    memories = (
        [Memory(memory, n_step_memory)]
        if shared
        else [
            Memory(m, n) for m, n in zip(memory, n_step_memory or [None] * len(memory), strict=True)
        ]
    )
    state = run.resume_state
    if state is not None and state.memory is not None:
        for mem, mem_state in zip(memories, state.memory, strict=True):
            mem.load_state_dict(mem_state)
    run.memory_provider = lambda: [m.state_dict() for m in memories]
    run.memory_every_checkpoint = save_memory
    eps_start, eps_end, eps_decay = epsilon_schedule(training)
    members = OffPolicyMembers(
        envs, memories, run, max_steps=training.max_steps,
        learning_delay=training.learning_delay or 0, eps_start=eps_start, eps_end=eps_end,
        eps_decay=eps_decay, exact_stops=save_memory,
    )  # fmt: skip
    return run_population(
        population, members, run, training, tournament=tournament, mutation=mutation,
        label=f"{algo} {env_name}".strip(),
    )  # fmt: skip


class OffPolicyMembers(EnvMembers):
    """The off-policy paradigm for :func:`~agilerl.training.engine.run_population`.

    Every generation starts each member's envs from a seeded reset (an
    unfinished episode ends there; its transitions stay in the memory), so
    a run resumed from a generation's checkpoint repeats it exactly. With
    the memory in every checkpoint (``exact_stops``), a stop drops the
    partial generation and the resumed run equals an uninterrupted one;
    otherwise the stop keeps it and its checkpoint carries the memory
    (nothing collected is lost, but the resumed run is not bit-exact).
    Epsilons are the loop's (checkpointed with it); learning credits are
    this trainer's state.
    """

    def __init__(
        self,
        envs: PopulationEnvs,
        memories: list[Memory],
        run: RunContext,
        *,
        max_steps: int,
        learning_delay: int,
        eps_start: float,
        eps_end: float,
        eps_decay: float,
        exact_stops: bool = False,
    ) -> None:
        super().__init__(envs)
        self.memories, self.max_steps, self.seed = memories, max_steps, run.seed
        self.learning_delay = learning_delay
        self.eps_start, self.eps_end, self.eps_decay = eps_start, eps_end, eps_decay
        self.partial_generation = "drop" if exact_stops else "keep"
        self.observations: list[Any] = [None] * len(envs.train)
        self.trackers = [EpisodeTracker(e.num_envs) for e in envs.train]
        self.learn_credit = [0.0] * len(envs.train)

    def state_dict(self) -> dict[str, Any]:
        """The learning credits (fractions of an update carried to the next step)."""
        return {"learn_credit": list(self.learn_credit)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        credit = state.get("learn_credit")
        if credit is not None and len(credit) == len(self.learn_credit):
            self.learn_credit = [float(c) for c in credit]

    def _start_generation(self, slot: int, agent: Any, generation: int) -> None:
        """Seeded reset of the member's envs, episode counters and exploration noise."""
        e = self.envs.train[slot]
        self.observations[slot] = e.reset(seed=self.seed + 7919 * generation + slot)[0]
        self.trackers[slot] = EpisodeTracker(e.num_envs)
        if hasattr(agent, "reset_noise"):
            agent.reset_noise()

    def train(self, slot: int, agent: Any, until: int, loop: PopulationLoop) -> dict[str, Any]:
        if loop.epsilons is None:
            loop.epsilons = [self.eps_start] * len(loop.population)
        epsilons = loop.epsilons
        mem = self.memories[0 if len(self.memories) == 1 else slot]
        self._start_generation(slot, agent, loop.generation)
        e = self.envs.train[slot]
        num_envs = e.num_envs
        stats: list[dict[str, float]] = []
        beta0 = getattr(agent, "beta", None)
        while agent.steps < until and not loop.interrupted():
            obs = self.observations[slot]
            action = agent.get_action(obs, epsilon=epsilons[slot])
            next_obs, reward, terminated, truncated, info = e.step(action)
            ended = terminated | truncated
            mem.add(
                obs, action, reward, real_next_obs(next_obs, info, ended), terminated, truncated
            )
            self.trackers[slot].step(reward, ended)
            if ended.any() and hasattr(agent, "reset_noise"):
                agent.reset_noise(np.flatnonzero(ended))
            self.observations[slot] = next_obs
            agent.steps += num_envs
            loop.advance(num_envs)
            epsilons[slot] = max(self.eps_end, epsilons[slot] * self.eps_decay)
            if agent.steps < self.learning_delay or len(mem) < agent.batch_size:
                continue
            self.learn_credit[slot] += num_envs / agent.learn_step
            while self.learn_credit[slot] >= 1.0:
                self.learn_credit[slot] -= 1.0
                beta = annealed_beta(beta0, agent.steps, self.max_steps)
                stats.append(mem.learn(agent, agent.batch_size, beta))
        finished = self.trackers[slot].pop()
        agent.scores.extend(finished)
        return {
            **mean_metrics(stats),
            "train_return": float(np.mean(finished)) if finished else math.nan,
            "epsilon": epsilons[slot] if getattr(agent, "uses_epsilon", False) else math.nan,
            "memory_size": len(mem),
        }
