"""The loops single-agent strategies name: batched when the members stack, else one by one.

The choice between the batched implementation (members that share an
architecture train as one stacked network: :mod:`agilerl.training.batched_on_policy`,
:mod:`agilerl.training.batched_off_policy`) and the sequential loop is made
here, for the strategy, from the population it is given; the sequential loops
know nothing of their batched twins.
"""

from __future__ import annotations

from typing import Any

from agilerl.arena.models.training import TrainingSpec
from agilerl.networks import torch_internals
from agilerl.networks.fastgrad import fast_gradients
from agilerl.training import batched_off_policy, batched_on_policy
from agilerl.training.batched_eval import use_batched
from agilerl.training.results import LoopResult
from agilerl.training.run_context import RunContext
from agilerl.training.train_off_policy import train_off_policy
from agilerl.training.train_on_policy import train_on_policy

__all__ = ["batching_mode", "train_off_policy_population", "train_on_policy_population"]


def batching_mode(training: TrainingSpec) -> bool | str:
    """Whether to batch the population: ``True``, ``"auto"`` (quietly, where it can) or ``False``.

    ``training.batched_population`` unset batches populations of more than one agent
    quietly; stacked members train through the fast-gradient path, so
    ``fast_grad: false`` never batches.
    """
    if not training.fast_grad:
        return False
    if training.batched_population:
        return True
    if training.batched_population is None and training.pop_size > 1:
        return "auto"
    return False


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
    """Train an on-policy population, batched where it can be (:func:`batching_mode`).

    Args:
        population: The agents.
        env: Vector env of agent 0.
        env_name: Label for logs.
        algo: Label for logs.
        training: The validated training spec (``batched_population``: ``True``
            batches, warning with the reason when the population cannot be).
        tournament: Selection operator (evolutionary HPO).
        mutation: Mutation operator (evolutionary HPO).
        env_factory: ``factory(seed=, num_envs=)`` making more vector envs.
        eval_env: Evaluation env; made with ``env_factory`` when omitted (the
            sequential loop only: a batched population evaluates in envs of its own).
        run: Run directory, sinks, display and stop conditions.

    Returns:
        The run's result; it unpacks as ``population, fitnesses``.
    """
    mode = batching_mode(training)
    common = {"training": training, "tournament": tournament, "mutation": mutation, "run": run}
    if mode:
        reason = _fast_path_reason() or batched_on_policy.batched_on_policy_reason(
            population, env, env_factory, eval_env
        )
        if use_batched(reason, mode):
            return batched_on_policy.train_on_policy_batched(
                population, env, env_name, algo, env_factory=env_factory, **common
            )
    return train_on_policy(
        population, env, env_name, algo, env_factory=env_factory, eval_env=eval_env, **common
    )


def train_off_policy_population(
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
    """Train an off-policy population, batched where it can be (see the on-policy twin).

    Args:
        population: The agents.
        env: Vector env of agent 0.
        env_name: Label for logs.
        algo: Label for logs.
        training: The validated training spec.
        memory: Replay buffer, or one per agent.
        n_step_memory: N-step buffer, or one per agent.
        tournament: Selection operator (evolutionary HPO).
        mutation: Mutation operator (evolutionary HPO).
        env_factory: ``factory(seed=, num_envs=)`` making more vector envs.
        eval_env: Evaluation env (the sequential loop only).
        run: Run directory, sinks, display and stop conditions.
        save_memory: Store the replay memory in checkpoints.

    Returns:
        The run's result; it unpacks as ``population, fitnesses``.
    """
    mode = batching_mode(training)
    if mode:
        reason = _fast_path_reason() or batched_off_policy.batched_off_policy_reason(
            population, env, memory, n_step_memory, env_factory, eval_env
        )
        if use_batched(reason, mode):
            return batched_off_policy.train_off_policy_batched(
                population,
                env,
                env_name,
                algo,
                training=training,
                memory=memory,
                n_step_memory=n_step_memory,
                tournament=tournament,
                mutation=mutation,
                env_factory=env_factory,
                run=run,
                save_memory=save_memory,
            )
    return train_off_policy(
        population, env, env_name, algo, training=training, memory=memory,
        n_step_memory=n_step_memory, tournament=tournament, mutation=mutation,
        env_factory=env_factory, eval_env=eval_env, run=run, save_memory=save_memory,
    )  # fmt: skip
