"""Shared machinery of the neural contextual bandits (NeuralUCB, NeuralTS).

A network ``f`` scores one arm's context (see :mod:`agilerl.envs.bandits` for
the per-arm encoding). Exploration uses the gradient of ``f`` with respect to
its **last layer** (weights and bias), scaled by ``1 / sqrt(m)`` for a last
layer with ``m`` inputs: ``g(x) = grad_{W, b} f(x) / sqrt(m) = [h(x), 1] / sqrt(m)``
for the linear output ``f = W h(x) + b``, with ``h(x)`` the last hidden
activations (read in one forward pass with the last layer set to the identity).
The inverse of ``U = lamb * I + sum_t g_t g_t^T`` over the arms pulled so far
is kept exactly with Sherman-Morrison updates::

    U^-1 <- U^-1 - (U^-1 g)(U^-1 g)^T / (1 + g^T U^-1 g)

and an arm's uncertainty is ``sigma(x) = sqrt(lamb * g^T U^-1 g)``. Pulling an
arm in training (``get_action(contexts)``) adds its ``g`` to ``U``; greedy
evaluation (``greedy=True``) leaves ``U`` unchanged. ``learn`` fits ``f`` to
the observed rewards by mean squared error plus ``reg`` times the squared
L2 norm of the parameters (plain autograd, Adam with ``spec.lr``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.func import functional_call

from agilerl.algorithms.core.base import SingleAgentAlgorithm
from agilerl.networks.optim import FlatAdam
from agilerl.networks.q_networks import QNetwork

DEFAULT_BANDIT_NET: dict[str, Any] = {
    "latent_dim": 64,
    "encoder_config": {"hidden_size": [64], "layer_norm": False},
    "head_config": {"hidden_size": [64], "layer_norm": False, "output_vanish": False},
}
"""The network used when the spec has none: two ReLU layers of 64 and a linear output."""


def sherman_morrison(inverse: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """``(A + g g^T)^-1`` from ``A^-1`` (symmetric) and a vector ``g``."""
    u = inverse @ g
    return inverse - torch.outer(u, u) / (1.0 + torch.dot(g, u))


class NeuralBandit(SingleAgentAlgorithm):
    """Base of NeuralUCB and NeuralTS; subclasses define :meth:`arm_scores`.

    Args:
        spec: Validated bandit spec (``lr``, ``batch_size``, ``learn_step``,
            ``gamma`` exploration scale, ``lamb``, ``reg``, ``net_config``).
        observation_space: ``Box`` of one arm's context.
        action_space: ``Discrete(K)``, one action per arm.
        index: Population index.
        device: Torch device.
        actor_network: A ready scoring network with one output.
        **overrides: Spec fields to change, validated through the spec.
    """

    lr_optimizers: ClassVar[dict[str, str]] = {"lr": "optimizer"}
    network_names = ("actor",)
    optimizer_names = ("optimizer",)
    action_space_types = (spaces.Discrete,)
    acts_on_batches: ClassVar[bool] = False
    """``act`` takes the ``[K, K * d]`` contexts of one step, not a batch of observations."""

    def _build(self, actor_network: nn.Module | None = None) -> None:
        if not hasattr(self, "generator"):
            seed = int(torch.randint(0, 2**31 - 1, (1,)).item())
            self.generator = torch.Generator(device="cpu").manual_seed(seed)
        actor = actor_network
        if actor is None:
            net = self.net_config if self.spec.net_config is not None else DEFAULT_BANDIT_NET
            actor = QNetwork(
                self.observation_space,
                spaces.Discrete(1),
                net_config=net,
                normalize_images=self.spec.normalize_images,
            )
        self.actor = actor.to(self.device)
        self.optimizer = FlatAdam(self.actor.parameters(), lr=self.spec.lr)
        name, last = [(n, m) for n, m in self.actor.named_modules() if isinstance(m, nn.Linear)][-1]
        self._width = last.in_features
        self._last_names = (f"{name}.weight", f"{name}.bias")
        self.reset_exploration()

    def act(self, obs: Any, greedy: bool = False) -> int:
        """The arm to pull (see :meth:`get_action`)."""
        return self.get_action(obs, greedy=greedy)

    def reset_exploration(self) -> None:
        """Forget the pulls: ``U^-1 = I / lamb``."""
        size = self._width + 1
        self.sigma_inv = torch.eye(size, device=self.device) / self.spec.lamb

    # --- scoring ----------------------------------------------------------------------
    def features(self, contexts: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores ``f [K]`` and last-layer gradient features ``g [K, m + 1]`` of the arms."""
        x = torch.as_tensor(np.asarray(contexts), dtype=torch.float32, device=self.device)
        w_name, b_name = self._last_names
        weight, bias = self.actor.get_parameter(w_name), self.actor.get_parameter(b_name)
        identity = {
            w_name: torch.eye(self._width, device=self.device),
            b_name: torch.zeros(self._width, device=self.device),
        }
        with torch.no_grad():
            # The last layer swapped for the identity returns its input h(x).
            hidden = functional_call(self.actor, identity, (x,), strict=False)
            f = (hidden @ weight.T + bias).reshape(-1)
            g = torch.cat([hidden, torch.ones_like(hidden[:, :1])], dim=1)
        return f, g / math.sqrt(self._width)

    def uncertainty(self, g: torch.Tensor) -> torch.Tensor:
        """``sigma = sqrt(lamb * g^T U^-1 g)`` for each row of ``g``."""
        quad = torch.einsum("ki,ij,kj->k", g, self.sigma_inv, g).clamp_min(0.0)
        return torch.sqrt(self.spec.lamb * quad)

    def arm_scores(self, f: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        """Exploration scores of the arms (highest is pulled)."""
        raise NotImplementedError

    def get_action(self, contexts: Any, greedy: bool = False) -> int:
        """The arm to pull for ``[K, K * d]`` contexts.

        Training pulls (``greedy=False``) maximise :meth:`arm_scores` and add the
        pulled arm's gradient to ``U``; greedy pulls maximise ``f`` and change nothing.
        """
        f, g = self.features(contexts)
        if greedy:
            return int(f.argmax())
        arm = int(self.arm_scores(f, self.uncertainty(g)).argmax())
        self.sigma_inv = sherman_morrison(self.sigma_inv, g[arm])
        return arm

    # --- learning ---------------------------------------------------------------------
    def learn(self, batch: Mapping[str, Any]) -> dict[str, float]:
        """One gradient step on ``mean (f(x) - r)^2 + reg * |theta|^2``.

        Args:
            batch: ``obs`` (the pulled arms' contexts ``[B, K * d]``) and ``reward`` ``[B]``.

        Returns:
            ``loss``.

        Raises:
            FloatingPointError: If the loss is not finite (no step is taken).
        """
        x = torch.as_tensor(batch["obs"], device=self.device).float()
        reward = torch.as_tensor(batch["reward"], device=self.device).float().reshape(-1)
        prediction = self.actor(x).reshape(-1)
        l2 = sum(p.square().sum() for p in self.actor.parameters())
        loss = (prediction - reward).square().mean() + self.spec.reg * l2
        value = float(loss.detach())
        if not math.isfinite(value):
            raise FloatingPointError(
                f"{type(self).__name__} loss became non-finite ({value}) at gradient update "
                f"{self.num_updates + 1} (env step {self.steps}); no update was applied"
            )
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.num_updates += 1
        return {"loss": value}

    def test(
        self,
        env: Any,
        max_steps: int | None = None,
        loop: int = 1,
        greedy: bool = True,
        seed: int | None = None,
    ) -> float:
        """Mean reward of greedy pulls over ``max_steps`` rows (default 100); appended to fitness.

        The exploration covariance is not touched (greedy pulls).
        """
        steps = int(max_steps or 100) * max(1, int(loop))
        contexts = env.reset(seed=seed)
        total = 0.0
        for _ in range(steps):
            contexts, reward = env.step(self.get_action(contexts, greedy=True))
            total += reward
        fitness = total / steps
        self.fitness.append(fitness)
        return fitness

    # --- state ------------------------------------------------------------------------
    def _extra_state(self) -> dict[str, Any]:
        return {"sigma_inv": self.sigma_inv, "generator": self.generator.get_state()}

    def _load_extra_state(self, extra: dict[str, Any]) -> None:
        if "sigma_inv" in extra:
            self.sigma_inv = extra["sigma_inv"].to(self.device).clone()
        if "generator" in extra:
            self.generator.set_state(extra["generator"])
