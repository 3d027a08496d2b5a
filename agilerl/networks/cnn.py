"""Convolutional encoder for image observations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from agilerl.networks.activations import activation_fn, make_activation
from agilerl.networks.mlp import HIDDEN_GAIN
from agilerl.networks.spaces import space_from_dict, space_to_dict

_CHANNEL_COUNTS = (1, 2, 3, 4)


def infer_channels_last(shape: Sequence[int]) -> bool:
    """Guess the layout of a 3-D image shape: ``(H, W, C)`` if the last dim looks like channels."""
    return shape[-1] in _CHANNEL_COUNTS and shape[0] not in _CHANNEL_COUNTS


class EvolvableCNN(nn.Module):
    """``Conv2d -> (GroupNorm) -> act`` stack, flattened and projected to ``latent_dim``.

    Args:
        observation_space: 3-D ``Box`` (channels first or last).
        latent_dim: Output width.
        channel_size: Output channels per conv layer.
        kernel_size: Kernel size per conv layer.
        stride_size: Stride per conv layer.
        activation: Activation after each conv layer.
        output_activation: Activation on the latent output.
        layer_norm: Normalise each conv output over (C, H, W) (``GroupNorm(1, C)``).
        init_layers: Orthogonal initialisation.
        normalize_images: Divide ``uint8`` observations by 255.
        channels_last: Image layout; ``None`` infers it from the shape.
        **bounds: Mutation bounds and other spec keys, kept in ``config``.

    Raises:
        ValueError: If the space is not a 3-D Box, the layer lists differ in
            length, or the image is too small for the kernels.
    """

    arch = "cnn"

    def __init__(
        self,
        observation_space: spaces.Space,
        latent_dim: int = 32,
        channel_size: Sequence[int] = (32, 32),
        kernel_size: Sequence[int] = (3, 3),
        stride_size: Sequence[int] = (1, 1),
        activation: str = "ReLU",
        output_activation: str | None = None,
        layer_norm: bool = False,
        init_layers: bool = True,
        normalize_images: bool = True,
        channels_last: bool | None = None,
        **bounds: Any,
    ) -> None:
        super().__init__()
        bounds.pop("arch", None)
        if not isinstance(observation_space, spaces.Box) or len(observation_space.shape) != 3:
            raise ValueError(
                f"EvolvableCNN needs a 3-D Box observation space, got {observation_space}"
            )
        if not len(channel_size) == len(kernel_size) == len(stride_size):
            raise ValueError(
                "channel_size, kernel_size and stride_size must have the same length "
                f"(got {len(channel_size)}, {len(kernel_size)}, {len(stride_size)})"
            )
        shape = tuple(observation_space.shape)
        if channels_last is None:
            channels_last = infer_channels_last(shape)
        self.channels_last = bool(channels_last)
        self.latent_dim = int(latent_dim)
        self.channel_size = [int(c) for c in channel_size]
        self.kernel_size = [int(k) for k in kernel_size]
        self.stride_size = [int(s) for s in stride_size]
        self.config: dict[str, Any] = {
            "arch": "cnn",
            "observation_space": space_to_dict(observation_space),
            "latent_dim": self.latent_dim,
            "channel_size": list(self.channel_size),
            "kernel_size": list(self.kernel_size),
            "stride_size": list(self.stride_size),
            "activation": activation,
            "output_activation": output_activation,
            "layer_norm": bool(layer_norm),
            "init_layers": bool(init_layers),
            "normalize_images": bool(normalize_images),
            "channels_last": self.channels_last,
            **bounds,
        }
        is_uint8 = observation_space.dtype == "uint8"
        self._scale = 1.0 / 255.0 if normalize_images and is_uint8 else None
        in_channels = shape[2] if self.channels_last else shape[0]
        height, width = (shape[0], shape[1]) if self.channels_last else (shape[1], shape[2])

        self.convs = nn.ModuleList()
        self.norms = nn.ModuleList() if layer_norm else None
        self.acts = nn.ModuleList()
        channels = in_channels
        for out_c, k, s in zip(self.channel_size, self.kernel_size, self.stride_size, strict=True):
            height, width = (height - k) // s + 1, (width - k) // s + 1
            if height < 1 or width < 1:
                raise ValueError(
                    f"Image of shape {shape} is too small for kernel_size={self.kernel_size}, "
                    f"stride_size={self.stride_size}"
                )
            conv = nn.Conv2d(channels, out_c, kernel_size=k, stride=s)
            if init_layers:
                nn.init.orthogonal_(conv.weight, gain=HIDDEN_GAIN)
                nn.init.zeros_(conv.bias)
            self.convs.append(conv)
            if self.norms is not None:
                self.norms.append(nn.GroupNorm(1, out_c))
            self.acts.append(make_activation(activation) or nn.Identity())
            channels = out_c
        self.flat_dim = channels * height * width
        self.fc = nn.Linear(self.flat_dim, self.latent_dim)
        if init_layers:
            nn.init.orthogonal_(self.fc.weight, gain=HIDDEN_GAIN)
            nn.init.zeros_(self.fc.bias)
        self.out_act = make_activation(output_activation) or nn.Identity()
        self._act_fns = tuple(activation_fn(activation, a) for a in self.acts)
        self._out_fn = activation_fn(output_activation, self.out_act)

    @property
    def hidden_size(self) -> list[int]:
        """Conv channel sizes (the mutable architecture data)."""
        return self.channel_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Encode a batch of images ``[B, C, H, W]`` (or ``[B, H, W, C]``)."""
        if self.channels_last:
            x = x.permute(0, 3, 1, 2)
        x = x.float()
        if self._scale is not None:
            x = x * self._scale
        for i, conv in enumerate(self.convs):
            x = conv(x)
            if self.norms is not None:
                x = self.norms[i](x)
            act = self._act_fns[i]
            if act is not None:
                x = act(x)
        x = F.linear(x.flatten(1), self.fc.weight, self.fc.bias)
        return x if self._out_fn is None else self._out_fn(x)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> EvolvableCNN:
        """Rebuild from ``config`` (fresh weights)."""
        kwargs = {k: v for k, v in config.items() if k not in ("arch", "observation_space")}
        return cls(space_from_dict(config["observation_space"]), **kwargs)
