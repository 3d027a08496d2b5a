"""CQN: conservative Q-learning on a fixed dataset of discrete-action transitions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from agilerl.algorithms.core.off_policy import soft_update
from agilerl.algorithms.core.spec_base import SpecAlgorithm
from agilerl.arena.models.algorithms.cqn import CQNSpec
from agilerl.networks.q_networks import QNetwork
from agilerl.networks.spaces import make_obs_converter


class CQN(SpecAlgorithm):
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
        actor_network: A ready :class:`QNetwork` to use instead of one built
            from ``spec.net_config``.

    Raises:
        ValueError: For a non-Discrete action space.
    """

    spec_class = CQNSpec
    hp_names = ("lr", "batch_size", "gamma", "tau", "conservative_weight")
    network_names = ("actor", "actor_target")
    optimizer_names = ("optimizer",)

    def __init__(
        self,
        spec: CQNSpec,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        *,
        index: int = 0,
        device: str | torch.device = "cpu",
        actor_network: nn.Module | None = None,
    ) -> None:
        super().__init__(spec, observation_space, action_space, index=index, device=device)
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(
                f"CQN needs a Discrete action space, got {type(action_space).__name__}"
            )
        self._given_actor = actor_network
        self._build()
        seed = int(torch.randint(0, 2**31 - 1, (1,)).item())
        self.rng = np.random.default_rng(seed)

    def _build(self) -> None:
        """Online and target Q networks and the optimizer, from ``self.spec``."""
        if self._given_actor is not None:
            self.actor = self._given_actor.to(self.device)
            self._given_actor = None
        else:
            self.actor = QNetwork(
                self.observation_space,
                self.action_space,
                net_config=self.network_config(),
                normalize_images=self.spec.normalize_images,
            ).to(self.device)
        self.actor_target = QNetwork.from_config(self.actor.config).to(self.device)
        self.actor_target.load_state_dict(self.actor.state_dict())
        self.actor_target.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.actor.parameters(), lr=self.spec.lr)
        self._to_tensor = make_obs_converter(self.observation_space, self.device)
        self._start = int(self.action_space.start)

    def set_lr(self, lr: float) -> None:
        """Set the optimizer's learning rate."""
        for group in self.optimizer.param_groups:
            group["lr"] = float(lr)

    # --- acting -----------------------------------------------------------------------
    def get_action(self, obs: Any, epsilon: float = 0.0, greedy: bool = False) -> np.ndarray:
        """Greedy (or epsilon-greedy) env actions ``int64 [B]`` for an observation batch."""
        with torch.inference_mode():
            q = self.actor(self._to_tensor(obs))
        action = q.argmax(dim=-1).cpu().numpy()
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
        obs = self._to_tensor(batch["obs"])
        next_obs = self._to_tensor(batch["next_obs"])
        action = torch.as_tensor(batch["action"], device=self.device).long().reshape(-1, 1)
        action = action - self._start
        reward = torch.as_tensor(batch["reward"], device=self.device).float().reshape(-1)
        done = torch.as_tensor(batch["done"], device=self.device).float().reshape(-1)

        q_all = self.actor(obs)
        q = q_all.gather(1, action).squeeze(1)
        with torch.no_grad():
            next_q = self.actor_target(next_obs)
            if spec.double:
                next_action = self.actor(next_obs).argmax(dim=1, keepdim=True)
                next_value = next_q.gather(1, next_action).squeeze(1)
            else:
                next_value = next_q.max(dim=1).values
            target = reward + spec.gamma * (1.0 - done) * next_value
        td_loss = F.smooth_l1_loss(q, target)
        conservative = (torch.logsumexp(q_all, dim=1) - q).mean()
        loss = td_loss + spec.conservative_weight * conservative

        values = torch.stack([loss, td_loss, conservative, q.mean()]).detach().tolist()
        if not np.isfinite(values[0]):
            raise FloatingPointError(
                f"CQN loss became non-finite ({values[0]}) at gradient update "
                f"{self.num_updates + 1}; no update was applied"
            )
        self.optimizer.zero_grad()
        loss.backward()
        if spec.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(self.actor.parameters(), spec.max_grad_norm)
        self.optimizer.step()
        soft_update(list(self.actor_target.parameters()), list(self.actor.parameters()), spec.tau)
        self.num_updates += 1
        return dict(zip(("loss", "td_loss", "conservative_loss", "q_mean"), values, strict=True))
