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
from gymnasium import spaces

from agilerl.algorithms.core.off_policy import Batch
from agilerl.algorithms.ddpg import DDPG, ddpg_actor_loss, ddpg_critic_loss
from agilerl.algorithms.td3 import TD3, smooth_target_action
from agilerl.networks.deterministic import ContinuousQNetwork, DeterministicActor
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

__all__ = ["DDPGGroup", "ddpg_group_key"]

Layout = tuple[LayerSlot, ...]


def _layouts(agent: DDPG) -> tuple[Layout, tuple[tuple[Layout, Layout], ...]] | None:
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


def _pairs(agent: DDPG) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], ...]:
    """(online, target) parameter pairs of the actor and of the critics."""
    actor = list(zip(agent.actor.parameters(), agent.actor_target.parameters(), strict=True))
    critics = [
        pair
        for critic, target in zip(agent._critics, agent._critic_targets, strict=True)
        for pair in zip(critic.parameters(), target.parameters(), strict=True)
    ]
    return actor, critics


def ddpg_group_key(agent: Any) -> tuple | None:
    """What members must share to stack (``None``: the agent cannot be stacked).

    A plain :class:`DDPG` or :class:`TD3` on a flat ``Box`` observation whose
    actor and critics are MLP chains with their own encoders (no
    ``share_encoders``), optimised by :class:`FlatAdam`.
    """
    if type(agent) not in (DDPG, TD3) or agent.spec.share_encoders:
        return None
    if type(agent.actor) is not DeterministicActor or agent.actor.detach_encoder:
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
    for pairs, opt in zip(_pairs(agent), optimizers, strict=True):
        if _offsets([p for p, _ in pairs], opt.flat) is None:
            return None
    actor = agent.actor
    return (
        type(agent).__name__,
        layouts,
        actor.bounded,
        tuple(actor.action_mid.tolist()),
        tuple(actor.action_half_range.tolist()),
        str(agent.device),
        agent.actor_optimizer.flat.dtype,
        agent.critic_optimizer.flat.dtype,
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

    def __init__(
        self,
        optimizers: Sequence[FlatAdam],
        pairs: Sequence[Sequence[tuple[torch.Tensor, torch.Tensor]]] | None,
    ) -> None:
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
    def write_back(
        self,
        optimizers: Sequence[FlatAdam],
        pairs: Sequence[Sequence[tuple[torch.Tensor, torch.Tensor]]] | None,
    ) -> None:
        """Online weights and Adam moments into the optimizers, targets into the target nets."""
        self.optimizer.write_back(optimizers)
        for i, member_pairs in enumerate(pairs or ()):
            for offset, (_, t) in zip(self.offsets[i], member_pairs, strict=True):
                t.copy_(self.target[i, offset : offset + t.numel()].view_as(t))


class DDPGGroup:
    """Members of one :func:`ddpg_group_key` (all DDPG or all TD3), stacked.

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

    def __init__(self, members: Sequence[DDPG], slots: Sequence[int]) -> None:
        self.members = list(members)
        self.slots = list(slots)
        first = self.members[0]
        self.device = first.device
        actor_layout, critic_layouts = _layouts(first)
        self.actor_net = LayoutStack(actor_layout)
        self.critic_nets = [(LayoutStack(e), LayoutStack(h)) for e, h in critic_layouts]
        pairs = [_pairs(m) for m in self.members]
        self.actor = _Rows([m.actor_optimizer for m in self.members], [p[0] for p in pairs])
        self.critic = _Rows([m.critic_optimizer for m in self.members], [p[1] for p in pairs])
        self._numpy_views = None
        params = self.actor.params
        if params.device.type == "cpu" and params.dtype == torch.float32:
            self._numpy_views = self.actor_net.views(params.numpy())
        self._actor_views = self.actor_net.views(params)
        self._views = ViewCache()
        column = {"dtype": params.dtype, "device": self.device}
        specs = [m.spec for m in self.members]
        self._gamma = torch.tensor([[float(s.gamma)] for s in specs], **column)
        self._tau = torch.tensor([[min(max(float(s.tau), 0.0), 1.0)] for s in specs], **column)
        self._td3 = isinstance(first, TD3)
        if self._td3:
            self._policy_noise = [float(s.policy_noise) for s in specs]
            self._noise = torch.tensor([[[v]] for v in self._policy_noise], **column)
            self._clip = torch.tensor([[[float(s.noise_clip)]] for s in specs], **column)
        self._bounded = first.actor.bounded
        self._mid = first.actor.action_mid.to(**column)
        self._half = first.actor.action_half_range.to(**column)

    def __len__(self) -> int:
        return len(self.members)

    # --- acting -----------------------------------------------------------------------
    def act(self, obs: np.ndarray, epsilons: Sequence[float], greedy: bool = False) -> list:
        """Each member's env actions for its ``obs[i]`` (``[N, E, obs]``), with its own noise."""
        if self._numpy_views is not None:
            actions = self.actor_net.forward_numpy(self._numpy_views, np.asarray(obs))
        else:
            x = torch.as_tensor(obs, dtype=self.actor.params.dtype, device=self.device)
            with torch.no_grad():
                actions = self.actor_net.forward(self._actor_views, x).cpu().numpy()
        out = []
        for member, action in zip(self.members, actions, strict=True):
            if not greedy:
                action = action + member.noise.sample(action.shape[0])
            out.append(member.actor.to_env_action(action))
        return out

    # --- learning ---------------------------------------------------------------------
    def _batch(
        self, rows: list[int], batches: Sequence[Mapping[str, Any]] | Mapping[str, Any]
    ) -> Batch:
        """The members' batches stacked ``[n, B, ...]``, with :meth:`DDPG._prepare`'s discounts
        and the actions normalised."""
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
        action = action.reshape(n, action.shape[1], -1).float()
        if self._bounded:
            action = (action - self._mid) / self._half
        return Batch(stack("obs").to(dtype), action, reward, stack("next_obs").to(dtype), discount)

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
        every = len(rows) == len(self.members)
        index = None if every else torch.as_tensor(rows, device=self.device)

        critic, critic_target, critic_grad = self.critic.rows(index)
        actor_target = self.actor.target if every else self.actor.target[index]
        views = self._views if every else _plain_views
        tape = StackedGradTape()
        critics = range(len(self.critic_nets))
        loss, _tds, q = ddpg_critic_loss(
            [self._q(tape, k, critic, critic_grad, views) for k in critics],
            [self._q(tape, k, critic_target, None, views) for k in critics],
            self._target_action(rows, views(self.actor_net, actor_target)),
            b,
            b.action,
        )
        values = torch.stack([loss.detach(), q.detach().mean(dim=-1)]).tolist()
        for r, value in zip(rows, values[0], strict=True):
            self.members[r]._check_finite({"critic_loss": value})
        tape.backward(loss.sum())
        self.critic.optimizer.step(critic_grad, None if every else rows)
        due = []
        for j, r in enumerate(rows):
            member = self.members[r]
            member.num_updates += 1
            if member.num_updates % member.spec.policy_freq == 0:
                due.append(j)
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
        every = len(rows) == len(self.members)
        index = None if every else torch.as_tensor(rows, device=self.device)
        actor, _, actor_grad = self.actor.rows(index)
        critic = self.critic.params if every else self.critic.params[index]
        view = self._views if every else _plain_views
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

    # --- members ----------------------------------------------------------------------
    @torch.no_grad()
    def sync(self) -> None:
        """Write the stacked weights, targets and Adam states back into the member agents."""
        pairs = [_pairs(m) for m in self.members]
        self.actor.write_back([m.actor_optimizer for m in self.members], [p[0] for p in pairs])
        self.critic.write_back([m.critic_optimizer for m in self.members], [p[1] for p in pairs])
