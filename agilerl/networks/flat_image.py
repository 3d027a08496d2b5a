"""A CNN encoder and an MLP head reading flattened images (the multi-agent networks).

Multi-agent algorithms feed every network ``(batch, obs_dim)`` float rows (see
:meth:`~agilerl.algorithms.core.multi_agent.MultiAgentAlgorithm.obs_tensor`);
:class:`FlatImageNet` puts an image agent's rows back into its ``Box`` shape before
the convolutions, so rollouts and replay memories stay as they are.
"""

from __future__ import annotations

import torch
from gymnasium import spaces
from torch import nn

from agilerl.arena.models.networks import NetworkSpec
from agilerl.networks.cnn import EvolvableCNN

__all__ = ["FlatImageNet"]


class FlatImageNet(nn.Module):
    """``rows -> [B, *image shape] -> EvolvableCNN -> activation -> head``.

    Args:
        space: The agent's image observation space (a 3-D ``Box``, channels first or last).
        net: The network spec (its ``encoder_config`` is a ``CnnSpec``).
        head: The layers after the CNN's ``latent_dim`` output (hidden layers and output).
        normalize_images: Divide ``uint8`` images by 255.
    """

    def __init__(
        self, space: spaces.Box, net: NetworkSpec, head: nn.Sequential, normalize_images: bool
    ) -> None:
        super().__init__()
        encoder = net.encoder_config
        self.shape = tuple(int(n) for n in space.shape)
        self.encoder = EvolvableCNN(
            space,
            latent_dim=net.latent_dim,
            channel_size=encoder.channel_size,
            kernel_size=encoder.kernel_size,
            stride_size=encoder.stride_size,
            activation=encoder.activation,
            layer_norm=encoder.layer_norm,
            init_layers=encoder.init_layers,
            normalize_images=normalize_images,
        )
        self.activation = getattr(nn, encoder.activation)()
        self.head = head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Outputs ``(batch, out_dim)`` for flattened image rows ``(batch, prod(shape))``."""
        return self.head(self.activation(self.encoder(x.reshape(x.shape[0], *self.shape))))
