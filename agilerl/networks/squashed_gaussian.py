"""Squashed Gaussian actor (SAC): a tanh-squashed diagonal Gaussian over a bounded Box.

The head outputs a mean and a log standard deviation per action dimension.
A sample is ``a = tanh(u)``, ``u ~ N(mean, exp(log_std)^2)``, in the
normalised action space ``[-1, 1]``; :meth:`SquashedGaussianActor.to_env_action`
maps it affinely onto the env's ``[low, high]`` and
:meth:`SquashedGaussianActor.normalize_action` maps stored env actions back.
Log-probabilities are those of ``a`` in the normalised space, with the tanh
correction ``log p(a) = log N(u) - sum log(1 - tanh(u)^2)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from agilerl.networks.config import build_encoder, resolve_net_config
from agilerl.networks.deterministic import box_action_dim
from agilerl.networks.fastgrad import GradTape, TapeFunction, run
from agilerl.networks.heads import POLICY_OUTPUT_GAIN, build_head, seeded
from agilerl.networks.spaces import ObsTensor, space_from_dict, space_to_dict

__all__ = ["LOG_STD_MAX", "LOG_STD_MIN", "SquashedGaussianActor", "squashed_log_prob"]

LOG_STD_MIN = -20.0
LOG_STD_MAX = 2.0
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)


def squashed_log_prob(u: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """``log p(tanh(u))`` summed over the last dimension, ``[B]``.

    ``log(1 - tanh(u)^2)`` is computed as ``2 (log 2 - u - softplus(-2u))``,
    which stays finite where ``tanh(u)`` rounds to +-1.
    """
    z = (u - mean) * torch.exp(-log_std)
    gaussian = -0.5 * z.square() - log_std - _HALF_LOG_2PI
    correction = 2.0 * (_LOG_2 - u - F.softplus(-2.0 * u))
    return (gaussian - correction).sum(-1)


class _SquashedSample(TapeFunction):
    """``(tanh(u), log p(tanh(u)))`` with ``u = mean + exp(log_std) noise`` from a head output.

    The head output is ``[mean, raw log_std]``; the log std is clamped to
    ``[LOG_STD_MIN, LOG_STD_MAX]``. The log-probability is
    :func:`squashed_log_prob` with ``(u - mean) / std = noise`` read directly:
    ``sum(2 (u + softplus(-2u)) - log_std - noise^2 / 2) - d (log(2 pi) / 2 + 2 log 2)``.
    """

    def forward(
        self, out: torch.Tensor, noise: torch.Tensor
    ) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, ...]]:
        mean, raw_log_std = out.chunk(2, dim=-1)
        log_std = raw_log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        std = log_std.exp()
        u = torch.addcmul(mean, noise, std)
        terms = torch.add(u, F.softplus(-2.0 * u)).mul_(2.0).sub_(log_std)
        terms.addcmul_(noise, noise, value=-0.5)
        dim = noise.shape[-1]
        log_prob = terms.sum(-1).sub_((_HALF_LOG_2PI + 2.0 * _LOG_2) * dim)
        action = torch.tanh(u)
        return (action, log_prob), (action, noise, std, raw_log_std)

    def backward(
        self, saved: tuple[torch.Tensor, ...], grads: Sequence[torch.Tensor | None]
    ) -> tuple[torch.Tensor, None]:
        # d tanh(u) / du = 1 - tanh(u)^2; d 2 (u + softplus(-2u)) / du = 2 tanh(u)
        action, noise, std, raw_log_std = saved
        grad_action, grad_log_prob = grads
        if grad_action is None:
            grad_u = torch.zeros_like(action)
        else:
            grad_u = grad_action * (1.0 - action.square())
        if grad_log_prob is not None:
            grad_log_prob = grad_log_prob.unsqueeze(-1)
            grad_u.addcmul_(action, grad_log_prob, value=2.0)
        grad_log_std = grad_u * noise * std
        if grad_log_prob is not None:
            grad_log_std.sub_(grad_log_prob)
        inside = (raw_log_std >= LOG_STD_MIN) & (raw_log_std <= LOG_STD_MAX)
        return torch.cat([grad_u, grad_log_std.mul_(inside)], dim=-1), None


_SQUASHED_SAMPLE = _SquashedSample()


class SquashedGaussianActor(nn.Module):
    """Encoder + MLP head giving ``(mean, log_std)`` of a tanh-squashed Gaussian.

    ``log_std`` is clamped to ``[LOG_STD_MIN, LOG_STD_MAX]``. With
    ``head_config.output_vanish`` (the default) the head's last layer starts
    with a small gain, so the initial policy has mean ~0 and std ~1 (before
    the squash).

    Args:
        observation_space: Single-env observation space.
        action_space: ``Box`` action space with finite bounds.
        net_config: Network config dict (see :mod:`agilerl.networks.config`).
        normalize_images: Divide ``uint8`` images by 255.
        encoder: An existing encoder to use (e.g. shared with the critics).
        detach_encoder: Stop gradients from the actor into the encoder (set when
            the encoder is shared and trained by the critics).

    Raises:
        ValueError: For a non-Box action space or one with infinite bounds.
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
        low = action_space.low.astype(np.float32).reshape(-1)
        high = action_space.high.astype(np.float32).reshape(-1)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ValueError(
                f"A squashed Gaussian policy needs finite action bounds, got {action_space}; "
                "wrap the env with gymnasium.wrappers.RescaleAction"
            )
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
        self._action_shape = tuple(action_space.shape)
        self._half_range = (high - low) / 2.0
        self._mid = (high + low) / 2.0
        self.register_buffer("action_mid", torch.from_numpy(self._mid.copy()), persistent=False)
        self.register_buffer(
            "action_half_range", torch.from_numpy(self._half_range.copy()), persistent=False
        )
        head_config = dict(self.net_config["head_config"])
        head_config["output_activation"] = None
        gain = POLICY_OUTPUT_GAIN if head_config.get("output_vanish", True) else 1.0
        with seeded(self.net_config.get("random_seed")):
            self.encoder = (
                encoder
                if encoder is not None
                else build_encoder(observation_space, self.net_config, normalize_images)
            )
            self.head = build_head(self.encoder.latent_dim, 2 * self.action_dim, head_config, gain)

    def forward(
        self, obs: ObsTensor, tape: GradTape | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, log_std)``, each ``[B, action_dim]`` (sub-modules through ``tape``)."""
        latent = run(self.encoder, obs, tape)
        if self.detach_encoder:
            latent = latent.detach()
        mean, log_std = run(self.head, latent, tape).chunk(2, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(
        self, obs: ObsTensor, tape: GradTape | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised sample ``(action [B, action_dim] in [-1, 1], log_prob [B])``."""
        latent = run(self.encoder, obs, tape)
        if self.detach_encoder:
            latent = latent.detach()
        out = run(self.head, latent, tape)
        shape = (*out.shape[:-1], self.action_dim)
        noise = torch.randn(shape, dtype=out.dtype, device=out.device)
        if tape is None:
            return _SQUASHED_SAMPLE.forward(out, noise)[0]
        action, log_prob = tape.apply(_SQUASHED_SAMPLE, out, noise)
        return action, log_prob

    def greedy(self, obs: ObsTensor) -> torch.Tensor:
        """The deterministic action ``tanh(mean)``, normalised."""
        return torch.tanh(self.forward(obs)[0])

    def to_env_action(self, action: np.ndarray) -> np.ndarray:
        """Map normalised numpy actions ``[B, action_dim]`` to env actions (clipped to bounds)."""
        action = np.clip(action, -1.0, 1.0, out=action)
        action *= self._half_range
        action += self._mid
        return action.reshape((action.shape[0], *self._action_shape))

    def normalize_action(self, action: torch.Tensor) -> torch.Tensor:
        """Map env actions (tensor ``[B, ...]``) to ``[-1, 1]``, shape ``[B, action_dim]``."""
        action = action.reshape(action.shape[0], -1).float()
        return (action - self.action_mid) / self.action_half_range

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> SquashedGaussianActor:
        """Rebuild from ``config`` (fresh weights, own encoder)."""
        return cls(
            space_from_dict(config["observation_space"]),
            space_from_dict(config["action_space"]),
            net_config=config["net_config"],
            normalize_images=config["normalize_images"],
        )
