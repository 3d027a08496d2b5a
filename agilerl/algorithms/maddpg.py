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
from agilerl.arena.models.algorithms.maddpg import MADDPGSpec
from agilerl.components.noise import ExplorationNoise, make_noise
from agilerl.hpo.mutation import generator_from_state, generator_state
from agilerl.networks.fastgrad import GradTape, chain_of
from agilerl.networks.optim import FlatAdam

__all__ = ["MADDPG"]


def _soft_update(targets: list[torch.Tensor], sources: list[torch.Tensor], tau: float) -> None:
    with torch.no_grad():
        torch._foreach_lerp_(targets, sources, tau)


def _forward(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``module(x)`` without autograd bookkeeping: through its chain when it has one."""
    chain = chain_of(module)
    return chain.forward(x) if chain is not None else module(x)


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
            flat_dim(self.observation_spaces[a]) + flat_dim(self.action_spaces[a])
            for a in self.agents
        )
        actors: dict[str, nn.Module] = {}
        critics: list[dict[str, nn.Module]] = [{} for _ in range(self.num_critics)]
        for policy in self.policies:
            agent = self.members[policy][0]
            own = flat_dim(self.observation_spaces[agent]) + flat_dim(self.action_spaces[agent])
            net = self.net_spec(policy)
            actors[policy] = build_mlp(
                flat_dim(self.observation_spaces[agent]), flat_dim(self.action_spaces[agent]), net
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
        for policy in self.policies:
            # Flat buffers: zeroing and the Adam update are a few whole-buffer ops.
            self.opts[f"actor:{policy}"] = FlatAdam(
                self.actors[policy].parameters(), lr=self.spec.lr_actor
            )
            params = [p for c in self.critic_sets for p in c[policy].parameters()]
            self.opts[f"critic:{policy}"] = FlatAdam(params, lr=self.spec.lr_critic)
        self._seed_noise()

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

    def _differentiable(self, agent: str, out: torch.Tensor) -> torch.Tensor:
        """Critic-input action from actor outputs, with gradients."""
        if isinstance(self.action_spaces[agent], spaces.Box):
            return self._squash(agent, out)
        if self.spec.discrete_actions == "gumbel_softmax":
            return F.gumbel_softmax(out, tau=self.spec.gumbel_temperature, hard=True)
        soft = F.softmax(out, dim=-1)
        hard = F.one_hot(soft.argmax(-1), soft.shape[-1]).to(soft.dtype)
        return hard - soft.detach() + soft

    def _target_action(self, agent: str, obs: torch.Tensor) -> torch.Tensor:
        out = _forward(self.actor_targets[self.policy_of[agent]], obs)
        if isinstance(self.action_spaces[agent], spaces.Box):
            return self._squash(agent, out)
        return F.one_hot(out.argmax(-1), out.shape[-1]).float()

    def to_critic_action(self, agent: str, action: torch.Tensor) -> torch.Tensor:
        """A stored env action as critic input (one-hot for Discrete)."""
        space = self.action_spaces[agent]
        if isinstance(space, spaces.Discrete):
            return F.one_hot(action.long().reshape(-1), int(space.n)).float()
        return action.reshape(action.shape[0], -1).float()

    @torch.no_grad()
    def act(self, obs: Mapping[str, Any], greedy: bool = False) -> dict[str, np.ndarray]:
        """Env actions: greedy outputs, or with exploration (noise / sampled categorical)."""
        actions = {}
        for agent in self.agents:
            x = self.obs_tensor(obs, agent)
            out = _forward(self.actors[self.policy_of[agent]], x)
            space = self.action_spaces[agent]
            if isinstance(space, spaces.Discrete):
                if greedy:
                    choice = out.argmax(-1)
                else:  # what Categorical(logits=out).sample() draws, without its checks
                    choice = torch.multinomial(F.softmax(out, dim=-1), 1, True).squeeze(-1)
                actions[agent] = choice.cpu().numpy().astype(np.int64)
                continue
            action = self._squash(agent, out).cpu().numpy()
            if not greedy:
                scale = (space.high - space.low).reshape(-1)
                action = action + self.noise[agent].sample(action.shape[0]) * scale
                action = np.clip(action, space.low.reshape(-1), space.high.reshape(-1))
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

    def _next_target_actions(self, next_obs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {a: self._target_action(a, next_obs[a]) for a in self.agents}

    def _actor_due(self) -> bool:
        return True

    def learn(self, batch: Mapping[str, Mapping[str, torch.Tensor]]) -> dict[str, float]:
        """One critic update per policy and (when due) one actor update, then soft targets.

        Each critic reads ``[own obs, own action, every obs, every action]``.
        Policies share no parameters, so each phase sums its policies' losses
        into one backward pass (the same gradients as one pass per policy).

        Args:
            batch: ``{field: {agent: tensor}}`` from
                :class:`~agilerl.components.multi_agent_replay_buffer.MultiAgentReplayBuffer`.

        Returns:
            Mean ``critic_loss`` and ``actor_loss`` (``nan`` when the actor was not updated).
        """
        spec = self.spec
        obs = {a: v.reshape(v.shape[0], -1) for a, v in batch["obs"].items()}
        next_obs = {a: v.reshape(v.shape[0], -1) for a, v in batch["next_obs"].items()}
        actions = {a: self.to_critic_action(a, batch["action"][a]) for a in self.agents}
        tape = GradTape()
        with torch.no_grad():
            next_actions = self._next_target_actions(next_obs)
            next_joint = self._joint(next_obs, next_actions)
            targets = {}
            for agent in self.agents:
                policy = self.policy_of[agent]
                own = (next_obs[agent], next_actions[agent], next_joint)
                qs = [tape(t[policy], *own).squeeze(-1) for t in self.critic_target_sets]
                q_next = qs[0] if len(qs) == 1 else torch.minimum(*qs)
                live = 1.0 - batch["done"][agent]
                targets[agent] = batch["reward"][agent] + spec.gamma * live * q_next
        joint = self._joint(obs, actions)
        critic_losses = []
        for policy in self.policies:
            loss = torch.zeros((), device=self.device)
            for agent in self.members[policy]:
                for critics in self.critic_sets:
                    q = tape(critics[policy], obs[agent], actions[agent], joint).squeeze(-1)
                    loss = loss + F.mse_loss(q, targets[agent])
            critic_losses.append(loss)
        critic_opts = [self.opts[f"critic:{p}"] for p in self.policies]
        for opt in critic_opts:
            opt.zero_grad()
        tape.backward(torch.stack(critic_losses).sum())
        for opt in critic_opts:
            opt.step()
        self.num_updates += 1
        result = {"critic_loss": float(torch.stack(critic_losses).detach().mean())}
        result["actor_loss"] = float("nan")
        if self._actor_due():
            actor_losses = []
            for policy in self.policies:
                loss = torch.zeros((), device=self.device)
                for agent in self.members[policy]:
                    out = tape(self.actors[policy], obs[agent])
                    own = self._differentiable(agent, out)
                    joint_own = self._joint(obs, {**actions, agent: own})
                    critic = self.critic_sets[0][policy]
                    q = tape(critic, obs[agent], own, joint_own, params=False)
                    loss = loss - q.mean()
                    if isinstance(self.action_spaces[agent], spaces.Discrete):
                        loss = loss + 1e-3 * out.pow(2).mean()
                actor_losses.append(loss)
            actor_opts = [self.opts[f"actor:{p}"] for p in self.policies]
            for opt in actor_opts:
                opt.zero_grad()
            tape.backward(torch.stack(actor_losses).sum())
            for opt in actor_opts:
                opt.step()
            result["actor_loss"] = float(torch.stack(actor_losses).detach().mean())
            _soft_update(*self._soft_pairs, spec.tau)
        return result


def _frozen_copy(module: nn.ModuleDict) -> nn.ModuleDict:
    target = copy.deepcopy(module)
    for param in target.parameters():
        param.requires_grad_(False)
    return target
