"""DDPG (single-agent, off-policy, continuous actions)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from agilerl.arena.models.algorithms.base import CONTINUOUS, SingleAgentAlgorithmSpec
from agilerl.arena.models.algorithms.fields import (
    batch_size_field,
    gamma_field,
    learn_step_field,
    lr_field,
    policy_freq_field,
    tau_field,
)
from agilerl.arena.models.networks import DeterministicActorSpec
from agilerl.arena.models.registry import register


class DeterministicPolicySpec(SingleAgentAlgorithmSpec):
    """Fields shared by DDPG and TD3: actor/critic rates and exploration noise."""

    off_policy: ClassVar[bool] = True
    action_space_kinds: ClassVar[frozenset[str]] = CONTINUOUS

    batch_size: int = batch_size_field(128)
    learn_step: int = learn_step_field(1)
    gamma: float = gamma_field(0.98)
    vect_noise_dim: int = Field(1, ge=1, description="Noise processes (copied from num_envs).")
    lr_actor: float = lr_field(1e-3, "Actor learning rate.")
    lr_critic: float = lr_field(1e-3, "Critic learning rate.")
    tau: float = tau_field(0.005)
    policy_freq: int = policy_freq_field(2, "Critic updates per actor update.")
    O_U_noise: bool = Field(False, description="Ornstein-Uhlenbeck noise; false for Gaussian.")
    expl_noise: float = Field(0.1, ge=0.0, le=10.0, description="Exploration noise scale.")
    mean_noise: float = Field(0.0, ge=-10.0, le=10.0, description="Exploration noise mean.")
    theta: float = Field(0.15, ge=0.0, le=10.0, description="OU mean-reversion rate.")
    dt: float = Field(0.01, gt=0.0, le=1.0, description="OU time step.")
    share_encoders: bool = Field(False, description="Actor and critic share one encoder.")
    net_config: DeterministicActorSpec | None = Field(None, description="Network settings.")


@register()
class DDPGSpec(DeterministicPolicySpec):
    """Deep Deterministic Policy Gradient."""
