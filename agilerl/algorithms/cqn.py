"""CQN: conservative Q-learning on a fixed dataset of discrete-action transitions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from agilerl.algorithms.core.off_policy import soft_update
from agilerl.algorithms.dqn import DQN
from agilerl.arena.models.algorithms.cqn import CQNSpec
from agilerl.networks.fastgrad import GradTape


class CQN(DQN):
    """Conservative Q-Network (discrete CQL): a :class:`DQN` with a conservative loss.

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
    lr_optimizers: ClassVar[dict[str, str]] = {"lr": "optimizer"}

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
