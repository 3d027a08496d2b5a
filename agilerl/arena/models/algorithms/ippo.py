"""IPPO: independent PPO for PettingZoo parallel envs (multi-agent, on-policy)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from agilerl.arena.models.algorithms.base import MultiAgentAlgorithmSpec
from agilerl.arena.models.algorithms.fields import (
    clip_coef_field,
    ent_coef_field,
    gae_lambda_field,
    lr_field,
    max_grad_norm_field,
    update_epochs_field,
    vf_coef_field,
)
from agilerl.arena.models.networks import StochasticActorSpec
from agilerl.arena.models.registry import register


@register()
class IPPOSpec(MultiAgentAlgorithmSpec):
    """Independent Proximal Policy Optimization."""

    refused_fields: ClassVar[dict[str, str]] = {
        **MultiAgentAlgorithmSpec.refused_fields,
        "action_batch_size": "each policy acts for all its agents in one forward; remove "
        "algorithm.action_batch_size",
    }

    lr: float = lr_field(1e-4)
    gae_lambda: float = gae_lambda_field(0.95)
    action_std_init: float = Field(0.0, ge=0.0, description="Initial log-std of Gaussian policies.")
    clip_coef: float = clip_coef_field(0.2)
    ent_coef: float = ent_coef_field(0.01)
    # Half of PPO's 0.5: IPPO's value loss once carried its own 1/2; the shared objective
    # (agilerl.algorithms.core.ppo_objective) does not, and 0.25 keeps IPPO's tuned balance.
    vf_coef: float = vf_coef_field(0.25, low=0.175, high=0.325)
    max_grad_norm: float = max_grad_norm_field(0.5)
    target_kl: float | None = Field(
        None,
        ge=0.0,
        description="Stop the update before a minibatch whose approximate KL exceeds "
        "1.5 * target_kl (as PPO).",
    )
    update_epochs: int = update_epochs_field(4)
    action_batch_size: int | None = Field(None, ge=1, description="Agents per batched forward.")
    shared_critic_input: bool = Field(
        False, description="Critics see every agent's observation (a centralised value)."
    )
    net_config: StochasticActorSpec | dict[str, StochasticActorSpec] | None = Field(
        None, description="Network settings, one for all or per agent group (or agent id)."
    )
