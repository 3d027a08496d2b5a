"""Many same-shaped MLP chains trained as one: stacked weights, batched matmuls, one Adam.

A population whose members share an architecture keeps each member's
parameters as one row of a ``[N, P]`` tensor, laid out exactly like the
member's :class:`~agilerl.networks.optim.FlatAdam` buffer. A forward pass
of all members is one ``baddbmm`` per layer on ``[N, B, width]`` inputs, one
``backward`` gives every member's gradient (each row only reaches its own
member's loss), and :class:`StackedAdam` steps every row with that member's
own learning rate, betas, epsilon and step count (Adam is elementwise).

:func:`chain_layout` reads where each layer's weight and bias sit in a
member's flat buffer; :class:`LayoutStack` runs a layout over a stacked
parameter tensor through the one stacked-chain implementation,
:class:`~agilerl.networks.fastgrad.StackedChain`. :class:`StackedTape` runs one
such chain inside a loss; :class:`StackedGradTape` runs several that feed
each other (a critic's encoder, then its head on the latent and an actor's
action) and passes the gradients between them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from agilerl.networks.fastgrad import LayerViews, MLPChain, StackedChain, TapeFunction
from agilerl.networks.optim import FUSED_ADAM, FlatAdam, fused_adam_step

__all__ = [
    "LayerSlot",
    "LayerViews",
    "LayoutStack",
    "StackedAdam",
    "StackedGradTape",
    "StackedTape",
    "chain_layout",
    "flat_of",
    "offset_in",
]


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


def offset_in(tensor: torch.Tensor, flat: torch.Tensor) -> int:
    """Where ``tensor`` (a contiguous view of ``flat``) starts in ``flat``.

    Raises:
        ValueError: If ``tensor`` does not lie inside ``flat``.
    """
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
                norm_slot = (
                    offset_in(norm.weight, flat),
                    offset_in(norm.bias, flat),
                    float(norm.eps),
                )
            slots.append(
                LayerSlot(
                    (offset_in(w, flat), int(w.shape[0]), int(w.shape[1])),
                    (offset_in(b, flat), int(b.shape[0])),
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


class LayoutStack(StackedChain):
    """A :func:`chain_layout` over stacked parameter rows ``[N, P]``.

    :meth:`views` cuts each layer's :class:`~agilerl.networks.fastgrad.LayerViews`
    out of a ``[N, P]`` tensor (parameters, a target network's rows, or a
    gradient buffer) or numpy array; the maths is the shared
    :class:`~agilerl.networks.fastgrad.StackedChain`'s.

    Args:
        layout: The layers' slots (the same for every member).
    """

    def __init__(self, layout: Sequence[LayerSlot]) -> None:
        self.layout = tuple(layout)
        super().__init__(
            [slot.act for slot in self.layout],
            [None if slot.norm is None else slot.norm[2] for slot in self.layout],
        )

    def views(self, params: Any) -> list[LayerViews]:
        """Per-layer views of ``params`` (a ``[N, P]`` tensor or numpy array)."""
        n = params.shape[0]
        out_views = []
        for (wo, out, inp), (bo, _), _act, norm in self.layout:
            weight = params[:, wo : wo + out * inp].reshape(n, out, inp)
            bias = params[:, bo : bo + out]
            norm_w = norm_b = None
            if norm is not None:
                norm_w = params[:, norm[0] : norm[0] + out]
                norm_b = params[:, norm[1] : norm[1] + out]
            weight_t = weight.transpose(0, 2, 1) if isinstance(weight, np.ndarray) else weight.mT
            bias_row = bias[:, None, :]
            out_views.append(LayerViews(weight, bias, norm_w, norm_b, weight_t, bias_row))
        return out_views


class StackedTape:
    """Runs a :class:`LayoutStack` inside a loss; :meth:`backward` fills gradient views.

    Calls made with autograd enabled are recorded (their output is a fresh
    leaf); calls under ``torch.no_grad()`` (targets) are plain forwards.

    Args:
        chain: The stacked chain.
    """

    def __init__(self, chain: LayoutStack) -> None:
        self.chain = chain
        self._records: list[tuple[Sequence[LayerViews], list[tuple], torch.Tensor]] = []

    def __call__(self, views: Sequence[LayerViews], x: torch.Tensor) -> torch.Tensor:
        """The chain's output on ``x`` with the parameters ``views``."""
        if not torch.is_grad_enabled():
            return self.chain.forward(views, x)
        saved: list[tuple] = []
        with torch.no_grad():
            out = self.chain.forward(views, x, saved)
        out.requires_grad_(True)
        self._records.append((views, saved, out))
        return out

    def backward(self, loss: torch.Tensor, grads: Sequence[LayerViews]) -> None:
        """Gradients of the scalar ``loss`` w.r.t. the recorded parameters, added to ``grads``."""
        loss.backward()
        self.propagate(grads)

    def propagate(self, grads: Sequence[LayerViews]) -> None:
        """After ``loss.backward()``: the recorded calls' parameter gradients, added to ``grads``.

        (Several tapes over one loss: call ``backward`` on one, ``propagate`` on the others.)
        """
        records, self._records = self._records, []
        with torch.no_grad():
            for views, saved, out in reversed(records):
                if out.grad is not None:
                    self.chain.backward(out.grad, views, saved, out, grads)


class StackedGradTape:
    """Runs several stacked chains inside one loss, passing gradients between them.

    Like :class:`StackedTape`, but each call names its chain and where its
    parameter gradients go (``grads``; ``None``: none wanted, e.g. a critic
    that only passes a gradient on to an actor), may read several inputs
    concatenated (a critic head's latent and action), and hands the gradient
    of every input that requires one on: into a leaf's ``.grad`` (e.g. an
    earlier call's output) or through autograd. Calls under
    ``torch.no_grad()`` are plain forwards. :meth:`apply` runs a
    :class:`~agilerl.networks.fastgrad.TapeFunction` (e.g. a policy sampler)
    between chains.
    """

    def __init__(self) -> None:
        self._records: list[tuple[Any, ...]] = []

    def __call__(
        self,
        chain: LayoutStack,
        views: Sequence[LayerViews],
        *inputs: torch.Tensor,
        grads: Sequence[LayerViews] | None = None,
    ) -> torch.Tensor:
        """``chain`` with the parameters ``views`` on ``torch.cat(inputs, -1)`` (``[N, B, in]``).

        Args:
            chain: The stacked chain.
            views: Its parameters' per-layer views.
            *inputs: ``[N, B, d]`` tensors, read concatenated.
            grads: Per-layer views of the buffer the parameter gradients are added to.
        """
        x = inputs[0] if len(inputs) == 1 else torch.cat([t.detach() for t in inputs], dim=-1)
        if not torch.is_grad_enabled():
            return chain.forward(views, x)
        saved: list[tuple] = []
        with torch.no_grad():
            out = chain.forward(views, x.detach(), saved)
        out.requires_grad_(True)
        self._records.append((chain, views, saved, inputs, out, grads))
        return out

    def apply(self, function: TapeFunction, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``function``'s outputs for ``inputs`` (fresh leaves, recorded for :meth:`backward`)."""
        if not torch.is_grad_enabled():
            return function.forward(*inputs)[0]
        with torch.no_grad():
            outputs, saved = function.forward(*inputs)
        for out in outputs:
            out.requires_grad_(True)
        self._records.append((function, saved, inputs, tuple(outputs)))
        return tuple(outputs)

    @staticmethod
    def _send(x: torch.Tensor, grad: torch.Tensor, keep: bool) -> None:
        """Hand ``grad`` (d loss / d ``x``) on: into a leaf's ``.grad``, or through autograd."""
        if x.grad_fn is None:
            x.grad = grad if x.grad is None else x.grad + grad
        else:
            with torch.enable_grad():
                x.backward(grad, retain_graph=keep)

    def backward(self, loss: torch.Tensor) -> None:
        """Back-propagate the scalar ``loss`` through the loss expression, then every call."""
        records, self._records = self._records, []
        # inputs: field 3 of a chain call's record, 2 of a TapeFunction's
        keep = any(x.grad_fn is not None for r in records for x in (r[3] if len(r) == 6 else r[2]))
        loss.backward(retain_graph=keep)
        with torch.no_grad():
            for record in reversed(records):
                if len(record) == 4:  # a TapeFunction
                    function, saved, inputs, outputs = record
                    out_grads = [out.grad for out in outputs]
                    if all(g is None for g in out_grads):
                        continue
                    in_grads = function.backward(saved, out_grads)
                    for x, g in zip(inputs, in_grads, strict=True):
                        if g is not None and x.requires_grad:
                            self._send(x, g, keep)
                    continue
                chain, views, saved, inputs, out, grads = record
                grad = out.grad
                wanted = [x.requires_grad for x in inputs]
                if grad is None or not (any(wanted) or grads is not None):
                    continue
                bounds, start = [], 0
                for x in inputs:
                    bounds.append((start, start + x.shape[-1]))
                    start += x.shape[-1]
                lo = next((b[0] for b, w in zip(bounds, wanted, strict=True) if w), 0)
                hi = max((b[1] for b, w in zip(bounds, wanted, strict=True) if w), default=0)
                cols = None if (lo, hi) == (0, start) else slice(lo, hi)
                grad_in = chain.backward(
                    grad,
                    views,
                    saved,
                    out,
                    grads,
                    param_grads=grads is not None,
                    input_grad=any(wanted),
                    input_cols=cols,
                )
                for x, want, (begin, end) in zip(inputs, wanted, bounds, strict=True):
                    if not want:
                        continue
                    self._send(x, grad_in[..., begin - lo : end - lo], keep)


class StackedAdam:
    """Adam over stacked rows, each with its own hyperparameters and step count.

    The maths of :class:`~agilerl.networks.optim.FlatAdam`, row by row.

    Args:
        params: ``[N, P]`` parameters.
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
        fused: bool = False,
    ) -> None:
        self.params = params
        self.exp_avg = exp_avg
        self.exp_avg_sq = exp_avg_sq
        self.steps = [int(s) for s in steps]
        self.lrs = [float(lr) for lr in lrs]
        self.betas = [(float(b1), float(b2)) for b1, b2 in betas]
        self.eps = [float(e) for e in eps]
        self.fused = bool(fused) and FUSED_ADAM
        self._step_tensors = [
            torch.zeros((), dtype=torch.float32, device=params.device) for _ in self.steps
        ]
        column = {"dtype": params.dtype, "device": params.device}
        self._one_minus_b1 = torch.tensor([[1.0 - b1] for b1, _ in self.betas], **column)
        self._one_minus_b2 = torch.tensor([[1.0 - b2] for _, b2 in self.betas], **column)
        self._beta2 = torch.tensor([[b2] for _, b2 in self.betas], **column)
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
            fused=all(opt.fused for opt in optimizers),
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
    def step(self, grad: torch.Tensor, rows: Sequence[int] | None = None) -> None:
        """One Adam update of ``rows`` (all rows by default) from ``grad`` (``[len(rows), P]``)."""
        if rows is None or len(rows) == len(self.steps):
            self._step(range(len(self.steps)), self.params, self.exp_avg, self.exp_avg_sq, grad)
            return
        index = torch.as_tensor(list(rows), device=self.params.device)
        params, m, v = self.params[index], self.exp_avg[index], self.exp_avg_sq[index]
        self._step(rows, params, m, v, grad, index)
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

        if self.fused:  # the members' own fused kernel: each row rounds as alone
            alike: dict[tuple, list[int]] = {}  # one launch per set of hyperparameters
            for row, i in enumerate(rows):
                self.steps[i] += 1
                self._step_tensors[i].fill_(self.steps[i])
                alike.setdefault((self.lrs[i], self.betas[i], self.eps[i]), []).append(row)
            for (lr, betas, eps), members in alike.items():
                fused_adam_step(
                    [params[r] for r in members],
                    [grad[r] for r in members],
                    [exp_avg[r] for r in members],
                    [exp_avg_sq[r] for r in members],
                    [self._step_tensors[rows[r]] for r in members],
                    lr,
                    betas,
                    eps,
                )
            return
        corrections = []
        for i in rows:
            self.steps[i] += 1
            beta1, beta2 = self.betas[i]
            step = self.steps[i]
            corrections.append([-self.lrs[i] / (1.0 - beta1**step), math.sqrt(1.0 - beta2**step)])
        scale = torch.tensor(corrections, dtype=params.dtype, device=params.device)
        # FlatAdam's operations in its order, with per-row columns for its scalars, so a
        # row rounds exactly as its member's own optimizer would
        exp_avg.lerp_(grad, column(self._one_minus_b1))
        exp_avg_sq.mul_(column(self._beta2)).addcmul_(grad.mul(column(self._one_minus_b2)), grad)
        denom = (exp_avg_sq.sqrt() / scale[:, 1:]).add_(column(self._eps))
        # addcdiv's scalar multiplier rounds unlike a tensor one: one call per row
        for row, (value, _) in enumerate(corrections):
            params[row].addcdiv_(exp_avg[row], denom[row], value=value)
