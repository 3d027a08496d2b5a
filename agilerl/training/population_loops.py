"""The loops single-agent strategies name: batched when the members stack, else one by one.

The choice between the batched implementation (members that share an
architecture train as one stacked network: :mod:`agilerl.training.batched_on_policy`,
:mod:`agilerl.training.batched_off_policy`) and the sequential loop is made
here, for the strategy, from the population it is given; the sequential loops
know nothing of their batched twins.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from agilerl.networks import torch_internals
from agilerl.networks.fastgrad import fast_gradients
from agilerl.training import batched_off_policy, batched_on_policy
from agilerl.training.batched_eval import use_batched
from agilerl.training.results import LoopResult
from agilerl.training.train_off_policy import train_off_policy
from agilerl.training.train_on_policy import train_on_policy

__all__ = ["train_off_policy_population", "train_on_policy_population"]


def _accepted(loop: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments ``loop`` declares (the batched loops make their own envs)."""
    names = inspect.signature(loop).parameters
    return {k: v for k, v in kwargs.items() if k in names}


def _fast_path_reason() -> str | None:
    """Why stacked members cannot train now: they train through the fast-gradient path."""
    if fast_gradients():
        return None
    return torch_internals.unsupported_reason() or (
        "training.fast_grad is false and stacked members train through the fast-gradient path"
    )


def train_on_policy_population(
    population: list[Any],
    env: Any,
    *args: Any,
    batched_population: bool | str = False,
    **kwargs: Any,
) -> LoopResult:
    """Train an on-policy population, batched where it can be.

    Args:
        population: The agents.
        env: Vector env of agent 0.
        *args: ``env_name`` and ``algo`` labels.
        batched_population: ``True``: batch, warning with the reason when the
            population cannot be; ``"auto"``: batch quietly where possible;
            ``False``: one member after another.
        **kwargs: :func:`~agilerl.training.train_on_policy.train_on_policy`'s arguments.
    """
    if batched_population:
        reason = _fast_path_reason() or batched_on_policy.batched_on_policy_reason(
            population, env, kwargs.get("env_factory"), kwargs.get("eval_env")
        )
        if use_batched(reason, batched_population):
            loop = batched_on_policy.train_on_policy_batched
            return loop(population, env, *args, **_accepted(loop, kwargs))
    return train_on_policy(population, env, *args, **kwargs)


def train_off_policy_population(
    population: list[Any],
    env: Any,
    *args: Any,
    batched_population: bool | str = False,
    **kwargs: Any,
) -> LoopResult:
    """Train an off-policy population, batched where it can be (see the on-policy twin).

    Args:
        population: The agents.
        env: Vector env of agent 0.
        *args: ``env_name`` and ``algo`` labels.
        batched_population: As for :func:`train_on_policy_population`.
        **kwargs: :func:`~agilerl.training.train_off_policy.train_off_policy`'s arguments.
    """
    if batched_population:
        reason = _fast_path_reason() or batched_off_policy.batched_off_policy_reason(
            population,
            env,
            kwargs.get("memory"),
            kwargs.get("n_step_memory"),
            kwargs.get("env_factory"),
            kwargs.get("eval_env"),
        )
        if use_batched(reason, batched_population):
            loop = batched_off_policy.train_off_policy_batched
            return loop(population, env, *args, **_accepted(loop, kwargs))
    return train_off_policy(population, env, *args, **kwargs)
