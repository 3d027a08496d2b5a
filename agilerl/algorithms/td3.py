"""Twin Delayed DDPG: clipped double critics, delayed actor updates, target smoothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from gymnasium import spaces

from agilerl.algorithms.ddpg import DDPG


class TD3(DDPG):
    """TD3 (Fujimoto et al., 2018), built on :class:`DDPG`.

    Differences from DDPG:

    * Two critics; the target is ``r + gamma^n (1 - done) min(Q1', Q2')`` and
      both critics regress on it (critic loss = sum of the two MSEs).
    * Target policy smoothing: ``a' = clip(actor_target(s') + clip(N(0,
      policy_noise^2), -noise_clip, noise_clip), -1, 1)`` in the normalised
      action space (fractions of the half action range).
    * The actor (on ``-Q1(s, actor(s))``) and all targets are updated every
      ``policy_freq`` critic updates.

    Args:
        observation_space: Single-env observation space.
        action_space: ``Box`` action space.
        index: Population index.
        device: Torch device.
        net_config: Network config dict, used by the actor and both critics.
        batch_size: Samples per gradient step.
        lr_actor: Actor Adam learning rate.
        lr_critic: Critic Adam learning rate (both critics).
        learn_step: Env steps (summed over sub-envs) per gradient step.
        gamma: Discount factor.
        tau: Soft target-update rate.
        policy_freq: Critic updates per actor (and target) update.
        vect_noise_dim: Number of sub-envs (noise processes).
        O_U_noise: Ornstein-Uhlenbeck exploration noise; ``False`` for Gaussian.
        expl_noise: Exploration noise scale.
        mean_noise: Exploration noise mean.
        theta: OU mean-reversion rate.
        dt: OU time step.
        share_encoders: The critics use the actor's encoder (trained by the critic loss).
        normalize_images: Divide ``uint8`` images by 255.
        policy_noise: Std of the target smoothing noise.
        noise_clip: Clip of the target smoothing noise.
        max_grad_norm: Gradient-norm clip of both optimizers (``None``/``0`` disables).
        total_steps: Env steps of the whole run (informational).
        **kwargs: Unknown extra settings are ignored with a warning.

    Raises:
        ValueError: For a non-Box action space or invalid settings.
    """

    network_names = (
        "actor",
        "actor_target",
        "critic_1",
        "critic_1_target",
        "critic_2",
        "critic_2_target",
    )
    _critic_names: ClassVar[tuple[str, ...]] = ("critic_1", "critic_2")

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        index: int = 0,
        device: str | torch.device = "cpu",
        net_config: Mapping[str, Any] | None = None,
        batch_size: int = 64,
        lr_actor: float = 1e-4,
        lr_critic: float = 1e-3,
        learn_step: int = 5,
        gamma: float = 0.99,
        tau: float = 5e-3,
        policy_freq: int = 2,
        vect_noise_dim: int = 1,
        O_U_noise: bool = True,
        expl_noise: float = 0.1,
        mean_noise: float = 0.0,
        theta: float = 0.15,
        dt: float = 1e-2,
        share_encoders: bool = False,
        normalize_images: bool = True,
        policy_noise: float = 0.2,
        noise_clip: float = 0.5,
        max_grad_norm: float | None = None,
        total_steps: int | None = None,
        **kwargs: Any,
    ) -> None:
        if float(policy_noise) < 0.0 or float(noise_clip) < 0.0:
            raise ValueError(
                f"TD3 policy_noise and noise_clip must be >= 0, got {policy_noise}, {noise_clip}"
            )
        self.policy_noise = float(policy_noise)
        self.noise_clip = float(noise_clip)
        super().__init__(
            observation_space,
            action_space,
            index=index,
            device=device,
            net_config=net_config,
            batch_size=batch_size,
            lr_actor=lr_actor,
            lr_critic=lr_critic,
            learn_step=learn_step,
            gamma=gamma,
            tau=tau,
            policy_freq=policy_freq,
            vect_noise_dim=vect_noise_dim,
            O_U_noise=O_U_noise,
            expl_noise=expl_noise,
            mean_noise=mean_noise,
            theta=theta,
            dt=dt,
            share_encoders=share_encoders,
            normalize_images=normalize_images,
            max_grad_norm=max_grad_norm,
            total_steps=total_steps,
            **kwargs,
        )

    def init_kwargs(self) -> dict[str, Any]:
        """Constructor kwargs (current values) that rebuild this agent."""
        return {
            **super().init_kwargs(),
            "policy_noise": self.policy_noise,
            "noise_clip": self.noise_clip,
        }

    def _smooth(self, action: torch.Tensor) -> torch.Tensor:
        """Smoothed target action ``clip(actor_target(s') + clipped noise, -1, 1)``."""
        if self.policy_noise > 0.0:
            noise = torch.randn_like(action).mul_(self.policy_noise)
            action = action + noise.clamp_(-self.noise_clip, self.noise_clip)
            if self.actor.bounded:
                action = action.clamp_(-1.0, 1.0)
        return action
