"""CQN: conservative Q-learning on a fixed dataset of discrete-action transitions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from agilerl.algorithms.core.off_policy import OffPolicyAlgorithm, soft_update
from agilerl.arena.models.algorithms.cqn import CQNSpec
from agilerl.networks.fastgrad import GradTape
from agilerl.networks.optim import FlatAdam
from agilerl.networks.q_networks import QNetwork
from agilerl.networks.spaces import make_obs_converter


class CQN(OffPolicyAlgorithm):
    """Conservative Q-Network (discrete CQL).

    One update minimises, over a dataset batch ``(s, a, r, s', done)``::

        huber(Q(s, a) - (r + gamma (1 - done) Q_target(s', a')))
        + conservative_weight * mean(logsumexp_b Q(s, b) - Q(s, a))

    with ``a' = argmax Q_target(s', .)``, or ``argmax Q(s', .)`` evaluated by
    the target network when ``spec.double``. The target network follows the
    online one by Polyak averaging with ``spec.tau``. The penalty lowers the
    values of actions the data does not take, so the greedy policy stays where
    the data has support; ``conservative_weight = 0`` is offline DQN.

    Args:
        spec: Validated :class:`CQNSpec` (every hyperparameter is read from it).
        observation_space: Single-env observation space.
        action_space: ``Discrete`` action space.
        index: Population index.
        device: Torch device.
        total_steps: Gradient steps of the whole run (informational).
        actor_network: A ready :class:`QNetwork` to use instead of one built
            from ``spec.net_config``.
        **overrides: Spec fields to change, validated through the spec.

    Raises:
        ValueError: For a non-Discrete action space.
    """

    spec_class = CQNSpec
    hp_names = ("lr", "batch_size", "gamma", "tau", "conservative_weight")
    lr_optimizers: ClassVar[dict[str, str]] = {"lr": "optimizer"}
    network_names = ("actor", "actor_target")
    optimizer_names = ("optimizer",)
    action_space_types = (spaces.Discrete,)
    uses_epsilon = True

    def _build(self, actor_network: nn.Module | None = None) -> None:
        """Online and target Q networks and the optimizer, from ``self.spec``."""
        self._init_rng()
        actor = actor_network
        if actor is None:
            actor = QNetwork(
                self.observation_space,
                self.action_space,
                net_config=self.net_config,
                normalize_images=self.spec.normalize_images,
            )
        self.actor = actor.to(self.device)
        self.actor_target = self._target_of(self.actor)
        self.optimizer = FlatAdam(self.actor.parameters(), lr=self.spec.lr)
        self._online_params = self._param_list(self.actor)
        self._target_params = self._param_list(self.actor_target)
        self._to_tensor = make_obs_converter(self.observation_space, self.device)
        self._start = int(self.action_space.start)

    # --- acting -----------------------------------------------------------------------
    def get_action(self, obs: Any, epsilon: float = 0.0, greedy: bool = False) -> np.ndarray:
        """Greedy (or epsilon-greedy) env actions ``int64 [B]`` for an observation batch."""
        with torch.inference_mode():
            action = self.actor.forward(self._to_tensor(obs)).argmax(dim=-1).cpu().numpy()
        if not greedy and epsilon > 0.0:
            explore = self.rng.random(action.shape[0]) < epsilon
            action[explore] = self.rng.integers(0, int(self.action_space.n), int(explore.sum()))
        return action + self._start

    # --- learning ---------------------------------------------------------------------
    def learn(self, batch: Mapping[str, Any]) -> dict[str, float]:
        """One gradient step on TD error plus the conservative penalty.

        Args:
            batch: ``obs, action, reward, next_obs, done`` (``done`` = terminated;
                truncated transitions bootstrap), leading batch dimension.

        Returns:
            ``loss``, ``td_loss``, ``conservative_loss`` and ``q_mean``.

        Raises:
            FloatingPointError: If the loss is not finite (no step is taken).
        """
        spec = self.spec
        b = self._prepare(batch)
        action = b.action.long().reshape(-1, 1) - self._start
        tape = GradTape()
        with torch.no_grad():
            next_q = self.actor_target.forward(b.next_obs, tape)
            if spec.double:
                next_action = self.actor.forward(b.next_obs, tape).argmax(dim=1, keepdim=True)
                next_value = next_q.gather(1, next_action).squeeze(1)
            else:
                next_value = next_q.max(dim=1).values
            target = b.reward + b.discount * next_value
        q_all = self.actor.forward(b.obs, tape)
        q = q_all.gather(1, action).squeeze(1)
        td_loss = F.smooth_l1_loss(q, target)
        conservative = (torch.logsumexp(q_all, dim=1) - q).mean()
        loss = td_loss + spec.conservative_weight * conservative

        values = torch.stack([loss, td_loss, conservative, q.mean()]).detach().tolist()
        self._check_finite({"loss": values[0]})
        self.optimizer.zero_grad()
        tape.backward(loss)
        self.optimizer.clip_grad_norm_(spec.max_grad_norm)
        self.optimizer.step()
        soft_update(self._target_params, self._online_params, spec.tau)
        self.num_updates += 1
        return dict(zip(("loss", "td_loss", "conservative_loss", "q_mean"), values, strict=True))
