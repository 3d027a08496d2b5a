"""State-value network (critic)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from gymnasium import spaces
from torch import nn

from agilerl.networks.config import build_encoder, resolve_net_config
from agilerl.networks.heads import VALUE_OUTPUT_GAIN, build_head, seeded
from agilerl.networks.spaces import ObsTensor, space_from_dict, space_to_dict


class ValueNetwork(nn.Module):
    """Encoder + MLP head producing ``V(s)`` of shape ``[B]``.

    The value output layer is initialised with gain 1.0 regardless of
    ``output_vanish`` (a vanishing value output only slows value learning).

    Args:
        observation_space: Single-env observation space.
        net_config: Network config dict (see :mod:`agilerl.networks.config`).
        normalize_images: Divide ``uint8`` images by 255.
        encoder: An existing encoder to share (e.g. the actor's).
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        net_config: Mapping[str, Any] | None = None,
        normalize_images: bool = True,
        encoder: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.observation_space = observation_space
        self.net_config = resolve_net_config(net_config, observation_space)
        self.config: dict[str, Any] = {
            "observation_space": space_to_dict(observation_space),
            "net_config": self.net_config,
            "normalize_images": bool(normalize_images),
        }
        seed = self.net_config.get("random_seed")
        with seeded(None if seed is None else int(seed) + 1):
            self.encoder = (
                encoder
                if encoder is not None
                else build_encoder(observation_space, self.net_config, normalize_images)
            )
            self.head = build_head(
                self.encoder.latent_dim, 1, self.net_config["head_config"], VALUE_OUTPUT_GAIN
            )

    def value_from_latent(self, latent: torch.Tensor) -> torch.Tensor:
        """``V`` (``[B]``) from encoder features."""
        return self.head.forward(latent).squeeze(-1)

    def forward(self, obs: ObsTensor) -> torch.Tensor:
        """``V(obs)`` of shape ``[B]``."""
        return self.head.forward(self.encoder(obs)).squeeze(-1)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ValueNetwork:
        """Rebuild from ``config`` (fresh weights, own encoder)."""
        return cls(
            space_from_dict(config["observation_space"]),
            net_config=config["net_config"],
            normalize_images=config["normalize_images"],
        )
