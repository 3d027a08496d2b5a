"""What the stacked actor-critic groups share (DDPG / TD3 and SAC).

Each member's actor weights are a row of one ``[N, Pa]`` leaf tensor and its
critic weights a row of one ``[N, Pc]`` tensor, laid out like the member's
:class:`~agilerl.networks.optim.FlatAdam` buffers, each kind with its Adam
moments in a :class:`~agilerl.networks.stacked.StackedAdam` (see :class:`_Rows`).
A critic is its encoder chain, then its head chain on the latent joined with
the action (:func:`stacked_critic`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agilerl.algorithms.batched.common import StackedGroup, numpy_views, stack_batch
from agilerl.algorithms.core.off_policy import Batch
from agilerl.networks.deterministic import ContinuousQNetwork
from agilerl.networks.fastgrad import chain_of, joined_chain
from agilerl.networks.optim import FlatAdam
from agilerl.networks.stacked import (
    LayerSlot,
    LayerViews,
    LayoutStack,
    StackedAdam,
    StackedGradTape,
    chain_layout,
)

__all__ = ["ActorCriticGroup", "ViewCache", "actor_critic_key", "stacked_critic"]

Layout = tuple[LayerSlot, ...]
Layouts = tuple[Layout, tuple[tuple[Layout, Layout], ...]]
Pairs = Sequence[tuple[torch.Tensor, torch.Tensor]]


def _layouts(agent: Any) -> Layouts | None:
    """The actor's layout in its flat buffer and each critic's (encoder, head) layouts in theirs."""
    actor_opt, critic_opt = agent.actor_optimizer, agent.critic_optimizer
    actor_opt._relink_data()
    critic_opt._relink_data()
    chain = joined_chain(agent.actor.encoder, agent.actor.head)
    actor = None if chain is None else chain_layout(chain, actor_opt.flat)
    if actor is None:
        return None
    critics = []
    for critic in agent._critics:
        encoder, head = chain_of(critic.encoder), chain_of(critic.head)
        if encoder is None or head is None:
            return None
        parts = chain_layout(encoder, critic_opt.flat), chain_layout(head, critic_opt.flat)
        if parts[0] is None or parts[1] is None:
            return None
        critics.append(parts)
    return actor, tuple(critics)


def _offsets(online: Sequence[torch.Tensor], flat: torch.Tensor) -> list[int] | None:
    """Where each online parameter starts in ``flat`` (``None`` unless they fill it exactly)."""
    base, size = flat.data_ptr(), flat.element_size()
    offsets = [(p.data_ptr() - base) // size for p in online]
    spans = sorted((o, o + p.numel()) for o, p in zip(offsets, online, strict=True))
    covered = 0
    for start, end in spans:
        if start != covered:
            return None
        covered = end
    if covered != flat.numel() or not all(p.is_contiguous() for p in online):
        return None
    return offsets


def critic_pairs(agent: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(online, target) parameter pairs of the agent's critics, critic by critic."""
    return [
        pair
        for critic, target in zip(agent._critics, agent._critic_targets, strict=True)
        for pair in zip(critic.parameters(), target.parameters(), strict=True)
    ]


def actor_critic_key(agent: Any, actor_type: type) -> tuple | None:
    """What members of an actor-critic algorithm must share to stack (``None``: cannot stack).

    Its actor must be a ``actor_type`` and its critics :class:`ContinuousQNetwork`
    s, all MLP chains with their own encoders (no ``share_encoders``, no
    ``detach_encoder``) on a flat ``Box`` observation, optimised by
    :class:`FlatAdam` s whose flat buffers hold exactly the online parameters.

    Args:
        agent: The agent (its algorithm already checked by the caller).
        actor_type: The actor network class the group's algorithm uses.

    Returns:
        The networks' layouts, the action scaling, the device and the optimizers'
        dtypes, or ``None``.
    """
    if agent.spec.share_encoders:
        return None
    if type(agent.actor) is not actor_type or agent.actor.detach_encoder:
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
    if _offsets(list(agent.actor.parameters()), agent.actor_optimizer.flat) is None:
        return None
    if _offsets([p for p, _ in critic_pairs(agent)], agent.critic_optimizer.flat) is None:
        return None
    return (
        layouts,
        tuple(agent.actor.action_mid.tolist()),
        tuple(agent.actor.action_half_range.tolist()),
        str(agent.device),
        *(o.flat.dtype for o in optimizers),
    )


ViewsOf = Callable[[LayoutStack, torch.Tensor], list[LayerViews]]
"""``views(net, rows)``: a net's per-layer views of ``[n, P]`` rows."""


def _plain_views(net: LayoutStack, rows: torch.Tensor) -> list[LayerViews]:
    return net.views(rows)


class ViewCache:
    """Per-layer views of a group's persistent ``[N, P]`` tensors, cut once.

    The parameters, targets and gradient buffers of a group are updated in
    place, so their views stay valid; cutting them anew on every update costs
    a few dozen tensor ops per network. Only pass tensors that live as long as
    the group (rows picked by an index are copies: use ``net.views`` for those).
    """

    def __init__(self) -> None:
        self._cache: dict[tuple[int, int], tuple[torch.Tensor, list[LayerViews]]] = {}

    def __call__(self, net: LayoutStack, rows: torch.Tensor) -> list[LayerViews]:
        """``net.views(rows)``, cached for ``rows``."""
        key = (id(net), id(rows))
        hit = self._cache.get(key)
        if hit is None or hit[0] is not rows:
            hit = self._cache[key] = (rows, net.views(rows))
        return hit[1]


def stacked_critic(
    tape: StackedGradTape,
    nets: tuple[LayoutStack, LayoutStack],
    params: torch.Tensor,
    grad: torch.Tensor | None,
    views: ViewsOf = _plain_views,
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A stacked :class:`ContinuousQNetwork` as ``q(obs, action) -> [n, B]``.

    Args:
        tape: Records the calls made with gradients enabled.
        nets: The critic's (encoder, head) chains.
        params: The members' critic rows ``[n, P]``.
        grad: Where the parameter gradients go (``[n, P]``); ``None``: none (the
            encoder then runs without a record; the action still gets its gradient).
        views: Cuts the per-layer views (e.g. a :class:`ViewCache`).
    """
    encoder, head = nets
    enc_views, head_views = views(encoder, params), views(head, params)
    enc_grads: list[LayerViews] | None = None
    head_grads: list[LayerViews] | None = None
    if grad is not None:
        enc_grads, head_grads = views(encoder, grad), views(head, grad)

    def q(obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        if grad is None:
            with torch.no_grad():
                latent = encoder.forward(enc_views, obs)
        else:
            latent = tape(encoder, enc_views, obs, grads=enc_grads)
        return tape(head, head_views, latent, action, grads=head_grads)[..., 0]

    return q


class _Rows:
    """One network kind (actor or critics) of every member: ``[N, P]`` online, target,
    Adam state and the offsets that map rows back to the members' target parameters."""

    def __init__(self, optimizers: Sequence[FlatAdam], pairs: Sequence[Pairs] | None) -> None:
        with torch.no_grad():
            self.params = torch.stack([o.flat for o in optimizers])
            self.target = torch.zeros_like(self.params) if pairs is not None else None
            self.offsets = []
            for i, (opt, member_pairs) in enumerate(zip(optimizers, pairs or (), strict=False)):
                offsets = _offsets([p for p, _ in member_pairs], opt.flat)
                self.offsets.append(offsets)
                for offset, (_, t) in zip(offsets, member_pairs, strict=True):
                    self.target[i, offset : offset + t.numel()] = t.detach().reshape(-1)
        self.grad = torch.zeros_like(self.params)
        self.optimizer = StackedAdam.of(optimizers, self.params)

    def rows(
        self, index: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Online rows, target rows (``None`` without targets) and a zeroed gradient buffer
        (all rows for ``index=None``)."""
        if index is None:
            self.grad.zero_()
            return self.params, self.target, self.grad
        target = None if self.target is None else self.target[index]
        return self.params[index], target, self.params.new_zeros((len(index), self.params.shape[1]))

    @torch.no_grad()
    def soft_update(self, index: torch.Tensor | None, tau: torch.Tensor) -> None:
        """``target <- lerp(target, online, tau)`` for the rows (``tau``: ``[rows, 1]``)."""
        if index is None:
            self.target.lerp_(self.params, tau)
            return
        target = self.target[index]
        target.lerp_(self.params[index], tau)
        self.target.index_copy_(0, index, target)

    @torch.no_grad()
    def write_back(self, optimizers: Sequence[FlatAdam], pairs: Sequence[Pairs] | None) -> None:
        """Online weights and Adam moments into the optimizers, targets into the target nets."""
        self.optimizer.write_back(optimizers)
        for i, member_pairs in enumerate(pairs or ()):
            for offset, (_, t) in zip(self.offsets[i], member_pairs, strict=True):
                t.copy_(self.target[i, offset : offset + t.numel()].view_as(t))


class ActorCriticGroup(StackedGroup):
    """Stacked actor and critics of members that share one group key.

    Subclasses add the algorithm's update (``learn``) and say whether the
    actor has target networks (:meth:`_actor_pairs`).

    Args:
        members: The agents (same key).
        slots: Their population slots.

    Attributes:
        stacked_batches: ``learn`` also takes one member-major batch.
        stacks_alone: ``False``: a member with no partner learns as a
            :class:`~agilerl.algorithms.batched.LoneGroup` (a stack of one costs
            ~15% more per update than the agent's own ``learn``).
    """

    stacked_batches = True
    stacks_alone = False

    def __init__(self, members: Sequence[Any], slots: Sequence[int]) -> None:
        super().__init__(members, slots)
        first = self.members[0]
        actor_layout, critic_layouts = _layouts(first)
        self.actor_net = LayoutStack(actor_layout)
        self.critic_nets = [(LayoutStack(e), LayoutStack(h)) for e, h in critic_layouts]
        self.actor = _Rows(
            [m.actor_optimizer for m in self.members], self._all_pairs(self._actor_pairs)
        )
        self.critic = _Rows(
            [m.critic_optimizer for m in self.members], self._all_pairs(critic_pairs)
        )
        params = self.actor.params
        self._numpy_views = numpy_views(self.actor_net, params)
        self._actor_views = self.actor_net.views(params)
        self._views = ViewCache()
        column = {"dtype": params.dtype, "device": self.device}
        self._column = column
        specs = [m.spec for m in self.members]
        self._gamma = torch.tensor([[float(s.gamma)] for s in specs], **column)
        self._tau = torch.tensor([[min(max(float(s.tau), 0.0), 1.0)] for s in specs], **column)
        # actions are normalised to [-1, 1] unless the actor is unbounded (a squashed one never is)
        self._bounded = getattr(first.actor, "bounded", True)
        self._mid = first.actor.action_mid.to(**column)
        self._half = first.actor.action_half_range.to(**column)

    @staticmethod
    def _actor_pairs(agent: Any) -> Pairs | None:
        """(online, target) pairs of the agent's actor (``None``: no actor target)."""
        return None

    def _all_pairs(self, pairs_of: Callable[[Any], Pairs | None]) -> list[Pairs] | None:
        pairs = [pairs_of(m) for m in self.members]
        return None if any(p is None for p in pairs) else pairs

    # --- acting -----------------------------------------------------------------------
    def _actor_out(self, obs: np.ndarray) -> np.ndarray:
        """The stacked actor on every member's ``obs[i]``, ``[N, E, obs] -> [N, E, out]``."""
        if self._numpy_views is not None:
            return self.actor_net.forward_numpy(self._numpy_views, np.asarray(obs))
        x = torch.as_tensor(obs, dtype=self.actor.params.dtype, device=self.device)
        with torch.no_grad():
            return self.actor_net.forward(self._actor_views, x).cpu().numpy()

    # --- learning ---------------------------------------------------------------------
    def _batch(
        self, rows: list[int], batches: Sequence[Mapping[str, Any]] | Mapping[str, Any]
    ) -> Batch:
        """The members' batches stacked ``[n, B, ...]`` with discounts and normalised actions."""
        b = stack_batch(rows, batches, self._gamma, self.actor.params.dtype, self.device)
        action = b.action.reshape(len(rows), b.action.shape[1], -1).float()
        if self._bounded:
            action = (action - self._mid) / self._half
        return b._replace(action=action)

    def _rows_of(self, rows: list[int]) -> tuple[bool, torch.Tensor | None, ViewsOf]:
        """Whether ``rows`` are every member, their index (``None`` then) and the views to cut."""
        every = len(rows) == len(self.members)
        index = None if every else torch.as_tensor(rows, device=self.device)
        return every, index, self._views if every else _plain_views

    def _due(self, rows: list[int]) -> list[int]:
        """Count an update for the members at ``rows``; the positions in ``rows`` whose
        ``policy_freq`` falls due."""
        due = []
        for j, r in enumerate(rows):
            member = self.members[r]
            member.num_updates += 1
            if member.num_updates % member.spec.policy_freq == 0:
                due.append(j)
        return due

    # --- members ----------------------------------------------------------------------
    @torch.no_grad()
    def sync(self) -> None:
        """Write the stacked weights, targets and Adam states back into the member agents."""
        optimizers = [m.actor_optimizer for m in self.members]
        self.actor.write_back(optimizers, self._all_pairs(self._actor_pairs))
        self.critic.write_back(
            [m.critic_optimizer for m in self.members], self._all_pairs(critic_pairs)
        )
