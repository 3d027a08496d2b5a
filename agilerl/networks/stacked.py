"""Many same-shaped MLP chains trained as one: stacked weights, batched matmuls, one Adam.

A population whose members share an architecture keeps each member's
parameters as one row of a ``[N, P]`` tensor, laid out exactly like the
member's :class:`~agilerl.networks.optim.FlatAdam` buffer. A forward pass
of all members is one ``baddbmm`` per layer on ``[N, B, width]`` inputs, one
``backward`` gives every member's gradient (each row only reaches its own
member's loss), and :class:`StackedAdam` steps every row with that member's
own learning rate, betas, epsilon and step count (Adam is elementwise).

:func:`chain_layout` reads where each layer's weight and bias sit in a
member's flat buffer; :class:`StackedChain` runs a layout over a stacked
parameter tensor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F

from agilerl.networks.fastgrad import MLPChain
from agilerl.networks.optim import FlatAdam

__all__ = ["LayerSlot", "StackedAdam", "StackedChain", "chain_layout", "flat_of"]


class LayerSlot(NamedTuple):
    """Where one ``Linear -> LayerNorm? -> activation`` layer lives in a flat row.

    Attributes:
        weight: ``(offset, out, in)`` of the weight.
        bias: ``(offset, out)`` of the bias.
        act: ``None``, ``"ReLU"`` or ``"Tanh"``.
        norm: ``(weight offset, bias offset, eps)`` of a LayerNorm, else ``None``.
    """

    weight: tuple[int, int, int]
    bias: tuple[int, int]
    act: str | None
    norm: tuple[int, int, float] | None


def _offset(tensor: torch.Tensor, flat: torch.Tensor) -> int:
    start = (tensor.data_ptr() - flat.data_ptr()) // flat.element_size()
    if not 0 <= start <= flat.numel() - tensor.numel() or not tensor.is_contiguous():
        raise ValueError("a chain parameter does not live in the given flat buffer")
    return int(start)


def chain_layout(chain: MLPChain, flat: torch.Tensor) -> tuple[LayerSlot, ...] | None:
    """The layout of ``chain``'s parameters inside ``flat`` (``None`` if noisy or elsewhere).

    Args:
        chain: The member's chain (e.g. encoder and head joined).
        flat: The flat buffer its parameters are views of.
    """
    slots = []
    try:
        for w, b, act, noise, norm in chain.layers:
            if noise is not None:
                return None
            norm_slot = None
            if norm is not None:
                if norm.weight is None or norm.bias is None:
                    return None
                norm_slot = (_offset(norm.weight, flat), _offset(norm.bias, flat), float(norm.eps))
            slots.append(
                LayerSlot(
                    (_offset(w, flat), int(w.shape[0]), int(w.shape[1])),
                    (_offset(b, flat), int(b.shape[0])),
                    act,
                    norm_slot,
                )
            )
    except ValueError:
        return None
    return tuple(slots)


def flat_of(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The tensors flattened and concatenated (a target network's row)."""
    return torch.cat([t.detach().reshape(-1) for t in tensors])


class StackedChain:
    """Runs a :func:`chain_layout` over stacked parameters ``[N, P]``.

    Args:
        layout: The layers' slots (the same for every member).
    """

    def __init__(self, layout: Sequence[LayerSlot]) -> None:
        self.layout = tuple(layout)

    def forward(self, params: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``[N, B, in] -> [N, B, out]``: member ``i``'s chain on ``x[i]`` with ``params[i]``."""
        n = params.shape[0]
        for (wo, out, inp), (bo, _), act, norm in self.layout:
            weight = params[:, wo : wo + out * inp].view(n, out, inp)
            bias = params[:, bo : bo + out].unsqueeze(1)
            x = torch.baddbmm(bias, x, weight.transpose(1, 2))
            if norm is not None:
                no, nbo, eps = norm
                x = F.layer_norm(x, (out,), eps=eps)
                x = torch.addcmul(params[:, nbo : nbo + out].unsqueeze(1), x, params[:, no : no + out].unsqueeze(1))
            if act == "ReLU":
                x = x.relu()
            elif act == "Tanh":
                x = x.tanh()
        return x


class StackedAdam:
    """Adam over stacked rows, each with its own hyperparameters and step count.

    The maths of :class:`~agilerl.networks.optim.FlatAdam`, row by row.

    Args:
        params: Leaf ``[N, P]`` parameters (``requires_grad``).
        exp_avg: ``[N, P]`` first moments.
        exp_avg_sq: ``[N, P]`` second moments.
        steps: Steps taken by each row's optimizer so far.
        lrs: Learning rate of each row.
        betas: ``(beta1, beta2)`` of each row.
        eps: Epsilon of each row.
    """

    def __init__(
        self,
        params: torch.Tensor,
        exp_avg: torch.Tensor,
        exp_avg_sq: torch.Tensor,
        steps: Sequence[int],
        lrs: Sequence[float],
        betas: Sequence[tuple[float, float]],
        eps: Sequence[float],
    ) -> None:
        self.params = params
        self.exp_avg = exp_avg
        self.exp_avg_sq = exp_avg_sq
        self.steps = [int(s) for s in steps]
        self.lrs = [float(lr) for lr in lrs]
        self.betas = [(float(b1), float(b2)) for b1, b2 in betas]
        self.eps = [float(e) for e in eps]
        column = {"dtype": params.dtype, "device": params.device}
        self._one_minus_b1 = torch.tensor([[1.0 - b1] for b1, _ in self.betas], **column)
        self._b2 = torch.tensor([[b2] for _, b2 in self.betas], **column)
        self._one_minus_b2 = torch.tensor([[1.0 - b2] for _, b2 in self.betas], **column)
        self._eps = torch.tensor([[e] for e in self.eps], **column)

    @classmethod
    def of(cls, optimizers: Sequence[FlatAdam], params: torch.Tensor) -> StackedAdam:
        """Stack the members' :class:`FlatAdam` states (copies) for ``params``."""
        groups = [opt.param_groups[0] for opt in optimizers]
        return cls(
            params,
            torch.stack([opt.exp_avg for opt in optimizers]),
            torch.stack([opt.exp_avg_sq for opt in optimizers]),
            [opt.step_count for opt in optimizers],
            [g["lr"] for g in groups],
            [g["betas"] for g in groups],
            [g["eps"] for g in groups],
        )

    def write_back(self, optimizers: Sequence[FlatAdam]) -> None:
        """Copy every row's parameters and moments into its member's :class:`FlatAdam`."""
        with torch.no_grad():
            for i, opt in enumerate(optimizers):
                opt.flat.copy_(self.params[i])
                opt.exp_avg.copy_(self.exp_avg[i])
                opt.exp_avg_sq.copy_(self.exp_avg_sq[i])
                opt.step_count = self.steps[i]

    @torch.no_grad()
    def step(self, rows: Sequence[int] | None = None) -> None:
        """One Adam update of ``rows`` (all rows by default) from ``params.grad``."""
        grad = self.params.grad
        if rows is None or len(rows) == len(self.steps):
            self._step(range(len(self.steps)), self.params, self.exp_avg, self.exp_avg_sq, grad)
            return
        index = torch.as_tensor(list(rows), device=self.params.device)
        params, m, v = self.params[index], self.exp_avg[index], self.exp_avg_sq[index]
        self._step(rows, params, m, v, grad[index], index)
        self.params.index_copy_(0, index, params)
        self.exp_avg.index_copy_(0, index, m)
        self.exp_avg_sq.index_copy_(0, index, v)

    def _step(
        self,
        rows: Sequence[int],
        params: torch.Tensor,
        exp_avg: torch.Tensor,
        exp_avg_sq: torch.Tensor,
        grad: torch.Tensor,
        index: torch.Tensor | None = None,
    ) -> None:
        def column(values: torch.Tensor) -> torch.Tensor:
            return values if index is None else values[index]

        step_size, bc2_sqrt = [], []
        for i in rows:
            self.steps[i] += 1
            beta1, beta2 = self.betas[i]
            step_size.append([-self.lrs[i] / (1.0 - beta1 ** self.steps[i])])
            bc2_sqrt.append([math.sqrt(1.0 - beta2 ** self.steps[i])])
        like = {"dtype": params.dtype, "device": params.device}
        exp_avg.lerp_(grad, column(self._one_minus_b1))
        exp_avg_sq.mul_(column(self._b2)).add_(grad * grad * column(self._one_minus_b2))
        denom = (exp_avg_sq.sqrt() / torch.tensor(bc2_sqrt, **like)).add_(column(self._eps))
        params.addcmul_(exp_avg / denom, torch.tensor(step_size, **like))
