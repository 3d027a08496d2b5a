"""Discrete-action Q networks: a plain Q head (DQN) and Rainbow's dueling noisy C51 head.

Both are an encoder (built from ``net_config`` like every other network) plus
a head. :func:`project_distribution` is the C51 projection of a shifted and
scaled value distribution back onto a fixed support.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from agilerl.networks.config import build_encoder, resolve_net_config
from agilerl.networks.fastgrad import GradTape, run
from agilerl.networks.heads import build_head, seeded
from agilerl.networks.noisy import NoisyLinear, NoisyMLP, reset_noise_of
from agilerl.networks.spaces import ObsTensor, space_from_dict, space_to_dict

__all__ = [
    "NoisyLinear",
    "NoisyMLP",
    "QNetwork",
    "RainbowQNetwork",
    "project_distribution",
]

Q_OUTPUT_GAIN_VANISH = 0.01


def _num_actions(action_space: spaces.Space) -> int:
    if not isinstance(action_space, spaces.Discrete):
        raise ValueError(
            f"Q networks need a Discrete action space, got {type(action_space).__name__} "
            f"({action_space})"
        )
    return int(action_space.n)


def _output_gain(head_config: Mapping[str, Any]) -> float:
    return Q_OUTPUT_GAIN_VANISH if head_config.get("output_vanish", True) else 1.0


class QNetwork(nn.Module):
    """Encoder + MLP head giving ``Q(s, a)`` for every discrete action, ``[B, n]``.

    Args:
        observation_space: Single-env observation space.
        action_space: ``Discrete`` action space.
        net_config: Network config dict (see :mod:`agilerl.networks.config`).
        normalize_images: Divide ``uint8`` images by 255.

    Raises:
        ValueError: For a non-Discrete action space.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        net_config: Mapping[str, Any] | None = None,
        normalize_images: bool = True,
    ) -> None:
        super().__init__()
        self.num_actions = _num_actions(action_space)
        self.observation_space = observation_space
        self.action_space = action_space
        self.net_config = resolve_net_config(net_config, observation_space)
        self.config: dict[str, Any] = {
            "observation_space": space_to_dict(observation_space),
            "action_space": space_to_dict(action_space),
            "net_config": self.net_config,
            "normalize_images": bool(normalize_images),
        }
        head_config = self.net_config["head_config"]
        with seeded(self.net_config.get("random_seed")):
            self.encoder = build_encoder(observation_space, self.net_config, normalize_images)
            self.head = build_head(
                self.encoder.latent_dim, self.num_actions, head_config, _output_gain(head_config)
            )

    def forward(self, obs: ObsTensor, tape: GradTape | None = None) -> torch.Tensor:
        """``Q(obs, .)`` of shape ``[B, num_actions]`` (sub-modules through ``tape``, if given)."""
        return run(self.head, run(self.encoder, obs, tape), tape)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> QNetwork:
        """Rebuild from ``config`` (fresh weights)."""
        return cls(
            space_from_dict(config["observation_space"]),
            space_from_dict(config["action_space"]),
            net_config=config["net_config"],
            normalize_images=config["normalize_images"],
        )


class RainbowQNetwork(nn.Module):
    """Encoder + dueling, noisy, distributional (C51) head.

    The value stream gives ``[B, 1, atoms]`` and the advantage stream
    ``[B, n, atoms]`` logits; they are combined as ``V + A - mean_a(A)`` and
    normalised with a softmax over the atoms. ``Q(s, a) = sum_z z p(z | s, a)``.
    Both streams use ``head_config``'s hidden sizes, activation and layer norm,
    with :class:`NoisyLinear` layers.

    Args:
        observation_space: Single-env observation space.
        action_space: ``Discrete`` action space.
        net_config: Network config dict.
        num_atoms: Atoms of the support (>= 2).
        v_min: Lowest atom.
        v_max: Highest atom.
        noise_std: Initial noise scale of the noisy layers.
        normalize_images: Divide ``uint8`` images by 255.

    Raises:
        ValueError: For a non-Discrete action space, ``num_atoms < 2`` or
            ``v_min >= v_max``.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        net_config: Mapping[str, Any] | None = None,
        num_atoms: int = 51,
        v_min: float = 0.0,
        v_max: float = 200.0,
        noise_std: float = 0.5,
        normalize_images: bool = True,
    ) -> None:
        super().__init__()
        self.num_actions = _num_actions(action_space)
        if int(num_atoms) < 2:
            raise ValueError(f"Rainbow needs num_atoms >= 2, got {num_atoms}")
        if float(v_min) >= float(v_max):
            raise ValueError(f"v_min ({v_min}) must be below v_max ({v_max})")
        self.num_atoms = int(num_atoms)
        self.v_min = float(v_min)
        self.v_max = float(v_max)
        self.noise_std = float(noise_std)
        self.observation_space = observation_space
        self.action_space = action_space
        self.net_config = resolve_net_config(net_config, observation_space)
        self.config: dict[str, Any] = {
            "observation_space": space_to_dict(observation_space),
            "action_space": space_to_dict(action_space),
            "net_config": self.net_config,
            "num_atoms": self.num_atoms,
            "v_min": self.v_min,
            "v_max": self.v_max,
            "noise_std": self.noise_std,
            "normalize_images": bool(normalize_images),
        }
        head = self.net_config["head_config"]
        hidden = [int(h) for h in head.get("hidden_size", [64])]
        activation = head.get("activation", "ReLU")
        layer_norm = bool(head.get("layer_norm", True))
        with seeded(self.net_config.get("random_seed")):
            self.encoder = build_encoder(observation_space, self.net_config, normalize_images)
            latent = self.encoder.latent_dim
            self.value = NoisyMLP(
                latent, self.num_atoms, hidden, activation, layer_norm, self.noise_std
            )
            self.advantage = NoisyMLP(
                latent,
                self.num_actions * self.num_atoms,
                hidden,
                activation,
                layer_norm,
                self.noise_std,
            )
        self.register_buffer(
            "support",
            torch.linspace(self.v_min, self.v_max, self.num_atoms),
            persistent=False,
        )

    def logits(
        self, obs: ObsTensor, noise: bool = True, tape: GradTape | None = None
    ) -> torch.Tensor:
        """Dueling atom logits ``[B, n, atoms]`` (sub-modules through ``tape``, if given)."""
        latent = run(self.encoder, obs, tape)
        value = run(self.value, latent, tape, noise=noise).unsqueeze(1)
        adv = run(self.advantage, latent, tape, noise=noise)
        adv = adv.view(-1, self.num_actions, self.num_atoms)
        return value + adv - adv.mean(dim=1, keepdim=True)

    def forward(self, obs: ObsTensor, noise: bool = True, log: bool = False) -> torch.Tensor:
        """Atom probabilities (``log`` for log-probabilities) ``[B, n, atoms]``."""
        logits = self.logits(obs, noise)
        return F.log_softmax(logits, dim=-1) if log else F.softmax(logits, dim=-1)

    def q_values(
        self, obs: ObsTensor, noise: bool = True, tape: GradTape | None = None
    ) -> torch.Tensor:
        """Expected values ``[B, n]`` of the distributions."""
        return F.softmax(self.logits(obs, noise, tape), dim=-1) @ self.support

    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """Draw new noise for every noisy layer (one random draw for the whole head).

        Args:
            generator: Where the draw comes from (torch's global generator when ``None``).
        """
        reset_noise_of([*self.value.layers, *self.advantage.layers], generator)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> RainbowQNetwork:
        """Rebuild from ``config`` (fresh weights)."""
        kwargs = {k: v for k, v in config.items() if k not in ("observation_space", "action_space")}
        return cls(
            space_from_dict(config["observation_space"]),
            space_from_dict(config["action_space"]),
            **kwargs,
        )


def project_distribution(
    next_probs: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    support: torch.Tensor,
    v_min: float | None = None,
    v_max: float | None = None,
) -> torch.Tensor:
    """Project the distribution of ``r + discount * Z`` onto ``support`` (C51).

    Each shifted atom ``Tz = clamp(r + discount * z, v_min, v_max)`` splits its
    probability between its two neighbouring support atoms in proportion to
    its distance from them, so the result sums to one and has the same mean
    as the (clamped) shifted distribution. A NaN input gives NaN masses.

    Args:
        next_probs: Probabilities ``[B, atoms]`` on ``support``.
        rewards: ``[B]`` rewards.
        discounts: ``[B]`` discounts (``gamma**n * (1 - done)``).
        support: The ``[atoms]`` evenly spaced support.
        v_min: ``support[0]`` (read from ``support`` when ``None``).
        v_max: ``support[-1]`` (read from ``support`` when ``None``).

    Returns:
        The projected probabilities ``[B, atoms]``.
    """
    batch, atoms = next_probs.shape
    v_min = float(support[0]) if v_min is None else float(v_min)
    v_max = float(support[-1]) if v_max is None else float(v_max)
    delta = (v_max - v_min) / (atoms - 1)
    tz = torch.addcmul(rewards.unsqueeze(1), discounts.unsqueeze(1), support.unsqueeze(0))
    b = (tz.clamp_(v_min, v_max) - v_min).div_(delta).clamp_(0.0, atoms - 1)
    lower = b.floor()
    upper_w = b - lower
    # NaN (e.g. a NaN reward) must reach the loss, not become an invalid index
    lower_idx = lower.nan_to_num_(0.0).long()
    upper_idx = (lower_idx + 1).clamp_(max=atoms - 1)
    offset = torch.arange(batch, device=next_probs.device).unsqueeze(1) * atoms
    projected = torch.zeros(batch * atoms, dtype=next_probs.dtype, device=next_probs.device)
    projected.index_add_(0, (lower_idx + offset).view(-1), (next_probs * (1.0 - upper_w)).view(-1))
    projected.index_add_(0, (upper_idx + offset).view(-1), (next_probs * upper_w).view(-1))
    return projected.view(batch, atoms)
