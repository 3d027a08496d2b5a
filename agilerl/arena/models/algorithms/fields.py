"""Mutable hyperparameters that mean the same in several algorithms, declared once.

A field that several specs carry with one meaning (a discount, a soft
target-update rate, a batch size, an RL learning rate) has one validation
range and one mutation range, whatever its default: each spec declares the
field with its own default through these functions.
"""

from __future__ import annotations

from typing import Any

from agilerl.arena.models.mutable import mutable_field

__all__ = [
    "batch_size_field",
    "clip_coef_field",
    "ent_coef_field",
    "gae_lambda_field",
    "gamma_field",
    "learn_step_field",
    "lr_field",
    "max_grad_norm_field",
    "policy_freq_field",
    "rollout_length_field",
    "tau_field",
    "update_epochs_field",
    "vf_coef_field",
]

LEARN_STEP = "Environment steps between learning updates."


def batch_size_field(default: int, description: str = "Samples per gradient step.") -> Any:
    """Samples per gradient step; explored over 8..512."""
    return mutable_field(default, ge=1, low=8, high=512, description=description)


def gamma_field(default: float) -> Any:
    """The discount factor; explored over 0.9..0.9999 in small steps."""
    return mutable_field(
        default, ge=0.0, le=1.0, low=0.9, high=0.9999, grow=1.001, shrink=0.999,
        description="Discount factor.",
    )  # fmt: skip


def learn_step_field(default: int, description: str = LEARN_STEP) -> Any:
    """Env steps between updates of an off-policy learner; explored over 1..10."""
    return mutable_field(
        default, ge=1, low=1, high=10, grow=1.5, shrink=0.75, description=description
    )


def rollout_length_field(default: int, description: str = LEARN_STEP) -> Any:
    """Env steps per on-policy rollout (one update); explored over 512..8192."""
    return mutable_field(
        default, ge=1, low=512, high=8192, grow=1.5, shrink=0.75, description=description
    )


def lr_field(default: float, description: str = "Adam learning rate.") -> Any:
    """An RL learning rate; explored over 6.25e-5..1e-2 (a log scale)."""
    return mutable_field(default, ge=0.0, le=1.0, low=6.25e-5, high=1e-2, description=description)


def tau_field(default: float) -> Any:
    """The soft target-update rate; explored over 1e-3..0.1."""
    return mutable_field(
        default, ge=0.0, le=1.0, low=1e-3, high=0.1, description="Soft target-update rate."
    )


def policy_freq_field(default: int, description: str) -> Any:
    """Critic updates per actor update; explored over 1..10."""
    return mutable_field(
        default, ge=1, low=1, high=10, grow=1.5, shrink=0.75, description=description
    )


def gae_lambda_field(default: float) -> Any:
    """GAE lambda of the PPO family; explored over 0.9..0.99 in small steps."""
    return mutable_field(
        default, ge=0.0, le=1.0, low=0.9, high=0.99, grow=1.01, shrink=0.99,
        description="GAE lambda.",
    )  # fmt: skip


def clip_coef_field(default: float) -> Any:
    """The PPO surrogate clipping range; explored over 0.05..0.35."""
    return mutable_field(
        default, ge=0.0, le=1.0, low=0.05, high=0.35, grow=1.15, shrink=0.85,
        description="Surrogate clipping range.",
    )  # fmt: skip


def ent_coef_field(default: float, description: str = "Entropy bonus coefficient.") -> Any:
    """The entropy bonus; explored over 0.001..0.1 (a zero value is never mutated)."""
    return mutable_field(default, ge=0.0, le=1.0, low=0.001, high=0.1, description=description)


def vf_coef_field(default: float, low: float = 0.35, high: float = 0.65) -> Any:
    """The weight of the value loss ``mean((V - returns)^2)``; explored over ``low..high``."""
    return mutable_field(
        default, ge=0.0, le=1.0, low=low, high=high, grow=1.15, shrink=0.85,
        description="Value loss coefficient: the loss adds vf_coef * mean((V - returns)^2).",
    )  # fmt: skip


def max_grad_norm_field(default: float) -> Any:
    """The gradient clipping norm of the PPO family; explored over 0.35..0.65."""
    return mutable_field(
        default, ge=0.0, low=0.35, high=0.65, grow=1.15, shrink=0.85,
        description="Gradient clipping norm.",
    )  # fmt: skip


def update_epochs_field(default: int) -> Any:
    """Passes over each rollout; explored over 1..10."""
    return mutable_field(
        default, ge=1, low=1, high=10, grow=1.5, shrink=0.75,
        description="Passes over each rollout.",
    )  # fmt: skip
