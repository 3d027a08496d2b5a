"""LSTM encoder for recurrent policies (``arch: lstm``), built on :class:`torch.nn.LSTM`.

``obs -> flatten -> LSTM(hidden_state_size, num_layers) -> Linear(latent_dim)``.

The recurrent state of a batch is one tensor ``[B, 2 * num_layers, hidden_state_size]``
(the ``h`` of every layer, then the ``c`` of every layer), batch first so that
rollout buffers can store and index it per env and step like any other field.
A zero state is the start of an episode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from gymnasium import spaces
from torch import nn

from agilerl.networks.mlp import HIDDEN_GAIN, init_linear, make_flattener
from agilerl.networks.spaces import flat_input_dim, space_from_dict, space_to_dict

__all__ = ["LSTMEncoder", "is_recurrent"]


def is_recurrent(module: nn.Module | None) -> bool:
    """Whether ``module`` is an encoder that carries a recurrent state."""
    return bool(getattr(module, "recurrent", False))


class LSTMEncoder(nn.Module):
    """A (stacked) LSTM over flat observations, projected to ``latent_dim``.

    Args:
        observation_space: Single-env observation space (non-composite).
        latent_dim: Output width.
        hidden_state_size: LSTM hidden width.
        num_layers: Stacked LSTM layers.
        dropout: Dropout between LSTM layers (training mode only).
        **bounds: Mutation bounds and other spec keys, kept in ``config``.

    Raises:
        ValueError: For a Dict/Tuple observation space.
    """

    arch = "lstm"
    recurrent = True

    def __init__(
        self,
        observation_space: spaces.Space,
        latent_dim: int = 64,
        hidden_state_size: int = 64,
        num_layers: int = 1,
        dropout: float = 0.0,
        **bounds: Any,
    ) -> None:
        super().__init__()
        bounds.pop("arch", None)
        if isinstance(observation_space, spaces.Dict | spaces.Tuple):
            raise ValueError("arch 'lstm' cannot encode a Dict/Tuple space; use 'multiinput'")
        self.observation_space = observation_space
        self.latent_dim = int(latent_dim)
        self.hidden_state_size = int(hidden_state_size)
        self.num_layers = int(num_layers)
        self.config: dict[str, Any] = {
            "arch": "lstm",
            "observation_space": space_to_dict(observation_space),
            "latent_dim": self.latent_dim,
            "hidden_state_size": self.hidden_state_size,
            "num_layers": self.num_layers,
            "dropout": float(dropout),
            **bounds,
        }
        self._flatten = make_flattener(observation_space)
        self.input_dim = flat_input_dim(observation_space)
        self.lstm = nn.LSTM(
            self.input_dim,
            self.hidden_state_size,
            num_layers=self.num_layers,
            dropout=float(dropout) if self.num_layers > 1 else 0.0,
        )
        for name, param in self.lstm.named_parameters():
            if name.startswith("weight"):
                nn.init.orthogonal_(param)
            else:
                nn.init.zeros_(param)
        self.projection = nn.Linear(self.hidden_state_size, self.latent_dim)
        init_linear(self.projection, HIDDEN_GAIN)

    @property
    def state_shape(self) -> tuple[int, int]:
        """Per-env state shape: ``(2 * num_layers, hidden_state_size)``."""
        return (2 * self.num_layers, self.hidden_state_size)

    def initial_state(
        self, batch_size: int, device: str | torch.device | None = None
    ) -> torch.Tensor:
        """A zero (episode-start) state ``[batch_size, 2 * num_layers, hidden_state_size]``."""
        device = self.projection.weight.device if device is None else device
        return torch.zeros((batch_size, *self.state_shape), device=device)

    def _inputs(self, x: torch.Tensor, lead: tuple[int, ...]) -> torch.Tensor:
        flat = x.reshape(-1, *x.shape[len(lead) :])
        if self._flatten is not None:
            flat = self._flatten(flat)
        return flat.float().reshape(*lead, self.input_dim)

    def _split(self, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        layers = self.num_layers
        state = state.transpose(0, 1)  # [2L, B, H]
        return state[:layers].contiguous(), state[layers:].contiguous()

    @staticmethod
    def _join(hc: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return torch.cat(hc, dim=0).transpose(0, 1)

    def sequence(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode time-major sequences without resets.

        Args:
            x: Observations ``[S, B, ...]``.
            state: States before the first step ``[B, 2 * num_layers, hidden_state_size]``.

        Returns:
            ``(latent [S, B, latent_dim], state after the last step)``.
        """
        steps, batch = x.shape[0], x.shape[1]
        out, hc = self.lstm(self._inputs(x, (steps, batch)), self._split(state))
        return self.projection(out), self._join(hc)

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step for a batch: ``(latent [B, latent_dim], next state)``."""
        latent, state = self.sequence(x.unsqueeze(0), state)
        return latent[0], state

    def forward(self, x: torch.Tensor, state: torch.Tensor | None = None) -> torch.Tensor:
        """Latent of one step from ``state`` (a zero, episode-start state when ``None``)."""
        if state is None:
            state = self.initial_state(x.shape[0], x.device)
        return self.step(x, state)[0]

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> LSTMEncoder:
        """Rebuild from ``config`` (fresh weights)."""
        kwargs = {k: v for k, v in config.items() if k not in ("arch", "observation_space")}
        return cls(space_from_dict(config["observation_space"]), **kwargs)
