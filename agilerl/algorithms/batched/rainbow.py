"""A group of same-architecture Rainbow DQN agents acting and learning as one stacked network.

The members' online weights are the rows of one ``[N, P]`` tensor (the
layout of each member's flat Adam buffer) and their target weights a second
one. The network's three MLP chains (encoder, noisy value and advantage
streams; :func:`~agilerl.networks.fastgrad.chain_of`) run for every member
at once as batched matmuls over views of those rows, recorded by autograd.
An update is one call of :func:`agilerl.algorithms.rainbow_dqn.rainbow_loss`
on ``[N, B]`` batches, one backward, each member's own gradient-norm clip
and one :class:`~agilerl.networks.stacked.StackedAdam` step.

The noise samples stay the members' own: while the group lives, every
member's noise buffers are rows of the group's stacked noise tensors, so a
member's :meth:`~agilerl.algorithms.rainbow_dqn.RainbowDQN.reset_noise`
(called by the loop at episode ends, and by :meth:`RainbowGroup.learn` before
each update, as the agent's ``learn`` does) draws from its own generator
straight into the group. :meth:`RainbowGroup.sync` gives every member its
weights, Adam state and standalone noise buffers back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces

from agilerl.algorithms.batched.common import (
    StackedGroup,
    checked_values,
    soft_update_rows,
    stack_batch,
    write_targets,
)
from agilerl.algorithms.rainbow_dqn import RainbowDQN, rainbow_loss
from agilerl.networks.fastgrad import MLPChain, chain_of
from agilerl.networks.optim import FlatAdam
from agilerl.networks.q_networks import RainbowQNetwork
from agilerl.networks.stacked import StackedAdam, flat_of, offset_in

__all__ = ["RainbowGroup", "rainbow_group_key"]

_NOISE = ("weight_epsilon", "bias_epsilon")
_STREAMS = ("encoder", "value", "advantage")


class _Layer(NamedTuple):
    """Where one chain layer lives: offsets into a member's flat row, noise keys, norm, act."""

    weight: tuple[int, int, int]
    bias: tuple[int, int]
    act: str | None
    norm: tuple[int, int, float] | None
    noise: tuple[int, str, int, str] | None  # (weight_sigma, weight_epsilon key, ...)


def _chains(net: RainbowQNetwork) -> list[MLPChain] | None:
    chains = [chain_of(getattr(net, name)) for name in _STREAMS]
    return None if any(c is None for c in chains) else chains


def _layout(agent: RainbowDQN) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    """The online network's ``(name, shape)`` in flat-buffer order (``None``: not flat)."""
    agent.optimizer._relink_data()
    flat = agent.optimizer.flat
    base, offset, layout = flat.data_ptr(), 0, []
    for name, param in agent.actor.named_parameters():
        if param.data_ptr() != base + offset * flat.element_size():
            return None
        layout.append((name, tuple(param.shape)))
        offset += param.numel()
    if offset != flat.numel():
        return None
    return tuple(layout)


def rainbow_group_key(agent: Any) -> tuple | None:
    """What members must share to stack (``None``: the agent cannot be stacked).

    A plain :class:`RainbowDQN` with its own :class:`RainbowQNetwork` of MLP
    chains (an MLP encoder) over an array observation, whose parameters are
    laid out in order in its :class:`FlatAdam` buffer and whose only buffers
    are the noise samples and the support.
    """
    if type(agent) is not RainbowDQN or type(agent.actor) is not RainbowQNetwork:
        return None
    if not isinstance(agent.observation_space, spaces.Box):
        return None
    if not isinstance(agent.optimizer, FlatAdam):
        return None
    layout = _layout(agent)
    if layout is None or _chains(agent.actor) is None:
        return None
    buffers = {name.rsplit(".", 1)[-1] for name, _ in agent.actor.named_buffers()}
    if not buffers <= {*_NOISE, "support"}:
        return None
    spec = agent.spec
    return (
        "RainbowDQN",
        layout,
        repr(agent.actor.net_config),
        spec.num_atoms,
        spec.v_min,
        spec.v_max,
        spec.n_step,
        bool(spec.combined_reward),
        agent._start,
        str(agent.device),
        agent.optimizer.flat.dtype,
    )


class RainbowGroup(StackedGroup):
    """Members of one :func:`rainbow_group_key`, stacked.

    Args:
        members: The agents (same key).
        slots: Their population slots.

    Attributes:
        takes_replay_extras: :meth:`learn` takes n-step batches and PER weights.
    """

    takes_replay_extras = True

    def __init__(self, members: Sequence[RainbowDQN], slots: Sequence[int]) -> None:
        super().__init__(members, slots)
        first = self.members[0]
        with torch.no_grad():
            self.params = torch.stack([m.optimizer.flat for m in self.members])
            self.target = torch.stack([flat_of(m._target_params) for m in self.members])
        self.optimizer = StackedAdam.of([m.optimizer for m in self.members], self.params)
        self._noise = self._share_noise("actor")
        self._target_noise = self._share_noise("actor_target")
        column = {"dtype": self.params.dtype, "device": self.device}
        spec = first.spec
        self._gamma = torch.tensor([[float(m.spec.gamma)] for m in self.members], **column)
        self._gamma_n = torch.tensor(
            [[float(m.spec.gamma) ** spec.n_step] for m in self.members], **column
        )
        self._tau = [float(m.spec.tau) for m in self.members]
        self._tau_column = torch.tensor([[min(t, 1.0)] for t in self._tau], **column)
        norms = [m.spec.max_grad_norm for m in self.members]
        self._max_norm = torch.tensor([[float(n) if n else float("inf")] for n in norms], **column)
        self._prior_eps = torch.tensor([[m.spec.prior_eps] for m in self.members], **column)
        self._support = first.actor.support
        self._v_min, self._v_max = float(spec.v_min), float(spec.v_max)
        self._combined = bool(spec.combined_reward)
        self._start = first._start
        self._num_actions = first.num_actions
        self._streams = self._stream_layouts(first)
        self._slices, offset = [], 0
        for _name, shape in _layout(first):
            size = int(np.prod(shape, dtype=np.int64))
            self._slices.append((offset, size, shape))
            offset += size
        # params and target change in place (Adam, soft updates): their parts stay valid
        self._param_parts = self._parts(self.params)
        self._target_parts = self._parts(self.target)

    # --- stacked state ----------------------------------------------------------------
    @torch.no_grad()
    def _share_noise(self, net_name: str) -> dict[str, torch.Tensor]:
        """Stack the members' noise buffers of ``net_name``; the members then write into them.

        Each member's buffer keeps its identity (networks' cached chains hold it) and
        moves onto its row of the stacked tensor (``Tensor.set_``).
        """
        names = [n for n, _ in getattr(self.members[0], net_name).named_buffers()]
        stacked = {}
        for name in names:
            if not name.endswith(_NOISE):
                continue
            owned = [getattr(m, net_name).get_buffer(name) for m in self.members]
            rows = stacked[name] = torch.stack(owned)
            for i, tensor in enumerate(owned):
                tensor.set_(
                    rows.untyped_storage(),
                    rows[i].storage_offset(),
                    rows[i].shape,
                    rows[i].stride(),
                )
        return stacked

    @torch.no_grad()
    def _release_noise(self, net_name: str, stacked: Mapping[str, torch.Tensor]) -> None:
        """Give every member's noise buffers storage of their own again."""
        for name in stacked:
            for m in self.members:
                tensor = getattr(m, net_name).get_buffer(name)
                tensor.set_(tensor.clone())

    def _stream_layouts(self, first: RainbowDQN) -> list[list[_Layer]]:
        """Every chain layer's place in a flat row and in the stacked noise (read once)."""
        flat = first.optimizer.flat
        noise_keys = {}
        for name, tensor in first.actor.named_buffers():
            if name.endswith(_NOISE):
                noise_keys[id(tensor)] = name
        streams = []
        for chain in _chains(first.actor):
            layers = []
            for w, b, act, noise, norm in chain.layers:
                norm_at = None
                if norm is not None:
                    norm_at = (offset_in(norm.weight, flat), offset_in(norm.bias, flat), norm.eps)
                noise_at = None
                if noise is not None:
                    w_sigma, w_eps, b_sigma, b_eps = noise
                    noise_at = (
                        offset_in(w_sigma, flat),
                        noise_keys[id(w_eps)],
                        offset_in(b_sigma, flat),
                        noise_keys[id(b_eps)],
                    )
                out, inp = int(w.shape[0]), int(w.shape[1])
                weight_at = (offset_in(w, flat), out, inp)
                layers.append(_Layer(weight_at, (offset_in(b, flat), out), act, norm_at, noise_at))
            streams.append(layers)
        return streams

    def _parts(self, rows: torch.Tensor, leaves: bool = False) -> dict[int, torch.Tensor]:
        """``rows`` ``[n, P]`` cut into the network's parameters ``[n, *shape]``, by offset.

        With ``leaves`` (``rows`` detached) every part is an autograd leaf of its own, so a
        backward writes each gradient once instead of scattering it into ``[n, P]``.
        """
        parts, n = {}, rows.shape[0]
        for offset, size, shape in self._slices:
            part = rows[:, offset : offset + size].view(n, *shape)
            parts[offset] = part.requires_grad_(True) if leaves else part
        return parts

    def _chain(
        self,
        layers: Sequence[_Layer],
        parts: Mapping[int, torch.Tensor],
        noise: Mapping[str, torch.Tensor] | None,
        x: torch.Tensor,
    ) -> torch.Tensor:
        """One stream of every member at once: ``[n, B, in] -> [n, B, out]``."""
        for (wo, out, _inp), (bo, _), act, norm, noisy in layers:
            weight, bias = parts[wo], parts[bo]
            if noisy is not None and noise is not None:
                ws, we, bs, be = noisy
                weight = torch.addcmul(weight, parts[ws], noise[we])
                bias = torch.addcmul(bias, parts[bs], noise[be])
            x = torch.baddbmm(bias.unsqueeze(1), x, weight.mT)
            if norm is not None:
                nw, nb, eps = norm
                x = F.layer_norm(x, (out,), None, None, eps)
                x = torch.addcmul(parts[nb].unsqueeze(1), x, parts[nw].unsqueeze(1))
            if act == "ReLU":
                x = torch.relu(x)
            elif act == "Tanh":
                x = torch.tanh(x)
        return x

    def _logits(
        self,
        parts: Mapping[int, torch.Tensor],
        noise: Mapping[str, torch.Tensor] | None,
        x: torch.Tensor,
    ) -> torch.Tensor:
        """Every member's dueling atom logits ``[n, B, actions, atoms]`` on its ``x[i]``."""
        encoder, value, advantage = self._streams
        latent = self._chain(encoder, parts, noise, x)
        v = self._chain(value, parts, noise, latent).unsqueeze(-2)
        adv = self._chain(advantage, parts, noise, latent)
        adv = adv.view(*adv.shape[:-1], self._num_actions, -1)
        return v + adv - adv.mean(dim=-2, keepdim=True)

    @staticmethod
    def _rows_of(stacked: Mapping[str, torch.Tensor], index: torch.Tensor | None) -> dict:
        return dict(stacked) if index is None else {k: v[index] for k, v in stacked.items()}

    # --- acting -----------------------------------------------------------------------
    def act(self, obs: np.ndarray, epsilons: Sequence[float], greedy: bool = False) -> list:
        """Each member's env actions for its ``obs[i]`` (``[N, E, obs]``); noise explores."""
        x = torch.as_tensor(np.asarray(obs), dtype=self.params.dtype, device=self.device)
        with torch.inference_mode():
            logits = self._logits(self._param_parts, None if greedy else self._noise, x)
            q = F.softmax(logits, dim=-1) @ self._support
            actions = q.argmax(dim=-1).cpu().numpy()
        if self._start:
            actions = actions + self._start
        return list(actions)

    # --- learning ---------------------------------------------------------------------
    def learn(
        self,
        rows: Sequence[int],
        batches: Sequence[Mapping[str, Any]],
        n_step_batches: Sequence[Mapping[str, Any] | None] | None = None,
        weights: Sequence[Any] | None = None,
    ) -> list[dict]:
        """One update of the members at ``rows`` (group positions), as each one's ``learn``.

        Args:
            rows: The members that learn.
            batches: Their one-step batches (one size).
            n_step_batches: Their n-step batches at the same indices (PER + n-step).
            weights: Their PER importance weights ``[B]`` each.

        Returns:
            Each member's ``loss``, ``q_mean`` and ``priorities`` (numpy ``[B]``).

        Raises:
            FloatingPointError: If a member's loss is not finite (no step is taken).
        """
        rows = list(rows)
        for r in rows:
            self.members[r].reset_noise()
        every = len(rows) == len(self.members)
        index = None if every else torch.as_tensor(rows, device=self.device)
        params = self._parts((self.params if every else self.params[index]).detach(), leaves=True)
        target = self._target_parts if every else self._parts(self.target[index])
        noise = self._rows_of(self._noise, index)
        target_noise = self._rows_of(self._target_noise, index)

        def online(x: torch.Tensor) -> torch.Tensor:
            return self._logits(params, noise, x)

        def target_of(x: torch.Tensor) -> torch.Tensor:
            return self._logits(target, target_noise, x)

        def loss_of(stacked: Sequence[Mapping[str, Any]], gamma_n: torch.Tensor) -> tuple:
            b = stack_batch(rows, stacked, self._gamma, self.params.dtype, self.device, gamma_n)
            return rainbow_loss(
                online, target_of, b, self._support, self._v_min, self._v_max, self._start
            )

        with torch.enable_grad():
            if n_step_batches is None or n_step_batches[0] is None:
                elementwise, q = loss_of(batches, self._gamma)
            else:
                elementwise, q = loss_of(n_step_batches, self._gamma_n)
                if self._combined:
                    elementwise = elementwise + loss_of(batches, self._gamma)[0]
            if weights is not None and weights[0] is not None:
                w = torch.stack([torch.as_tensor(x, device=self.device) for x in weights])
                loss = (elementwise * w.reshape(len(rows), -1).float()).mean(dim=-1)
            else:
                loss = elementwise.mean(dim=-1)
            values = checked_values(self.members, rows, loss, q, "loss")
            leaves = list(params.values())
            grads = torch.autograd.grad(loss.sum(), leaves, allow_unused=True)
        grad = torch.cat(
            [
                (torch.zeros_like(p) if g is None else g).reshape(len(rows), -1)
                for p, g in zip(leaves, grads, strict=True)
            ],
            dim=1,
        )
        self._clip(grad, index)
        self.optimizer.step(grad, None if every else rows)
        soft_update_rows(self.target, self.params, self._tau, self._tau_column, rows, every)
        eps = self._prior_eps if every else self._prior_eps[index]
        priorities = (elementwise.detach() + eps).cpu().numpy()
        stats = []
        for i, r in enumerate(rows):
            self.members[r].num_updates += 1
            loss_value, q_mean = values[0][i], values[1][i]
            stats.append({"loss": loss_value, "q_mean": q_mean, "priorities": priorities[i]})
        return stats

    @torch.no_grad()
    def _clip(self, grad: torch.Tensor, index: torch.Tensor | None) -> None:
        """Each row's gradient-norm clip, as :meth:`FlatAdam.clip_grad_norm_` does it."""
        max_norm = self._max_norm if index is None else self._max_norm[index]
        norm = torch.linalg.vector_norm(grad, dim=1, keepdim=True)
        grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))

    # --- members ----------------------------------------------------------------------
    @torch.no_grad()
    def sync(self) -> None:
        """Write the stacked weights, targets and Adam state back; unshare the noise."""
        self.optimizer.write_back([m.optimizer for m in self.members])
        write_targets(self.members, self.target)
        self._release_noise("actor", self._noise)
        self._release_noise("actor_target", self._target_noise)
