"""Twin Delayed DDPG: clipped double critics, delayed actor updates, target smoothing."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from agilerl.algorithms.ddpg import DDPG
from agilerl.arena.models.algorithms.td3 import TD3Spec
from agilerl.networks.fastgrad import GradTape


class TD3(DDPG):
    """TD3 (Fujimoto et al., 2018): :class:`DDPG` with two critics and a smoothed target.

    * Two critics; the target is ``r + gamma^n (1 - done) min(Q1', Q2')`` and
      both critics regress on it (critic loss = sum of the two MSEs).
    * Target policy smoothing: ``a' = clip(actor_target(s') + clip(N(0,
      policy_noise^2), -noise_clip, noise_clip), -1, 1)`` in the normalised
      action space (fractions of the half action range).
    * The actor (on ``-Q1(s, actor(s))``) and all targets are updated every
      ``policy_freq`` critic updates.

    Takes the arguments of :class:`DDPG` with a :class:`TD3Spec`.
    """

    spec_class: ClassVar[type] = TD3Spec
    num_critics: ClassVar[int] = 2
    network_names = (
        "actor",
        "actor_target",
        "critic_1",
        "critic_1_target",
        "critic_2",
        "critic_2_target",
    )

    def target_action(self, next_obs: Any, tape: GradTape) -> torch.Tensor:
        """Smoothed target action ``clip(actor_target(s') + clipped noise, -1, 1)``."""
        action = self.actor_target.forward(next_obs, tape)
        if self.spec.policy_noise > 0.0:
            noise = torch.randn_like(action).mul_(self.spec.policy_noise)
            action = action + noise.clamp_(-self.spec.noise_clip, self.spec.noise_clip)
            if self.actor.bounded:
                action = action.clamp_(-1.0, 1.0)
        return action
