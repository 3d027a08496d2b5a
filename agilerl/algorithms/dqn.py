"""Deep Q-Network with soft target updates and an optional double-DQN target."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agilerl.algorithms.core.off_policy import (
    Batch,
    OffPolicyAlgorithm,
    batch_size_of,
    soft_update,
)
from agilerl.arena.models.algorithms.dqn import DQNSpec
from agilerl.networks import masking
from agilerl.networks.fastgrad import GradTape, joined_chain
from agilerl.networks.optim import FlatAdam
from agilerl.networks.q_networks import QNetwork


def dqn_loss(
    online: Callable[[Any], torch.Tensor],
    target: Callable[[Any], torch.Tensor],
    b: Batch,
    *,
    start: int = 0,
    double: bool = True,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """DQN's objective: the (importance-weighted) mean squared TD error.

    The one definition of the update, for one agent (``[B]`` rewards, ``[B, n]``
    Q-values) and for a batched population alike (every tensor with a leading
    member dimension, ``[N, B]`` / ``[N, B, n]``; the loss is then one value
    per member).

    Args:
        online: Online Q-values ``Q(obs, .)`` of an observation batch.
        target: Target-network Q-values of an observation batch.
        b: The prepared batch (``discount`` = ``gamma ** n * (1 - done)``); with
            ``next_mask`` the next action is chosen among the legal ones only.
        start: The action space's ``start`` (stored actions are env actions).
        double: Choose the next action with the online network.
        weights: Importance weights shaped like the rewards, or ``None``.

    Returns:
        ``(loss, td, q)``: the mean over the last batch dimension, the TD
        errors and the Q-values of the taken actions.
    """
    action = b.action.reshape(*b.reward.shape, 1).long() - start
    with torch.no_grad():
        next_q = target(b.next_obs)
        if double:
            next_action = masking.masked_argmax(online(b.next_obs), b.next_mask).unsqueeze(-1)
            next_value = next_q.gather(-1, next_action).squeeze(-1)
        else:
            next_value = masking.masked_max(next_q, b.next_mask)
        target_value = b.reward + b.discount * next_value
    q = online(b.obs).gather(-1, action).squeeze(-1)
    td = q - target_value
    squared = td.square() if weights is None else td.square() * weights
    return squared.mean(dim=-1), td, q


class DQN(OffPolicyAlgorithm):
    """DQN: ``Q(s, a) <- r + gamma^n (1 - done) max_a' Q_target(s', a')``.

    With ``double`` the next action is chosen by the online network and
    evaluated by the target network. The target network follows the online
    one by Polyak averaging with ``tau`` after every update. Hyperparameters
    are the fields of :class:`~agilerl.arena.models.algorithms.dqn.DQNSpec`.

    Args:
        spec: The validated DQN spec.
        observation_space: Single-env observation space.
        action_space: ``Discrete`` action space.
        index: Population index.
        device: Torch device.
        total_steps: Env steps of the whole run (informational).
        actor_network: A pre-built :class:`QNetwork` to use as is.
        **overrides: Spec fields to change, validated through the spec.

    Raises:
        ValueError: For a non-Discrete action space.
    """

    spec_class: ClassVar[type] = DQNSpec
    lr_optimizers: ClassVar[dict[str, str]] = {"lr": "optimizer"}
    network_names = ("actor", "actor_target")
    optimizer_names = ("optimizer",)
    uses_epsilon = DQNSpec.uses_epsilon
    action_space_types = (spaces.Discrete,)
    reads_action_masks = True

    def _build(self, actor_network: nn.Module | None = None) -> None:
        """(Re)build the online and target Q networks, optimizer and converters."""
        self._init_rng()
        actor = actor_network
        if actor is None:
            actor = QNetwork(
                self.policy_space,
                self.action_space,
                net_config=self.net_config,
                normalize_images=self.spec.normalize_images,
            )
        self.actor = actor.to(self.device)
        self.actor_target = self._target_of(self.actor)
        self.optimizer = FlatAdam(self.actor.parameters(), lr=self.spec.lr)
        self._online_params = self._param_list(self.actor)
        self._target_params = self._param_list(self.actor_target)
        self._masks = masking.MaskReader(self.observation_space, self.action_space, self.device)
        self._to_tensor = self._masks.to_tensor
        self.num_actions = int(self.action_space.n)
        self._start = int(self.action_space.start)
        self._numpy_chain = None
        if isinstance(self.actor, QNetwork):
            chain = joined_chain(self.actor.encoder, self.actor.head)
            self._numpy_chain = chain if chain is not None and chain.numpy_ok else None

    # --- acting -----------------------------------------------------------------------
    def get_action(self, obs: Any, epsilon: float = 0.0, greedy: bool = False) -> np.ndarray:
        """Epsilon-greedy env actions ``int64 [B]`` for an observation batch.

        Args:
            obs: Observation batch (numpy/tensors; dicts for Dict spaces). With an
                action mask, greedy and random actions are legal ones.
            epsilon: Probability of a uniformly random action, per sub-env.
            greedy: Always take ``argmax_a Q`` (epsilon 0).
        """
        if greedy:
            epsilon = 0.0
        mask = self._masks.numpy_mask(obs)
        if epsilon >= 1.0:
            return self.explore(None, epsilon, batch_size_of(obs, self.observation_space), mask)
        part = masking.observation_part(obs) if mask is not None else obs
        if self._numpy_chain is not None and type(part) is np.ndarray:
            q = self._numpy_chain.forward_numpy(part)
            action = masking.masked_argmax_numpy(q, mask)
        else:
            with torch.inference_mode():
                q = self.actor.forward(self._to_tensor(obs))
                action = masking.masked_argmax(q, self._masks.mask(obs)).cpu().numpy()
        return self.explore(action, epsilon, mask=mask)

    def explore(
        self,
        action: np.ndarray | None,
        epsilon: float,
        n: int = 0,
        mask: np.ndarray | None = None,
    ) -> np.ndarray:
        """Epsilon-greedy env actions from the greedy ones (``argmax_a Q``, 0-based).

        With ``action`` ``None`` (``epsilon >= 1``) all ``n`` actions are random.
        With ``mask`` (``[B, n]`` bools) random actions are drawn among the legal
        ones. A batched population acts through this too, so its members draw the
        same random numbers as lone agents.
        """
        if action is None:
            if mask is not None:
                return masking.legal_uniform(self.rng, mask) + self._start
            return self.rng.integers(0, self.num_actions, n) + self._start
        if epsilon > 0.0:
            explore = self.rng.random(action.shape[0]) < epsilon
            if explore.any():
                action = action.copy()
                if mask is not None:
                    action[explore] = masking.legal_uniform(self.rng, mask[explore])
                else:
                    action[explore] = self.rng.integers(0, self.num_actions, int(explore.sum()))
        return action + self._start if self._start else action

    def get_q_values(self, obs: Any) -> np.ndarray:
        """``Q(obs, .)`` as numpy ``[B, n]``."""
        with torch.inference_mode():
            return self.actor.forward(self._to_tensor(obs)).cpu().numpy()

    # --- learning ---------------------------------------------------------------------
    def learn(
        self,
        batch: Mapping[str, Any],
        n_step_batch: Mapping[str, Any] | None = None,
        weights: torch.Tensor | None = None,
    ) -> dict[str, Any]:
        """One gradient step on the (importance-weighted) mean squared TD error.

        Args:
            batch: ``obs, action, reward, next_obs, done`` (``done`` = terminated)
                and optional ``n_steps`` (discount ``gamma ** n_steps``).
            n_step_batch: n-step transitions; when given they replace ``batch``
                (they must carry ``n_steps``).
            weights: Importance weights ``[B]`` (prioritised replay); the
                result then holds ``priorities`` (``|td error| + 1e-6``).

        Returns:
            ``loss`` and ``q_mean`` floats (plus ``priorities`` as numpy).

        Raises:
            FloatingPointError: If the loss is not finite (no step is taken).
            ValueError: If ``n_step_batch`` has no ``n_steps``.
        """
        b = self._prepare(self._n_step_batch("DQN", batch, n_step_batch))
        w = self._weights(weights)
        tape = GradTape()
        loss, td, q = dqn_loss(
            lambda x: self.actor.forward(x, tape),
            lambda x: self.actor_target.forward(x, tape),
            b,
            start=self._start,
            double=self.spec.double,
            weights=w,
        )
        loss_value, q_mean = torch.stack([loss.detach(), q.detach().mean()]).tolist()
        self._check_finite({"loss": loss_value})
        self._step(self.optimizer, tape, loss)
        soft_update(self._target_params, self._online_params, self.spec.tau)
        self.num_updates += 1
        out: dict[str, Any] = {"loss": loss_value, "q_mean": q_mean}
        if w is not None:
            out["priorities"] = (td.detach().abs() + 1e-6).cpu().numpy()
        return out
