"""The contextual-bandit loop (NeuralUCB, NeuralTS): pull, store, learn every learn_step.

A step is one pull: the agent sees the ``[K, K * d]`` contexts of a row
(:mod:`agilerl.envs.bandits`), pulls an arm, gets reward 1 for the right
class, and the pulled arm's context and reward go into the replay memory;
every ``learn_step`` pulls it takes one gradient step on a sampled batch.
The regret of a pull is ``1 - reward`` (the best arm always pays 1).

Every ``evo_steps`` pulls per agent: greedy accuracy on ``eval_steps`` (or
``episode_steps``) rows of an evaluation copy of the bandit (the fitness),
``metrics.csv`` rows with the cumulative regret and the regret per pull of
that stretch, then evolution and checkpoints as in the other loops. At the
end ``plots/regret.png`` shows every agent's cumulative regret and reward.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from agilerl.arena.models.training import TrainingSpec
from agilerl.training.engine import Members, bind_training, run_population
from agilerl.training.population_loop import PopulationLoop
from agilerl.training.results import LoopResult, mean_metrics
from agilerl.training.run_context import RunContext

REWARD_WINDOW = 50


EPISODE_STEPS = 500
"""Rows per evaluation when ``training`` sets neither ``eval_steps`` nor ``episode_steps``."""


def train_bandits(
    population: list[Any],
    env: Any,
    env_name: str = "",
    algo: str = "",
    *,
    training: TrainingSpec,
    memory: Any,
    tournament: Any = None,
    mutation: Any = None,
    env_factory: Any = None,
    eval_env: Any = None,
    run: RunContext | None = None,
    save_memory: bool = False,
) -> LoopResult:
    """Train a population of contextual-bandit agents.

    ``training.max_steps`` and ``training.evo_steps`` count pulls per agent; an
    evaluation plays ``training.eval_loop`` repeats of ``training.eval_steps`` rows
    (``training.episode_steps``, else :data:`EPISODE_STEPS`, when unset).

    Args:
        population: Agents with ``get_action(contexts, greedy=)``, ``learn``,
            ``test``, ``batch_size`` and ``learn_step``.
        env: A :class:`~agilerl.envs.bandits.BanditEnv` (agent 0 pulls in it).
        env_name: Label for logs.
        algo: Label for logs.
        training: The validated training spec (``target_score``: a greedy accuracy).
        memory: Replay buffer of pulls (shared), or one per agent.
        tournament: Selection operator (evolutionary HPO).
        mutation: Mutation operator (evolutionary HPO).
        env_factory: ``factory(seed=)`` making the other agents' bandits; by
            default copies of ``env`` with other seeds.
        eval_env: Evaluation bandit; a copy of ``env`` when omitted.
        run: Run directory, sinks, display and stop conditions.
        save_memory: Store the replay memory in checkpoints.

    Returns:
        The population and each agent's last fitness (greedy accuracy).
    """
    run = bind_training(run, training)
    make = env_factory or (lambda seed=None, num_envs=None: env.copy(seed=seed))
    envs = [env] + [make(seed=run.seed + 1000 * i) for i in range(1, len(population))]
    evaluation = eval_env if eval_env is not None else env.copy(seed=run.seed + 99_991)
    shared = not isinstance(memory, list)
    memories = [memory] if shared else list(memory)
    resumed = run.resume_state
    if resumed is not None and resumed.memory is not None:
        for mem, mem_state in zip(memories, resumed.memory, strict=True):
            mem.load_state_dict(mem_state)
    if save_memory:
        run.memory_provider = lambda: [m.state_dict() for m in memories]
    generation = resumed.generation if resumed is not None else 0
    contexts = [e.reset(seed=run.seed + 7919 * generation + i) for i, e in enumerate(envs)]
    members = BanditMembers(
        envs, contexts, memories, evaluation, run.seed,
        training.eval_steps or training.episode_steps or EPISODE_STEPS, training.eval_loop,
        plots=run.run_dir.plots_dir if run.run_dir is not None else None,
        title=f"{algo} {env_name}".strip(),
    )  # fmt: skip
    return run_population(
        population, members, run, training, tournament=tournament, mutation=mutation,
        label=f"{algo} {env_name}".strip(),
    )  # fmt: skip


class BanditMembers(Members):
    """The contextual-bandit paradigm for :func:`~agilerl.training.engine.run_population`.

    A member's steps are pulls in its own copy of the bandit (contexts carry
    over between generations, so a stop keeps the partial generation); its
    checkpointed state is every slot's cumulative regret and the regret and
    reward curves ``plots/regret.png`` draws at the end.
    """

    partial_generation = "keep"

    def __init__(
        self,
        envs: list[Any],
        contexts: list[Any],
        memories: list[Any],
        evaluation: Any,
        seed: int,
        rows: int,
        repeats: int,
        *,
        plots: Path | None,
        title: str,
    ) -> None:
        self.envs, self.contexts, self.memories = envs, contexts, memories
        self.evaluation, self.seed, self.rows, self.repeats = evaluation, seed, rows, repeats
        self.plots, self.title = plots, title
        size = len(envs)
        self.regret = [0.0] * size
        self.curves: list[list[float]] = [[] for _ in range(size)]
        self.rewards: list[list[float]] = [[] for _ in range(size)]

    def train(self, slot: int, agent: Any, until: int, loop: PopulationLoop) -> dict[str, Any]:
        mem = self.memories[0 if len(self.memories) == 1 else slot]
        stats: list[dict[str, float]] = []
        start_regret, start_steps = self.regret[slot], agent.steps
        while agent.steps < until and not loop.interrupted():
            ctx = self.contexts[slot]
            arm = agent.get_action(ctx)
            self.contexts[slot], reward = self.envs[slot].step(arm)
            chosen = ctx[arm][None]
            mem.add(
                chosen, np.array([arm]), np.array([reward]), chosen, np.array([True]),
                is_vectorised=True,
            )  # fmt: skip
            self.regret[slot] += 1.0 - reward
            self.curves[slot].append(self.regret[slot])
            self.rewards[slot].append(reward)
            agent.steps += 1
            loop.advance(1)
            if agent.steps % agent.learn_step == 0 and len(mem) >= agent.batch_size:
                stats.append(agent.learn(mem.sample(agent.batch_size)))
        pulls = agent.steps - start_steps
        return {
            **mean_metrics(stats),
            "cumulative_regret": self.regret[slot],
            "regret_per_step": (self.regret[slot] - start_regret) / pulls if pulls else math.nan,
        }

    def evaluate(self, population: list[Any], generation: int) -> list[tuple[float, dict]]:
        seed = self.seed + 31 * generation
        return [
            (agent.test(self.evaluation, max_steps=self.rows, loop=self.repeats, seed=seed), {})
            for agent in population
        ]

    def state_dict(self) -> dict[str, Any]:
        return {
            "regret": list(self.regret),
            "regret_curves": [list(c) for c in self.curves],
            "reward_curves": [list(c) for c in self.rewards],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.regret = [float(r) for r in state.get("regret", self.regret)]
        self.curves = [list(c) for c in state.get("regret_curves", self.curves)]
        self.rewards = [list(c) for c in state.get("reward_curves", self.rewards)]

    def close(self) -> None:
        if self.plots is not None:
            plot_regret(self.plots, self.curves, self.rewards, self.title)


def plot_regret(
    directory: Path, curves: list[list[float]], rewards: list[list[float]], title: str
) -> Path | None:
    """Cumulative regret and a moving-average reward per pull, one line per agent slot."""
    if not any(curves):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for slot, (curve, reward) in enumerate(zip(curves, rewards, strict=True)):
        steps = np.arange(1, len(curve) + 1)
        left.plot(steps, curve, label=f"agent {slot}")
        if len(reward) >= REWARD_WINDOW:
            window = np.ones(REWARD_WINDOW) / REWARD_WINDOW
            right.plot(steps[REWARD_WINDOW - 1 :], np.convolve(reward, window, mode="valid"))
    left.set(xlabel="pulls", ylabel="cumulative regret", title=title)
    right.set(xlabel="pulls", ylabel=f"reward ({REWARD_WINDOW}-pull mean)", ylim=(-0.05, 1.05))
    for ax in (left, right):
        ax.grid(alpha=0.3)
    if len(curves) > 1:
        left.legend()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "regret.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
