"""Stochastic policy network for PPO-style algorithms."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agilerl.networks import distributions as D
from agilerl.networks.config import build_encoder, resolve_net_config
from agilerl.networks.heads import POLICY_OUTPUT_GAIN, build_head, seeded
from agilerl.networks.spaces import ObsTensor, space_from_dict, space_to_dict

ACTION_KINDS = {
    spaces.Discrete: "discrete",
    spaces.MultiDiscrete: "multidiscrete",
    spaces.MultiBinary: "multibinary",
    spaces.Box: "box",
}


def action_kind(action_space: spaces.Space) -> str:
    """``"discrete" | "multidiscrete" | "multibinary" | "box"``.

    Raises:
        ValueError: Naming the unsupported space type.
    """
    for cls, kind in ACTION_KINDS.items():
        if isinstance(action_space, cls):
            return kind
    raise ValueError(
        f"Unsupported action space {type(action_space).__name__} ({action_space}); "
        "StochasticActor supports Discrete, MultiDiscrete, MultiBinary and Box"
    )


class StochasticActor(nn.Module):
    """Encoder + MLP head parameterising an action distribution.

    * ``Discrete``: categorical over ``n`` logits.
    * ``MultiDiscrete``: independent categoricals (``sum(nvec)`` logits).
    * ``MultiBinary``: independent Bernoullis.
    * ``Box``: diagonal Gaussian; the head gives the mean and a
      state-independent ``log_std`` parameter starts at ``action_std_init``
      (a *log* std: 0.0 means std 1). Sampled actions are clipped to the
      bounds by :meth:`to_env_action`, or, with ``squash_output``, mapped
      through ``tanh`` and rescaled. Log-probabilities refer to the raw
      (pre-clip/pre-squash) Gaussian sample, which is what the rollout buffer
      stores; the tanh Jacobian cancels in PPO's probability ratio.

    Args:
        observation_space: Single-env observation space.
        action_space: Single-env action space.
        net_config: Network config dict (see :mod:`agilerl.networks.config`).
        action_std_init: Initial log std of the Gaussian (Box only).
        normalize_images: Divide ``uint8`` images by 255.
        encoder: An existing encoder to share (e.g. with the critic).

    Raises:
        ValueError: For an unsupported action space, or ``squash_output`` with
            unbounded Box actions.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        net_config: Mapping[str, Any] | None = None,
        action_std_init: float = 0.0,
        normalize_images: bool = True,
        encoder: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.kind = action_kind(action_space)
        self.observation_space = observation_space
        self.action_space = action_space
        self.net_config = resolve_net_config(net_config, observation_space)
        self.squash_output = bool(self.net_config["squash_output"]) and self.kind == "box"
        self.config: dict[str, Any] = {
            "observation_space": space_to_dict(observation_space),
            "action_space": space_to_dict(action_space),
            "net_config": self.net_config,
            "action_std_init": float(action_std_init),
            "normalize_images": bool(normalize_images),
        }
        self._multi: D.MultiCategorical | None = None
        if self.kind == "discrete":
            num_outputs = int(action_space.n)
        elif self.kind == "multidiscrete":
            self._multi = D.MultiCategorical(action_space.nvec.reshape(-1).tolist())
            num_outputs = int(action_space.nvec.sum())
        else:
            num_outputs = int(np.prod(action_space.shape))
        self.num_outputs = num_outputs
        self._setup_env_mapping(action_space)

        with seeded(self.net_config.get("random_seed")):
            self.encoder = (
                encoder
                if encoder is not None
                else build_encoder(observation_space, self.net_config, normalize_images)
            )
            head_config = self.net_config["head_config"]
            gain = POLICY_OUTPUT_GAIN if head_config.get("output_vanish", True) else 1.0
            self.head = build_head(self.encoder.latent_dim, num_outputs, head_config, gain)
        if self.kind == "box":
            self.log_std = nn.Parameter(torch.full((num_outputs,), float(action_std_init)))
        else:
            self.register_parameter("log_std", None)

    def _setup_env_mapping(self, action_space: spaces.Space) -> None:
        self._start: np.ndarray | int | None = None
        self._low = self._high = None
        if self.kind == "discrete" and int(action_space.start) != 0:
            self._start = int(action_space.start)
        elif self.kind == "multidiscrete" and np.any(action_space.start != 0):
            self._start = action_space.start.astype(np.int64)
        elif self.kind == "box":
            low = action_space.low.astype(np.float32).reshape(-1)
            high = action_space.high.astype(np.float32).reshape(-1)
            bounded = bool(np.all(np.isfinite(low)) and np.all(np.isfinite(high)))
            if self.squash_output and not bounded:
                raise ValueError("squash_output needs finite Box action bounds")
            if bounded:
                self._low, self._high = low, high
                self._half_range = (high - low) / 2.0
            self._action_shape = action_space.shape

    # --- distribution -------------------------------------------------------
    def dist_params(self, latent: torch.Tensor) -> torch.Tensor:
        """Head output: logits, or the Gaussian mean."""
        return self.head.forward(latent)

    def sample(
        self, params: torch.Tensor, greedy: bool = False, generator: D.Generators = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw ``(action, log_prob)`` from the distribution given by ``params``.

        Random numbers come from ``generator`` (see :mod:`agilerl.networks.distributions`).
        """
        kind = self.kind
        if kind == "discrete":
            return D.categorical_sample(params, greedy, generator)
        if kind == "box":
            return D.gaussian_sample(params, self.log_std, greedy, generator)
        if kind == "multidiscrete":
            return self._multi.sample(params, greedy, generator)
        return D.bernoulli_sample(params, greedy, generator)

    def evaluate(
        self, params: torch.Tensor, action: torch.Tensor, with_entropy: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(log_prob, entropy)`` of stored actions; entropy is ``None`` unless requested."""
        kind = self.kind
        if kind == "discrete":
            if not with_entropy:
                return D.categorical_log_prob(params, action), None
            return D.categorical_evaluate(params, action)
        if kind == "box":
            log_prob, entropy = D.gaussian_evaluate(params, self.log_std, action)
        elif kind == "multidiscrete":
            log_prob, entropy = self._multi.evaluate(params, action)
        else:
            log_prob, entropy = D.bernoulli_evaluate(params, action)
        return log_prob, entropy if with_entropy else None

    def forward(
        self,
        obs: ObsTensor,
        action: torch.Tensor | None = None,
        greedy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample (or evaluate ``action``) for a batch of observations.

        Args:
            obs: Observation batch (tensor or dict of tensors).
            action: Actions to evaluate; sampled when ``None``.
            greedy: Take the mode instead of sampling.

        Returns:
            ``(action, log_prob, entropy)``; ``action`` is the raw policy
            action (see :meth:`to_env_action`).
        """
        params = self.head.forward(self.encoder(obs))
        if action is None:
            action = self.sample(params, greedy)[0].detach()
        log_prob, entropy = self.evaluate(params, action)
        return action, log_prob, entropy

    # --- env mapping --------------------------------------------------------
    def to_env_action(self, action: np.ndarray) -> np.ndarray:
        """Map raw policy actions (``[B, ...]`` numpy) to valid env actions.

        Box actions are clipped to the bounds (or squashed with ``tanh`` and
        rescaled when ``squash_output``); discrete actions get the space's
        ``start`` offset.
        """
        kind = self.kind
        if kind == "box":
            if self.squash_output:
                action = self._low + (np.tanh(action) + 1.0) * self._half_range
            elif self._low is not None:
                action = np.clip(action, self._low, self._high)
            return action.reshape((action.shape[0], *self._action_shape))
        if kind == "multibinary":
            return action.astype(np.int8).reshape((action.shape[0], *self.action_space.shape))
        if self._start is not None:
            return action + self._start
        return action

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> StochasticActor:
        """Rebuild from ``config`` (fresh weights, own encoder)."""
        return cls(
            space_from_dict(config["observation_space"]),
            space_from_dict(config["action_space"]),
            net_config=config["net_config"],
            action_std_init=config["action_std_init"],
            normalize_images=config["normalize_images"],
        )
