"""Fully connected networks: the plain :class:`MLP` and the :class:`EvolvableMLP` encoder.

Hidden sizes are kept as data (``hidden_size``) and every module carries a
``config`` dict it can be rebuilt from, so architecture mutation can later
build a resized copy and transfer weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from agilerl.networks.activations import activation_fn, make_activation
from agilerl.networks.spaces import flat_input_dim, space_from_dict, space_to_dict

HIDDEN_GAIN = math.sqrt(2.0)


def init_linear(layer: nn.Linear, gain: float) -> None:
    """Orthogonal weights with ``gain`` and zero bias."""
    nn.init.orthogonal_(layer.weight, gain=gain)
    nn.init.zeros_(layer.bias)


class MLP(nn.Module):
    """``[Linear -> LayerNorm? -> act] * len(hidden_size) -> Linear -> output_act?``.

    The forward pass calls ``F.linear`` on the layers' parameters directly
    instead of going through ``nn.Sequential``: for tiny networks the per-module
    call overhead costs more than the arithmetic.

    Args:
        num_inputs: Input width.
        num_outputs: Output width.
        hidden_size: Width of each hidden layer (may be empty).
        activation: Hidden activation name.
        output_activation: Output activation name, ``None`` for none.
        layer_norm: LayerNorm after each hidden linear layer.
        init_layers: Orthogonal init (gain sqrt(2) hidden, ``output_gain`` output).
        output_gain: Gain of the output layer when ``init_layers``.
        **bounds: Mutation bounds (``min_hidden_layers`` ...) kept in ``config``.
    """

    def __init__(
        self,
        num_inputs: int,
        num_outputs: int,
        hidden_size: Sequence[int] = (64,),
        activation: str = "ReLU",
        output_activation: str | None = None,
        layer_norm: bool = False,
        init_layers: bool = True,
        output_gain: float = 1.0,
        **bounds: Any,
    ) -> None:
        super().__init__()
        self.num_inputs = int(num_inputs)
        self.num_outputs = int(num_outputs)
        self.hidden_size = [int(h) for h in hidden_size]
        self.activation = activation
        self.output_activation = output_activation
        self.layer_norm = bool(layer_norm)
        self.config: dict[str, Any] = {
            "num_inputs": self.num_inputs,
            "num_outputs": self.num_outputs,
            "hidden_size": list(self.hidden_size),
            "activation": activation,
            "output_activation": output_activation,
            "layer_norm": self.layer_norm,
            "init_layers": bool(init_layers),
            "output_gain": float(output_gain),
            **bounds,
        }
        dims = [self.num_inputs, *self.hidden_size, self.num_outputs]
        self.linears = nn.ModuleList(nn.Linear(dims[i], dims[i + 1]) for i in range(len(dims) - 1))
        self.norms = (
            nn.ModuleList(nn.LayerNorm(h) for h in self.hidden_size) if layer_norm else None
        )
        acts = [make_activation(activation) for _ in self.hidden_size]
        acts.append(make_activation(output_activation))
        self.acts = nn.ModuleList(a if a is not None else nn.Identity() for a in acts)
        if init_layers:
            for i, layer in enumerate(self.linears):
                init_linear(layer, HIDDEN_GAIN if i < len(self.hidden_size) else output_gain)
        plan: list[tuple[nn.Linear, nn.LayerNorm | None, Callable | None]] = []
        for i, layer in enumerate(self.linears):
            hidden = i < len(self.hidden_size)
            norm = self.norms[i] if hidden and self.norms is not None else None
            name = activation if hidden else output_activation
            plan.append((layer, norm, activation_fn(name, self.acts[i])))
        self._plan = tuple(plan)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``[..., num_inputs]`` to ``[..., num_outputs]``."""
        for layer, norm, act in self._plan:
            x = F.linear(x, layer.weight, layer.bias)
            if norm is not None:
                x = F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)
            if act is not None:
                x = act(x)
        return x

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> MLP:
        """Rebuild from ``config`` (fresh weights)."""
        return cls(**config)


def make_flattener(space: spaces.Space) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """Function mapping a batch of ``space`` observations to floats for an MLP.

    Returns ``None`` when the tensor can be used as is (a 1-D float Box).
    """
    if isinstance(space, spaces.Box):
        if len(space.shape) == 1 and space.dtype != "uint8":
            return None
        return lambda x: x.reshape(x.shape[0], -1).float()
    if isinstance(space, spaces.Discrete):
        n, start = int(space.n), int(space.start)
        return lambda x: F.one_hot(x.reshape(-1).long() - start, n).float()
    if isinstance(space, spaces.MultiDiscrete):
        nvec = [int(n) for n in space.nvec.reshape(-1)]
        starts = torch.as_tensor(space.start.reshape(-1), dtype=torch.int64)

        def one_hot_multi(x: torch.Tensor) -> torch.Tensor:
            x = x.reshape(x.shape[0], -1).long() - starts.to(x.device)
            return torch.cat([F.one_hot(x[:, i], n) for i, n in enumerate(nvec)], dim=1).float()

        return one_hot_multi
    if isinstance(space, spaces.MultiBinary):
        return lambda x: x.reshape(x.shape[0], -1).float()
    raise ValueError(f"Observation space {type(space).__name__} is not supported by an MLP encoder")


class EvolvableMLP(nn.Module):
    """MLP encoder: observation -> ``latent_dim`` features.

    Discrete observations are one-hot encoded, multi-dimensional boxes are
    flattened.

    Args:
        observation_space: Single-env observation space (non-composite).
        latent_dim: Output width.
        hidden_size: Hidden layer widths.
        activation: Hidden activation.
        output_activation: Activation on the latent output.
        layer_norm: LayerNorm after each hidden layer.
        init_layers: Orthogonal initialisation.
        **bounds: Mutation bounds and other spec keys, kept in ``config``.
    """

    arch = "mlp"

    def __init__(
        self,
        observation_space: spaces.Space,
        latent_dim: int = 32,
        hidden_size: Sequence[int] = (64,),
        activation: str = "ReLU",
        output_activation: str | None = None,
        layer_norm: bool = True,
        init_layers: bool = True,
        **bounds: Any,
    ) -> None:
        super().__init__()
        bounds.pop("arch", None)
        bounds.pop("output_vanish", None)  # encoders never vanish their output
        self.observation_space = observation_space
        self.latent_dim = int(latent_dim)
        self.config: dict[str, Any] = {
            "arch": "mlp",
            "observation_space": space_to_dict(observation_space),
            "latent_dim": self.latent_dim,
            "hidden_size": [int(h) for h in hidden_size],
            "activation": activation,
            "output_activation": output_activation,
            "layer_norm": bool(layer_norm),
            "init_layers": bool(init_layers),
            **bounds,
        }
        self._flatten = make_flattener(observation_space)
        self.mlp = MLP(
            flat_input_dim(observation_space),
            self.latent_dim,
            hidden_size,
            activation=activation,
            output_activation=output_activation,
            layer_norm=layer_norm,
            init_layers=init_layers,
            output_gain=HIDDEN_GAIN,
        )

    @property
    def hidden_size(self) -> list[int]:
        """Hidden layer widths (the mutable architecture data)."""
        return self.mlp.hidden_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Encode a batch of observations."""
        if self._flatten is not None:
            x = self._flatten(x)
        return self.mlp.forward(x)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> EvolvableMLP:
        """Rebuild from ``config`` (fresh weights)."""
        kwargs = {k: v for k, v in config.items() if k not in ("arch", "observation_space")}
        return cls(space_from_dict(config["observation_space"]), **kwargs)
