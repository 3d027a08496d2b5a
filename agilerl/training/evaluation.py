"""The envs a population trains and is evaluated in."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

EVAL_COPIES_MAX = 16


def eval_layout(eval_loop: int, max_concurrent: int | None = None) -> tuple[int, int]:
    """``(env copies, episodes per copy)`` covering at least ``eval_loop`` episodes.

    Args:
        eval_loop: Episodes per evaluation.
        max_concurrent: Episodes in flight at once (``training.eval_max_concurrent_episodes``):
            the evaluation env's copies; ``None``: up to :data:`EVAL_COPIES_MAX`.
    """
    copies = max(1, min(eval_loop, max_concurrent or EVAL_COPIES_MAX))
    return copies, math.ceil(eval_loop / copies)


class PopulationEnvs:
    """One training vector env per population slot, and a separate evaluation env.

    Args:
        size: Population size.
        env: Training env of slot 0 (owned by the caller).
        env_factory: ``factory(seed=, num_envs=)`` making the other envs.
        eval_env: Evaluation env (owned by the caller); made with ``env_factory`` when omitted.
        seed: Run seed; slot ``i`` gets ``seed + 1000 i``.
        eval_loop: Episodes per evaluation.
        eval_steps: Cap on steps per evaluation; ``None`` runs whole episodes.
        max_concurrent: Evaluation episodes in flight at once (see :func:`eval_layout`).

    Raises:
        ValueError: If more envs are needed and there is no ``env_factory``.
    """

    def __init__(
        self,
        size: int,
        env: Any,
        env_factory: Any,
        eval_env: Any,
        *,
        seed: int,
        eval_loop: int,
        eval_steps: int | None,
        max_concurrent: int | None = None,
    ) -> None:
        if env_factory is None and (size > 1 or eval_env is None):
            raise ValueError(
                "a population of more than one agent, or no eval_env, needs env_factory"
            )
        copies, self.episodes = eval_layout(eval_loop, max_concurrent)
        self.eval_steps = eval_steps
        self.seed = seed
        self.train = [env] + [env_factory(seed=seed + 1000 * i) for i in range(1, size)]
        self._owned = self.train[1:]
        if eval_env is None:
            eval_env = env_factory(seed=seed + 99_991, num_envs=copies)
            self._owned.append(eval_env)
        self.eval_env = eval_env

    def evaluate(self, population: list[Any], generation: int) -> list[float]:
        """Greedy mean return of every agent (appended to its ``fitness``).

        Every agent plays the same seeded episodes, so agents are compared on the
        same starts. The episodes' spread and count are kept in :attr:`last_stats`.
        """
        seed = self.seed + 31 * generation
        recorder = ReturnRecorder(self.eval_env)
        fitness, self.last_stats = [], []
        for agent in population:
            fitness.append(
                agent.test(
                    recorder, max_steps=self.eval_steps, loop=self.episodes, greedy=True, seed=seed
                )
            )
            self.last_stats.append(episode_stats(recorder.returns(self.episodes)))
        return fitness

    def with_eval_stats(self, details: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each agent's details plus ``eval_std`` and ``eval_episodes`` of its last evaluation."""
        return [{**d, **s} for d, s in zip(details, self.last_stats, strict=True)]

    def close(self) -> None:
        """Close the envs this object made."""
        for env in self._owned:
            env.close()


def episode_stats(returns: list[float]) -> dict[str, float | int]:
    """``eval_std`` (sample std, 0 for one episode) and ``eval_episodes`` of evaluation returns."""
    std = float(np.std(returns, ddof=1)) if len(returns) > 1 else 0.0
    return {"eval_std": std, "eval_episodes": len(returns)}


class ReturnRecorder:
    """A vector env seen through an evaluation: records every episode's return per sub-env.

    :meth:`returns` picks the episodes an agent's ``test`` averages (the first
    ``loop`` of each sub-env, or a sub-env's partial return if it finished none),
    so the std and count belong to the same episodes as the fitness.
    """

    def __init__(self, env: Any) -> None:
        self.env = env
        self.num_envs = int(getattr(env, "num_envs", 1))
        self._running = np.zeros(self.num_envs)
        self._finished: list[list[float]] = [[] for _ in range(self.num_envs)]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def reset(self, **kwargs: Any) -> Any:
        self._running = np.zeros(self.num_envs)
        self._finished = [[] for _ in range(self.num_envs)]
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        _obs, reward, terminated, truncated, _info = out
        self._running += np.asarray(reward, dtype=np.float64)
        for i in np.flatnonzero(np.logical_or(terminated, truncated)):
            self._finished[i].append(float(self._running[i]))
            self._running[i] = 0.0
        return out

    def returns(self, loop: int) -> list[float]:
        """The returns of the episodes the last ``test(loop=loop)`` averaged."""
        kept = [r for env_returns in self._finished for r in env_returns[:loop]]
        kept += [float(self._running[i]) for i in range(self.num_envs) if not self._finished[i]]
        return kept
