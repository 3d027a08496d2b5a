"""The envs a population trains and is evaluated in."""

from __future__ import annotations

import math
from typing import Any

EVAL_COPIES_MAX = 16


def eval_layout(eval_loop: int) -> tuple[int, int]:
    """``(env copies, episodes per copy)`` covering at least ``eval_loop`` episodes."""
    copies = max(1, min(eval_loop, EVAL_COPIES_MAX))
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
    ) -> None:
        if env_factory is None and (size > 1 or eval_env is None):
            raise ValueError(
                "a population of more than one agent, or no eval_env, needs env_factory"
            )
        copies, self.episodes = eval_layout(eval_loop)
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
        same starts.
        """
        seed = self.seed + 31 * generation
        return [
            agent.test(
                self.eval_env, max_steps=self.eval_steps, loop=self.episodes, greedy=True, seed=seed
            )
            for agent in population
        ]

    def close(self) -> None:
        """Close the envs this object made."""
        for env in self._owned:
            env.close()
