"""Deterministic actor and continuous-action Q critic (DDPG, TD3).

Actions are handled in a *normalised* space: for a Box with finite bounds the
actor outputs ``[-1, 1]`` (tanh) and :meth:`DeterministicActor.to_env_action`
maps that affinely onto ``[low, high]``; the critic reads normalised actions
(:meth:`DeterministicActor.normalize_action` maps stored env actions back).
For unbounded Boxes both spaces coincide and the actor output is linear.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agilerl.networks.config import build_encoder, resolve_net_config
from agilerl.networks.fastgrad import GradTape, run
from agilerl.networks.heads import build_head, seeded
from agilerl.networks.spaces import ObsTensor, space_from_dict, space_to_dict

__all__ = ["ContinuousQNetwork", "DeterministicActor", "box_action_dim", "critic_values"]

OUTPUT_GAIN_VANISH = 0.01


def box_action_dim(action_space: spaces.Space) -> int:
    """Flattened width of a Box action space.

    Raises:
        ValueError: For anything but a ``Box``.
    """
    if not isinstance(action_space, spaces.Box):
        raise ValueError(
            f"Continuous-action networks need a Box action space, got "
            f"{type(action_space).__name__} ({action_space})"
        )
    return int(np.prod(action_space.shape))


def _gain(head_config: Mapping[str, Any]) -> float:
    return OUTPUT_GAIN_VANISH if head_config.get("output_vanish", True) else 1.0


class DeterministicActor(nn.Module):
    """Encoder + MLP head mapping observations to one action, ``[B, action_dim]``.

    The head's output activation is ``head_config["output_activation"]`` when
    set, else ``Tanh`` for bounded Boxes (actions in ``[-1, 1]``) and none for
    unbounded ones.

    Args:
        observation_space: Single-env observation space.
        action_space: ``Box`` action space.
        net_config: Network config dict (see :mod:`agilerl.networks.config`).
        normalize_images: Divide ``uint8`` images by 255.
        encoder: An existing encoder to use (e.g. shared with the critic).
        detach_encoder: Stop gradients from the actor into the encoder (set when
            the encoder is shared and trained by the critic).

    Raises:
        ValueError: For a non-Box action space.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        net_config: Mapping[str, Any] | None = None,
        normalize_images: bool = True,
        encoder: nn.Module | None = None,
        detach_encoder: bool = False,
    ) -> None:
        super().__init__()
        self.action_dim = box_action_dim(action_space)
        self.observation_space = observation_space
        self.action_space = action_space
        self.net_config = resolve_net_config(net_config, observation_space)
        self.detach_encoder = bool(detach_encoder)
        self.config: dict[str, Any] = {
            "observation_space": space_to_dict(observation_space),
            "action_space": space_to_dict(action_space),
            "net_config": self.net_config,
            "normalize_images": bool(normalize_images),
        }
        low = action_space.low.astype(np.float32).reshape(-1)
        high = action_space.high.astype(np.float32).reshape(-1)
        self.bounded = bool(np.all(np.isfinite(low)) and np.all(np.isfinite(high)))
        self._action_shape = tuple(action_space.shape)
        if self.bounded:
            self._low = low
            self._high = high
            self._half_range = (high - low) / 2.0
            self._mid = (high + low) / 2.0
        self.register_buffer(
            "action_mid",
            torch.from_numpy(self._mid.copy() if self.bounded else np.zeros_like(low)),
            persistent=False,
        )
        self.register_buffer(
            "action_half_range",
            torch.from_numpy(self._half_range.copy() if self.bounded else np.ones_like(low)),
            persistent=False,
        )
        head_config = dict(self.net_config["head_config"])
        if head_config.get("output_activation") is None and self.bounded:
            head_config["output_activation"] = "Tanh"
        with seeded(self.net_config.get("random_seed")):
            self.encoder = (
                encoder
                if encoder is not None
                else build_encoder(observation_space, self.net_config, normalize_images)
            )
            self.head = build_head(
                self.encoder.latent_dim, self.action_dim, head_config, _gain(head_config)
            )

    def forward(self, obs: ObsTensor, tape: GradTape | None = None) -> torch.Tensor:
        """Normalised actions ``[B, action_dim]`` (sub-modules through ``tape``, if given)."""
        latent = run(self.encoder, obs, tape)
        if self.detach_encoder:
            latent = latent.detach()
        return run(self.head, latent, tape)

    def to_env_action(self, action: np.ndarray) -> np.ndarray:
        """Map normalised numpy actions ``[B, action_dim]`` to env actions (clipped to bounds)."""
        if self.bounded:
            action = np.clip(action, -1.0, 1.0, out=action)
            action *= self._half_range
            action += self._mid
        return action.reshape((action.shape[0], *self._action_shape))

    def normalize_action(self, action: torch.Tensor) -> torch.Tensor:
        """Map env actions (tensor ``[B, ...]``) to the normalised space, ``[B, action_dim]``."""
        action = action.reshape(action.shape[0], -1).float()
        if not self.bounded:
            return action
        return (action - self.action_mid) / self.action_half_range

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> DeterministicActor:
        """Rebuild from ``config`` (fresh weights, own encoder)."""
        return cls(
            space_from_dict(config["observation_space"]),
            space_from_dict(config["action_space"]),
            net_config=config["net_config"],
            normalize_images=config["normalize_images"],
        )


class ContinuousQNetwork(nn.Module):
    """``Q(s, a)``: encoder(s) concatenated with the (normalised) action, then an MLP head.

    Args:
        observation_space: Single-env observation space.
        action_space: ``Box`` action space.
        net_config: Network config dict.
        normalize_images: Divide ``uint8`` images by 255.
        encoder: An existing encoder to share (e.g. the actor's).
        seed_offset: Added to ``net_config["random_seed"]`` for this network's
            initialisation, so twin critics built from one seeded config differ.

    Raises:
        ValueError: For a non-Box action space.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        net_config: Mapping[str, Any] | None = None,
        normalize_images: bool = True,
        encoder: nn.Module | None = None,
        seed_offset: int = 1,
    ) -> None:
        super().__init__()
        self.action_dim = box_action_dim(action_space)
        self.observation_space = observation_space
        self.action_space = action_space
        self.net_config = resolve_net_config(net_config, observation_space)
        self.config: dict[str, Any] = {
            "observation_space": space_to_dict(observation_space),
            "action_space": space_to_dict(action_space),
            "net_config": self.net_config,
            "normalize_images": bool(normalize_images),
            "seed_offset": int(seed_offset),
        }
        head_config = dict(self.net_config["head_config"])
        seed = self.net_config.get("random_seed")
        with seeded(None if seed is None else int(seed) + int(seed_offset)):
            self.encoder = (
                encoder
                if encoder is not None
                else build_encoder(observation_space, self.net_config, normalize_images)
            )
            self.head = build_head(
                self.encoder.latent_dim + self.action_dim, 1, head_config, _gain(head_config)
            )

    def forward(
        self,
        obs: ObsTensor,
        action: torch.Tensor,
        tape: GradTape | None = None,
        params: bool = True,
    ) -> torch.Tensor:
        """``Q(obs, action)`` of shape ``[B]`` (``action`` normalised, ``[B, action_dim]``).

        Args:
            obs: Observation batch.
            action: Normalised actions.
            tape: Runs the sub-modules (see :mod:`agilerl.networks.fastgrad`).
            params: With a tape, whether this call's parameter gradients are wanted.
        """
        if tape is None:
            latent = self.encoder.forward(obs)
            return self.head.forward(torch.cat([latent, action], dim=-1)).squeeze(-1)
        if params:
            latent = tape(self.encoder, obs)
        else:
            with torch.no_grad():  # the observation carries no gradient
                latent = self.encoder.forward(obs)
        return tape(self.head, latent, action, params=params).squeeze(-1)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ContinuousQNetwork:
        """Rebuild from ``config`` (fresh weights, own encoder)."""
        return cls(
            space_from_dict(config["observation_space"]),
            space_from_dict(config["action_space"]),
            net_config=config["net_config"],
            normalize_images=config["normalize_images"],
            seed_offset=config.get("seed_offset", 1),
        )


def critic_values(
    critics: Sequence[nn.Module],
    obs: ObsTensor,
    action: torch.Tensor,
    tape: GradTape | None = None,
    params: bool = True,
) -> torch.Tensor:
    """``[N, B]``: ``torch.stack([c.forward(obs, action, tape, params) for c in critics])``.

    With a tape, same-shaped :class:`ContinuousQNetwork` s reading a flat
    observation batch run as one stacked pass (:meth:`GradTape.stacked`): twin
    critics cost one batched matmul per layer instead of two.
    """
    fused = (
        tape is not None
        and isinstance(obs, torch.Tensor)
        and obs.dim() == 2
        and all(type(c) is ContinuousQNetwork for c in critics)
    )
    if not fused:
        return torch.stack([c.forward(obs, action, tape, params) for c in critics])
    encoders = [c.encoder for c in critics]
    if params:
        latent = tape.stacked(encoders, obs)
    else:
        with torch.no_grad():  # the observation carries no gradient
            latent = tape.stacked(encoders, obs)
    return tape.stacked([c.head for c in critics], latent, action, params=params).squeeze(-1)
