"""Activation lookup by name, with a functional fast path for stateless ones."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

ActivationFn = Callable[[torch.Tensor], torch.Tensor]


class GumbelSoftmax(nn.Module):
    """Soft Gumbel-softmax sample over the last dimension (``tau=1``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the activation."""
        return F.gumbel_softmax(x, tau=1.0, hard=False, dim=-1)


ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "Tanh": nn.Tanh,
    "GELU": nn.GELU,
    "ReLU": nn.ReLU,
    "ELU": nn.ELU,
    "LeakyReLU": nn.LeakyReLU,
    "Sigmoid": nn.Sigmoid,
    "Softplus": nn.Softplus,
    "Softmax": partial(nn.Softmax, dim=-1),
    "GumbelSoftmax": GumbelSoftmax,
    "PReLU": nn.PReLU,
    "Identity": nn.Identity,
}

_FUNCTIONAL: dict[str, ActivationFn] = {
    "Tanh": torch.tanh,
    "GELU": F.gelu,
    "ReLU": torch.relu,
    "ELU": F.elu,
    "LeakyReLU": F.leaky_relu,
    "Sigmoid": torch.sigmoid,
    "Softplus": F.softplus,
    "Softmax": partial(torch.softmax, dim=-1),
}


def check_activation(name: str | None) -> None:
    """Raise ``ValueError`` for an unknown activation name (``None`` means identity)."""
    if name is not None and name not in ACTIVATIONS:
        raise ValueError(f"Unknown activation {name!r}; choose one of {', '.join(ACTIVATIONS)}")


def make_activation(name: str | None) -> nn.Module | None:
    """Module for ``name``; ``None`` for identity (``None`` or ``"Identity"``)."""
    check_activation(name)
    if name is None or name == "Identity":
        return None
    return ACTIVATIONS[name]()


def activation_fn(name: str | None, module: nn.Module | None) -> ActivationFn | None:
    """Fast callable for the forward pass: a torch function when stateless, else the module."""
    if name is None or name == "Identity":
        return None
    return _FUNCTIONAL.get(name, module)
