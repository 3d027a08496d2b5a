"""IPPO: independent PPO for PettingZoo parallel envs (multi-agent, on-policy)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from agilerl.arena.models.algorithms.base import (
    ON_POLICY_HPO_RANGES,
    HpRange,
    MultiAgentAlgorithmSpec,
)
from agilerl.arena.models.networks import StochasticActorSpec
from agilerl.arena.models.registry import register


@register()
class IPPOSpec(MultiAgentAlgorithmSpec):
    """Independent Proximal Policy Optimization."""

    hpo_ranges: ClassVar[dict[str, HpRange]] = ON_POLICY_HPO_RANGES

    lr: float = Field(1e-4, ge=0.0, le=1.0, description="Adam learning rate.")
    gae_lambda: float = Field(0.95, ge=0.0, le=1.0, description="GAE lambda.")
    action_std_init: float = Field(0.0, ge=0.0, description="Initial log-std of Gaussian policies.")
    clip_coef: float = Field(0.2, ge=0.0, le=1.0, description="Surrogate clipping range.")
    ent_coef: float = Field(0.01, ge=0.0, le=1.0, description="Entropy bonus coefficient.")
    vf_coef: float = Field(0.5, ge=0.0, le=1.0, description="Value loss coefficient.")
    max_grad_norm: float = Field(0.5, ge=0.0, description="Gradient clipping norm.")
    target_kl: float | None = Field(None, ge=0.0, description="Early-stop KL threshold.")
    update_epochs: int = Field(4, ge=1, description="Passes over each rollout.")
    action_batch_size: int | None = Field(None, ge=1, description="Agents per batched forward.")
    net_config: StochasticActorSpec | dict[str, StochasticActorSpec] | None = Field(
        None, description="Network settings, shared or per agent group."
    )
