"""DDPG (single-agent, off-policy, continuous actions)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from agilerl.arena.models.algorithms.base import CONTINUOUS, SingleAgentAlgorithmSpec
from agilerl.arena.models.mutable import mutable_field
from agilerl.arena.models.networks import DeterministicActorSpec
from agilerl.arena.models.registry import register


class DeterministicPolicySpec(SingleAgentAlgorithmSpec):
    """Fields shared by DDPG and TD3: actor/critic rates and exploration noise."""

    off_policy: ClassVar[bool] = True
    action_space_kinds: ClassVar[frozenset[str]] = CONTINUOUS

    batch_size: int = mutable_field(
        128, ge=1, low=8, high=512, description="Samples per gradient step."
    )
    learn_step: int = mutable_field(
        1, ge=1, low=1, high=10, grow=1.5, shrink=0.75,
        description="Environment steps between learning updates.",
    )  # fmt: skip
    gamma: float = mutable_field(
        0.98, ge=0.0, le=1.0, low=0.9, high=0.9999, grow=1.001, shrink=0.999,
        description="Discount factor.",
    )  # fmt: skip
    vect_noise_dim: int = Field(1, ge=1, description="Noise processes (copied from num_envs).")
    lr_actor: float = mutable_field(
        1e-3, ge=0.0, le=1.0, low=6.25e-5, high=1e-2, description="Actor learning rate."
    )
    lr_critic: float = mutable_field(
        1e-3, ge=0.0, le=1.0, low=6.25e-5, high=1e-2, description="Critic learning rate."
    )
    tau: float = mutable_field(
        0.005, ge=0.0, le=1.0, low=1e-3, high=0.1, description="Soft target-update rate."
    )
    policy_freq: int = mutable_field(
        2, ge=1, low=1, high=10, grow=1.5, shrink=0.75,
        description="Critic updates per actor update.",
    )  # fmt: skip
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
