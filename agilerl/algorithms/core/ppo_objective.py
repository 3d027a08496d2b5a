"""PPO's objective, written once: PPO, recurrent PPO, a stacked PPO population and IPPO
call :func:`ppo_objective`; LLM PPO and the GRPO family call its per-token parts
(:func:`clipped_surrogate`, :func:`approx_kl`, :func:`outside_clip`) with their masks.

The value loss is ``vf_coef * mean((V - returns)^2)`` everywhere (no 1/2).
Early stopping on ``target_kl`` means one thing everywhere: before a
minibatch's optimizer step, stop the update when that minibatch's approximate
KL exceeds ``TARGET_KL_MARGIN * target_kl`` (:func:`kl_stops`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

TARGET_KL_MARGIN = 1.5
"""How far past ``target_kl`` a minibatch's KL may go before the update stops."""


def clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, low: Any, high: Any
) -> torch.Tensor:
    """PPO's clipped surrogate loss per element: ``max(-A r, -A clip(r, low, high))``."""
    return torch.maximum(-advantages * ratio, -advantages * ratio.clamp(low, high))


def approx_kl(ratio: torch.Tensor, logratio: torch.Tensor) -> torch.Tensor:
    """The ``(r - 1) - log r`` estimator of KL(old || new) per element (never negative)."""
    return (ratio - 1.0) - logratio


def outside_clip(ratio: torch.Tensor, clip: Any, high: Any = None) -> torch.Tensor:
    """Where the ratio left ``[1 - clip, 1 + clip]`` (the clip fraction's numerator), or
    ``[1 - clip, 1 + high]`` with an upper range of its own (clip-higher)."""
    excess = ratio - 1.0
    return (excess < -clip) | (excess > (clip if high is None else high))


def value_error(
    value: torch.Tensor, returns: torch.Tensor, old: torch.Tensor | None = None, clip: Any = None
) -> torch.Tensor:
    """``(V - R)^2`` per element; with ``clip``, the larger of it and the error of ``V``
    clipped to ``old +- clip`` (the rollout's values)."""
    error = (value - returns).square()
    if clip is None:
        return error
    clipped_value = old + torch.clamp(value - old, -clip, clip)
    return torch.maximum(error, (clipped_value - returns).square())


def kl_stops(kl: float | None, target_kl: float | None) -> bool:
    """Whether a minibatch's approximate KL stops the update (see the module docstring)."""
    return target_kl is not None and kl is not None and kl > TARGET_KL_MARGIN * target_kl


class PPOCoefs(NamedTuple):
    """The loss coefficients of :func:`ppo_objective`: floats, or ``[N, 1]`` tensors (one row
    per stacked member).

    Attributes:
        clip_low: ``1 - clip_coef``.
        clip_high: ``1 + clip_coef``.
        clip: ``clip_coef`` (the clip fraction's threshold).
        vf_coef: Value-loss weight.
        ent_coef: Entropy-bonus weight; ``None`` leaves entropy out of the loss.
        value_clip: ``value_clip_coef``; ``None``: unclipped value loss.
    """

    clip_low: Any
    clip_high: Any
    clip: Any
    vf_coef: Any
    ent_coef: Any
    value_clip: Any

    @classmethod
    def of(cls, spec: Any) -> PPOCoefs:
        """The coefficients of one agent's spec (``value_clip_coef`` where it has one)."""
        clip = spec.clip_coef
        ent = spec.ent_coef if spec.ent_coef != 0.0 else None
        return cls(
            1.0 - clip, 1.0 + clip, clip, spec.vf_coef, ent, getattr(spec, "value_clip_coef", None)
        )


def _per_loss(coef: Any) -> Any:
    """A coefficient for the per-member losses: a ``[N, 1]`` column becomes ``[N]``."""
    return coef[..., 0] if isinstance(coef, torch.Tensor) else coef


def ppo_objective(
    log_prob: torch.Tensor,
    entropy: torch.Tensor | None,
    value: torch.Tensor,
    batch: dict[str, Any],
    coefs: PPOCoefs,
    normalize_advantages: bool,
    diagnose: bool,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """PPO's loss over the last dimension: clipped surrogate, value error, entropy bonus.

    ``policy_loss + vf_coef * value_loss - ent_coef * entropy``. Every tensor is
    ``[B]`` for one agent or ``[N, B]`` for ``N`` stacked members (coefficients
    then ``[N, 1]``); the loss is a scalar or ``[N]``, one per member.

    Args:
        log_prob: Log-probabilities of the stored actions under the current policy.
        entropy: Policy entropy per sample (``None`` when not computed).
        value: ``V(obs)``.
        batch: ``advantages``, ``log_probs``, ``returns`` and ``values`` of the minibatch.
        coefs: The coefficients.
        normalize_advantages: Standardise advantages over the minibatch.
        diagnose: Also track the approximate KL and the clip fraction.

    Returns:
        ``(loss, tracked)``: ``tracked`` holds (without gradients) the policy
        loss, value loss, mean entropy if computed, then KL and clip fraction
        when ``diagnose``.
    """
    advantages = batch["advantages"]
    if normalize_advantages and advantages.shape[-1] > 1:
        advantages = (advantages - advantages.mean(-1, keepdim=True)) / (
            advantages.std(-1, keepdim=True) + 1e-8
        )
    logratio = log_prob - batch["log_probs"]
    ratio = logratio.exp()
    policy_loss = clipped_surrogate(ratio, advantages, coefs.clip_low, coefs.clip_high).mean(-1)
    old = batch["values"] if coefs.value_clip is not None else None
    value_loss = value_error(value, batch["returns"], old, coefs.value_clip).mean(-1)
    loss = policy_loss + _per_loss(coefs.vf_coef) * value_loss
    entropy_mean = None if entropy is None else entropy.mean(-1)
    if entropy_mean is not None and coefs.ent_coef is not None:
        loss = loss - _per_loss(coefs.ent_coef) * entropy_mean
    with torch.no_grad():
        tracked = [policy_loss.detach(), value_loss.detach()]
        if entropy_mean is not None:
            tracked.append(entropy_mean.detach())
        if diagnose:
            tracked.append(approx_kl(ratio, logratio).mean(-1))
            tracked.append(outside_clip(ratio, coefs.clip).float().mean(-1))
    return loss, tracked
