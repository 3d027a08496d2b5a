"""IPPO: independent PPO for PettingZoo parallel envs (multi-agent, on-policy)."""

from __future__ import annotations

from pydantic import Field

from agilerl.arena.models.algorithms.base import MultiAgentAlgorithmSpec
from agilerl.arena.models.algorithms.fields import lr_field
from agilerl.arena.models.mutable import mutable_field
from agilerl.arena.models.networks import StochasticActorSpec
from agilerl.arena.models.registry import register


@register()
class IPPOSpec(MultiAgentAlgorithmSpec):
    """Independent Proximal Policy Optimization."""

    lr: float = lr_field(1e-4)
    gae_lambda: float = mutable_field(
        0.95, ge=0.0, le=1.0, low=0.9, high=0.99, grow=1.01, shrink=0.99, description="GAE lambda."
    )
    action_std_init: float = Field(0.0, ge=0.0, description="Initial log-std of Gaussian policies.")
    clip_coef: float = mutable_field(
        0.2, ge=0.0, le=1.0, low=0.05, high=0.35, grow=1.15, shrink=0.85,
        description="Surrogate clipping range.",
    )  # fmt: skip
    ent_coef: float = mutable_field(
        0.01, ge=0.0, le=1.0, low=0.001, high=0.1, description="Entropy bonus coefficient."
    )
    vf_coef: float = mutable_field(
        0.5, ge=0.0, le=1.0, low=0.35, high=0.65, grow=1.15, shrink=0.85,
        description="Value loss coefficient.",
    )  # fmt: skip
    max_grad_norm: float = mutable_field(
        0.5, ge=0.0, low=0.35, high=0.65, grow=1.15, shrink=0.85,
        description="Gradient clipping norm.",
    )  # fmt: skip
    target_kl: float | None = Field(None, ge=0.0, description="Early-stop KL threshold.")
    update_epochs: int = mutable_field(
        4, ge=1, low=1, high=10, grow=1.5, shrink=0.75, description="Passes over each rollout."
    )
    action_batch_size: int | None = Field(None, ge=1, description="Agents per batched forward.")
    shared_critic_input: bool = Field(
        False, description="Critics see every agent's observation (a centralised value)."
    )
    net_config: StochasticActorSpec | dict[str, StochasticActorSpec] | None = Field(
        None, description="Network settings, one for all or per agent group (or agent id)."
    )
