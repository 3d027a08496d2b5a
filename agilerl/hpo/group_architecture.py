"""Architecture mutation of a multi-agent algorithm's group networks.

A multi-agent agent has one network section per agent group (``speaker``,
``listener``; a single ``net_config`` counts as every group's). A mutation
edits one group's section with :func:`agilerl.hpo.architecture.edit_mlp`
(add/remove a hidden layer or nodes, within the section's
``min/max_hidden_layers`` and ``min/max_mlp_nodes`` bounds), writes
``net_config`` back as a per-group mapping (validated through the spec), and
rebuilds the agent with :meth:`with_spec`. Every network's weights are copied
over where they overlap: linear layer ``i`` from old layer ``i`` (the output
layer always from the old output layer), leading slices of each dimension.
Counters, history and exploration state are carried over; optimizers are fresh.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from torch import nn

from agilerl.hpo.architecture import edit_mlp, editable_sections

__all__ = ["group_net_configs", "mutate_group_architecture", "transfer_mlp"]


def group_net_configs(agent: Any) -> dict[str, dict[str, Any]]:
    """``{group: resolved network section}`` of every policy group of ``agent``.

    Sections left out (``None``) are written out with the defaults
    :func:`~agilerl.algorithms.core.multi_agent.build_mlp` builds from.
    """
    from agilerl.algorithms.core.multi_agent import agent_group
    from agilerl.arena.models.networks import MlpSpec, NetworkSpec

    configs: dict[str, dict[str, Any]] = {}
    for policy in agent.policies:
        group = agent_group(policy)
        if group in configs:
            continue
        net = agent.net_spec(policy) or NetworkSpec()
        data = net.model_dump(mode="json")
        for key in ("encoder_config", "head_config"):
            if data.get(key) is None:
                data[key] = MlpSpec().model_dump(mode="json")
        configs[group] = data
    return configs


@torch.no_grad()
def _copy_overlap(target: torch.Tensor, source: torch.Tensor) -> None:
    if target.dim() != source.dim():
        return
    region = tuple(slice(0, min(a, b)) for a, b in zip(target.shape, source.shape, strict=True))
    target[region].copy_(source[region])


def transfer_mlp(old: nn.Module, new: nn.Module) -> None:
    """Copy an MLP's weights into a resized one (see the module docstring); in place."""
    if not isinstance(old, nn.Sequential) or not isinstance(new, nn.Sequential):
        for (_, target), (_, source) in zip(
            new.state_dict(keep_vars=True).items(), old.state_dict().items(), strict=False
        ):
            _copy_overlap(target, source)
        return
    for kind in (nn.Linear, nn.LayerNorm):
        old_layers = [m for m in old if isinstance(m, kind)]
        new_layers = [m for m in new if isinstance(m, kind)]
        if not old_layers or not new_layers:
            continue
        pairs = list(zip(new_layers[:-1], old_layers[:-1], strict=False))
        if kind is nn.Linear:
            pairs.append((new_layers[-1], old_layers[-1]))
        else:  # norms follow hidden layers only
            pairs = list(zip(new_layers, old_layers, strict=False))
        for target, source in pairs:
            for name, param in target.named_parameters():
                _copy_overlap(param, getattr(source, name))


def mutate_group_architecture(
    agent: Any, rng: np.random.Generator, new_layer: float = 0.2
) -> tuple[Any, str]:
    """One architecture edit of one group's networks, as a rebuilt agent.

    Args:
        agent: A :class:`~agilerl.algorithms.core.multi_agent.MultiAgentAlgorithm`.
        rng: Picks the group, section, edit and sizes.
        new_layer: Probability of trying a depth edit before a width edit.

    Returns:
        ``(new agent, detail)`` with ``detail`` like ``"listener: head add_layer
        [64]->[64, 64]"``, or ``(agent, "")`` when no edit fits the bounds.
    """
    from agilerl.algorithms.core.base import updated_spec

    configs = group_net_configs(agent)
    groups = list(configs)
    layer_ops = ["add_layer", "remove_layer"]
    node_ops = ["add_nodes", "remove_nodes"]
    if rng.random() < 0.5:
        layer_ops.reverse()
    if rng.random() < 0.5:
        node_ops.reverse()
    ops = layer_ops + node_ops if rng.random() < new_layer else node_ops + layer_ops
    for g in rng.permutation(len(groups)):
        group = groups[int(g)]
        sections = editable_sections(configs[group])
        for s in rng.permutation(len(sections)):
            for op in ops:
                edited = edit_mlp(configs[group], sections[int(s)], op, rng)
                if edited is None:
                    continue
                new_configs = {**copy.deepcopy(configs), group: edited[0]}
                spec = updated_spec(agent.spec, {"net_config": new_configs})
                return _rebuilt(agent, spec, int(rng.integers(0, 2**31 - 1))), (
                    f"{group}: {edited[1]}"
                )
    return agent, ""


def _rebuilt(agent: Any, spec: Any, seed: int) -> Any:
    new = agent.with_spec(spec, seed=seed)
    for name, old_net in agent.nets.items():
        new_net = new.nets[name]
        if isinstance(old_net, nn.ParameterDict):
            for key, param in new_net.items():
                if key in old_net:
                    _copy_overlap(param.data, old_net[key].data)
            continue
        for key, module in new_net.items():
            if key in old_net:
                transfer_mlp(old_net[key], module)
    for attr in ("steps", "num_updates", "mut"):
        setattr(new, attr, getattr(agent, attr))
    new.fitness = list(agent.fitness)
    new.scores = list(agent.scores)
    new._load_extra_state(copy.deepcopy(agent._extra_state()))
    return new
