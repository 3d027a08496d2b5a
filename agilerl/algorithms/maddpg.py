"""MADDPG: decentralised deterministic actors, centralised critics over all agents."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from agilerl.algorithms.core.multi_agent import MultiAgentAlgorithm, build_mlp, flat_dim
from agilerl.algorithms.core.rng import generator_from_state, generator_state
from agilerl.arena.models.algorithms.maddpg import MADDPGSpec
from agilerl.components.noise import ExplorationNoise, make_noise
from agilerl.networks import masking
from agilerl.networks import torch_internals as internals
from agilerl.networks.fastgrad import (
    GradTape,
    chain_of,
    interleaved_parameters,
    pack_parameters,
)
from agilerl.networks.optim import FlatAdam

__all__ = ["MADDPG"]


def _soft_update(targets: list[torch.Tensor], sources: list[torch.Tensor], tau: float) -> None:
    with torch.no_grad():
        internals.foreach_lerp_(targets, sources, tau)


def _forward(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``module(x)`` without autograd bookkeeping: through its chain when it has one."""
    chain = chain_of(module)
    return chain.forward(x) if chain is not None else module(x)


def one_hot(index: torch.Tensor, n: int) -> torch.Tensor:
    """Float one-hot rows of integer ``index`` (``F.one_hot`` without its range check)."""
    out = torch.zeros((index.shape[0], n), device=index.device)
    return out.scatter_(1, index.reshape(-1, 1), 1.0)


def critic_values(
    tape: GradTape, critics: list[nn.Module], *inputs: torch.Tensor, params: bool = True
) -> torch.Tensor:
    """``[N, B]`` values of ``critics`` on ``cat(inputs)``; twins run as one stacked pass."""
    if len(critics) == 1:
        return tape(critics[0], *inputs, params=params).view(1, -1)
    return tape.stacked(critics, *inputs, params=params).squeeze(-1)


class MADDPG(MultiAgentAlgorithm):
    """Multi-Agent DDPG.

    Each policy (an agent, or a group with ``share_policies``) has an actor on
    its own observation and a critic on ``[own obs, own action, every obs,
    every action]`` (the own part lets a group-shared critic tell its members
    apart). Box actions are ``tanh`` squashed into the bounds; Discrete
    actions are logits, made differentiable with Gumbel-softmax or a greedy
    one-hot with straight-through gradients (``spec.discrete_actions``), and
    stored one-hot for the critics.

    Args:
        spec: Validated :class:`MADDPGSpec`.
        observation_spaces: Per-agent observation spaces.
        action_spaces: Per-agent action spaces.
        index: Population index.
        device: Torch device.
        actor_networks: Optional pre-built ``ModuleDict`` of actors by policy id.
        critic_networks: Optional pre-built ``ModuleDict`` of critics by policy id.
    """

    spec_class = MADDPGSpec
    spec: MADDPGSpec
    num_critics = 1

    # --- networks -------------------------------------------------------------
    def _critic_names(self) -> list[str]:
        return (
            ["critics"]
            if self.num_critics == 1
            else [f"critics_{i + 1}" for i in range(self.num_critics)]
        )

    def _build(self) -> None:
        given_actors, given_critics = self._given
        joint = sum(
            flat_dim(self.policy_spaces[a]) + flat_dim(self.action_spaces[a]) for a in self.agents
        )
        actors: dict[str, nn.Module] = {}
        critics: list[dict[str, nn.Module]] = [{} for _ in range(self.num_critics)]
        for policy in self.policies:
            agent = self.members[policy][0]
            own = flat_dim(self.policy_spaces[agent]) + flat_dim(self.action_spaces[agent])
            net = self.net_spec(policy)
            actors[policy] = build_mlp(
                flat_dim(self.policy_spaces[agent]), flat_dim(self.action_spaces[agent]), net
            )
            for table in critics:
                table[policy] = build_mlp(own + joint, 1, net)
        self.actors = given_actors if given_actors is not None else nn.ModuleDict(actors)
        critic_dicts = [nn.ModuleDict(t) for t in critics]
        if given_critics is not None:
            critic_dicts[0] = given_critics
        self.actors.to(self.device)
        self.actor_targets = _frozen_copy(self.actors)
        self.nets = {"actors": self.actors, "actor_targets": self.actor_targets}
        self.critic_sets: list[nn.ModuleDict] = []
        self.critic_target_sets: list[nn.ModuleDict] = []
        for name, critic in zip(self._critic_names(), critic_dicts, strict=True):
            critic.to(self.device)
            target = _frozen_copy(critic)
            self.critic_sets.append(critic)
            self.critic_target_sets.append(target)
            self.nets[name] = critic
            self.nets[f"{name}_targets"] = target
        self._soft_pairs = ([], [])
        for source, target in [
            (self.actors, self.actor_targets),
            *zip(self.critic_sets, self.critic_target_sets, strict=True),
        ]:
            self._soft_pairs[0].extend(target.parameters())
            self._soft_pairs[1].extend(source.parameters())
        self._bounds = {
            a: (
                torch.as_tensor(s.low, dtype=torch.float32, device=self.device).reshape(-1),
                torch.as_tensor(s.high, dtype=torch.float32, device=self.device).reshape(-1),
            )
            for a, s in self.action_spaces.items()
            if isinstance(s, spaces.Box)
        }
        self.opts = {}
        # (target flat, online flat) pairs: a soft update is one lerp per optimizer
        self._soft_flats: list[tuple[torch.Tensor, torch.Tensor]] = []
        for policy in self.policies:
            # Flat buffers: zeroing and the Adam update are one fused whole-buffer pass each.
            actor = FlatAdam(self.actors[policy].parameters(), lr=self.spec.lr_actor, fused=True)
            # twin critics' tensors side by side, so that they run as one stacked pass
            critic = FlatAdam(
                interleaved_parameters(*[c[policy] for c in self.critic_sets]),
                lr=self.spec.lr_critic,
                fused=True,
            )
            self.opts[f"actor:{policy}"] = actor
            self.opts[f"critic:{policy}"] = critic
            targets = [
                list(self.actor_targets[policy].parameters()),
                interleaved_parameters(*[t[policy] for t in self.critic_target_sets]),
            ]
            for opt, params in zip((actor, critic), targets, strict=True):
                flat = pack_parameters(params)
                if flat is not None and [p.numel() for p in params] == opt.numels:
                    self._soft_flats.append((flat, opt.flat))
        if len(self._soft_flats) != 2 * len(self.policies):
            self._soft_flats = []
        self._target_ptrs = self._target_layout()
        self._seed_noise()

    def _target_layout(self) -> tuple[int, ...]:
        return tuple(p.data_ptr() for p in self._soft_pairs[0])

    def _soft_update_targets(self) -> None:
        """``target <- (1 - tau) target + tau online`` for every network."""
        if self._soft_flats and self._target_layout() == self._target_ptrs:
            with torch.no_grad():
                for target, online in self._soft_flats:
                    target.lerp_(online, self.spec.tau)
        else:  # a target was re-pointed since the build: tensor by tensor
            _soft_update(*self._soft_pairs, self.spec.tau)

    def _seed_noise(self) -> None:
        """Fresh exploration noise processes on one generator seeded from torch's RNG."""
        seed = int(torch.randint(0, 2**31 - 1, (1,)).item())
        rng = np.random.default_rng(seed)
        self._noise_rng = rng
        self.noise: dict[str, ExplorationNoise] = {
            a: make_noise(
                self.spec.O_U_noise,
                flat_dim(self.action_spaces[a]),
                self.spec.vect_noise_dim,
                self.spec.mean_noise,
                self.spec.expl_noise,
                self.spec.theta,
                self.spec.dt,
                rng,
            )
            for a in self.agents
            if isinstance(self.action_spaces[a], spaces.Box)
        }

    def _apply_lrs(self) -> None:
        for name, opt in self.opts.items():
            lr = self.spec.lr_actor if name.startswith("actor:") else self.spec.lr_critic
            for group in opt.param_groups:
                group["lr"] = lr

    # --- actions ----------------------------------------------------------------
    def _squash(self, agent: str, out: torch.Tensor) -> torch.Tensor:
        low, high = self._bounds[agent]
        return low + (high - low) * (torch.tanh(out) + 1.0) / 2.0

    def _differentiable(
        self, agent: str, out: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Critic-input action from actor outputs, with gradients (among legal actions)."""
        if isinstance(self.action_spaces[agent], spaces.Box):
            return self._squash(agent, out)
        out = masking.mask_logits(out, mask)
        if self.spec.discrete_actions == "gumbel_softmax":
            return F.gumbel_softmax(out, tau=self.spec.gumbel_temperature, hard=True)
        soft = F.softmax(out, dim=-1)
        hard = one_hot(soft.argmax(-1), soft.shape[-1])
        return hard - soft.detach() + soft

    def _target_action(
        self, agent: str, obs: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        out = _forward(self.actor_targets[self.policy_of[agent]], obs)
        if isinstance(self.action_spaces[agent], spaces.Box):
            return self._squash(agent, out)
        return one_hot(masking.masked_argmax(out, mask), out.shape[-1])

    def to_critic_action(self, agent: str, action: torch.Tensor) -> torch.Tensor:
        """A stored env action as critic input (one-hot for Discrete)."""
        space = self.action_spaces[agent]
        if isinstance(space, spaces.Discrete):
            return one_hot(action.long(), int(space.n))
        return action.reshape(action.shape[0], -1).float()

    def _actor_outputs(self, obs: Mapping[str, Any], agent: str) -> np.ndarray:
        """The actor's raw outputs for one agent's observation batch, as a numpy array.

        CPU float32 chains run in numpy (a few microseconds per layer at acting
        batch sizes, where each torch op costs several times that).
        """
        actor = self.actors[self.policy_of[agent]]
        chain = chain_of(actor)
        value = masking.observation_part(obs[agent])
        if chain is not None and chain.numpy_ok and isinstance(value, np.ndarray):
            return chain.forward_numpy(value.reshape(value.shape[0], -1))
        with torch.no_grad():
            return _forward(actor, self.obs_tensor(obs, agent)).cpu().numpy()

    def act(self, obs: Mapping[str, Any], greedy: bool = False) -> dict[str, np.ndarray]:
        """Env actions: greedy outputs, or with exploration (noise / sampled categorical).

        Exploration draws (Box noise, Discrete samples) come from the agent's own
        noise generator, so acting leaves torch's global RNG untouched. A masked
        agent's Discrete action is the best (or sampled) legal one.
        """
        actions = {}
        for agent in self.agents:
            out = self._actor_outputs(obs, agent)
            space = self.action_spaces[agent]
            if isinstance(space, spaces.Discrete):
                if not greedy:  # Gumbel-max: a draw from Categorical(logits=out)
                    out = out - np.log(self._noise_rng.standard_exponential(out.shape))
                legal = masking.numpy_mask(obs[agent])
                actions[agent] = masking.masked_argmax_numpy(out, legal).astype(np.int64)
                continue
            low, high = space.low.reshape(-1), space.high.reshape(-1)
            action = low + (high - low) * (np.tanh(out) + 1.0) / 2.0
            if not greedy:
                action = action + self.noise[agent].sample(action.shape[0]) * (high - low)
                action = np.clip(action, low, high)
            actions[agent] = action.reshape((action.shape[0], *space.shape)).astype(space.dtype)
        return actions

    def reset_noise(self, env_indices: np.ndarray | None = None) -> None:
        """Reset exploration noise of finished env copies (all when ``None``)."""
        for noise in self.noise.values():
            noise.reset(env_indices)

    # --- state ------------------------------------------------------------------
    def _extra_state(self) -> dict[str, Any]:
        """The noise generator and each OU process's state, so a resumed run explores alike."""
        processes = {
            a: torch.from_numpy(n.state.copy())
            for a, n in self.noise.items()
            if isinstance(getattr(n, "state", None), np.ndarray)
        }
        return {"noise_rng": generator_state(self._noise_rng), "noise_state": processes}

    def _load_extra_state(self, extra: dict[str, Any]) -> None:
        if "noise_rng" in extra:
            self._noise_rng.bit_generator.state = generator_from_state(
                extra["noise_rng"]
            ).bit_generator.state
        for agent, value in extra.get("noise_state", {}).items():
            noise = self.noise.get(agent)
            if noise is not None:
                noise.vect_noise_dim = int(value.shape[0])
                noise.state = value.numpy().astype(np.float32).copy()

    def clone(self, index: int | None = None) -> MADDPG:
        """A deep copy with its own exploration noise stream (see the base ``clone``)."""
        agent = super().clone(index)
        agent._seed_noise()
        return agent

    # --- learning ---------------------------------------------------------------
    def _joint(
        self, obs: Mapping[str, torch.Tensor], actions: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        """``[every obs, every action]`` in agent order: the shared part of each critic input."""
        return torch.cat([t for a in self.agents for t in (obs[a], actions[a])], dim=-1)

    def _next_target_actions(
        self, next_obs: Mapping[str, torch.Tensor], masks: Mapping[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        return {a: self._target_action(a, next_obs[a], masks.get(a)) for a in self.agents}

    def _actor_due(self) -> bool:
        return True

    def learn(self, batch: Mapping[str, Mapping[str, torch.Tensor]]) -> dict[str, float]:
        """One critic update per policy and (when due) one actor update, then soft targets.

        Each critic reads ``[own obs, own action, every obs, every action]``.
        Policies share no parameters, so each phase sums its policies' losses
        into one backward pass (the same gradients as one pass per policy);
        twin critics run as one stacked pass.

        Args:
            batch: ``{field: {agent: tensor}}`` from
                :class:`~agilerl.components.multi_agent_replay_buffer.MultiAgentReplayBuffer`;
                masked agents' legal actions under ``action_mask`` and
                ``next_action_mask`` (target actions and the actor's action are
                then chosen among them).

        Returns:
            Mean ``critic_loss`` and ``actor_loss`` (``nan`` when the actor was not updated).
        """
        spec = self.spec
        obs = {a: v.reshape(v.shape[0], -1) for a, v in batch["obs"].items()}
        next_obs = {a: v.reshape(v.shape[0], -1) for a, v in batch["next_obs"].items()}
        actions = {a: self.to_critic_action(a, batch["action"][a]) for a in self.agents}
        tape = GradTape()
        with torch.no_grad():
            next_actions = self._next_target_actions(
                next_obs, {a: m.bool() for a, m in batch.get("next_action_mask", {}).items()}
            )
            next_joint = self._joint(next_obs, next_actions)
            targets = {}
            for agent in self.agents:
                critics = [t[self.policy_of[agent]] for t in self.critic_target_sets]
                qs = critic_values(tape, critics, next_obs[agent], next_actions[agent], next_joint)
                live = 1.0 - batch["done"][agent]
                targets[agent] = batch["reward"][agent] + spec.gamma * live * qs.amin(0)
        joint = self._joint(obs, actions)
        critic_loss = None
        for agent in self.agents:
            critics = [c[self.policy_of[agent]] for c in self.critic_sets]
            qs = critic_values(tape, critics, obs[agent], actions[agent], joint)  # [N, B]
            # the sum over critics of each one's mean squared error
            loss = F.mse_loss(qs, targets[agent].expand_as(qs), reduction="sum") / qs.shape[1]
            critic_loss = loss if critic_loss is None else critic_loss + loss
        critic_opts = [self.opts[f"critic:{p}"] for p in self.policies]
        for opt in critic_opts:
            opt.zero_grad()
        tape.backward(critic_loss)
        for opt in critic_opts:
            opt.step()
        self.num_updates += 1
        result = {"critic_loss": float(critic_loss.detach()) / len(self.policies)}
        result["actor_loss"] = float("nan")
        if self._actor_due():
            actor_loss = None
            for agent in self.agents:
                policy = self.policy_of[agent]
                out = tape(self.actors[policy], obs[agent])
                mask = batch.get("action_mask", {}).get(agent)
                own = self._differentiable(agent, out, None if mask is None else mask.bool())
                joint_own = self._joint(obs, {**actions, agent: own})
                q = tape(self.critic_sets[0][policy], obs[agent], own, joint_own, params=False)
                loss = -q.mean()
                if isinstance(self.action_spaces[agent], spaces.Discrete):
                    loss = loss + 1e-3 * out.pow(2).mean()
                actor_loss = loss if actor_loss is None else actor_loss + loss
            actor_opts = [self.opts[f"actor:{p}"] for p in self.policies]
            for opt in actor_opts:
                opt.zero_grad()
            tape.backward(actor_loss)
            for opt in actor_opts:
                opt.step()
            result["actor_loss"] = float(actor_loss.detach()) / len(self.policies)
            self._soft_update_targets()
        return result


def _frozen_copy(module: nn.ModuleDict) -> nn.ModuleDict:
    target = copy.deepcopy(module)
    for param in target.parameters():
        param.requires_grad_(False)
    return target
