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
from gymnasium import spaces

from agilerl.algorithms.batched.ddpg import (
    ViewCache,
    ViewsOf,
    _layouts,
    _offsets,
    _plain_views,
    _Rows,
    stacked_critic,
)
from agilerl.algorithms.core.off_policy import Batch
from agilerl.algorithms.sac import SAC, sac_actor_loss, sac_critic_loss, sac_temperature_loss
from agilerl.networks.deterministic import ContinuousQNetwork
from agilerl.networks.optim import FlatAdam
from agilerl.networks.squashed_gaussian import (
    _SQUASHED_SAMPLE,
    LOG_STD_MAX,
    LOG_STD_MIN,
    SquashedGaussianActor,
)
from agilerl.networks.stacked import LayoutStack, StackedGradTape

__all__ = ["SACGroup", "sac_group_key"]


def _critic_pairs(agent: SAC) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [
        pair
        for critic, target in zip(agent._critics, agent._critic_targets, strict=True)
        for pair in zip(critic.parameters(), target.parameters(), strict=True)
    ]


def sac_group_key(agent: Any) -> tuple | None:
    """What members must share to stack (``None``: the agent cannot be stacked).

    A plain :class:`SAC` on a flat ``Box`` observation whose actor and critics
    are MLP chains with their own encoders, optimised by :class:`FlatAdam`.
    """
    if type(agent) is not SAC or agent.spec.share_encoders:
        return None
    if type(agent.actor) is not SquashedGaussianActor or agent.actor.detach_encoder:
        return None
    if any(type(c) is not ContinuousQNetwork for c in agent._critics):
        return None
    space = agent.observation_space
    if not isinstance(space, spaces.Box) or len(space.shape) != 1:
        return None
    optimizers = (agent.actor_optimizer, agent.critic_optimizer)
    if not all(isinstance(o, FlatAdam) for o in optimizers):
        return None
    layouts = _layouts(agent)
    if layouts is None:
        return None
    actor_params = list(agent.actor.parameters())
    if _offsets(actor_params, agent.actor_optimizer.flat) is None:
        return None
    if _offsets([p for p, _ in _critic_pairs(agent)], agent.critic_optimizer.flat) is None:
        return None
    actor = agent.actor
    return (
        "SAC",
        layouts,
        tuple(actor.action_mid.tolist()),
        tuple(actor.action_half_range.tolist()),
        str(agent.device),
        agent.actor_optimizer.flat.dtype,
        agent.critic_optimizer.flat.dtype,
    )


class SACGroup:
    """Members of one :func:`sac_group_key`, stacked.

    Args:
        members: The agents (same key).
        slots: Their population slots.

    Attributes:
        stacked_batches: :meth:`learn` also takes one member-major batch.
        stacks_alone: ``False``: a member with no partner learns as a
            :class:`~agilerl.algorithms.batched.LoneGroup` (a stack of one costs
            ~15% more per update than the agent's own :meth:`learn`).
    """

    stacked_batches = True
    stacks_alone = False

    def __init__(self, members: Sequence[SAC], slots: Sequence[int]) -> None:
        self.members = list(members)
        self.slots = list(slots)
        first = self.members[0]
        self.device = first.device
        actor_layout, critic_layouts = _layouts(first)
        self.actor_net = LayoutStack(actor_layout)
        self.critic_nets = [(LayoutStack(e), LayoutStack(h)) for e, h in critic_layouts]
        self.actor = _Rows([m.actor_optimizer for m in self.members], None)
        self.critic = _Rows(
            [m.critic_optimizer for m in self.members], [_critic_pairs(m) for m in self.members]
        )
        params = self.actor.params
        self._numpy_views = None
        if params.device.type == "cpu" and params.dtype == torch.float32:
            self._numpy_views = self.actor_net.views(params.numpy())
        self._actor_views = self.actor_net.views(params)
        self._views = ViewCache()
        column = {"dtype": params.dtype, "device": self.device}
        self._column = column
        specs = [m.spec for m in self.members]
        self._gamma = torch.tensor([[float(s.gamma)] for s in specs], **column)
        self._tau = torch.tensor([[min(max(float(s.tau), 0.0), 1.0)] for s in specs], **column)
        self._action_dim = first.actor.action_dim
        self._mid = first.actor.action_mid.to(**column)
        self._half = first.actor.action_half_range.to(**column)

    def __len__(self) -> int:
        return len(self.members)

    # --- acting -----------------------------------------------------------------------
    def act(self, obs: np.ndarray, epsilons: Sequence[float], greedy: bool = False) -> list:
        """Each member's env actions for its ``obs[i]`` (``[N, E, obs]``), as ``get_action``."""
        if self._numpy_views is not None:
            out = self.actor_net.forward_numpy(self._numpy_views, np.asarray(obs))
        else:
            x = torch.as_tensor(obs, dtype=self.actor.params.dtype, device=self.device)
            with torch.no_grad():
                out = self.actor_net.forward(self._actor_views, x).cpu().numpy()
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
    def _batch(
        self, rows: list[int], batches: Sequence[Mapping[str, Any]] | Mapping[str, Any]
    ) -> Batch:
        """The members' batches stacked ``[n, B, ...]`` with discounts and normalised actions."""
        n = len(rows)
        if isinstance(batches, Mapping):  # already one batch of n * B rows, member-major

            def stack(key: str) -> torch.Tensor:
                value = torch.as_tensor(batches[key], device=self.device)
                return value.reshape(n, -1, *value.shape[1:])

            first: Mapping[str, Any] = batches
        else:

            def stack(key: str) -> torch.Tensor:
                return torch.stack([torch.as_tensor(b[key], device=self.device) for b in batches])

            first = batches[0]

        dtype = self.actor.params.dtype
        reward = stack("reward").reshape(n, -1).float()
        done = stack("done").reshape(n, -1).float()
        gamma = self._gamma if n == len(self.members) else self._gamma[rows]
        if first.get("n_steps") is None:
            discount = (1.0 - done).mul_(gamma)
        else:
            discount = torch.pow(gamma, stack("n_steps").reshape(n, -1).float()).mul_(1.0 - done)
        action = stack("action")
        action = (action.reshape(n, action.shape[1], -1).float() - self._mid) / self._half
        return Batch(stack("obs").to(dtype), action, reward, stack("next_obs").to(dtype), discount)

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
        every = len(rows) == len(self.members)
        index = None if every else torch.as_tensor(rows, device=self.device)
        alphas = [self.members[r].alpha for r in rows]
        alpha = torch.tensor([[a] for a in alphas], **self._column)

        critic, critic_target, critic_grad = self.critic.rows(index)
        actor = self.actor.params if every else self.actor.params[index]
        views = self._views if every else _plain_views
        tape = StackedGradTape()
        loss, _td, q = sac_critic_loss(
            self._critics(tape, critic, critic_grad, views),
            self._critics(tape, critic_target, None, views),
            self._sampler(tape, rows, actor, None, views),
            b,
            b.action,
            alpha,
        )
        values = torch.stack([loss.detach(), q.detach().mean(dim=-1)]).tolist()
        for r, value in zip(rows, values[0], strict=True):
            self.members[r]._check_finite({"critic_loss": value})
        tape.backward(loss.sum())
        self.critic.optimizer.step(critic_grad, None if every else rows)
        self.critic.soft_update(index, self._tau if every else self._tau[index])
        due = []
        for j, r in enumerate(rows):
            member = self.members[r]
            member.num_updates += 1
            if member.num_updates % member.spec.policy_freq == 0:
                due.append(j)
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
        every = len(rows) == len(self.members)
        index = None if every else torch.as_tensor(rows, device=self.device)
        actor, _, actor_grad = self.actor.rows(index)
        critic = self.critic.params if every else self.critic.params[index]
        views = self._views if every else _plain_views
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

    # --- members ----------------------------------------------------------------------
    @torch.no_grad()
    def sync(self) -> None:
        """Write the stacked weights, targets and Adam states back into the member agents."""
        self.actor.write_back([m.actor_optimizer for m in self.members], None)
        self.critic.write_back(
            [m.critic_optimizer for m in self.members], [_critic_pairs(m) for m in self.members]
        )
