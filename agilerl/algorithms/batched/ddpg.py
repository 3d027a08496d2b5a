"""A group of same-architecture DDPG (or TD3) agents acting and learning as stacked networks.

Each member's actor weights are a row of one ``[N, Pa]`` leaf tensor and its
critic weights (one critic for DDPG, two for TD3) a row of one ``[N, Pc]``
tensor, laid out like the member's :class:`~agilerl.networks.optim.FlatAdam`
buffers; the target networks are two more such tensors and the Adam moments
live in two :class:`~agilerl.networks.stacked.StackedAdam` s. An update runs
the algorithm's own objectives, :func:`agilerl.algorithms.ddpg.ddpg_critic_loss`
and :func:`agilerl.algorithms.ddpg.ddpg_actor_loss`, once on ``[N, B]``
batches (a critic is its encoder chain, then its head chain on the latent
joined with the action, through a :class:`~agilerl.networks.stacked.StackedGradTape`).

Each member keeps its own learning rates, betas, gamma (through its batch's
discounts), tau, ``policy_freq`` (its actor and targets step on its own
schedule), TD3 ``policy_noise`` / ``noise_clip`` with noise from its own
:attr:`~agilerl.algorithms.td3.TD3.smoothing_rng`, and exploration noise from
its own noise process, so the group makes the same moves as its members
would alone. :meth:`DDPGGroup.sync` writes everything back into the members.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from agilerl.algorithms.batched.actor_critic import (
    ActorCriticGroup,
    Pairs,
    ViewsOf,
    actor_critic_key,
    stacked_critic,
)
from agilerl.algorithms.batched.common import checked_values
from agilerl.algorithms.ddpg import DDPG, ddpg_actor_loss, ddpg_critic_loss
from agilerl.algorithms.td3 import TD3, smooth_target_action
from agilerl.networks.deterministic import DeterministicActor
from agilerl.networks.stacked import LayerViews, StackedGradTape

__all__ = ["DDPGGroup", "ddpg_group_key"]


def _actor_pairs(agent: DDPG) -> Pairs:
    """(online, target) parameter pairs of the actor."""
    return list(zip(agent.actor.parameters(), agent.actor_target.parameters(), strict=True))


def ddpg_group_key(agent: Any) -> tuple | None:
    """What members must share to stack (``None``: the agent cannot be stacked).

    A plain :class:`DDPG` or :class:`TD3` on a flat ``Box`` observation whose
    actor and critics are MLP chains with their own encoders (no
    ``share_encoders``), optimised by :class:`FlatAdam`.
    """
    if type(agent) not in (DDPG, TD3):
        return None
    key = actor_critic_key(agent, DeterministicActor)
    return None if key is None else (type(agent).__name__, agent.actor.bounded, *key)


class DDPGGroup(ActorCriticGroup):
    """Members of one :func:`ddpg_group_key` (all DDPG or all TD3), stacked.

    Args:
        members: The agents (same key).
        slots: Their population slots.
    """

    _actor_pairs = staticmethod(_actor_pairs)

    def __init__(self, members: Sequence[DDPG], slots: Sequence[int]) -> None:
        super().__init__(members, slots)
        self._td3 = isinstance(self.members[0], TD3)
        if self._td3:
            specs = [m.spec for m in self.members]
            self._policy_noise = [float(s.policy_noise) for s in specs]
            self._noise = torch.tensor([[[v]] for v in self._policy_noise], **self._column)
            self._clip = torch.tensor([[[float(s.noise_clip)]] for s in specs], **self._column)

    # --- acting -----------------------------------------------------------------------
    def act(self, obs: np.ndarray, epsilons: Sequence[float], greedy: bool = False) -> list:
        """Each member's env actions for its ``obs[i]`` (``[N, E, obs]``), with its own noise."""
        actions = self._actor_out(obs)
        out = []
        for member, action in zip(self.members, actions, strict=True):
            if not greedy:
                action = action + member.noise.sample(action.shape[0])
            out.append(member.actor.to_env_action(action))
        return out

    # --- learning ---------------------------------------------------------------------
    def _q(
        self,
        tape: StackedGradTape,
        k: int,
        params: torch.Tensor,
        grad: torch.Tensor | None,
        views: ViewsOf,
    ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        return stacked_critic(tape, self.critic_nets[k], params, grad, views)

    def _target_action(self, rows: list[int], views: list[LayerViews]) -> Callable:
        """The members' target policy at ``s'`` (TD3: smoothed with each member's own noise)."""

        def target_action(next_obs: torch.Tensor) -> torch.Tensor:
            action = self.actor_net.forward(views, next_obs)
            if not self._td3 or all(self._policy_noise[r] <= 0.0 for r in rows):
                return action
            shape = action.shape[1:]
            noise = torch.stack(
                [
                    self.members[r].smoothing_noise(shape).to(action)
                    if self._policy_noise[r] > 0.0
                    else action.new_zeros(shape)
                    for r in rows
                ]
            )
            every = len(rows) == len(self.members)
            scale = self._noise if every else self._noise[rows]
            clip = self._clip if every else self._clip[rows]
            return smooth_target_action(action, noise, scale, clip, self._bounded)

        return target_action

    def learn(
        self, rows: Sequence[int], batches: Sequence[Mapping[str, Any]] | Mapping[str, Any]
    ) -> list[dict]:
        """One update of the members at ``rows`` (group positions), one batch each.

        A critic step for every member, then an actor step and a target update
        for the members whose ``policy_freq`` falls due. The batches must have
        one size; ``batches`` may also be one batch of ``len(rows) * B``
        transitions, member-major (see :attr:`stacked_batches`). Returns each
        member's ``critic_loss``, ``actor_loss`` (its latest), ``actor_updated``
        and ``q_mean``, as :meth:`DDPG.learn` does.

        Raises:
            FloatingPointError: If a member's loss is not finite (that step is not taken).
        """
        rows = list(rows)
        b = self._batch(rows, batches)
        every, index, views = self._rows_of(rows)

        critic, critic_target, critic_grad = self.critic.rows(index)
        actor_target = self.actor.target if every else self.actor.target[index]
        tape = StackedGradTape()
        critics = range(len(self.critic_nets))
        loss, _tds, q = ddpg_critic_loss(
            [self._q(tape, k, critic, critic_grad, views) for k in critics],
            [self._q(tape, k, critic_target, None, views) for k in critics],
            self._target_action(rows, views(self.actor_net, actor_target)),
            b,
            b.action,
        )
        values = checked_values(self.members, rows, loss, q, "critic_loss")
        tape.backward(loss.sum())
        self.critic.optimizer.step(critic_grad, None if every else rows)
        due = self._due(rows)
        if due:
            self._actor_step([rows[j] for j in due], b.obs[due] if len(due) < len(rows) else b.obs)
        due_set = set(due)
        return [
            {
                "critic_loss": values[0][j],
                "actor_loss": self.members[r].last_actor_loss,
                "actor_updated": float(j in due_set),
                "q_mean": values[1][j],
            }
            for j, r in enumerate(rows)
        ]

    def _actor_step(self, rows: list[int], obs: torch.Tensor) -> None:
        """The actor step and target update of the members at ``rows`` on their ``obs``."""
        every, index, view = self._rows_of(rows)
        actor, _, actor_grad = self.actor.rows(index)
        critic = self.critic.params if every else self.critic.params[index]
        tape = StackedGradTape()
        views, grads = view(self.actor_net, actor), view(self.actor_net, actor_grad)
        loss = ddpg_actor_loss(
            self._q(tape, 0, critic, None, view),
            lambda o: tape(self.actor_net, views, o, grads=grads),
            obs,
        )
        values = loss.detach().tolist()
        for r, value in zip(rows, values, strict=True):
            self.members[r]._check_finite({"actor_loss": value})
        tape.backward(loss.sum())
        self.actor.optimizer.step(actor_grad, None if every else rows)
        for r, value in zip(rows, values, strict=True):
            self.members[r].last_actor_loss = value
        tau = self._tau if every else self._tau[index]
        self.actor.soft_update(index, tau)
        self.critic.soft_update(index, tau)
