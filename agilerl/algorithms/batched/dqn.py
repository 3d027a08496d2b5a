"""A group of same-architecture DQN agents acting and learning as one stacked network.

The group holds the members' online weights as rows of one ``[N, P]`` leaf
tensor (the layout of each member's flat Adam buffer), their target weights
as a second ``[N, P]`` tensor, and their Adam moments in a
:class:`~agilerl.networks.stacked.StackedAdam`. An update is one call of
:func:`agilerl.algorithms.dqn.dqn_loss` on ``[N, B]`` batches, one backward
and one optimizer step; each member keeps its own learning rate, betas,
epsilon, gamma (through its batch's discounts) and tau. Exploration draws
from each member's own generator (:meth:`DQN.explore`), so the group makes
the same moves as its members would alone.

:meth:`DQNGroup.sync` writes everything back into the member agents, which
stay the source of truth for evaluation-free bookkeeping, evolution and
checkpoints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agilerl.algorithms.batched.common import (
    StackedGroup,
    checked_values,
    numpy_views,
    soft_update_rows,
    stack_batch,
    write_targets,
)
from agilerl.algorithms.dqn import DQN, dqn_loss
from agilerl.networks.fastgrad import joined_chain
from agilerl.networks.optim import FlatAdam
from agilerl.networks.q_networks import QNetwork
from agilerl.networks.stacked import (
    LayoutStack,
    StackedAdam,
    StackedTape,
    chain_layout,
    flat_of,
)

__all__ = ["DQNGroup", "dqn_group_key"]


def dqn_group_key(agent: Any) -> tuple | None:
    """What members must share to stack (``None``: the agent cannot be stacked).

    A plain :class:`DQN` whose Q network is an MLP chain over a flat ``Box``
    observation, optimised by :class:`FlatAdam`.
    """
    if type(agent) is not DQN or not isinstance(agent.actor, QNetwork):
        return None
    space = agent.observation_space
    if not isinstance(space, spaces.Box) or len(space.shape) != 1:
        return None
    if not isinstance(agent.optimizer, FlatAdam):
        return None
    chain = joined_chain(agent.actor.encoder, agent.actor.head)
    if chain is None:
        return None
    agent.optimizer._relink_data()
    layout = chain_layout(chain, agent.optimizer.flat)
    if layout is None or agent.optimizer.flat.numel() != sum(
        p.numel() for p in agent._target_params
    ):
        return None
    return (
        "DQN",
        layout,
        bool(agent.spec.double),
        agent._start,
        str(agent.device),
        agent.optimizer.flat.dtype,
    )


class DQNGroup(StackedGroup):
    """Members of one :func:`dqn_group_key`, stacked.

    Args:
        members: The agents (same key).
        slots: Their population slots.

    Attributes:
        stacked_batches: :meth:`learn` also takes one member-major batch.
    """

    stacked_batches = True

    def __init__(self, members: Sequence[DQN], slots: Sequence[int]) -> None:
        super().__init__(members, slots)
        first = self.members[0]
        layout = chain_layout(
            joined_chain(first.actor.encoder, first.actor.head), first.optimizer.flat
        )
        self.net = LayoutStack(layout)
        with torch.no_grad():
            self.params = torch.stack([m.optimizer.flat for m in self.members])
            self.target = torch.stack([flat_of(m._target_params) for m in self.members])
        self.grad = torch.zeros_like(self.params)
        self.optimizer = StackedAdam.of([m.optimizer for m in self.members], self.params)
        self._views = self.net.views(self.params)
        self._target_views = self.net.views(self.target)
        self._grad_views = self.net.views(self.grad)
        self._numpy_views = numpy_views(self.net, self.params)
        column = {"dtype": self.params.dtype, "device": self.device}
        self._gamma = torch.tensor([[float(m.spec.gamma)] for m in self.members], **column)
        self._tau = [float(m.spec.tau) for m in self.members]
        self._tau_column = torch.tensor([[min(t, 1.0)] for t in self._tau], **column)
        self._double = bool(first.spec.double)
        self._start = first._start

    # --- acting -----------------------------------------------------------------------
    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """``Q`` of every member on its own observations, ``[N, E, obs] -> [N, E, n]``."""
        if self._numpy_views is not None:
            return self.net.forward_numpy(self._numpy_views, np.asarray(obs))
        x = torch.as_tensor(obs, dtype=self.params.dtype, device=self.device)
        return self.net.forward(self._views, x).cpu().numpy()

    def act(self, obs: np.ndarray, epsilons: Sequence[float], greedy: bool = False) -> list:
        """Each member's env actions for its ``obs[i]`` (``[N, E, obs]``), epsilon-greedy."""
        eps = [0.0 if greedy else float(e) for e in epsilons]
        greedy_actions = None
        if any(e < 1.0 for e in eps):
            greedy_actions = self.q_values(obs).argmax(axis=-1)
        n = obs.shape[1]
        return [
            m.explore(None if e >= 1.0 else greedy_actions[i], e, n)
            for i, (m, e) in enumerate(zip(self.members, eps, strict=True))
        ]

    # --- learning ---------------------------------------------------------------------
    def learn(
        self, rows: Sequence[int], batches: Sequence[Mapping[str, Any]] | Mapping[str, Any]
    ) -> list[dict]:
        """One update of the members at ``rows`` (group positions), one batch each.

        The batches must have one size; ``batches`` may also be one batch of
        ``len(rows) * B`` transitions, member-major (see :attr:`stacked_batches`).
        Returns each member's ``loss`` and ``q_mean``.

        Raises:
            FloatingPointError: If a member's loss is not finite (no step is taken).
        """
        rows = list(rows)
        b = stack_batch(rows, batches, self._gamma, self.params.dtype, self.device)
        every = len(rows) == len(self.members)
        if every:
            views, target, grad, grads = (
                self._views,
                self._target_views,
                self.grad,
                self._grad_views,
            )
            grad.zero_()
        else:
            index = torch.as_tensor(rows, device=self.device)
            views = self.net.views(self.params[index])
            target = self.net.views(self.target[index])
            grad = self.params.new_zeros((len(rows), self.params.shape[1]))
            grads = self.net.views(grad)
        tape = StackedTape(self.net)
        loss, _td, q = dqn_loss(
            lambda x: tape(views, x),
            lambda x: tape(target, x),
            b,
            start=self._start,
            double=self._double,
        )
        values = checked_values(self.members, rows, loss, q, "loss")
        tape.backward(loss.sum(), grads)
        self.optimizer.step(grad, None if every else rows)
        soft_update_rows(self.target, self.params, self._tau, self._tau_column, rows, every)
        stats = []
        for r, loss_value, q_mean in zip(rows, values[0], values[1], strict=True):
            self.members[r].num_updates += 1
            stats.append({"loss": loss_value, "q_mean": q_mean})
        return stats

    # --- members ----------------------------------------------------------------------
    @torch.no_grad()
    def sync(self) -> None:
        """Write the stacked weights, targets and Adam state back into the member agents."""
        self.optimizer.write_back([m.optimizer for m in self.members])
        write_targets(self.members, self.target)
