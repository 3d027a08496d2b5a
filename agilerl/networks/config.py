"""Network config dicts: defaults, ``arch`` inference and encoder construction.

A ``net_config`` is a plain dict (a dump of the manifest's ``NetworkSpec``)::

    {"latent_dim": 64, "min_latent_dim": 8, "max_latent_dim": 128,
     "encoder_config": {"arch": "mlp", "hidden_size": [64], ...},
     "head_config": {"hidden_size": [64], ...},
     "squash_output": False, ...}

Every key is optional; :func:`resolve_net_config` fills the defaults from the
contract's specs (:mod:`agilerl.arena.models.networks`), the only place they live.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from gymnasium import spaces
from pydantic import ValidationError
from torch import nn

from agilerl.arena.models.networks import (
    CnnSpec,
    LstmSpec,
    MlpSpec,
    MultiInputSpec,
    NetworkSpec,
    SimbaSpec,
)
from agilerl.networks.cnn import EvolvableCNN
from agilerl.networks.lstm import LSTMEncoder
from agilerl.networks.mlp import EvolvableMLP
from agilerl.networks.multi_input import EvolvableMultiInput
from agilerl.networks.normalization import NormalizedEncoder, check_normalizable
from agilerl.networks.simba import SimbaEncoder
from agilerl.networks.spaces import is_image_space, space_from_dict

ENCODER_ARCHS = ("mlp", "cnn", "multiinput", "lstm", "simba")
_ENCODER_SPECS = {
    "mlp": MlpSpec,
    "cnn": CnnSpec,
    "multiinput": MultiInputSpec,
    "lstm": LstmSpec,
    "simba": SimbaSpec,
}


def infer_arch(observation_space: spaces.Space, recurrent: bool = False) -> str:
    """Encoder kind for a space: Dict/Tuple -> multiinput, 3-D Box -> cnn, else lstm
    for a recurrent policy, else mlp."""
    if isinstance(observation_space, spaces.Dict | spaces.Tuple):
        return "multiinput"
    if is_image_space(observation_space):
        return "cnn"
    return "lstm" if recurrent else "mlp"


def _fit_multi_input(encoder: dict[str, Any], observation_space: spaces.Space) -> dict[str, Any]:
    """A multi-input layout (``mlp_config`` / ``cnn_config``) for a space that is not composite.

    A section written for Dict observations names its sub-encoders; on a single
    image space its ``cnn_config`` is the encoder, on a flat space its ``mlp_config``.
    """
    if isinstance(observation_space, spaces.Dict | spaces.Tuple):
        return encoder
    if is_image_space(observation_space):
        return {**(encoder.get("cnn_config") or {}), "arch": "cnn"}
    return {**(encoder.get("mlp_config") or {}), "arch": "mlp"}


def _dump(spec_cls: type, data: Mapping[str, Any] | None) -> dict[str, Any]:
    return spec_cls.model_validate(dict(data or {})).model_dump()


def resolve_net_config(
    net_config: NetworkSpec | Mapping[str, Any] | None,
    observation_space: spaces.Space,
    recurrent: bool = False,
) -> dict[str, Any]:
    """Return a complete ``net_config`` with the spec's defaults filled in and ``arch`` set.

    Every default comes from the contract's network specs
    (:class:`~agilerl.arena.models.networks.NetworkSpec` and the encoder specs),
    so the manifest, the CLI and the Python API build the same network.

    Args:
        net_config: A network spec, a partial config dict, or ``None`` for all defaults.
        observation_space: Used to infer the encoder ``arch`` when unset, and
            the sub-encoders of a multi-input layout.
        recurrent: The policy is recurrent (an unset ``arch`` becomes ``lstm``).

    Returns:
        A new plain dict; the input is not modified.

    Raises:
        ValueError: For an unknown ``arch``, activation or key, or bounds that do not hold.
    """
    if isinstance(net_config, NetworkSpec):
        cfg = net_config.model_dump()
    else:
        raw = copy.deepcopy(dict(net_config or {}))
        encoder = raw.get("encoder_config")
        arch = (encoder or {}).get("arch") or raw.get("arch")
        if arch is not None and arch not in ENCODER_ARCHS:
            raise ValueError(
                f"Unknown encoder arch {arch!r}; choose one of {', '.join(ENCODER_ARCHS)}"
            )
        try:
            cfg = NetworkSpec.model_validate(raw).model_dump()
        except ValidationError as exc:
            raise ValueError(f"Invalid network config: {exc}") from None
    encoder = cfg.get("encoder_config") or {"arch": infer_arch(observation_space, recurrent)}
    if encoder["arch"] == "multiinput":
        encoder = _fit_multi_input(encoder, observation_space)
    arch = encoder["arch"]
    encoder = _dump(_ENCODER_SPECS[arch], encoder)
    if arch == "multiinput":
        encoder["mlp_config"] = _dump(MlpSpec, encoder.get("mlp_config"))
        encoder["cnn_config"] = _dump(CnnSpec, encoder.get("cnn_config"))
    head = _dump(MlpSpec, cfg.get("head_config"))
    head.pop("arch", None)
    cfg.update(encoder_config=encoder, head_config=head)
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
        An encoder module with ``latent_dim``, ``config`` and ``forward(obs)``; with
        ``normalize_observations`` a :class:`NormalizedEncoder` around it.

    Raises:
        ValueError: If the arch does not fit the observation space.
    """
    if net_config.get("normalize_observations"):
        check_normalizable(observation_space, net_config["encoder_config"]["arch"])
        inner = build_encoder(
            observation_space, {**net_config, "normalize_observations": False}, normalize_images
        )
        return NormalizedEncoder(observation_space, inner)
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
    if arch == "simba":
        if isinstance(observation_space, spaces.Dict | spaces.Tuple):
            raise ValueError("arch 'simba' cannot encode a Dict/Tuple space; use 'multiinput'")
        return SimbaEncoder(observation_space, latent_dim=latent_dim, **enc)
    if arch == "lstm":
        return LSTMEncoder(observation_space, latent_dim=latent_dim, **enc)
    raise ValueError(f"Unknown encoder arch {arch!r}; choose one of {', '.join(ENCODER_ARCHS)}")


def encoder_from_config(config: Mapping[str, Any]) -> nn.Module:
    """Rebuild an encoder from its own ``config`` attribute (fresh weights and statistics)."""
    if config.get("normalize_observations"):
        inner = {k: v for k, v in config.items() if k != "normalize_observations"}
        space = space_from_dict(config["observation_space"])
        return NormalizedEncoder(space, encoder_from_config(inner))
    classes = {
        "mlp": EvolvableMLP,
        "cnn": EvolvableCNN,
        "multiinput": EvolvableMultiInput,
        "simba": SimbaEncoder,
        "lstm": LSTMEncoder,
    }
    return classes[config["arch"]].from_config(dict(config))
