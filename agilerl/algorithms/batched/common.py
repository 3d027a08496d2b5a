"""Machinery the stacked groups share (the members and, for the off-policy ones, batches)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from agilerl.algorithms.core.off_policy import Batch
from agilerl.networks.stacked import LayerViews, LayoutStack

__all__ = [
    "StackedGroup",
    "checked_values",
    "numpy_views",
    "soft_update_rows",
    "stack_batch",
    "write_targets",
]


class StackedGroup:
    """The members of a stacked group, their population slots and their device.

    Args:
        members: The agents (one group key).
        slots: Their population slots.
    """

    def __init__(self, members: Sequence[Any], slots: Sequence[int]) -> None:
        self.members = list(members)
        self.slots = list(slots)
        self.device = self.members[0].device

    def __len__(self) -> int:
        return len(self.members)


def numpy_views(net: LayoutStack, params: torch.Tensor) -> list[LayerViews] | None:
    """NumPy views of ``params`` for acting on the CPU (``None`` unless CPU float32).

    Args:
        net: The stacked network whose layout cuts the views.
        params: The members' rows ``[N, P]``.

    Returns:
        The per-layer NumPy views, or ``None`` where acting goes through torch.
    """
    if params.device.type == "cpu" and params.dtype == torch.float32:
        return net.views(params.numpy())
    return None


def stack_batch(
    rows: list[int],
    batches: Sequence[Mapping[str, Any]] | Mapping[str, Any],
    gamma: torch.Tensor,
    dtype: torch.dtype,
    device: torch.device | str,
    gamma_n: torch.Tensor | None = None,
) -> Batch:
    """The members' batches stacked ``[n, B, ...]``, with the single agent's discounts.

    Args:
        rows: The group positions of the members that learn.
        batches: One batch per member, or one batch of ``len(rows) * B``
            transitions, member-major.
        gamma: Every member's discount factor as a ``[N, 1]`` column.
        dtype: The observations' dtype (the parameters').
        device: Where the tensors go.
        gamma_n: Every member's discount of a transition without ``n_steps``
            (``gamma ** n`` for an n-step batch; ``gamma`` when ``None``).

    Returns:
        The stacked batch; its actions are stacked as stored ``[n, B, ...]``.
    """
    n = len(rows)
    if isinstance(batches, Mapping):  # already one batch of n * B rows, member-major

        def stack(key: str) -> torch.Tensor:
            value = torch.as_tensor(batches[key], device=device)
            return value.reshape(n, -1, *value.shape[1:])

        first: Mapping[str, Any] = batches
    else:

        def stack(key: str) -> torch.Tensor:
            return torch.stack([torch.as_tensor(b[key], device=device) for b in batches])

        first = batches[0]

    reward = stack("reward").reshape(n, -1).float()
    done = stack("done").reshape(n, -1).float()

    def column(values: torch.Tensor) -> torch.Tensor:
        return values if n == values.shape[0] else values[rows]

    gamma = column(gamma)
    if first.get("n_steps") is None:
        discount = (1.0 - done).mul_(gamma if gamma_n is None else column(gamma_n))
    else:
        discount = torch.pow(gamma, stack("n_steps").reshape(n, -1).float()).mul_(1.0 - done)
    return Batch(
        stack("obs").to(dtype), stack("action"), reward, stack("next_obs").to(dtype), discount
    )


def checked_values(
    members: Sequence[Any], rows: Sequence[int], loss: torch.Tensor, q: torch.Tensor, name: str
) -> list[list[float]]:
    """Each member's loss and mean ``Q``, after checking that the losses are finite.

    Args:
        members: The group's members.
        rows: The group positions of the members that learn.
        loss: Their losses ``[n]``.
        q: Their ``Q`` values ``[n, B]``.
        name: The loss's name in the finiteness check.

    Returns:
        ``[losses, q_means]``, one value per row each.

    Raises:
        FloatingPointError: If a member's loss is not finite.
    """
    values = torch.stack([loss.detach(), q.detach().mean(dim=-1)]).tolist()
    for r, value in zip(rows, values[0], strict=True):
        members[r]._check_finite({name: value})
    return values


@torch.no_grad()
def soft_update_rows(
    target: torch.Tensor,
    params: torch.Tensor,
    taus: Sequence[float],
    tau_column: torch.Tensor,
    rows: Sequence[int],
    every: bool,
) -> None:
    """Each learning member's soft target update, ``target <- lerp(target, params, tau)``.

    Args:
        target: The members' target rows ``[N, P]`` (updated in place).
        params: Their online rows ``[N, P]``.
        taus: Every member's ``tau``.
        tau_column: ``min(tau, 1)`` of every member, ``[N, 1]``.
        rows: The members that learnt.
        every: Whether ``rows`` is every member.
    """
    if all(taus[r] <= 0.0 for r in rows):
        return
    if every:
        if all(taus[r] >= 1.0 for r in rows):
            target.copy_(params)
        else:
            target.lerp_(params, tau_column)
        return
    index = torch.as_tensor(list(rows), device=target.device)
    moved = target[index]
    moved.lerp_(params[index], tau_column[index])
    target.index_copy_(0, index, moved)


@torch.no_grad()
def write_targets(members: Sequence[Any], target: torch.Tensor) -> None:
    """Copy every member's row of ``target`` ``[N, P]`` into its ``_target_params``."""
    for row, member in zip(target, members, strict=True):
        offset = 0
        for p in member._target_params:
            n = p.numel()
            p.copy_(row[offset : offset + n].view_as(p))
            offset += n
