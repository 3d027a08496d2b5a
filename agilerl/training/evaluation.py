"""Evaluation of a population on a dedicated vector env."""

from __future__ import annotations

import math
from typing import Any

EVAL_COPIES_MAX = 16


def eval_layout(eval_loop: int) -> tuple[int, int]:
    """``(env copies, episodes per copy)`` covering at least ``eval_loop`` episodes."""
    copies = max(1, min(eval_loop, EVAL_COPIES_MAX))
    return copies, math.ceil(eval_loop / copies)


def evaluate(
    agent: Any, env: Any, *, eval_steps: int | None, episodes_per_env: int, seed: int
) -> float:
    """Greedy mean episode return of ``agent`` (appended to ``agent.fitness``).

    Args:
        agent: The agent; its ``test`` runs the episodes.
        env: Evaluation vector env (not the training env: its episodes stay intact).
        eval_steps: Cap on steps per evaluation; ``None`` runs whole episodes.
        episodes_per_env: Episodes each env copy runs.
        seed: Seed of the evaluation episodes (the same for every agent, so
            agents are compared on the same starts).
    """
    return agent.test(env, max_steps=eval_steps, loop=episodes_per_env, greedy=True, seed=seed)
