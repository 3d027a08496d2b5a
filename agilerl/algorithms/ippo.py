"""IPPO: independent PPO per agent (or per agent group) on PettingZoo parallel envs."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from agilerl.algorithms.core.multi_agent import (
    MultiAgentAlgorithm,
    build_mlp,
    build_net,
    flat_dim,
)
from agilerl.algorithms.core.ppo_objective import PPOCoefs, kl_stops, ppo_objective
from agilerl.arena.models.algorithms.ippo import IPPOSpec
from agilerl.components.advantages import gae_torch
from agilerl.networks import masking
from agilerl.networks.fastgrad import GradTape, chain_of
from agilerl.networks.optim import FlatAdam

__all__ = ["IPPO"]

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def _forward(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``module(x)`` without autograd bookkeeping: through its chain when it has one."""
    chain = chain_of(module)
    return chain.forward(x) if chain is not None else module(x)


class IPPO(MultiAgentAlgorithm):
    """Independent PPO: one actor-critic per policy (agent or shared group).

    Discrete actions use a categorical policy, Box actions a diagonal
    Gaussian with a learned state-independent log-std (actions are clipped
    to the bounds by the env wrapper, the unclipped sample is what is
    learned from). With ``spec.shared_critic_input`` each critic sees the
    concatenated observations of every agent.

    Args:
        spec: Validated :class:`IPPOSpec`.
        observation_spaces: Per-agent observation spaces.
        action_spaces: Per-agent action spaces.
        index: Population index.
        device: Torch device.
        actor_networks: Optional pre-built ``ModuleDict`` of actors keyed by
            policy id, used as given (outputs: logits or Gaussian means).
        critic_networks: Optional pre-built ``ModuleDict`` of critics.
    """

    spec_class = IPPOSpec
    spec: IPPOSpec

    # --- networks -------------------------------------------------------------
    def _critic_in(self, policy: str) -> int:
        if self.spec.shared_critic_input:
            return sum(flat_dim(self.policy_spaces[a]) for a in self.agents)
        return flat_dim(self.policy_spaces[self.members[policy][0]])

    def _build(self) -> None:
        given_actors, given_critics = self._given
        actors, critics, log_std = {}, {}, {}
        for policy in self.policies:
            agent = self.members[policy][0]
            obs_space = self.policy_spaces[agent]
            act_space = self.action_spaces[agent]
            out_dim = flat_dim(act_space)
            net = self.net_spec(policy)
            images = self.spec.normalize_images
            if given_actors is None:
                actors[policy] = build_net(obs_space, out_dim, net, images)
            if given_critics is None and self.spec.shared_critic_input:
                critics[policy] = build_mlp(self._critic_in(policy), 1, net)
            elif given_critics is None:
                critics[policy] = build_net(obs_space, 1, net, images)
            if isinstance(act_space, spaces.Box):
                log_std[policy] = nn.Parameter(torch.full((out_dim,), self.spec.action_std_init))
        self.actors = given_actors if given_actors is not None else nn.ModuleDict(actors)
        self.critics = given_critics if given_critics is not None else nn.ModuleDict(critics)
        self.log_std = nn.ParameterDict(log_std)
        for module in (self.actors, self.critics, self.log_std):
            module.to(self.device)
        self.nets = {"actors": self.actors, "critics": self.critics, "log_std": self.log_std}
        self.opts = {
            policy: FlatAdam(self._params(policy), lr=self.spec.lr, eps=1e-5)
            for policy in self.policies
        }

    def _params(self, policy: str) -> list[nn.Parameter]:
        params = [*self.actors[policy].parameters(), *self.critics[policy].parameters()]
        if policy in self.log_std:
            params.append(self.log_std[policy])
        return params

    def _apply_lrs(self) -> None:
        for opt in self.opts.values():
            for group in opt.param_groups:
                group["lr"] = self.spec.lr

    def _log_prob_entropy(
        self, policy: str, out: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of ``action`` and the entropy under the policy's actor output.

        Categorical over logits for Discrete actions, a diagonal Gaussian with
        the learned log-std for Box actions (summed over action dimensions).
        """
        if policy in self.log_std:
            log_std = self.log_std[policy]
            z = (action - out) * torch.exp(-log_std)
            log_prob = (-0.5 * z.square() - log_std - _LOG_SQRT_2PI).sum(-1)
            entropy = (0.5 + _LOG_SQRT_2PI + log_std).sum().expand(out.shape[0])
            return log_prob, entropy
        logp = F.log_softmax(out, dim=-1)
        log_prob = logp.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(logp.exp() * logp).sum(-1)
        return log_prob, entropy

    def critic_obs(self, obs: Mapping[str, Any], agent: str) -> torch.Tensor:
        """The critic's input for ``agent``: its own or everyone's observations."""
        if self.spec.shared_critic_input:
            return torch.cat([self.obs_tensor(obs, a) for a in self.agents], dim=-1)
        return self.obs_tensor(obs, agent)

    def _critic_inputs(self, x: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if self.spec.shared_critic_input:
            joint = torch.cat([x[a] for a in self.agents], dim=-1)
            return dict.fromkeys(self.agents, joint)
        return dict(x)

    def _per_policy(
        self, nets: nn.ModuleDict, x: Mapping[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """One forward per policy over all its members' rows, split back per agent."""
        out = {}
        for policy, members in self.members.items():
            if len(members) == 1:
                out[members[0]] = _forward(nets[policy], x[members[0]])
                continue
            rows = [x[a].shape[0] for a in members]
            y = _forward(nets[policy], torch.cat([x[a] for a in members]))
            out.update(zip(members, y.split(rows), strict=True))
        return out

    # --- acting -----------------------------------------------------------------
    @torch.no_grad()
    def values(self, obs: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """State values ``(batch,)`` per agent."""
        x = {a: self.obs_tensor(obs, a) for a in self.agents}
        values = self._per_policy(self.critics, self._critic_inputs(x))
        return {a: v.squeeze(-1) for a, v in values.items()}

    @torch.no_grad()
    def policy_step(self, obs: Mapping[str, Any], greedy: bool = False) -> dict[str, dict]:
        """Actions, their log-probabilities and the values, per agent.

        Returns:
            ``{"action": {agent: tensor}, "log_prob": ..., "value": ..., "obs": ...,
            "critic_obs": ..., "mask": ...}`` (``obs``, ``critic_obs``: the network
            inputs used; ``mask``: the legal actions of masked agents, which the
            policy samples among).
        """
        x = {a: self.obs_tensor(obs, a) for a in self.agents}
        critic_x = self._critic_inputs(x)
        values = self._per_policy(self.critics, critic_x)
        outs = self._per_policy(self.actors, x)
        result: dict[str, dict[str, torch.Tensor]] = {
            "action": {},
            "log_prob": {},
            "value": {},
            "obs": x,
            "critic_obs": critic_x,
            "mask": {},
        }
        for agent in self.agents:
            policy = self.policy_of[agent]
            out = outs[agent]
            mask = self.action_mask(obs, agent)
            if mask is not None:
                result["mask"][agent] = mask
                out = masking.mask_logits(out, mask)
            if policy in self.log_std:
                std = self.log_std[policy].exp().expand_as(out)
                action = out if greedy else torch.normal(out, std)
            elif greedy:
                action = out.argmax(-1)
            else:  # what Categorical(logits=out).sample() draws
                action = torch.multinomial(F.softmax(out, dim=-1), 1, True).squeeze(-1)
            result["action"][agent] = action
            result["log_prob"][agent] = self._log_prob_entropy(policy, out, action)[0]
            result["value"][agent] = values[agent].squeeze(-1)
        return result

    def env_actions(self, actions: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
        """Tensors from :meth:`policy_step` as numpy env actions (Box actions clipped)."""
        result = {}
        for agent, action in actions.items():
            array = action.cpu().numpy()
            space = self.action_spaces[agent]
            if isinstance(space, spaces.Discrete):
                result[agent] = array.astype(np.int64)
            else:  # the unclipped sample is what the policy learns from; the env gets it clipped
                result[agent] = np.clip(array, space.low, space.high).astype(space.dtype)
        return result

    def act(self, obs: Mapping[str, Any], greedy: bool = False) -> dict[str, np.ndarray]:
        """Env actions per agent (mode of the policy when ``greedy``)."""
        return self.env_actions(self.policy_step(obs, greedy)["action"])

    # --- learning ---------------------------------------------------------------
    def learn(self, rollout: Mapping[str, Any]) -> dict[str, float]:
        """PPO updates from one rollout, every policy on its members' samples.

        Args:
            rollout: Per-agent ``(T, N, ...)`` tensors under ``obs``,
                ``critic_obs``, ``action``, ``log_prob``, ``value``, ``reward``,
                ``done``, ``active``, and ``(N,)`` tensors under ``last_value``;
                masked agents' legal actions ``(T, N, n)`` under ``mask`` (the
                log-probabilities and entropy are then the masked policy's).

        Returns:
            Mean ``policy_loss``, ``value_loss``, ``entropy`` and ``approx_kl``.
        """
        spec = self.spec
        stats: dict[str, list[float]] = {
            "policy_loss": [],
            "value_loss": [],
            "entropy": [],
            "approx_kl": [],
        }
        coefs = PPOCoefs.of(spec)
        for policy in self.policies:
            parts: dict[str, list[torch.Tensor]] = {
                k: [] for k in ("obs", "cobs", "act", "logp", "adv", "ret")
            }
            for agent in self.members[policy]:
                adv, ret = gae_torch(
                    rollout["reward"][agent],
                    rollout["value"][agent],
                    rollout["done"][agent] == 0,
                    rollout["last_value"][agent],
                    spec.gamma,
                    spec.gae_lambda,
                )
                keep = rollout["active"][agent].reshape(-1).bool()
                fields = [
                    ("obs", rollout["obs"][agent]),
                    ("cobs", rollout["critic_obs"][agent]),
                    ("act", rollout["action"][agent]),
                    ("logp", rollout["log_prob"][agent]),
                    ("adv", adv),
                    ("ret", ret),
                ]
                if agent in rollout.get("mask", {}):
                    fields.append(("mask", rollout["mask"][agent]))
                for key, value in fields:
                    parts.setdefault(key, []).append(value.reshape(-1, *value.shape[2:])[keep])
            data = {k: torch.cat(v) for k, v in parts.items()}
            n = data["obs"].shape[0]
            opt = self.opts[policy]
            stop = False
            for _ in range(spec.update_epochs):
                order = torch.randperm(n, device=self.device)
                for start in range(0, n, spec.batch_size):
                    idx = order[start : start + spec.batch_size]
                    tape = GradTape()
                    out = tape(self.actors[policy], data["obs"][idx])
                    if "mask" in data:
                        out = masking.mask_logits(out, data["mask"][idx])
                    logp, entropy = self._log_prob_entropy(policy, out, data["act"][idx])
                    value = tape(self.critics[policy], data["cobs"][idx]).squeeze(-1)
                    batch = {
                        "advantages": data["adv"][idx],
                        "log_probs": data["logp"][idx],
                        "returns": data["ret"][idx],
                    }
                    loss, tracked = ppo_objective(
                        logp, entropy, value, batch, coefs, normalize_advantages=True,
                        diagnose=True,
                    )  # fmt: skip
                    policy_loss, value_loss, entropy_mean, kl, _ = (float(t) for t in tracked)
                    if kl_stops(kl, spec.target_kl):
                        stop = True
                        break
                    opt.zero_grad()
                    tape.backward(loss)
                    opt.clip_grad_norm_(spec.max_grad_norm)
                    opt.step()
                    stats["policy_loss"].append(policy_loss)
                    stats["value_loss"].append(value_loss)
                    stats["entropy"].append(entropy_mean)
                    stats["approx_kl"].append(kl)
                if stop:
                    break
        self.num_updates += 1
        return {k: float(np.mean(v)) if v else 0.0 for k, v in stats.items()}
