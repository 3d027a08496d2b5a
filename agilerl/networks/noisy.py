"""Noisy linear layers (NoisyNet, factorised Gaussian noise) and the noisy MLP head of Rainbow.

Kept apart from :mod:`agilerl.networks.q_networks` so that the fast-gradient
module can recognise a noisy head without importing the Q networks that use it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from agilerl.networks.activations import activation_fn, make_activation

__all__ = ["NoisyLinear", "NoisyMLP", "reset_noise_of"]


class NoisyLinear(nn.Module):
    """Linear layer with factorised Gaussian parameter noise (Fortunato et al., 2018).

    ``W = W_mu + W_sigma * (f(e_out) f(e_in)^T)``, ``b = b_mu + b_sigma * f(e_out)``
    with ``f(x) = sign(x) sqrt(|x|)``. The noise sample is held in buffers and
    changes only on :meth:`reset_noise`; ``forward(x, noise=False)`` uses the
    mean weights (deterministic).

    Args:
        in_features: Input width.
        out_features: Output width.
        std_init: Initial ``sigma`` scale (``std_init / sqrt(fan)``).
    """

    def __init__(self, in_features: int, out_features: int, std_init: float = 0.5) -> None:
        super().__init__()
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.std_init = float(std_init)
        self.weight_mu = nn.Parameter(torch.empty(self.out_features, self.in_features))
        self.weight_sigma = nn.Parameter(torch.empty(self.out_features, self.in_features))
        self.bias_mu = nn.Parameter(torch.empty(self.out_features))
        self.bias_sigma = nn.Parameter(torch.empty(self.out_features))
        self.register_buffer("weight_epsilon", torch.zeros(self.out_features, self.in_features))
        self.register_buffer("bias_epsilon", torch.zeros(self.out_features))
        self.reset_parameters()
        self.reset_noise()

    def reset_parameters(self) -> None:
        """Uniform ``mu`` in ``+-1/sqrt(in)`` and constant ``sigma``."""
        bound = 1.0 / math.sqrt(self.in_features)
        with torch.no_grad():
            self.weight_mu.uniform_(-bound, bound)
            self.bias_mu.uniform_(-bound, bound)
            self.weight_sigma.fill_(self.std_init / math.sqrt(self.in_features))
            self.bias_sigma.fill_(self.std_init / math.sqrt(self.out_features))

    @torch.no_grad()
    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """Draw a new factorised noise sample (from ``generator``, else torch's global one)."""
        reset_noise_of([self], generator)

    def forward(self, x: torch.Tensor, noise: bool = True) -> torch.Tensor:
        """Apply the layer, with the current noise sample unless ``noise`` is False."""
        if not noise:
            return F.linear(x, self.weight_mu, self.bias_mu)
        weight = torch.addcmul(self.weight_mu, self.weight_sigma, self.weight_epsilon)
        bias = torch.addcmul(self.bias_mu, self.bias_sigma, self.bias_epsilon)
        return F.linear(x, weight, bias)


@torch.no_grad()
def reset_noise_of(layers: Sequence[NoisyLinear], generator: torch.Generator | None = None) -> None:
    """Draw new factorised noise for several :class:`NoisyLinear` layers with one draw.

    Equivalent in distribution to calling each layer's ``reset_noise``, with
    a handful of tensor ops in total instead of several per layer.

    Args:
        layers: The layers.
        generator: Where the draw comes from (torch's global generator when ``None``).
    """
    if not layers:
        return
    sizes = [n for layer in layers for n in (layer.in_features, layer.out_features)]
    device = layers[0].weight_mu.device if generator is None else generator.device
    x = torch.randn(sum(sizes), device=device, generator=generator)
    x = x.to(layers[0].weight_mu.device)
    scaled = x.sign().mul_(x.abs().sqrt_())
    parts = scaled.split(sizes)
    for i, layer in enumerate(layers):
        eps_in, eps_out = parts[2 * i], parts[2 * i + 1]
        torch.outer(eps_out, eps_in, out=layer.weight_epsilon)
        layer.bias_epsilon.copy_(eps_out)


class NoisyMLP(nn.Module):
    """``[NoisyLinear -> LayerNorm? -> act] * len(hidden) -> NoisyLinear``.

    Args:
        num_inputs: Input width.
        num_outputs: Output width.
        hidden_size: Hidden layer widths.
        activation: Hidden activation name.
        layer_norm: LayerNorm after each hidden layer.
        std_init: Initial noise scale of every layer.
    """

    def __init__(
        self,
        num_inputs: int,
        num_outputs: int,
        hidden_size: Sequence[int],
        activation: str,
        layer_norm: bool,
        std_init: float,
    ) -> None:
        super().__init__()
        self.activation = activation
        dims = [int(num_inputs), *[int(h) for h in hidden_size], int(num_outputs)]
        self.layers = nn.ModuleList(
            NoisyLinear(dims[i], dims[i + 1], std_init) for i in range(len(dims) - 1)
        )
        hidden = dims[1:-1]
        self.norms = nn.ModuleList(nn.LayerNorm(h) for h in hidden) if layer_norm else None
        self.acts = nn.ModuleList(make_activation(activation) or nn.Identity() for _ in hidden)
        self._act = [activation_fn(activation, a) for a in self.acts]

    def forward(self, x: torch.Tensor, noise: bool = True) -> torch.Tensor:
        """Apply the stack (with the current noise sample unless ``noise`` is False)."""
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer.forward(x, noise)
            if i < last:
                if self.norms is not None:
                    norm = self.norms[i]
                    x = F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)
                act = self._act[i]
                if act is not None:
                    x = act(x)
        return x

    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """Draw new noise for every layer (from ``generator``, else torch's global one)."""
        reset_noise_of(list(self.layers), generator)
