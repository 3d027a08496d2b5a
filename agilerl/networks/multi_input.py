"""Encoder for ``Dict``/``Tuple`` observations: one CNN per image key, vector keys concatenated."""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces
from torch import nn

from agilerl.arena.models.networks import CnnSpec, MlpSpec
from agilerl.networks.cnn import EvolvableCNN
from agilerl.networks.mlp import HIDDEN_GAIN, MLP, make_flattener
from agilerl.networks.spaces import (
    composite_items,
    flat_input_dim,
    is_image_space,
    space_from_dict,
    space_to_dict,
)

# Defaults of the sub-encoders come from the contract's specs (one source of truth).
DEFAULT_SUB_MLP: dict[str, Any] = {
    k: v for k, v in MlpSpec().model_dump().items() if k not in ("arch", "output_vanish")
}
DEFAULT_SUB_CNN: dict[str, Any] = {k: v for k, v in CnnSpec().model_dump().items() if k != "arch"}


class EvolvableMultiInput(nn.Module):
    """Encode composite observations into one ``latent_dim`` vector.

    Each 3-D ``Box`` key gets its own :class:`EvolvableCNN` (output
    ``sub_latent_dim``); the other keys are flattened (one-hot for discrete)
    and concatenated, optionally through an MLP (``vector_space_mlp``). All
    parts are concatenated and projected linearly to ``latent_dim``.

    Args:
        observation_space: ``Dict`` or ``Tuple`` space of non-composite leaves.
        latent_dim: Output width.
        sub_latent_dim: Output width of each CNN and of the vector MLP.
        vector_space_mlp: Pass the concatenated vector keys through an MLP.
        mlp_config: Settings of the vector MLP.
        cnn_config: Settings of the per-key CNNs.
        output_activation: Activation on the final projection.
        init_layers: Orthogonal initialisation.
        normalize_images: Divide ``uint8`` images by 255.
        **extra: Other spec keys (mutation bounds), kept in ``config``.

    Raises:
        ValueError: If the space is not composite or nests composite spaces.
    """

    arch = "multiinput"

    def __init__(
        self,
        observation_space: spaces.Space,
        latent_dim: int = 32,
        sub_latent_dim: int = 32,
        vector_space_mlp: bool = False,
        mlp_config: dict[str, Any] | None = None,
        cnn_config: dict[str, Any] | None = None,
        output_activation: str | None = None,
        init_layers: bool = True,
        normalize_images: bool = True,
        **extra: Any,
    ) -> None:
        super().__init__()
        extra.pop("arch", None)
        mlp_config = {**DEFAULT_SUB_MLP, **(mlp_config or {})}
        cnn_config = {**DEFAULT_SUB_CNN, **(cnn_config or {})}
        self.latent_dim = int(latent_dim)
        self.config: dict[str, Any] = {
            "arch": "multiinput",
            "observation_space": space_to_dict(observation_space),
            "latent_dim": self.latent_dim,
            "sub_latent_dim": int(sub_latent_dim),
            "vector_space_mlp": bool(vector_space_mlp),
            "mlp_config": dict(mlp_config),
            "cnn_config": dict(cnn_config),
            "output_activation": output_activation,
            "init_layers": bool(init_layers),
            "normalize_images": bool(normalize_images),
            **extra,
        }
        self.image_keys: list[str] = []
        self.vector_keys: list[str] = []
        self.cnns = nn.ModuleList()
        flatteners = []
        vector_dim = 0
        for key, sub in composite_items(observation_space):
            if isinstance(sub, spaces.Dict | spaces.Tuple):
                raise ValueError(
                    f"Nested composite observation spaces are not supported (key {key!r})"
                )
            if is_image_space(sub):
                self.image_keys.append(key)
                cnn_kwargs = {k: v for k, v in cnn_config.items() if k != "arch"}
                self.cnns.append(
                    EvolvableCNN(
                        sub,
                        latent_dim=sub_latent_dim,
                        normalize_images=normalize_images,
                        **cnn_kwargs,
                    )
                )
            else:
                self.vector_keys.append(key)
                flatteners.append(make_flattener(sub))
                vector_dim += flat_input_dim(sub)
        self._flatteners = tuple(flatteners)
        self.vector_mlp: MLP | None = None
        vector_out = vector_dim
        if vector_space_mlp and self.vector_keys:
            mlp_kwargs = {k: v for k, v in mlp_config.items() if k not in ("arch", "output_vanish")}
            self.vector_mlp = MLP(vector_dim, sub_latent_dim, output_gain=HIDDEN_GAIN, **mlp_kwargs)
            vector_out = int(sub_latent_dim)
        total = len(self.image_keys) * int(sub_latent_dim) + vector_out
        self.projection = MLP(
            total,
            self.latent_dim,
            hidden_size=[],
            output_activation=output_activation,
            init_layers=init_layers,
            output_gain=HIDDEN_GAIN,
        )

    @property
    def hidden_size(self) -> list[int]:
        """Hidden widths of the vector MLP (empty without one)."""
        return self.vector_mlp.hidden_size if self.vector_mlp is not None else []

    def forward(self, x: dict[str, torch.Tensor]) -> torch.Tensor:
        """Encode a dict of observation batches."""
        parts = [cnn(x[key]) for key, cnn in zip(self.image_keys, self.cnns, strict=True)]
        if self.vector_keys:
            vectors = []
            for key, flatten in zip(self.vector_keys, self._flatteners, strict=True):
                v = x[key]
                vectors.append(v.float() if flatten is None else flatten(v))
            vec = vectors[0] if len(vectors) == 1 else torch.cat(vectors, dim=1)
            if self.vector_mlp is not None:
                vec = self.vector_mlp(vec)
            parts.append(vec)
        features = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        return self.projection(features)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> EvolvableMultiInput:
        """Rebuild from ``config`` (fresh weights)."""
        kwargs = {k: v for k, v in config.items() if k not in ("arch", "observation_space")}
        return cls(space_from_dict(config["observation_space"]), **kwargs)
