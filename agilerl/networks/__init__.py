"""Evolvable-friendly torch networks built from plain ``net_config`` dicts."""

from __future__ import annotations

from agilerl.networks.actors import StochasticActor, action_kind
from agilerl.networks.cnn import EvolvableCNN
from agilerl.networks.config import (
    build_encoder,
    encoder_from_config,
    infer_arch,
    resolve_net_config,
)
from agilerl.networks.mlp import MLP, EvolvableMLP
from agilerl.networks.multi_input import EvolvableMultiInput
from agilerl.networks.optim import FlatAdam
from agilerl.networks.spaces import (
    make_obs_converter,
    obs_to_tensor,
    space_from_dict,
    space_to_dict,
)
from agilerl.networks.value import ValueNetwork

__all__ = [
    "MLP",
    "EvolvableCNN",
    "EvolvableMLP",
    "EvolvableMultiInput",
    "FlatAdam",
    "StochasticActor",
    "ValueNetwork",
    "action_kind",
    "build_encoder",
    "encoder_from_config",
    "infer_arch",
    "make_obs_converter",
    "obs_to_tensor",
    "resolve_net_config",
    "space_from_dict",
    "space_to_dict",
]
