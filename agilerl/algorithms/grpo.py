"""The GRPO family: GRPO, GSPO and CISPO, with DAPO's switches.

All three take group-relative advantages (each completion's reward minus its
group's mean, optionally over the group's std) and the shared objective of
:class:`~agilerl.algorithms.llm_rollout.RolloutLLMAlgorithm`; GSPO takes one
importance ratio per completion, CISPO weights every token by its truncated
ratio. DAPO's switches live here: the soft overlong punishment shapes the
rewards the advantages compare (:mod:`agilerl.llm.overlong`), overlong
filtering keeps truncated completions out of the update, and dynamic
sampling fills a round with groups whose rewards differ
(:mod:`agilerl.llm.dynamic_sampling`); clip-higher and the loss normalisers
are part of the shared objective.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch

from agilerl.algorithms.llm_rollout import RolloutLLMAlgorithm
from agilerl.arena.models.algorithms import CISPOSpec, GRPOSpec, GSPOSpec, LLMAlgorithmSpec
from agilerl.llm.dynamic_sampling import refill_groups
from agilerl.llm.overlong import episode_penalty
from agilerl.llm.rollout import Sample


class GRPO(RolloutLLMAlgorithm):
    """Group Relative Policy Optimization."""

    spec_class: ClassVar[type[LLMAlgorithmSpec]] = GRPOSpec

    def shaped_rewards(self, samples: list[Sample]) -> torch.Tensor:
        """``(groups, group_size)`` rewards the advantages compare: the episode rewards plus
        DAPO's soft overlong punishment (``overlong_buffer_len``)."""
        spec = self.spec
        rewards = torch.tensor([s.reward for s in samples], dtype=torch.float32)
        if spec.overlong_buffer_len is not None:
            rewards += torch.tensor(
                [
                    episode_penalty(
                        s.action_mask,
                        spec.max_output_tokens,
                        spec.overlong_buffer_len,
                        spec.overlong_penalty_factor,
                    )
                    for s in samples
                ]
            )
        return rewards.view(-1, self.group_size)

    def varied(self, group: list[Sample]) -> bool:
        """Whether a group's (shaped) rewards differ by more than ``adv_filter_eps`` in std."""
        if len(group) < 2:
            return False
        return float(self.shaped_rewards(group).std()) > self.spec.adv_filter_eps + 1e-8

    def fill_groups(
        self, samples: list[Sample], more: Callable[[int], list[Sample]]
    ) -> list[Sample]:
        """Dynamic sampling (``dynamic_sampling_max_rounds``): see
        :func:`~agilerl.llm.dynamic_sampling.refill_groups`."""
        rounds = self.spec.dynamic_sampling_max_rounds
        if not rounds:
            return samples
        return refill_groups(samples, self.group_size, self.varied, more, rounds)

    def assign_advantages(self, samples: list[Sample]) -> tuple[list[Sample], dict[str, float]]:
        """Group-relative advantages; zero-variance groups counted and optionally dropped,
        truncated completions dropped with ``mask_truncated_completions``."""
        spec = self.spec
        raw = torch.tensor([s.reward for s in samples], dtype=torch.float32)
        rewards = self.shaped_rewards(samples)
        mean = rewards.mean(1, keepdim=True)
        std = rewards.std(1, keepdim=True) if self.group_size > 1 else torch.zeros_like(mean)
        advantages = rewards - mean
        if spec.adv_norm == "mean_std":
            advantages = advantages / (std + 1e-4)
        if spec.whiten_advantages and advantages.numel() > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        if spec.adv_clip_range is not None:
            advantages = advantages.clamp(-spec.adv_clip_range, spec.adv_clip_range)
        zero = (std.squeeze(1) <= spec.adv_filter_eps + 1e-8).tolist()
        for sample, value in zip(samples, advantages.flatten().tolist(), strict=True):
            sample.advantage = value
        kept = [s for s in samples if not (spec.filter_zero_adv and zero[s.group])]
        if spec.mask_truncated_completions:
            kept = [s for s in kept if not s.truncated]
        metrics = {
            "frac_reward_zero_std": sum(zero) / len(zero),
            "frac_truncated": sum(s.truncated for s in samples) / len(samples),
        }
        if spec.overlong_buffer_len is not None:
            metrics["overlong_penalty"] = float((rewards.flatten() - raw).mean())
        if spec.dynamic_sampling_max_rounds:
            metrics["sampling_rounds"] = float(
                max(s.extra.get("sampling_round", 0) for s in samples)
            )
        return kept, metrics


class GSPO(GRPO):
    """Group Sequence Policy Optimization: one clipped ratio per completion (or turn)."""

    spec_class: ClassVar[type[LLMAlgorithmSpec]] = GSPOSpec

    def ratio_level(self) -> tuple[str, str]:
        """``trajectory`` unless the spec asks for ``turn``; a span's mean log-ratio."""
        return self.spec.importance_sampling_level or "trajectory", "mean"


class CISPO(GRPO):
    """Clipped IS-weight Policy Optimization."""

    spec_class: ClassVar[type[LLMAlgorithmSpec]] = CISPOSpec

    def surrogate(
        self, ratio: torch.Tensor, advantages: torch.Tensor, logps: torch.Tensor
    ) -> torch.Tensor:
        """``-sg(min(r, 1 + eps_high)) * A * log pi`` per token (``eps_high``: ``clip_coef_high``,
        else ``clip_coef``): the weight is truncated, never the gradient (no token drops out
        as PPO's clip drops them)."""
        weight = ratio.detach().clamp(max=1.0 + self.clip_range()[1])
        return -weight * advantages * logps
