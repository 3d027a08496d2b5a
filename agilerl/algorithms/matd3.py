"""MATD3: multi-agent TD3 (twin centralised critics, delayed actors, target smoothing)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from gymnasium import spaces

from agilerl.algorithms.maddpg import MADDPG, _forward, one_hot
from agilerl.arena.models.algorithms.matd3 import MATD3Spec
from agilerl.networks import masking

__all__ = ["MATD3"]


class MATD3(MADDPG):
    """Multi-Agent TD3: :class:`MADDPG` with two critics per policy (targets use the
    minimum), actor and target updates every ``spec.policy_freq`` critic updates,
    and clipped Gaussian noise on the target actions of Box agents
    (``spec.policy_noise`` / ``spec.noise_clip``, in units of the action range).
    Discrete target actions are smoothed by Gumbel-softmax sampling instead (among the
    legal actions of a masked agent).
    """

    spec_class = MATD3Spec
    spec: MATD3Spec
    num_critics = 2

    def _actor_due(self) -> bool:
        return self.num_updates % self.spec.policy_freq == 0

    def _next_target_actions(
        self, next_obs: Mapping[str, torch.Tensor], masks: Mapping[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        actions = {}
        for agent in self.agents:
            out = _forward(self.actor_targets[self.policy_of[agent]], next_obs[agent])
            space = self.action_spaces[agent]
            if isinstance(space, spaces.Discrete):
                # the value of F.gumbel_softmax(out, hard=True) from the same draw: no
                # gradient flows here, so the argmax of the perturbed logits is all it takes
                gumbel = torch.empty_like(out).exponential_().log()
                best = masking.masked_argmax(out - gumbel, masks.get(agent))
                actions[agent] = one_hot(best, out.shape[-1])
                continue
            action = self._squash(agent, out)
            low, high = self._bounds[agent]
            noise = torch.randn_like(action) * self.spec.policy_noise
            noise = noise.clamp(-self.spec.noise_clip, self.spec.noise_clip) * (high - low)
            actions[agent] = torch.max(torch.min(action + noise, high), low)
        return actions
