"""Running observation normalisation in front of an encoder (``network.normalize_observations``).

``obs -> flatten -> (obs - mean) / sqrt(var + eps) -> clip to +-OBS_CLIP -> encoder``.

The statistics are the SimBa encoder's :class:`~agilerl.networks.simba.RunningNorm`
and follow its rule: registered buffers (saved in the agent's checkpoint with the
weights, copied by clones, carried over by architecture mutations, exported with
the policy), fit only by forward passes that record gradients in training mode,
that is on the batches the agent learns from (rollouts, replay or dataset
batches). Acting, target computations, evaluation and an exported policy run
without gradients and leave them alone, so a policy normalises identically
wherever it runs between two learning updates. A target network's copy follows
its online network's statistics (:meth:`RunningNorm.follow`).

The wrapper is a module of its own kind, so the graph-free fast paths
(:mod:`agilerl.networks.fastgrad`, fused and stacked acting), which only take plain
MLP chains, do not recognise it and run it through ordinary torch calls: a
normalised network is never run without its normalisation.
"""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces
from torch import nn

from agilerl.networks.simba import RunningNorm
from agilerl.networks.spaces import flat_input_dim, is_image_space

__all__ = ["OBS_CLIP", "NormalizedEncoder", "check_normalizable"]

OBS_CLIP = 10.0
"""Normalised observations are clipped to ``[-OBS_CLIP, OBS_CLIP]`` (as SB3's ``VecNormalize``)."""


def check_normalizable(observation_space: spaces.Space, arch: str) -> None:
    """Raise ``ValueError`` unless ``normalize_observations`` can act on this encoder and space.

    Args:
        observation_space: Single-env observation space.
        arch: The encoder kind (after inference from the space).
    """
    if arch != "mlp":
        raise ValueError(
            f"network.normalize_observations needs an mlp encoder, not {arch!r}; remove "
            "network.normalize_observations"
        )
    if not isinstance(observation_space, spaces.Box) or is_image_space(observation_space):
        raise ValueError(
            "network.normalize_observations normalises vector (Box) observations, not "
            f"{observation_space}; remove network.normalize_observations"
        )


class NormalizedEncoder(nn.Module):
    """An encoder reading running-normalised observations.

    Args:
        observation_space: Single-env observation space (a non-image Box).
        encoder: The encoder to feed (``latent_dim`` and ``config`` are its own).
        clip: Bound of the normalised values.

    Raises:
        ValueError: For an observation space that cannot be normalised.
    """

    def __init__(
        self, observation_space: spaces.Space, encoder: nn.Module, clip: float = OBS_CLIP
    ) -> None:
        super().__init__()
        check_normalizable(observation_space, "mlp")
        self.observation_space = observation_space
        self.obs_norm = RunningNorm(flat_input_dim(observation_space))
        self.encoder = encoder
        self.clip = float(clip)
        self.latent_dim = int(encoder.latent_dim)
        self.config: dict[str, Any] = {**encoder.config, "normalize_observations": True}

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (a batch, any observation shape) normalised and clipped, in its own shape."""
        flat = self.obs_norm(x.reshape(x.shape[0], -1).float())
        return flat.clamp(-self.clip, self.clip).reshape(x.shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Encode a batch of observations ``[B, ...]``."""
        return self.encoder(self.normalize(x))
