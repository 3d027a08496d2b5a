"""A group of same-architecture SAC agents acting and learning as stacked networks.

The members' actor weights are rows of one ``[N, Pa]`` tensor, their twin
critics' rows of one ``[N, Pc]`` tensor (with ``[N, Pc]`` targets), each
with a :class:`~agilerl.networks.stacked.StackedAdam`. An update runs SAC's
own objectives, :func:`agilerl.algorithms.sac.sac_critic_loss` and
:func:`agilerl.algorithms.sac.sac_actor_loss`, once on ``[N, B]`` batches;
the reparameterised samples go through the single agent's sampler
(``_SQUASHED_SAMPLE``, a :class:`~agilerl.networks.fastgrad.TapeFunction`)
on stacked head outputs, with each member's noise from its own
:meth:`~agilerl.algorithms.sac.SAC.sample_noise`. Each member keeps its own
learning rates, gamma, tau, ``policy_freq``, temperature (a ``[N, 1]``
column in the losses; its step, :func:`~agilerl.algorithms.sac.sac_temperature_loss`'s
gradient, is taken by the member's own alpha optimizer: one scalar per
member) and exploration noise. :meth:`SACGroup.sync` writes everything back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from agilerl.algorithms.batched.actor_critic import (
    ActorCriticGroup,
    ViewsOf,
    actor_critic_key,
    stacked_critic,
)
from agilerl.algorithms.batched.common import checked_values
from agilerl.algorithms.sac import SAC, sac_actor_loss, sac_critic_loss, sac_temperature_loss
from agilerl.networks.squashed_gaussian import (
    _SQUASHED_SAMPLE,
    LOG_STD_MAX,
    LOG_STD_MIN,
    SquashedGaussianActor,
)
from agilerl.networks.stacked import StackedGradTape

__all__ = ["SACGroup", "sac_group_key"]


def sac_group_key(agent: Any) -> tuple | None:
    """What members must share to stack (``None``: the agent cannot be stacked).

    A plain :class:`SAC` on a flat ``Box`` observation whose actor and critics
    are MLP chains with their own encoders, optimised by :class:`FlatAdam`.
    """
    if type(agent) is not SAC:
        return None
    key = actor_critic_key(agent, SquashedGaussianActor)
    return None if key is None else ("SAC", *key)


class SACGroup(ActorCriticGroup):
    """Members of one :func:`sac_group_key`, stacked.

    Args:
        members: The agents (same key).
        slots: Their population slots.
    """

    def __init__(self, members: Sequence[SAC], slots: Sequence[int]) -> None:
        super().__init__(members, slots)
        self._action_dim = self.members[0].actor.action_dim

    # --- acting -----------------------------------------------------------------------
    def act(self, obs: np.ndarray, epsilons: Sequence[float], greedy: bool = False) -> list:
        """Each member's env actions for its ``obs[i]`` (``[N, E, obs]``), as ``get_action``."""
        out = self._actor_out(obs)
        actions = []
        for member, member_out in zip(self.members, out, strict=True):
            mean, log_std = np.split(member_out, 2, axis=-1)
            if greedy:
                action = np.tanh(mean)
            else:
                std = np.exp(np.clip(log_std, LOG_STD_MIN, LOG_STD_MAX))
                action = np.tanh(mean + std * member._exploration_noise(mean.shape))
            actions.append(member.actor.to_env_action(action))
        return actions

    # --- learning ---------------------------------------------------------------------
    def _critics(
        self,
        tape: StackedGradTape,
        params: torch.Tensor,
        grad: torch.Tensor | None,
        views: ViewsOf,
    ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """The twin critics of the rows ``params`` as ``critics(obs, action) -> [2, n, B]``."""
        qs = [stacked_critic(tape, nets, params, grad, views) for nets in self.critic_nets]
        return lambda obs, action: torch.stack([q(obs, action) for q in qs])

    def _sampler(
        self,
        tape: StackedGradTape,
        rows: list[int],
        params: torch.Tensor,
        grad: torch.Tensor | None,
        view: ViewsOf,
    ) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
        """The members' reparameterised policy samples, each with its own noise."""
        views = view(self.actor_net, params)
        grads = None if grad is None else view(self.actor_net, grad)

        def sample(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            out = tape(self.actor_net, views, obs, grads=grads)
            shape = (out.shape[1], self._action_dim)
            noise = torch.stack([self.members[r].sample_noise(shape) for r in rows]).to(out)
            action, log_prob = tape.apply(_SQUASHED_SAMPLE, out, noise)
            return action, log_prob

        return sample

    def learn(
        self, rows: Sequence[int], batches: Sequence[Mapping[str, Any]] | Mapping[str, Any]
    ) -> list[dict]:
        """One update of the members at ``rows`` (group positions), one batch each.

        A critic step and target update for every member, then an actor and
        temperature step for the members whose ``policy_freq`` falls due.
        Returns what :meth:`SAC.learn` returns, per member.

        Raises:
            FloatingPointError: If a member's loss is not finite (that step is not taken).
        """
        rows = list(rows)
        b = self._batch(rows, batches)
        every, index, views = self._rows_of(rows)
        alphas = [self.members[r].alpha for r in rows]
        alpha = torch.tensor([[a] for a in alphas], **self._column)

        critic, critic_target, critic_grad = self.critic.rows(index)
        actor = self.actor.params if every else self.actor.params[index]
        tape = StackedGradTape()
        loss, _td, q = sac_critic_loss(
            self._critics(tape, critic, critic_grad, views),
            self._critics(tape, critic_target, None, views),
            self._sampler(tape, rows, actor, None, views),
            b,
            b.action,
            alpha,
        )
        values = checked_values(self.members, rows, loss, q, "critic_loss")
        tape.backward(loss.sum())
        self.critic.optimizer.step(critic_grad, None if every else rows)
        self.critic.soft_update(index, self._tau if every else self._tau[index])
        due = self._due(rows)
        if due:
            obs = b.obs[due] if len(due) < len(rows) else b.obs
            self._actor_step([rows[j] for j in due], obs, alpha[due])
        due_set = set(due)
        out = []
        for j, r in enumerate(rows):
            m = self.members[r]
            out.append(
                {
                    "critic_loss": values[0][j],
                    "actor_loss": m.last_actor_loss,
                    "alpha_loss": m.last_alpha_loss,
                    "entropy": m.last_entropy,
                    "alpha": m.alpha,
                    "actor_updated": float(j in due_set),
                    "q_mean": values[1][j],
                }
            )
        return out

    def _actor_step(self, rows: list[int], obs: torch.Tensor, alpha: torch.Tensor) -> None:
        """The actor and temperature steps of the members at ``rows`` on their ``obs``."""
        every, index, views = self._rows_of(rows)
        actor, _, actor_grad = self.actor.rows(index)
        critic = self.critic.params if every else self.critic.params[index]
        tape = StackedGradTape()
        loss, log_prob = sac_actor_loss(
            self._critics(tape, critic, None, views),
            self._sampler(tape, rows, actor, actor_grad, views),
            obs,
            alpha,
        )
        actor_values, log_prob_means = torch.stack(
            [loss.detach(), log_prob.detach().mean(dim=-1)]
        ).tolist()
        temperature = []
        for r, actor_value, log_prob_mean in zip(rows, actor_values, log_prob_means, strict=True):
            m = self.members[r]
            alpha_value, alpha_grad = sac_temperature_loss(
                m.log_alpha.item(), log_prob_mean, m.target_entropy_value
            )
            m._check_finite({"actor_loss": actor_value, "alpha_loss": alpha_value})
            temperature.append((alpha_value, alpha_grad))
        tape.backward(loss.sum())
        self.actor.optimizer.step(actor_grad, None if every else rows)
        for r, actor_value, log_prob_mean, (alpha_value, alpha_grad) in zip(
            rows, actor_values, log_prob_means, temperature, strict=True
        ):
            m = self.members[r]
            m._alpha_step(alpha_grad)
            m.last_actor_loss, m.last_alpha_loss = actor_value, alpha_value
            m.last_entropy = -log_prob_mean
