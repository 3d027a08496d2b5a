"""MADDPG: centralised critics, decentralised actors (multi-agent, off-policy)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from agilerl.arena.models.algorithms.base import MultiAgentAlgorithmSpec
from agilerl.arena.models.algorithms.fields import (
    gamma_field,
    learn_step_field,
    lr_field,
    tau_field,
)
from agilerl.arena.models.networks import DeterministicActorSpec
from agilerl.arena.models.registry import register


@register()
class MADDPGSpec(MultiAgentAlgorithmSpec):
    """Multi-Agent Deep Deterministic Policy Gradient."""

    off_policy: ClassVar[bool] = True

    vect_noise_dim: int = Field(1, ge=1, description="Noise processes (copied from num_envs).")
    lr_actor: float = lr_field(1e-3, "Actor learning rate.")
    lr_critic: float = lr_field(1e-2, "Critic learning rate.")
    learn_step: int = learn_step_field(5)
    gamma: float = gamma_field(0.95)
    tau: float = tau_field(0.01)
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
