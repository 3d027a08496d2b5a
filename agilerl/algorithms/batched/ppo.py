"""A group of same-architecture PPO agents acting and learning as one stacked network.

The group holds the members' parameters (actor and critic, the layout of
each member's flat Adam buffer) as rows of one ``[N, P]`` tensor and their
Adam moments in a :class:`~agilerl.networks.stacked.StackedAdam`. Acting is
one stacked forward of actor and critic for every member's sub-envs; a
minibatch update is one call of :func:`agilerl.algorithms.core.ppo_objective.ppo_objective`
on ``[N, B]`` tensors, one backward and one optimizer step. Per-member
hyperparameters (``clip_coef``, ``ent_coef``, ``vf_coef``,
``value_clip_coef``, ``max_grad_norm``, ``lr`` and its schedule,
``target_kl``; ``gamma`` and ``gae_lambda`` in the advantages) enter as
``[N, 1]`` columns; those that change shapes (``batch_size``,
``learn_step``, ``num_envs``, ``update_epochs``) are part of the group key.
Action noise and minibatch order come from each member's own
``torch.Generator``, drawn exactly as the member draws them alone, so the
group learns what its members would one after another.

:meth:`PPOGroup.sync` writes the weights and optimizer state back into the
member agents, which stay the source of truth for evolution and checkpoints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agilerl.algorithms.batched.common import StackedGroup
from agilerl.algorithms.core.ppo_objective import PPOCoefs, kl_stops, ppo_objective
from agilerl.algorithms.core.ppo_updates import UpdateTally, diagnoses
from agilerl.algorithms.ppo import PPO
from agilerl.components.rollout_buffer import RolloutBuffer, gae
from agilerl.networks import distributions as D
from agilerl.networks.fastgrad import joined_chain
from agilerl.networks.optim import FlatAdam
from agilerl.networks.stacked import LayoutStack, StackedAdam, StackedTape, chain_layout

__all__ = ["PPOGroup", "ppo_group_key"]

_DATA_KEYS = ("observations", "actions", "log_probs", "values", "advantages", "returns")


def _layouts(agent: PPO) -> tuple[tuple, tuple, tuple[int, int] | None] | None:
    """The actor's and critic's chain layouts in the agent's flat buffer, and the Gaussian
    ``log_std``'s ``(offset, size)`` there (``None`` for other action spaces)."""
    actor = joined_chain(agent.actor.encoder, agent.actor.head)
    critic = joined_chain(agent.critic.encoder, agent.critic.head)
    if actor is None or critic is None:
        return None
    agent.optimizer._relink_data()
    flat = agent.optimizer.flat
    layouts = chain_layout(actor, flat), chain_layout(critic, flat)
    if layouts[0] is None or layouts[1] is None:
        return None
    covered: set[tuple[int, int]] = set()
    for slot in (*layouts[0], *layouts[1]):
        covered.add((slot.weight[0], slot.weight[1] * slot.weight[2]))
        covered.add(slot.bias)
        if slot.norm is not None:
            covered |= {(slot.norm[0], slot.bias[1]), (slot.norm[1], slot.bias[1])}
    log_std = None
    if agent.actor.log_std is not None:
        std = agent.actor.log_std
        offset = (std.data_ptr() - flat.data_ptr()) // flat.element_size()
        if not 0 <= offset <= flat.numel() - std.numel():
            return None
        log_std = (int(offset), std.numel())
        covered.add(log_std)
    if sum(size for _, size in covered) != flat.numel():
        return None  # parameters outside the chains
    return (*layouts, log_std)


def ppo_group_key(agent: Any) -> tuple | None:
    """What members must share to stack (``None``: the agent cannot be stacked).

    A plain feed-forward :class:`PPO` with ``Discrete`` or 1-D ``Box``
    (Gaussian) actions over a flat ``Box`` observation whose actor and critic
    are MLP chains optimised by one :class:`FlatAdam` (a shared encoder is run
    once per chain), without ``normalize_rewards`` (observation normalisation is
    no MLP chain either).
    """
    if type(agent) is not PPO or agent.spec.recurrent:
        return None
    if agent.spec.normalize_rewards:  # the group computes its advantages from raw rewards
        return None
    obs_space, action_space = agent.observation_space, agent.action_space
    if not isinstance(obs_space, spaces.Box) or len(obs_space.shape) != 1:
        return None
    box = isinstance(action_space, spaces.Box) and len(action_space.shape) == 1
    if not (isinstance(action_space, spaces.Discrete) or box):
        return None
    if not isinstance(agent.optimizer, FlatAdam):
        return None
    layouts = _layouts(agent)
    if layouts is None:
        return None
    spec = agent.spec
    return (
        "PPO",
        *layouts,
        int(spec.batch_size),
        int(spec.learn_step),
        int(spec.num_envs),
        int(spec.update_epochs),
        bool(spec.normalize_advantages),
        spec.value_clip_coef is None,
        str(agent.device),
        agent.optimizer.flat.dtype,
    )


class PPOGroup(StackedGroup):
    """Members of one :func:`ppo_group_key`, stacked.

    Args:
        members: The agents (same key).
        slots: Their population slots.
    """

    def __init__(self, members: Sequence[PPO], slots: Sequence[int]) -> None:
        super().__init__(members, slots)
        first = self.members[0]
        actor_layout, critic_layout, self._log_std_slot = _layouts(first)
        self.actor_net, self.critic_net = LayoutStack(actor_layout), LayoutStack(critic_layout)
        with torch.no_grad():
            self.params = torch.stack([m.optimizer.flat for m in self.members])
        self.grad = torch.zeros_like(self.params)
        self.optimizer = StackedAdam.of([m.optimizer for m in self.members], self.params)
        self._views = self._views_of(self.params)
        self._grad_views = self._views_of(self.grad)
        self._numpy_views = None
        if self.params.device.type == "cpu" and self.params.dtype == torch.float32:
            self._numpy_views = self._views_of(self.params.numpy())
        self.generators = [m.generator for m in self.members]
        specs = [m.spec for m in self.members]
        column = {"dtype": self.params.dtype, "device": self.device}

        def col(values: Sequence[float]) -> torch.Tensor:
            return torch.tensor([[float(v)] for v in values], **column)

        ent = [s.ent_coef for s in specs]
        self._coefs = PPOCoefs(
            col([1.0 - s.clip_coef for s in specs]),
            col([1.0 + s.clip_coef for s in specs]),
            col([s.clip_coef for s in specs]),
            col([s.vf_coef for s in specs]),
            col(ent) if any(e != 0.0 for e in ent) else None,
            None if specs[0].value_clip_coef is None else col([s.value_clip_coef for s in specs]),
        )
        self._max_norm = col([s.max_grad_norm for s in specs])

    def _views_of(self, params: Any) -> tuple[list, list]:
        return self.actor_net.views(params), self.critic_net.views(params)

    def _log_std(self, params: torch.Tensor) -> torch.Tensor | None:
        """The rows' Gaussian ``log_std`` as ``[N, 1, A]`` views (``None``: not Gaussian)."""
        if self._log_std_slot is None:
            return None
        offset, size = self._log_std_slot
        return params[:, None, offset : offset + size]

    def _sample(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Every member's ``(action, log_prob)`` from its own generator, as it samples alone."""
        log_std = self._log_std(self.params)
        if log_std is not None:
            return D.gaussian_sample(logits, log_std, False, self.generators)
        return self.members[0].actor.sample(logits, False, self.generators)

    # --- acting -----------------------------------------------------------------------
    def _forward(self, obs: np.ndarray, critic: bool = True) -> tuple[torch.Tensor, ...]:
        """Logits ``[N, E, n]`` and values ``[N, E]`` of every member on its ``obs[i]``."""
        if self._numpy_views is not None:
            actor_views, critic_views = self._numpy_views
            logits = torch.from_numpy(self.actor_net.forward_numpy(actor_views, obs))
            if not critic:
                return (logits,)
            return logits, torch.from_numpy(self.critic_net.forward_numpy(critic_views, obs))[
                ..., 0
            ]
        x = torch.as_tensor(obs, dtype=self.params.dtype, device=self.device)
        logits = self.actor_net.forward(self._views[0], x)
        if not critic:
            return (logits,)
        return logits, self.critic_net.forward(self._views[1], x)[..., 0]

    def policy_step(self, obs: np.ndarray) -> tuple[np.ndarray, list, np.ndarray, np.ndarray]:
        """``(raw actions [N, E], env actions per member, log_probs [N, E], values [N, E])``."""
        obs = np.asarray(obs, dtype=np.float32)
        logits, value = self._forward(obs)
        with torch.no_grad():
            action, log_prob = self._sample(logits)
        raw = action.cpu().numpy()
        env_actions = [m.actor.to_env_action(raw[i]) for i, m in enumerate(self.members)]
        return raw, env_actions, log_prob.cpu().numpy(), value.cpu().numpy()

    def values(self, obs: np.ndarray) -> np.ndarray:
        """``V`` of every member on its ``obs[i]`` (``[N, E, obs] -> [N, E]``)."""
        obs = np.asarray(obs, dtype=np.float32)
        if self._numpy_views is not None:
            return self.critic_net.forward_numpy(self._numpy_views[1], obs)[..., 0]
        x = torch.as_tensor(obs, dtype=self.params.dtype, device=self.device)
        return self.critic_net.forward(self._views[1], x)[..., 0].cpu().numpy()

    def act(self, obs: np.ndarray, epsilons: Sequence[float], greedy: bool = False) -> list:
        """Each member's env actions for its ``obs[i]`` (``epsilons`` are ignored)."""
        if not greedy:
            return self.policy_step(obs)[1]
        (logits,) = self._forward(np.asarray(obs, dtype=np.float32), critic=False)
        mode = logits if self._log_std_slot is not None else logits.argmax(dim=-1)
        raw = mode.cpu().numpy()
        return [m.actor.to_env_action(raw[i]) for i, m in enumerate(self.members)]

    # --- rollouts ---------------------------------------------------------------------
    def create_rollout_buffer(self) -> RolloutBuffer:
        """One buffer of ``steps_per_env`` steps for all ``N * num_envs`` sub-envs, member-major."""
        first = self.members[0]
        num_envs = first.spec.num_envs * len(self.members)
        return RolloutBuffer(
            first.steps_per_env, num_envs, first.observation_space, first.action_space
        )

    def compute_advantages(self, buffer: RolloutBuffer, last_value: np.ndarray) -> None:
        """GAE of every member's columns with its own ``gamma`` and ``gae_lambda``."""
        steps, per = buffer.pos, self.members[0].spec.num_envs
        for i, member in enumerate(self.members):
            cols = slice(i * per, (i + 1) * per)
            gae(
                buffer._np_rewards[:steps, cols],
                buffer._np_values[:steps, cols],
                buffer._np_terminated[:steps, cols],
                buffer._np_truncated[:steps, cols],
                buffer._np_bootstrap[:steps, cols],
                last_value[i],
                float(member.gamma),
                float(member.gae_lambda),
                out_advantages=buffer._np_advantages[:steps, cols],
                out_returns=buffer._np_returns[:steps, cols],
            )
        buffer.computed = True

    def member_data(self, buffer: RolloutBuffer) -> dict[str, torch.Tensor]:
        """The buffer as member-major ``[N, T * E, ...]`` tensors (each member's own order)."""
        steps, n = buffer.pos, len(self.members)
        out = {}
        for key in _DATA_KEYS:
            value = getattr(buffer, key)[:steps]
            value = value.reshape(steps, n, -1, *value.shape[2:]).movedim(1, 0)
            out[key] = value.reshape(n, -1, *value.shape[3:]).to(self.device)
        return out

    # --- learning ---------------------------------------------------------------------
    def learn(self, data: dict[str, torch.Tensor]) -> list[dict[str, float]]:
        """Every member's :meth:`PPO.learn` on its rows of ``data`` (see :meth:`member_data`).

        Returns:
            Each member's losses, as :meth:`PPO.learn` reports them.

        Raises:
            FloatingPointError: If a member's loss is not finite (no step is taken).
        """
        members, n = self.members, len(self.members)
        spec = members[0].spec
        lrs = []
        for i, member in enumerate(members):
            lrs.append(member.update_lr_schedule() if member.spec.lr_schedule else member.spec.lr)
            self.optimizer.lrs[i] = float(member.optimizer.param_groups[0]["lr"])
        samples = data["advantages"].shape[1]
        batch_size, epochs = spec.batch_size, spec.update_epochs
        target_kl = [m.spec.target_kl for m in members]
        ent_in_loss = [m.spec.ent_coef != 0.0 for m in members]
        tallies = [UpdateTally(math.ceil(samples / batch_size)) for _ in range(n)]
        active = list(range(n))
        for epoch in range(epochs):
            if not active:
                break
            diagnosed = [diagnoses(target_kl[i], epoch, epochs) for i in range(n)]
            rows = list(active)
            orders = None
            if batch_size < samples:
                orders = torch.stack(
                    [
                        torch.randperm(samples, generator=self.generators[i], device=self.device)
                        for i in rows
                    ]
                )
            order_row = {r: j for j, r in enumerate(rows)}
            for index, start in enumerate(range(0, samples, batch_size)):
                if not rows:
                    break
                idx = None if orders is None else orders[[order_row[r] for r in rows]]
                if idx is not None:
                    idx = idx[:, start : start + batch_size]
                stats, stop = self._update(rows, data, idx, diagnosed, ent_in_loss, epoch, index)
                for r, values in zip(rows, stats, strict=True):
                    if r in stop:
                        tallies[r].stop()
                    else:
                        members[r].num_updates += 1
                        tallies[r].step(values)
                rows = [r for r in rows if r not in stop]
            for r in active:
                tallies[r].end_epoch()
            active = rows
        return [tally.result(lr) for tally, lr in zip(tallies, lrs, strict=True)]

    def _update(
        self,
        rows: list[int],
        data: dict[str, torch.Tensor],
        idx: torch.Tensor | None,
        diagnosed: list[bool],
        ent_in_loss: list[bool],
        epoch: int,
        index: int,
    ) -> tuple[list[list[float | None]], set[int]]:
        """One minibatch of the members at ``rows``: their stats, and who stopped (target KL)."""
        every = len(rows) == len(self.members)
        where = None if every else torch.as_tensor(rows, device=self.device)
        batch = {}
        for key in _DATA_KEYS:
            value = data[key] if where is None else data[key][where]
            if idx is not None:
                value = value[torch.arange(len(rows), device=self.device)[:, None], idx]
            batch[key] = value
        if every:
            views, grad, grads, coefs, max_norm = (
                self._views,
                self.grad,
                self._grad_views,
                self._coefs,
                self._max_norm,
            )
            grad.zero_()
        else:
            views = self._views_of(self.params[where])
            grad = self.params.new_zeros((len(rows), self.params.shape[1]))
            grads = self._views_of(grad)
            coefs = PPOCoefs(*[None if c is None else c[where] for c in self._coefs])
            max_norm = self._max_norm[where]
        diagnose = any(diagnosed[r] for r in rows)
        want_entropy = any(diagnosed[r] or ent_in_loss[r] for r in rows)
        tape = StackedTape(self.actor_net)
        critic_tape = StackedTape(self.critic_net)
        obs = batch["observations"].to(self.params.dtype)
        logits = tape(views[0], obs)
        value = critic_tape(views[1], obs)[..., 0]
        log_std = self._log_std(self.params if where is None else self.params[where])
        if log_std is not None:
            log_std = log_std.detach().requires_grad_(True)  # a leaf: plain autograd
            log_prob, entropy = D.gaussian_evaluate(logits, log_std, batch["actions"])
            entropy = entropy if want_entropy else None
        else:
            log_prob, entropy = self.members[0].actor.evaluate(
                logits, batch["actions"], with_entropy=want_entropy
            )
        loss, tracked = ppo_objective(
            log_prob,
            entropy,
            value,
            batch,
            coefs,
            self.members[0].spec.normalize_advantages,
            diagnose,
        )
        values = torch.stack(tracked).tolist()
        stats, stop = [], set()
        for j, r in enumerate(rows):
            has_entropy = diagnosed[r] or ent_in_loss[r]
            member_stats: list[float | None] = [values[0][j], values[1][j], None, None, None]
            if has_entropy:
                member_stats[2] = values[2][j]
            if diagnosed[r]:
                member_stats[3], member_stats[4] = values[-2][j], values[-1][j]
            self.members[r]._check_finite(member_stats, epoch, index)
            if kl_stops(member_stats[3], self.members[r].spec.target_kl):
                stop.add(r)
            stats.append(member_stats)
        if len(stop) == len(rows):
            return stats, stop
        if stop:
            keep = torch.tensor([r not in stop for r in rows], device=self.device)
            loss = loss * keep
        tape.backward(loss.sum(), grads[0])
        critic_tape.propagate(grads[1])
        with torch.no_grad():
            if log_std is not None and log_std.grad is not None:
                self._log_std(grad).add_(log_std.grad)
            norm = torch.linalg.vector_norm(grad, dim=1, keepdim=True)
            scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
            grad.mul_(torch.where(max_norm > 0, scale, torch.ones_like(scale)))
        stepped = [r for r in rows if r not in stop]
        if stop:
            grad = grad[[j for j, r in enumerate(rows) if r not in stop]]
        self.optimizer.step(grad, None if len(stepped) == len(self.members) else stepped)
        return stats, stop

    # --- members ----------------------------------------------------------------------
    @torch.no_grad()
    def sync(self) -> None:
        """Write the stacked weights and Adam state back into the member agents."""
        self.optimizer.write_back([m.optimizer for m in self.members])
