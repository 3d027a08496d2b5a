"""Network-architecture edits for evolutionary HPO, and weight transfer between agents.

Two halves:

* Pure ``net_config`` edits (:func:`edit_mlp`, :func:`set_activation`): they
  return an edited deep copy and never touch an agent. Only MLP sections are
  edited: the ``head_config`` (always an MLP) and the ``encoder_config`` when
  its ``arch`` is ``"mlp"``. Every edit stays within the section's
  ``min/max_hidden_layers`` and ``min/max_mlp_nodes`` (and the top-level
  ``min/max_latent_dim`` for the encoder's output width). An ``lstm`` encoder
  is edited too: layer edits change ``num_layers`` within ``min/max_layers``,
  node edits ``hidden_state_size`` within ``min/max_hidden_state_size``.
* :func:`rebuild_agent`: a fresh agent of the same class built from
  ``init_kwargs()`` with the new ``net_config``, with every tensor of every
  network (``network_names``) copied over from the old agent where shapes
  overlap (for each dimension ``[:min(old, new)]``), and the agent's counters,
  history, hyperparameters, exploration state and extra state carried over.
  Optimizers are fresh (the parameter shapes may have changed).

Weights are matched by name, with one refinement for layer stacks (modules
holding a ``linears`` or ``layers`` ``ModuleList``): the output layer of the
new stack is always filled from the output layer of the old one, so adding or
removing the last hidden layer keeps the output weights; hidden layer ``i``
comes from old hidden layer ``i``; a newly added hidden layer keeps its fresh
initialisation.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = [
    "ARCH_OPS",
    "LATENT_SHARE",
    "NODE_CHOICES",
    "edit_mlp",
    "editable_sections",
    "mlp_bounds",
    "rebuild_agent",
    "set_activation",
    "transfer_weights",
]

NODE_CHOICES: tuple[int, ...] = (16, 32, 64)
"""Node counts an ``add_nodes`` / ``remove_nodes`` edit moves a layer's width by."""

LATENT_SHARE = 0.25
"""Probability that an encoder node edit tries the latent width before the hidden layers."""

ARCH_OPS: tuple[str, ...] = ("add_layer", "remove_layer", "add_nodes", "remove_nodes")
"""The architecture edits :func:`edit_mlp` knows."""

_SECTIONS = {"encoder": "encoder_config", "head": "head_config"}
_STACK_ATTRS = ("linears", "layers")
_LAYER_KEY = re.compile(r"^(?P<stack>(?:.*\.)?(?P<attr>linears|layers|norms))\.(?P<i>\d+)\.")
_LSTM_GATES = re.compile(r"(?:^|\.)(?:weight|bias)_(?:ih|hh)_l\d+$")  # 4 gate blocks on dim 0
_DEFAULT_BOUNDS = {
    "min_hidden_layers": 1,
    "max_hidden_layers": 6,
    "min_mlp_nodes": 8,
    "max_mlp_nodes": 256,
}


# --- net_config edits ---------------------------------------------------------------
def editable_sections(net_config: Mapping[str, Any]) -> list[str]:
    """MLP sections of a resolved ``net_config`` that mutations may edit.

    Returns:
        ``["encoder", "head"]`` for an MLP encoder, ``["head"]`` otherwise
        (CNN, multi-input and other encoders are left alone).
    """
    encoder = net_config.get("encoder_config") or {}
    sections = ["encoder"] if encoder.get("arch", "mlp") in ("mlp", "lstm") else []
    return [*sections, "head"]


def _edit_lstm(
    cfg: dict[str, Any], sec: dict[str, Any], op: str, rng: np.random.Generator
) -> tuple[dict[str, Any], str] | None:
    """An ``lstm`` encoder edit (``sec`` is ``cfg``'s encoder section, edited in place)."""
    if op in ("add_layer", "remove_layer"):
        old = int(sec.get("num_layers", 1))
        low, high = int(sec.get("min_layers", 1)), int(sec.get("max_layers", 6))
        new = old + (1 if op == "add_layer" else -1)
        if not max(low, 1) <= new <= high:
            return None
        sec["num_layers"] = new
        return cfg, f"encoder {op} lstm layers {old}->{new}"
    old = int(sec["hidden_state_size"])
    low = int(sec.get("min_hidden_state_size", 8))
    high = max(low, int(sec.get("max_hidden_state_size", 256)))
    new = _resize(old, 1 if op == "add_nodes" else -1, low, high, rng)
    if new is None:
        return None
    sec["hidden_state_size"] = new
    return cfg, f"encoder {op} lstm hidden {old}->{new}"


def mlp_bounds(section_config: Mapping[str, Any]) -> tuple[int, int, int, int]:
    """``(min_layers, max_layers, min_nodes, max_nodes)`` of an MLP section.

    Missing bounds take the defaults of :mod:`agilerl.networks.config`; an
    inverted pair is widened so that ``min <= max``.
    """
    values = [
        default if section_config.get(k) is None else int(section_config[k])
        for k, default in _DEFAULT_BOUNDS.items()
    ]
    min_layers, max_layers, min_nodes, max_nodes = values
    return min_layers, max(min_layers, max_layers), min_nodes, max(min_nodes, max_nodes)


def _latent_bounds(net_config: Mapping[str, Any]) -> tuple[int, int]:
    low = int(net_config.get("min_latent_dim") or 8)
    high = int(net_config.get("max_latent_dim") or 128)
    return low, max(low, high)


def _resize(old: int, sign: int, low: int, high: int, rng: np.random.Generator) -> int | None:
    """New width ``old +/- delta`` (``delta`` from :data:`NODE_CHOICES`) within ``[low, high]``.

    A delta that lands inside the bounds is preferred; when none does, the
    width is clipped to the bound. ``None`` when the width cannot move in
    direction ``sign``.
    """
    fitting = [d for d in NODE_CHOICES if low <= old + sign * d <= high]
    if fitting:
        return old + sign * int(rng.choice(fitting))
    new = int(np.clip(old + sign * min(NODE_CHOICES), low, high))
    return new if (new - old) * sign > 0 else None


def _format_sizes(sizes: list[int]) -> str:
    return "[" + ", ".join(str(s) for s in sizes) + "]"


def edit_mlp(
    net_config: Mapping[str, Any],
    section: str,
    op: str,
    rng: np.random.Generator,
) -> tuple[dict[str, Any], str] | None:
    """Apply one architecture edit to a copy of ``net_config``.

    Args:
        net_config: A resolved network config (not modified).
        section: ``"encoder"`` or ``"head"``.
        op: One of :data:`ARCH_OPS`:

            * ``add_layer``: append a hidden layer as wide as the last one
              (clipped into the node bounds); needs fewer than
              ``max_hidden_layers`` layers.
            * ``remove_layer``: drop the last hidden layer; needs more than
              ``min_hidden_layers`` layers.
            * ``add_nodes`` / ``remove_nodes``: widen / narrow one hidden
              layer (or, for the encoder, the latent output, 1 time in 4
              first) by one of :data:`NODE_CHOICES` that keeps it within the
              bounds, or up to the bound when none does; layers already at
              the bound are skipped.
        rng: Random generator for the layer and node count choices.

    Returns:
        ``(new_config, detail)`` with ``detail`` like
        ``"encoder add_layer [64]->[64, 64]"``, or ``None`` when the edit is
        not possible within the bounds.

    Raises:
        ValueError: For an unknown ``section`` or ``op``.
    """
    if section not in _SECTIONS:
        raise ValueError(f"Unknown network section {section!r}; choose encoder or head")
    if op not in ARCH_OPS:
        raise ValueError(f"Unknown architecture edit {op!r}; choose one of {ARCH_OPS}")
    if section not in editable_sections(net_config):
        return None
    key = _SECTIONS[section]
    cfg = copy.deepcopy(dict(net_config))
    sec = dict(cfg.get(key) or {})
    cfg[key] = sec
    if section == "encoder" and sec.get("arch") == "lstm":
        return _edit_lstm(cfg, sec, op, rng)
    sizes = [int(h) for h in sec.get("hidden_size", [])]
    min_layers, max_layers, min_nodes, max_nodes = mlp_bounds(sec)
    if op == "add_layer":
        if len(sizes) >= max_layers:
            return None
        width = sizes[-1] if sizes else int(cfg.get("latent_dim") or min_nodes)
        new_sizes = [*sizes, int(np.clip(width, min_nodes, max_nodes))]
    elif op == "remove_layer":
        if len(sizes) <= max(min_layers, 0) or not sizes:
            return None
        new_sizes = sizes[:-1]
    else:
        sign = 1 if op == "add_nodes" else -1
        candidates: list[int | None] = [int(i) for i in rng.permutation(len(sizes))]
        if section == "encoder":  # the latent (encoder output) width, tried first 1 time in 4
            position = 0 if rng.random() < LATENT_SHARE else len(candidates)
            candidates.insert(position, None)
        for layer in candidates:
            if layer is None:
                low, high = _latent_bounds(cfg)
                old = int(cfg.get("latent_dim") or 32)
            else:
                low, high, old = min_nodes, max_nodes, sizes[layer]
            new = _resize(old, sign, low, high, rng)
            if new is None:
                continue
            if layer is None:
                cfg["latent_dim"] = new
                return cfg, f"{section} {op} latent {old}->{new}"
            new_sizes = list(sizes)
            new_sizes[layer] = new
            sec["hidden_size"] = new_sizes
            detail = f"{section} {op} layer {layer} {_format_sizes(sizes)}->"
            return cfg, detail + _format_sizes(new_sizes)
        return None
    sec["hidden_size"] = new_sizes
    return cfg, f"{section} {op} {_format_sizes(sizes)}->{_format_sizes(new_sizes)}"


def set_activation(
    net_config: Mapping[str, Any], activation: str
) -> tuple[dict[str, Any], str] | None:
    """Copy of ``net_config`` with the hidden activation of its MLP sections set.

    The head's activation, and the encoder's for an MLP encoder, become
    ``activation``; output activations are left alone.

    Returns:
        ``(new_config, detail)`` (detail like ``"activation ReLU->GELU"``), or
        ``None`` when nothing would change.
    """
    cfg = copy.deepcopy(dict(net_config))
    old: list[str] = []
    changed = False
    for section in editable_sections(cfg):
        key = _SECTIONS[section]
        sec = dict(cfg.get(key) or {})
        current = sec.get("activation", "ReLU")
        old.append(str(current))
        if current != activation:
            sec["activation"] = activation
            changed = True
        cfg[key] = sec
    if not changed:
        return None
    before = "/".join(dict.fromkeys(old))
    return cfg, f"activation {before}->{activation}"


# --- weight transfer ----------------------------------------------------------------
def _stack_lengths(module: nn.Module) -> dict[str, int]:
    """``{qualified stack name: number of layers}`` of every layer stack in ``module``."""
    lengths: dict[str, int] = {}
    for name, sub in module.named_modules():
        for attr in _STACK_ATTRS:
            stack = getattr(sub, attr, None)
            if isinstance(stack, nn.ModuleList):
                lengths[f"{name}.{attr}" if name else attr] = len(stack)
    return lengths


def _source_key(key: str, old_lengths: dict[str, int], new_lengths: dict[str, int]) -> str | None:
    """The old state-dict key that fills new ``key`` (``None``: keep the fresh value)."""
    match = _LAYER_KEY.match(key)
    if match is None:
        return key
    stack, attr, index = match.group("stack"), match.group("attr"), int(match.group("i"))
    rest = key[match.end() :]
    prefix = stack[: -len(attr)]
    if attr == "norms":
        base = next((prefix + a for a in _STACK_ATTRS if prefix + a in old_lengths), None)
        if base is None:
            return key
        hidden_old = old_lengths[base] - 1
        return key if index < hidden_old else None
    n_old, n_new = old_lengths.get(stack), new_lengths.get(stack)
    if n_old is None or n_new is None or n_old == n_new:
        return key
    if index == n_new - 1:
        src = n_old - 1
    elif index < n_old - 1:
        src = index
    else:
        return None
    return f"{stack}.{src}.{rest}"


@torch.no_grad()
def transfer_weights(old: nn.Module, new: nn.Module) -> int:
    """Copy ``old``'s parameters and buffers into ``new`` (in place) where they overlap.

    Tensors are matched by state-dict name (see the module docstring for layer
    stacks); for tensors of the same rank the leading ``[:min(old, new)]``
    slice of every dimension is copied, the rest of ``new`` keeps its values
    (LSTM weights and biases per gate, so a wider state keeps every gate's old units).
    Parameters are written in place, so optimizers built over ``new`` stay valid.

    Returns:
        The number of tensors (fully or partly) copied.
    """
    old_state = old.state_dict()
    old_lengths, new_lengths = _stack_lengths(old), _stack_lengths(new)
    copied = 0
    for key, target in new.state_dict(keep_vars=True).items():
        src_key = _source_key(key, old_lengths, new_lengths)
        if src_key is None or src_key not in old_state:
            continue
        source = old_state[src_key]
        if source.dim() != target.dim():
            continue
        if source.dim() == 0:
            target.copy_(source)
        elif _LSTM_GATES.search(key):
            gates = target.view(4, -1, *target.shape[1:])
            old_gates = source.reshape(4, -1, *source.shape[1:])
            pairs = zip(gates.shape, old_gates.shape, strict=True)
            region = tuple(slice(0, min(a, b)) for a, b in pairs)
            gates[region].copy_(old_gates[region])
        else:
            pairs = zip(target.shape, source.shape, strict=True)
            region = tuple(slice(0, min(a, b)) for a, b in pairs)
            target[region].copy_(source[region])
        copied += 1
    return copied


_CARRIED = ("steps", "num_updates", "mut")


def rebuild_agent(
    agent: Any, net_config: Mapping[str, Any], seed: int | None = None, keep_weights: bool = True
) -> Any:
    """A new agent of ``agent``'s class with ``net_config``, carrying over everything else.

    The new agent is built from the agent's spec with the new network section
    (validated, so the architecture stays within its bounds), with the same
    spaces, ``index`` and ``device``; then the weights of every
    network in ``network_names`` are transferred with :func:`transfer_weights`;
    ``steps``, ``num_updates``, ``fitness``, ``scores``, ``mut``, the extra
    state (``_extra_state``) and any exploration generator (``rng``) and noise
    process (``noise``) are carried over. Optimizers are fresh.

    Args:
        agent: An :class:`~agilerl.algorithms.core.base.EvolvableAlgorithm`.
        net_config: The new network config.
        seed: Seeds torch's RNG (forked, so the global state is untouched) while
            the new networks are initialised; ``None`` uses the global RNG.
        keep_weights: Transfer the weights (otherwise fresh networks).

    Returns:
        The new agent (``agent`` itself is not modified).
    """
    from agilerl.algorithms.core.base import updated_spec

    spec = updated_spec(agent.spec, {"net_config": copy.deepcopy(dict(net_config))})
    new = agent.with_spec(spec, seed=seed)
    if keep_weights:
        for name in agent.network_names:
            transfer_weights(getattr(agent, name), getattr(new, name))
    for attr in _CARRIED:
        setattr(new, attr, getattr(agent, attr))
    new.fitness = list(agent.fitness)
    new.scores = list(agent.scores)
    new._load_extra_state(copy.deepcopy(agent._extra_state()))
    for attr in ("rng", "noise"):
        if hasattr(agent, attr) and hasattr(new, attr):
            setattr(new, attr, getattr(agent, attr))
    if hasattr(new, "_fused_key"):
        new._fused_key = None
    return new
