"""MADDPG: centralised critics, decentralised actors (multi-agent, off-policy)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from agilerl.arena.models.algorithms.base import MultiAgentAlgorithmSpec
from agilerl.arena.models.mutable import mutable_field
from agilerl.arena.models.networks import DeterministicActorSpec
from agilerl.arena.models.registry import register


@register()
class MADDPGSpec(MultiAgentAlgorithmSpec):
    """Multi-Agent Deep Deterministic Policy Gradient."""

    off_policy: ClassVar[bool] = True

    vect_noise_dim: int = Field(1, ge=1, description="Noise processes (copied from num_envs).")
    lr_actor: float = mutable_field(
        1e-3, ge=0.0, le=1.0, low=6.25e-5, high=1e-2, description="Actor learning rate."
    )
    lr_critic: float = mutable_field(
        1e-2, ge=0.0, le=1.0, low=6.25e-5, high=1e-2, description="Critic learning rate."
    )
    learn_step: int = mutable_field(
        5, ge=1, low=1, high=10, grow=1.5, shrink=0.75,
        description="Environment steps between learning updates.",
    )  # fmt: skip
    gamma: float = mutable_field(
        0.95, ge=0.0, le=1.0, low=0.9, high=0.9999, grow=1.001, shrink=0.999,
        description="Discount factor.",
    )  # fmt: skip
    tau: float = mutable_field(
        0.01, ge=0.0, le=1.0, low=1e-3, high=0.1, description="Soft target-update rate."
    )
    O_U_noise: bool = Field(True, description="Ornstein-Uhlenbeck noise; false for Gaussian.")
    expl_noise: float = Field(0.1, ge=0.0, description="Exploration noise scale.")
    mean_noise: float = Field(0.0, ge=-1.0, le=1.0, description="Exploration noise mean.")
    theta: float = Field(0.15, ge=0.0, description="OU mean-reversion rate.")
    dt: float = Field(0.01, gt=0.0, description="OU time step.")
    discrete_actions: Literal["gumbel_softmax", "one_hot"] = Field(
        "gumbel_softmax",
        description=(
            "Differentiable discrete actions for the actor update: Gumbel-softmax samples or "
            "the greedy one-hot with straight-through gradients."
        ),
    )
    gumbel_temperature: float = Field(1.0, gt=0.0, description="Gumbel-softmax temperature.")
    net_config: DeterministicActorSpec | dict[str, DeterministicActorSpec] | None = Field(
        None, description="Network settings, one for all or per agent group (or agent id)."
    )
