"""Inference-only fusion of actor and critic MLP stacks.

During rollout collection the actor and critic each run a few tiny matmuls
per env step, and for batch sizes like 8 the per-op dispatch cost dominates.
:class:`FusedActorCritic` packs both stacks into one: the first layer's
weights are concatenated (both read the same input) and later layers become
block-diagonal, so ``k``-layer actor + ``k``-layer critic cost ``k`` matmuls.
Weights are pre-transposed once per snapshot. The result equals the separate
forward passes up to float summation order.

Fusion applies when both stacks are plain MLPs (no LayerNorm) of the same
depth with the same elementwise activation at every depth; with a shared
encoder only the heads need to match (the encoder runs once, any arch).
:func:`build_fused_actor_critic` returns ``None`` otherwise and callers fall
back to the modules' own forward passes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from agilerl.networks.mlp import MLP, EvolvableMLP

_ELEMENTWISE = frozenset({"Tanh", "GELU", "ReLU", "ELU", "LeakyReLU", "Sigmoid", "Softplus"})

Layer = tuple[nn.Linear, Callable[[torch.Tensor], torch.Tensor] | None, str | None]


def _mlp_layers(mlp: MLP) -> list[Layer] | None:
    """``(linear, act_fn, act_name)`` per layer, or ``None`` if the MLP cannot be fused."""
    if mlp.norms is not None:
        return None
    names = [mlp.activation] * len(mlp.hidden_size) + [mlp.output_activation]
    layers: list[Layer] = []
    for (linear, _, act), name in zip(mlp._plan, names, strict=True):
        key = None if name in (None, "Identity") else name
        if key is not None and key not in _ELEMENTWISE:
            return None
        layers.append((linear, act, key))
    return layers


class FusedActorCritic:
    """Snapshot of actor/critic MLP weights as fused, pre-transposed matrices.

    Call it as ``params, value = fused(obs)``; rebuild (``build_fused_actor_critic``)
    whenever the weights change.
    """

    def __init__(
        self,
        prefix: Callable[[torch.Tensor], torch.Tensor] | None,
        actor_layers: list[Layer],
        critic_layers: list[Layer],
    ) -> None:
        self.prefix = prefix
        self.split = actor_layers[-1][0].out_features
        weights: list[tuple[torch.Tensor, torch.Tensor, Callable | None]] = []
        with torch.no_grad():
            for depth, (a, c) in enumerate(zip(actor_layers, critic_layers, strict=True)):
                if depth == 0:
                    w = torch.cat([a[0].weight, c[0].weight], dim=0)
                else:
                    w = torch.block_diag(a[0].weight, c[0].weight)
                b = torch.cat([a[0].bias, c[0].bias])
                weights.append((w.t().contiguous(), b.clone(), a[1]))
        self.weights = weights

    def __call__(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actor head output, value [B])`` for a batch of observations."""
        x = obs if self.prefix is None else self.prefix(obs)
        for w, b, act in self.weights:
            x = torch.addmm(b, x, w)
            if act is not None:
                x = act(x)
        return x[:, : self.split], x[:, self.split]


def build_fused_actor_critic(
    actor: nn.Module, critic: nn.Module, shared_encoder: bool
) -> FusedActorCritic | None:
    """Fuse ``actor`` and ``critic`` for inference, or ``None`` when they do not qualify.

    Args:
        actor: A :class:`~agilerl.networks.actors.StochasticActor`.
        critic: A :class:`~agilerl.networks.value.ValueNetwork`.
        shared_encoder: Both use ``actor.encoder`` (only the heads are fused).
    """
    actor_head = _mlp_layers(actor.head)
    critic_head = _mlp_layers(critic.head)
    if actor_head is None or critic_head is None:
        return None
    if shared_encoder:
        prefix = actor.encoder.forward
        actor_layers, critic_layers = actor_head, critic_head
    else:
        enc_a, enc_c = actor.encoder, critic.encoder
        if not (isinstance(enc_a, EvolvableMLP) and isinstance(enc_c, EvolvableMLP)):
            return None
        a_enc, c_enc = _mlp_layers(enc_a.mlp), _mlp_layers(enc_c.mlp)
        if a_enc is None or c_enc is None:
            return None
        prefix = enc_a._flatten
        actor_layers, critic_layers = a_enc + actor_head, c_enc + critic_head
    if len(actor_layers) != len(critic_layers):
        return None
    if any(a[2] != c[2] for a, c in zip(actor_layers, critic_layers, strict=True)):
        return None
    return FusedActorCritic(prefix, actor_layers, critic_layers)
