"""Twin Delayed DDPG: clipped double critics, delayed actor updates, target smoothing."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from agilerl.algorithms.core.rng import device_generator, restore_generator
from agilerl.algorithms.ddpg import DDPG
from agilerl.arena.models.algorithms.td3 import TD3Spec
from agilerl.networks.fastgrad import GradTape


def smooth_target_action(
    action: torch.Tensor,
    noise: torch.Tensor,
    policy_noise: float | torch.Tensor,
    noise_clip: float | torch.Tensor,
    bounded: bool,
) -> torch.Tensor:
    """TD3's target policy smoothing: ``clip(action + clip(policy_noise * noise, +-c), -1, 1)``.

    Written once for one agent (floats) and for stacked members (``[N, 1, 1]``
    columns of each member's ``policy_noise`` and ``noise_clip``).

    Args:
        action: The target policy's normalised action.
        noise: Standard normal noise of ``action``'s shape (overwritten).
        policy_noise: The noise scale.
        noise_clip: The bound of the scaled noise.
        bounded: Whether actions live in ``[-1, 1]`` (then the result is clipped to it).
    """
    action = action + noise.mul_(policy_noise).clamp_(-noise_clip, noise_clip)
    if bounded:
        action = action.clamp_(-1.0, 1.0)
    return action


class TD3(DDPG):
    """TD3 (Fujimoto et al., 2018): :class:`DDPG` with two critics and a smoothed target.

    * Two critics; the target is ``r + gamma^n (1 - done) min(Q1', Q2')`` and
      both critics regress on it (critic loss = sum of the two MSEs).
    * Target policy smoothing: ``a' = clip(actor_target(s') + clip(N(0,
      policy_noise^2), -noise_clip, noise_clip), -1, 1)`` in the normalised
      action space (fractions of the half action range). The noise comes from
      the agent's own torch generator (:attr:`smoothing_rng`, seeded once from
      its exploration generator and saved in checkpoints), so an agent draws
      the same noise whether it trains alone or stacked with others.
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

    def _build(self, *args: Any, **kwargs: Any) -> None:
        super()._build(*args, **kwargs)
        self.smoothing_rng = device_generator(
            getattr(self, "smoothing_rng", None), self.device, self.rng
        )

    def _extra_state(self) -> dict[str, Any]:
        return {**super()._extra_state(), "smoothing_rng": self.smoothing_rng.get_state()}

    def _load_extra_state(self, extra: dict[str, Any]) -> None:
        super()._load_extra_state(extra)
        state = extra.get("smoothing_rng")
        if state is not None:
            restore_generator(self.smoothing_rng, torch.as_tensor(state))

    def smoothing_noise(self, shape: torch.Size | tuple[int, ...]) -> torch.Tensor:
        """Standard normal noise of ``shape`` from :attr:`smoothing_rng` (on the agent's device)."""
        return torch.randn(shape, generator=self.smoothing_rng, device=self.smoothing_rng.device)

    def target_action(self, next_obs: Any, tape: GradTape) -> torch.Tensor:
        """Smoothed target action ``clip(actor_target(s') + clipped noise, -1, 1)``."""
        action = self.actor_target.forward(next_obs, tape)
        if self.spec.policy_noise > 0.0:
            noise = self.smoothing_noise(action.shape).to(action.dtype)
            action = smooth_target_action(
                action, noise, self.spec.policy_noise, self.spec.noise_clip, self.actor.bounded
            )
        return action
