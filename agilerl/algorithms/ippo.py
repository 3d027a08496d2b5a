"""IPPO: independent PPO per agent (or per agent group) on PettingZoo parallel envs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.distributions import Categorical, Normal

from agilerl.algorithms.core.multi_agent import MultiAgentAlgorithm, build_mlp, flat_dim
from agilerl.arena.models.algorithms.ippo import IPPOSpec

__all__ = ["IPPO", "gae"]


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    last_values: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimates over a ``(T, N)`` rollout of one agent.

    Args:
        rewards: Rewards (truncation bootstraps already added).
        values: Value estimates of the observations acted on.
        dones: 1 where the agent's episode ended after that step.
        last_values: Values of the observations after the last step, ``(N,)``.
        gamma: Discount.
        lam: GAE lambda.

    Returns:
        ``(advantages, returns)``, each ``(T, N)``.
    """
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(last_values)
    next_values = last_values
    for t in reversed(range(rewards.shape[0])):
        live = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_values * live - values[t]
        running = delta + gamma * lam * live * running
        advantages[t] = running
        next_values = values[t]
    return advantages, advantages + values


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

    def __init__(
        self,
        spec: IPPOSpec,
        observation_spaces: Mapping[str, spaces.Space] | None,
        action_spaces: Mapping[str, spaces.Space] | None,
        *,
        index: int | None = 0,
        device: str | torch.device = "cpu",
        total_steps: int | None = None,
        actor_networks: nn.ModuleDict | None = None,
        critic_networks: nn.ModuleDict | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__(
            spec,
            observation_spaces,
            action_spaces,
            index=index,
            device=device,
            total_steps=total_steps,
            **overrides,
        )
        for space in self.action_spaces.values():
            if not isinstance(space, spaces.Discrete | spaces.Box):
                raise ValueError(f"IPPO supports Discrete and Box actions, got {space}")
        self._given = (actor_networks, critic_networks)
        self._build()

    # --- networks -------------------------------------------------------------
    def _critic_in(self, policy: str) -> int:
        if self.spec.shared_critic_input:
            return sum(flat_dim(self.observation_spaces[a]) for a in self.agents)
        return flat_dim(self.observation_spaces[self.members[policy][0]])

    def _build(self) -> None:
        given_actors, given_critics = self._given
        actors, critics, log_std = {}, {}, {}
        for policy in self.policies:
            agent = self.members[policy][0]
            obs_dim = flat_dim(self.observation_spaces[agent])
            act_space = self.action_spaces[agent]
            out_dim = flat_dim(act_space)
            net = self.net_spec(policy)
            if given_actors is None:
                actors[policy] = build_mlp(obs_dim, out_dim, net)
            if given_critics is None:
                critics[policy] = build_mlp(self._critic_in(policy), 1, net)
            if isinstance(act_space, spaces.Box):
                log_std[policy] = nn.Parameter(torch.full((out_dim,), self.spec.action_std_init))
        self.actors = given_actors if given_actors is not None else nn.ModuleDict(actors)
        self.critics = given_critics if given_critics is not None else nn.ModuleDict(critics)
        self.log_std = nn.ParameterDict(log_std)
        for module in (self.actors, self.critics, self.log_std):
            module.to(self.device)
        self.nets = {"actors": self.actors, "critics": self.critics, "log_std": self.log_std}
        self.opts = {
            policy: torch.optim.Adam(self._params(policy), lr=self.spec.lr, eps=1e-5, foreach=True)
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

    def _dist(self, policy: str, obs: torch.Tensor) -> Categorical | Normal:
        out = self.actors[policy](obs)
        if policy in self.log_std:
            return Normal(out, self.log_std[policy].exp().expand_as(out))
        return Categorical(logits=out)

    def _log_prob(self, dist: Categorical | Normal, action: torch.Tensor) -> torch.Tensor:
        if isinstance(dist, Normal):
            return dist.log_prob(action).sum(-1)
        return dist.log_prob(action.long())

    def _entropy(self, dist: Categorical | Normal) -> torch.Tensor:
        return dist.entropy().sum(-1) if isinstance(dist, Normal) else dist.entropy()

    def critic_obs(self, obs: Mapping[str, Any], agent: str) -> torch.Tensor:
        """The critic's input for ``agent``: its own or everyone's observations."""
        if self.spec.shared_critic_input:
            return torch.cat([self.obs_tensor(obs, a) for a in self.agents], dim=-1)
        return self.obs_tensor(obs, agent)

    # --- acting -----------------------------------------------------------------
    @torch.no_grad()
    def values(self, obs: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """State values ``(batch,)`` per agent."""
        return {
            a: self.critics[self.policy_of[a]](self.critic_obs(obs, a)).squeeze(-1)
            for a in self.agents
        }

    @torch.no_grad()
    def policy_step(self, obs: Mapping[str, Any], greedy: bool = False) -> dict[str, dict]:
        """Actions, their log-probabilities and the values, per agent.

        Returns:
            ``{"action": {agent: tensor}, "log_prob": ..., "value": ...}``.
        """
        out: dict[str, dict[str, torch.Tensor]] = {"action": {}, "log_prob": {}, "value": {}}
        values = self.values(obs)
        for agent in self.agents:
            dist = self._dist(self.policy_of[agent], self.obs_tensor(obs, agent))
            if greedy:
                action = dist.mean if isinstance(dist, Normal) else dist.probs.argmax(-1)
            else:
                action = dist.sample()
            out["action"][agent] = action
            out["log_prob"][agent] = self._log_prob(dist, action)
            out["value"][agent] = values[agent]
        return out

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
                ``done``, ``active``, and ``(N,)`` tensors under ``last_value``.

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
        for policy in self.policies:
            parts: dict[str, list[torch.Tensor]] = {
                k: [] for k in ("obs", "cobs", "act", "logp", "adv", "ret")
            }
            for agent in self.members[policy]:
                adv, ret = gae(
                    rollout["reward"][agent],
                    rollout["value"][agent],
                    rollout["done"][agent],
                    rollout["last_value"][agent],
                    spec.gamma,
                    spec.gae_lambda,
                )
                keep = rollout["active"][agent].reshape(-1).bool()
                for key, value in (
                    ("obs", rollout["obs"][agent]),
                    ("cobs", rollout["critic_obs"][agent]),
                    ("act", rollout["action"][agent]),
                    ("logp", rollout["log_prob"][agent]),
                    ("adv", adv),
                    ("ret", ret),
                ):
                    parts[key].append(value.reshape(-1, *value.shape[2:])[keep])
            data = {k: torch.cat(v) for k, v in parts.items()}
            n = data["obs"].shape[0]
            params = self._params(policy)
            opt = self.opts[policy]
            for _ in range(spec.update_epochs):
                order = torch.randperm(n, device=self.device)
                kls = []
                for start in range(0, n, spec.batch_size):
                    idx = order[start : start + spec.batch_size]
                    dist = self._dist(policy, data["obs"][idx])
                    logp = self._log_prob(dist, data["act"][idx])
                    log_ratio = logp - data["logp"][idx]
                    ratio = log_ratio.exp()
                    adv = data["adv"][idx]
                    if adv.numel() > 1:
                        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                    pg_loss = -torch.min(
                        ratio * adv, ratio.clamp(1 - spec.clip_coef, 1 + spec.clip_coef) * adv
                    ).mean()
                    value = self.critics[policy](data["cobs"][idx]).squeeze(-1)
                    v_loss = 0.5 * (value - data["ret"][idx]).pow(2).mean()
                    entropy = self._entropy(dist).mean()
                    loss = pg_loss + spec.vf_coef * v_loss - spec.ent_coef * entropy
                    opt.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(params, spec.max_grad_norm)
                    opt.step()
                    with torch.no_grad():
                        kls.append(float(((ratio - 1) - log_ratio).mean()))
                    stats["policy_loss"].append(float(pg_loss.detach()))
                    stats["value_loss"].append(float(v_loss.detach()))
                    stats["entropy"].append(float(entropy.detach()))
                stats["approx_kl"].append(float(np.mean(kls)) if kls else 0.0)
                if spec.target_kl is not None and kls and np.mean(kls) > spec.target_kl:
                    break
        self.num_updates += 1
        return {k: float(np.mean(v)) if v else 0.0 for k, v in stats.items()}
