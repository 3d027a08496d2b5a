"""Network config dicts: defaults, ``arch`` inference and encoder construction.

A ``net_config`` is a plain dict (a dump of the manifest's ``NetworkSpec``)::

    {"latent_dim": 32, "min_latent_dim": 8, "max_latent_dim": 128,
     "encoder_config": {"arch": "mlp", "hidden_size": [64], ...},
     "head_config": {"hidden_size": [64], ...},
     "squash_output": False}

Every key is optional; :func:`resolve_net_config` fills the defaults.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from gymnasium import spaces
from torch import nn

from agilerl.networks.activations import check_activation
from agilerl.networks.cnn import EvolvableCNN
from agilerl.networks.mlp import EvolvableMLP
from agilerl.networks.multi_input import DEFAULT_SUB_CNN, DEFAULT_SUB_MLP, EvolvableMultiInput
from agilerl.networks.spaces import is_image_space

ENCODER_ARCHS = ("mlp", "cnn", "multiinput", "lstm", "simba")

_MLP_BOUNDS: dict[str, Any] = {
    "min_hidden_layers": 1,
    "max_hidden_layers": 6,
    "min_mlp_nodes": 8,
    "max_mlp_nodes": 256,
}
DEFAULT_MLP_CONFIG: dict[str, Any] = {
    "arch": "mlp",
    "hidden_size": [64],
    "activation": "ReLU",
    "output_activation": None,
    "layer_norm": True,
    "init_layers": True,
    "output_vanish": True,
    **_MLP_BOUNDS,
}
DEFAULT_CNN_CONFIG: dict[str, Any] = {
    "arch": "cnn",
    **DEFAULT_SUB_CNN,
    "output_activation": None,
    "min_hidden_layers": 1,
    "max_hidden_layers": 6,
    "min_channel_size": 8,
    "max_channel_size": 256,
}
DEFAULT_MULTI_INPUT_CONFIG: dict[str, Any] = {
    "arch": "multiinput",
    "latent_dim": 32,
    "vector_space_mlp": False,
    "mlp_config": dict(DEFAULT_SUB_MLP),
    "cnn_config": dict(DEFAULT_SUB_CNN),
    "output_activation": None,
    "min_latent_dim": 8,
    "max_latent_dim": 128,
}
DEFAULT_HEAD_CONFIG: dict[str, Any] = {
    "hidden_size": [64],
    "activation": "ReLU",
    "output_activation": None,
    "layer_norm": True,
    "init_layers": True,
    "output_vanish": True,
    **_MLP_BOUNDS,
}
_DEFAULTS_BY_ARCH = {
    "mlp": DEFAULT_MLP_CONFIG,
    "cnn": DEFAULT_CNN_CONFIG,
    "multiinput": DEFAULT_MULTI_INPUT_CONFIG,
    "lstm": {"arch": "lstm", "hidden_state_size": 64, "num_layers": 1},
    "simba": {"arch": "simba", "hidden_size": 128, "num_blocks": 2},
}


def infer_arch(observation_space: spaces.Space) -> str:
    """Encoder kind for a space: Dict/Tuple -> multiinput, 3-D Box -> cnn, else mlp."""
    if isinstance(observation_space, spaces.Dict | spaces.Tuple):
        return "multiinput"
    if is_image_space(observation_space):
        return "cnn"
    return "mlp"


def resolve_net_config(
    net_config: Mapping[str, Any] | None, observation_space: spaces.Space
) -> dict[str, Any]:
    """Return a complete ``net_config`` with defaults filled in and ``arch`` set.

    Unknown keys are kept, so a resolved config round-trips through checkpoints.

    Args:
        net_config: Partial config (``None`` for all defaults).
        observation_space: Used to infer the encoder ``arch`` when unset.

    Returns:
        A new dict; the input is not modified.

    Raises:
        ValueError: For an unknown ``arch`` or activation name.
    """
    cfg = copy.deepcopy(dict(net_config or {}))
    top_arch = cfg.pop("arch", None)
    encoder = dict(cfg.get("encoder_config") or {})
    arch = encoder.get("arch") or top_arch or infer_arch(observation_space)
    if arch not in ENCODER_ARCHS:
        raise ValueError(f"Unknown encoder arch {arch!r}; choose one of {', '.join(ENCODER_ARCHS)}")
    defaults = copy.deepcopy(_DEFAULTS_BY_ARCH[arch])
    if arch == "multiinput":
        for sub in ("mlp_config", "cnn_config"):
            encoder[sub] = {**defaults[sub], **(encoder.get(sub) or {})}
    encoder = {**defaults, **encoder, "arch": arch}
    head = {**copy.deepcopy(DEFAULT_HEAD_CONFIG), **(cfg.get("head_config") or {})}
    for section in (
        encoder,
        head,
        encoder.get("mlp_config") or {},
        encoder.get("cnn_config") or {},
    ):
        check_activation(section.get("activation"))
        check_activation(section.get("output_activation"))
    cfg.update(
        {
            "latent_dim": int(cfg.get("latent_dim") or 32),
            "min_latent_dim": int(cfg.get("min_latent_dim") or 8),
            "max_latent_dim": int(cfg.get("max_latent_dim") or 128),
            "encoder_config": encoder,
            "head_config": head,
            "squash_output": bool(cfg.get("squash_output", False)),
        }
    )
    return cfg


def build_encoder(
    observation_space: spaces.Space,
    net_config: Mapping[str, Any],
    normalize_images: bool = True,
) -> nn.Module:
    """Build the encoder described by a resolved ``net_config``.

    Args:
        observation_space: Single-env observation space.
        net_config: Output of :func:`resolve_net_config`.
        normalize_images: Divide ``uint8`` images by 255.

    Returns:
        An encoder module with ``latent_dim``, ``config`` and ``forward(obs)``.

    Raises:
        NotImplementedError: For ``lstm`` and ``simba`` encoders (not yet built).
        ValueError: If the arch does not fit the observation space.
    """
    enc = dict(net_config["encoder_config"])
    arch = enc.pop("arch")
    latent_dim = int(net_config["latent_dim"])
    if arch == "mlp":
        if isinstance(observation_space, spaces.Dict | spaces.Tuple):
            raise ValueError("arch 'mlp' cannot encode a Dict/Tuple space; use 'multiinput'")
        return EvolvableMLP(observation_space, latent_dim=latent_dim, **enc)
    if arch == "cnn":
        return EvolvableCNN(
            observation_space, latent_dim=latent_dim, normalize_images=normalize_images, **enc
        )
    if arch == "multiinput":
        sub_latent = enc.pop("latent_dim", 32)
        enc.pop("min_latent_dim", None)
        enc.pop("max_latent_dim", None)
        return EvolvableMultiInput(
            observation_space,
            latent_dim=latent_dim,
            sub_latent_dim=sub_latent,
            normalize_images=normalize_images,
            **enc,
        )
    raise NotImplementedError(
        f"Encoder arch {arch!r} is not implemented yet (supported now: mlp, cnn, multiinput)"
    )


def encoder_from_config(config: Mapping[str, Any]) -> nn.Module:
    """Rebuild an encoder from its own ``config`` attribute (fresh weights)."""
    classes = {"mlp": EvolvableMLP, "cnn": EvolvableCNN, "multiinput": EvolvableMultiInput}
    return classes[config["arch"]].from_config(dict(config))
