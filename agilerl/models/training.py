"""Training and replay-buffer specs, plus the helpers that build buffers from them.

The buffer classes need torch, so :func:`init_buffer` and
:func:`init_n_step_buffer` import them on call; importing this module stays
as light as the specs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agilerl.arena.models.training import (
    CheckpointExportSpec,
    NStepBufferArgs,
    PerBufferArgs,
    ReplayBufferSpec,
    TrainingSpec,
)

if TYPE_CHECKING:
    import torch

    from agilerl.components.replay_buffer import BufferType, MultiStepReplayBuffer

__all__ = [
    "CheckpointExportSpec",
    "NStepBufferArgs",
    "PerBufferArgs",
    "ReplayBufferSpec",
    "TrainingSpec",
    "init_buffer",
    "init_n_step_buffer",
]


def _is_multi_agent(algo_spec: Any) -> bool:
    from agilerl.arena.models.algorithms.base import MultiAgentAlgorithmSpec

    return (
        isinstance(algo_spec, MultiAgentAlgorithmSpec)
        or getattr(algo_spec, "agent_type", None) == "multi_agent"
    )


def _algo_name(algo_spec: Any) -> str:
    return str(getattr(algo_spec, "name", None) or type(algo_spec).__name__)


def _gamma(algo_spec: Any) -> float:
    gamma = getattr(algo_spec, "gamma", None)
    if gamma is None:
        raise ValueError(
            f"an n-step buffer needs a discount factor; {_algo_name(algo_spec)} has no gamma"
        )
    return float(gamma)


def _space_kwargs(observation_space: Any, action_space: Any) -> dict[str, Any]:
    if (observation_space is None) != (action_space is None):
        raise ValueError("give both observation_space and action_space, or neither")
    return {"observation_space": observation_space, "action_space": action_space}


def init_buffer(
    spec: ReplayBufferSpec,
    algo_spec: Any,
    device: str | torch.device = "cpu",
    *,
    observation_space: Any = None,
    action_space: Any = None,
    seed: int | None = None,
) -> BufferType:
    """Initialize the replay buffer described by ``spec``.

    * multi-agent algorithm ⇒ plain ``ReplayBuffer(max_size)`` (n-step and PER
      flags are ignored);
    * else ``per_buffer`` ⇒ ``PrioritizedReplayBuffer(max_size, alpha)``; the
      algorithm must support PER (``supports_per_buffer``, Rainbow DQN). PER
      takes precedence over n-step for the main memory (the n-step memory is
      then :func:`init_n_step_buffer`);
    * else ``n_step_buffer`` ⇒ ``MultiStepReplayBuffer(max_size, n_step, gamma)``
      with ``gamma`` from ``algo_spec``;
    * else ⇒ ``ReplayBuffer(max_size)``.

    Args:
        spec: The ``replay_buffer`` section.
        algo_spec: The algorithm spec.
        device: Device of sampled batches.
        observation_space: Single-env observation space (per-agent mapping for
            multi-agent). With ``action_space`` the memory is checked and the
            storage allocated now; a multi-agent buffer is only checked (its
            per-agent field structure comes from the first ``add``).
        action_space: Single-env action space (per-agent mapping for multi-agent).
        seed: Seed of the buffer's sampling generator (``None``: fresh entropy).

    Returns:
        The buffer.

    Raises:
        ValueError: If PER is requested for an algorithm that does not support it.
        InsufficientMemoryError: If the buffer would not fit in available memory.
    """
    from agilerl.components.memory import check_memory, estimate_buffer_bytes
    from agilerl.components.replay_buffer import (
        MultiStepReplayBuffer,
        PrioritizedReplayBuffer,
        ReplayBuffer,
    )

    spaces = _space_kwargs(observation_space, action_space)
    if _is_multi_agent(algo_spec):
        if observation_space is not None:
            needed = estimate_buffer_bytes(spec.max_size, observation_space, action_space)
            check_memory(needed, what=f"ReplayBuffer(max_size={spec.max_size:,})")
        return ReplayBuffer(spec.max_size, device=device, seed=seed)
    if spec.per_buffer:
        if not getattr(algo_spec, "supports_per_buffer", False):
            raise ValueError(
                "prioritized replay (per_buffer) is only supported for Rainbow DQN, "
                f"not {_algo_name(algo_spec)}"
            )
        return PrioritizedReplayBuffer(
            spec.max_size, alpha=spec.per_buffer_args.alpha, device=device, seed=seed, **spaces
        )
    if spec.n_step_buffer:
        return MultiStepReplayBuffer(
            spec.max_size,
            n_step=spec.n_step_buffer_args.n_step,
            gamma=_gamma(algo_spec),
            device=device,
            seed=seed,
            **spaces,
        )
    return ReplayBuffer(spec.max_size, device=device, seed=seed, **spaces)


def init_n_step_buffer(
    spec: ReplayBufferSpec,
    algo_spec: Any,
    device: str | torch.device = "cpu",
    *,
    observation_space: Any = None,
    action_space: Any = None,
    seed: int | None = None,
) -> MultiStepReplayBuffer | None:
    """Initialize the n-step replay buffer for combined PER + n-step setups.

    The main memory (:func:`init_buffer`) is then prioritized and stores the
    one-step transitions returned by this buffer's ``add``; both have
    ``max_size`` rows so their indices coincide (see
    :class:`~agilerl.components.replay_buffer.MultiStepReplayBuffer`).

    Args:
        spec: The ``replay_buffer`` section.
        algo_spec: The algorithm spec (supplies ``gamma``).
        device: Device of sampled batches.
        observation_space: See :func:`init_buffer`.
        action_space: See :func:`init_buffer`.
        seed: See :func:`init_buffer`.

    Returns:
        ``MultiStepReplayBuffer(max_size, n_step, gamma)`` when both
        ``per_buffer`` and ``n_step_buffer`` are set, else ``None``. Multi-agent
        algorithms get ``None``: their main memory ignores both flags too.
    """
    from agilerl.arena.models.algorithms import MultiAgentAlgorithmSpec

    if not (spec.per_buffer and spec.n_step_buffer) or isinstance(
        algo_spec, MultiAgentAlgorithmSpec
    ):
        return None
    from agilerl.components.replay_buffer import MultiStepReplayBuffer

    return MultiStepReplayBuffer(
        spec.max_size,
        n_step=spec.n_step_buffer_args.n_step,
        gamma=_gamma(algo_spec),
        device=device,
        seed=seed,
        **_space_kwargs(observation_space, action_space),
    )
