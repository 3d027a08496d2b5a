"""Adam over parameters packed into one contiguous buffer.

For small networks ``torch.optim.Adam.step`` and ``clip_grad_norm_`` are
dominated by per-parameter Python and dispatch overhead. :class:`FlatAdam`
re-points every parameter's storage (``p.data``) and gradient (``p.grad``)
at views of two flat tensors, so zeroing, clipping and the Adam update are a
handful of whole-buffer ops. The maths matches ``torch.optim.Adam``
(``amsgrad=False``, no weight decay).

The parameters stay ordinary leaf ``nn.Parameter`` objects, so module
``state_dict``/``load_state_dict`` keep working (``load_state_dict`` copies
in place). If a parameter's storage or gradient is replaced behind the
optimizer's back (``module.to(...)``, ``zero_grad(set_to_none=True)``), the
next :meth:`FlatAdam.step` re-links it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import nn

from agilerl.networks import torch_internals as internals

FUSED_ADAM = internals.FUSED_ADAM
"""Whether this torch has the one-pass fused Adam kernel (and is one the fast paths know)."""


def fused_adam_step(
    params: torch.Tensor | Sequence[torch.Tensor],
    grad: torch.Tensor | Sequence[torch.Tensor],
    exp_avg: torch.Tensor | Sequence[torch.Tensor],
    exp_avg_sq: torch.Tensor | Sequence[torch.Tensor],
    step: torch.Tensor | Sequence[torch.Tensor],
    lr: float,
    betas: tuple[float, float],
    eps: float,
) -> None:
    """One Adam update of ``params`` in place by torch's fused kernel (``step``: 0-dim float32).

    Each argument may also be a list (one kernel launch for several tensors with
    the same hyperparameters, each with its own step; the arithmetic per element
    is that of a launch of its own). The kernel does not bump version counters;
    caches keyed on them (e.g. PPO's acting snapshot) rely on that, as after the
    unfused in-place update, so this does.
    """

    def listed(value: torch.Tensor | Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return [value] if isinstance(value, torch.Tensor) else list(value)

    params, exp_avg, exp_avg_sq = listed(params), listed(exp_avg), listed(exp_avg_sq)
    internals.fused_adam_(
        params,
        listed(grad),
        exp_avg,
        exp_avg_sq,
        [],
        listed(step),
        lr=lr,
        beta1=betas[0],
        beta2=betas[1],
        weight_decay=0.0,
        eps=eps,
        amsgrad=False,
        maximize=False,
    )
    for tensor in (*params, *exp_avg, *exp_avg_sq):
        torch.autograd.graph.increment_version(tensor)


class FlatAdam:
    """Adam with a single flat parameter/gradient buffer.

    Args:
        params: Parameters to optimise (duplicates are dropped).
        lr: Learning rate.
        betas: Adam betas.
        eps: Adam epsilon.
        fused: Run the update as torch's one-pass fused Adam kernel (the default:
            the same maths, ~5x faster for small networks; the last bit of a value
            can round differently from the unfused update's; falls back to it where
            torch has no such kernel).

    Raises:
        ValueError: If ``params`` is empty or mixes dtypes/devices.
    """

    def __init__(
        self,
        params: Iterable[nn.Parameter],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        fused: bool = True,
    ) -> None:
        unique: list[nn.Parameter] = []
        seen: set[int] = set()
        for p in params:
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                unique.append(p)
        if not unique:
            raise ValueError("FlatAdam got no parameters to optimise")
        dtypes = {p.dtype for p in unique}
        devices = {p.device for p in unique}
        if len(dtypes) != 1 or len(devices) != 1:
            raise ValueError(f"FlatAdam needs one dtype and device, got {dtypes} / {devices}")
        self.params = unique
        self.numels = [p.numel() for p in unique]
        total = sum(self.numels)
        dtype, device = unique[0].dtype, unique[0].device
        self.flat = torch.zeros(total, dtype=dtype, device=device)
        self.flat_grad = torch.zeros(total, dtype=dtype, device=device)
        self.exp_avg = torch.zeros_like(self.flat)
        self.exp_avg_sq = torch.zeros_like(self.flat)
        self.step_count = 0
        self.fused = bool(fused) and FUSED_ADAM
        self._step_tensor = torch.zeros((), dtype=torch.float32, device=device)
        self._data_views: list[torch.Tensor] = []
        self._grad_views: list[torch.Tensor] = []
        offset = 0
        with torch.no_grad():
            for p, n in zip(unique, self.numels, strict=True):
                data = self.flat[offset : offset + n].view_as(p)
                data.copy_(p.data)
                p.data = data
                grad = self.flat_grad[offset : offset + n].view_as(p)
                p.grad = grad
                self._data_views.append(data)
                self._grad_views.append(grad)
                offset += n
        self.param_groups: list[dict[str, Any]] = [
            {
                "params": unique,
                "lr": float(lr),
                "betas": (float(betas[0]), float(betas[1])),
                "eps": float(eps),
                "weight_decay": 0.0,
            }
        ]

    @property
    def lr(self) -> float:
        """Current learning rate."""
        return self.param_groups[0]["lr"]

    def set_lr(self, lr: float) -> None:
        """Change the learning rate."""
        self.param_groups[0]["lr"] = float(lr)

    def _relink_grads(self, keep_values: bool = True) -> None:
        """Re-point replaced gradients (e.g. set to ``None``) at the flat buffer.

        With ``keep_values`` the replacement's values are copied in (``None`` counts as zero).
        """
        for p, grad in zip(self.params, self._grad_views, strict=True):
            g = p.grad
            if g is not grad:
                if keep_values:
                    with torch.no_grad():
                        if g is None:
                            grad.zero_()
                        else:
                            grad.copy_(g)
                p.grad = grad

    def _relink_data(self) -> None:
        """Re-point parameters whose storage was replaced (e.g. ``module.to``) at the flat."""
        for p, data in zip(self.params, self._data_views, strict=True):
            if p.data_ptr() != data.data_ptr():
                with torch.no_grad():
                    data.copy_(p.data)
                p.data = data

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zero all gradients (``set_to_none`` is ignored: gradients live in the flat buffer)."""
        self._relink_grads(keep_values=False)
        self.flat_grad.zero_()

    def clip_grad_norm_(self, max_norm: float | None) -> torch.Tensor:
        """Scale gradients so their global L2 norm is at most ``max_norm``; return the norm."""
        self._relink_grads()
        norm = torch.linalg.vector_norm(self.flat_grad)
        if max_norm is not None and max_norm > 0:
            self.flat_grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        return norm

    @torch.no_grad()
    def step(self) -> None:
        """One Adam update from the current gradients."""
        self._relink_grads()
        self._relink_data()
        group = self.param_groups[0]
        beta1, beta2 = group["betas"]
        self.step_count += 1
        grad = self.flat_grad
        if self.fused:
            self._step_tensor.fill_(self.step_count)
            fused_adam_step(
                self.flat,
                grad,
                self.exp_avg,
                self.exp_avg_sq,
                self._step_tensor,
                group["lr"],
                (beta1, beta2),
                group["eps"],
            )
            return
        self.exp_avg.lerp_(grad, 1.0 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        bias_correction1 = 1.0 - beta1**self.step_count
        bias_correction2_sqrt = math.sqrt(1.0 - beta2**self.step_count)
        denom = (self.exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(group["eps"])
        self.flat.addcdiv_(self.exp_avg, denom, value=-group["lr"] / bias_correction1)

    def state_dict(self) -> dict[str, Any]:
        """Plain dict of tensors and Python scalars (safe for ``weights_only`` loading)."""
        group = self.param_groups[0]
        return {
            "state": {
                "step": self.step_count,
                "exp_avg": self.exp_avg,
                "exp_avg_sq": self.exp_avg_sq,
            },
            "param_groups": [
                {
                    "lr": group["lr"],
                    "betas": list(group["betas"]),
                    "eps": group["eps"],
                    "weight_decay": 0.0,
                    "params": list(range(len(self.params))),
                }
            ],
            "numels": list(self.numels),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a dict written by :meth:`state_dict` (copies the moment tensors).

        Raises:
            ValueError: If the parameter layout differs.
        """
        if list(state_dict.get("numels", [])) != self.numels:
            raise ValueError(
                "Optimizer state does not match the parameters "
                f"(sizes {state_dict.get('numels')} vs {self.numels})"
            )
        state = state_dict["state"]
        with torch.no_grad():
            self.exp_avg.copy_(state["exp_avg"])
            self.exp_avg_sq.copy_(state["exp_avg_sq"])
        self.step_count = int(state["step"])
        group = state_dict["param_groups"][0]
        self.param_groups[0].update(
            lr=float(group["lr"]), betas=tuple(group["betas"]), eps=float(group["eps"])
        )
