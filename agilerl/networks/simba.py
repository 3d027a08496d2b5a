"""SimBa encoder (Lee et al., 2024): normalised input, residual pre-LayerNorm MLP blocks.

``obs -> running normalisation -> Linear(hidden) -> num_blocks x [x + MLP(LayerNorm(x))]
-> LayerNorm -> Linear(latent_dim) -> output activation``, where each block's MLP is
``Linear(hidden, scale_factor * hidden) -> ReLU -> Linear(hidden)``.

The observation statistics (mean, variance, count) are registered buffers, so
they are saved with the weights, cloned, and carried over by architecture
mutations. They are updated only by forward passes that record gradients in
training mode (the learning updates, on replay or rollout batches); acting,
target computations and evaluation run without gradients and leave them alone.
A target network's copy follows its online network's statistics
(:meth:`RunningNorm.follow`, linked by ``OffPolicyAlgorithm._target_of``): its
lagging weights then read observations normalised as the online network reads
them, as with the single shared normaliser of the SimBa paper.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from agilerl.networks import torch_internals as internals
from agilerl.networks.activations import make_activation
from agilerl.networks.mlp import HIDDEN_GAIN, init_linear, make_flattener
from agilerl.networks.spaces import flat_input_dim, space_from_dict, space_to_dict

__all__ = ["RunningNorm", "SimbaBlock", "SimbaEncoder"]


class RunningNorm(nn.Module):
    """``(x - mean) / sqrt(var + eps)`` with running statistics over every batch it was fit on.

    Args:
        dim: Feature width.
        eps: Added to the variance.
    """

    def __init__(self, dim: int, eps: float = 1e-8) -> None:
        super().__init__()
        self.eps = float(eps)
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.tensor(0.0))

    def follow(self, source: RunningNorm) -> None:
        """Use ``source``'s statistics from now on (a target network's copy follows its online one).

        The statistics are copied into this module's buffers at every forward
        pass, so its checkpoint holds the values it normalised with.
        """
        self.__dict__["_source"] = source  # a plain reference: not a submodule, not saved twice

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge a batch ``[B, dim]`` into the statistics (parallel Welford)."""
        n = float(x.shape[0])
        if n == 0:
            return
        batch_mean = x.mean(0)
        batch_var = x.var(0, unbiased=False)
        total = self.count + n
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var * n + delta.square() * (self.count * n / total)
        self.mean.add_(delta * (n / total))
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x``; in training mode with gradients enabled, fit on it first."""
        source = self.__dict__.get("_source")
        if source is not None:
            with torch.no_grad():
                internals.foreach_copy_(
                    [self.mean, self.var, self.count], [source.mean, source.var, source.count]
                )
        elif self.training and torch.is_grad_enabled():
            self.update(x.detach())
        return (x - self.mean) * torch.rsqrt(self.var + self.eps)


class SimbaBlock(nn.Module):
    """``x + Linear(ReLU(Linear(LayerNorm(x))))``, inner width ``scale_factor * hidden_size``."""

    def __init__(self, hidden_size: int, scale_factor: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden_size)
        self.fc1 = nn.Linear(hidden_size, scale_factor * hidden_size)
        self.fc2 = nn.Linear(scale_factor * hidden_size, hidden_size)
        init_linear(self.fc1, HIDDEN_GAIN)
        init_linear(self.fc2, 1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the residual block."""
        return x + self.fc2(F.relu(self.fc1(self.norm(x))))


class SimbaEncoder(nn.Module):
    """SimBa encoder for flat (or flattenable) observations: see the module docstring.

    Args:
        observation_space: Single-env observation space (non-composite).
        latent_dim: Output width.
        hidden_size: Width of the residual stream.
        num_blocks: Residual blocks.
        scale_factor: Inner expansion of each block.
        output_activation: Activation on the latent output (``None`` for none).
        **bounds: Mutation bounds and other spec keys, kept in ``config``.
    """

    arch = "simba"

    def __init__(
        self,
        observation_space: spaces.Space,
        latent_dim: int = 32,
        hidden_size: int = 128,
        num_blocks: int = 2,
        scale_factor: int = 4,
        output_activation: str | None = None,
        **bounds: Any,
    ) -> None:
        super().__init__()
        bounds.pop("arch", None)
        self.observation_space = observation_space
        self.latent_dim = int(latent_dim)
        self.hidden_size = int(hidden_size)
        self.num_blocks = int(num_blocks)
        self.config: dict[str, Any] = {
            "arch": "simba",
            "observation_space": space_to_dict(observation_space),
            "latent_dim": self.latent_dim,
            "hidden_size": self.hidden_size,
            "num_blocks": self.num_blocks,
            "scale_factor": int(scale_factor),
            "output_activation": output_activation,
            **bounds,
        }
        self._flatten = make_flattener(observation_space)
        input_dim = flat_input_dim(observation_space)
        self.obs_norm = RunningNorm(input_dim)
        self.embed = nn.Linear(input_dim, self.hidden_size)
        init_linear(self.embed, 1.0)
        self.blocks = nn.ModuleList(
            SimbaBlock(self.hidden_size, int(scale_factor)) for _ in range(self.num_blocks)
        )
        self.final_norm = nn.LayerNorm(self.hidden_size)
        self.out = nn.Linear(self.hidden_size, self.latent_dim)
        init_linear(self.out, HIDDEN_GAIN)
        self.output_activation = make_activation(output_activation) or nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Encode a batch of observations ``[B, ...]`` to ``[B, latent_dim]``."""
        if self._flatten is not None:
            x = self._flatten(x)
        x = self.embed(self.obs_norm(x))
        for block in self.blocks:
            x = block(x)
        return self.output_activation(self.out(self.final_norm(x)))

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> SimbaEncoder:
        """Rebuild from ``config`` (fresh weights and statistics)."""
        kwargs = {k: v for k, v in config.items() if k not in ("arch", "observation_space")}
        return cls(space_from_dict(config["observation_space"]), **kwargs)
