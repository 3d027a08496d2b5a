"""MADDPG: centralised critics, decentralised actors (multi-agent, off-policy)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from agilerl.arena.models.algorithms.base import MultiAgentAlgorithmSpec
from agilerl.arena.models.networks import DeterministicActorSpec
from agilerl.arena.models.registry import register


@register()
class MADDPGSpec(MultiAgentAlgorithmSpec):
    """Multi-Agent Deep Deterministic Policy Gradient."""

    off_policy: ClassVar[bool] = True

    vect_noise_dim: int = Field(1, ge=1, description="Noise processes (copied from num_envs).")
    lr_actor: float = Field(1e-3, ge=0.0, le=1.0, description="Actor learning rate.")
    lr_critic: float = Field(1e-2, ge=0.0, le=1.0, description="Critic learning rate.")
    learn_step: int = Field(5, ge=1, description="Environment steps between learning updates.")
    gamma: float = Field(0.95, ge=0.0, le=1.0, description="Discount factor.")
    tau: float = Field(0.01, ge=0.0, le=1.0, description="Soft target-update rate.")
    O_U_noise: bool = Field(True, description="Ornstein-Uhlenbeck noise; false for Gaussian.")
    expl_noise: float = Field(0.1, ge=0.0, description="Exploration noise scale.")
    mean_noise: float = Field(0.0, ge=-1.0, le=1.0, description="Exploration noise mean.")
    theta: float = Field(0.15, ge=0.0, description="OU mean-reversion rate.")
    dt: float = Field(0.01, gt=0.0, description="OU time step.")
    net_config: DeterministicActorSpec | dict[str, DeterministicActorSpec] | None = Field(
        None, description="Network settings, shared or per agent group."
    )
