"""Deep Deterministic Policy Gradient (and the shared machinery TD3 extends)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agilerl.algorithms.core.off_policy import (
    Batch,
    MLPChain,
    OffPolicyAlgorithm,
    OptimizerLR,
    soft_update,
)
from agilerl.components.noise import ExplorationNoise, make_noise
from agilerl.networks.config import resolve_net_config
from agilerl.networks.deterministic import ContinuousQNetwork, DeterministicActor
from agilerl.networks.optim import FlatAdam
from agilerl.networks.spaces import make_obs_converter

_ARCH_KEYS = frozenset(
    {"observation_space", "action_space", "net_config", "normalize_images", "share_encoders"}
)
_NOISE_KEYS = frozenset(
    {"action_space", "vect_noise_dim", "O_U_noise", "expl_noise", "mean_noise", "theta", "dt"}
)


class _Chains(NamedTuple):
    """Manual-backward views of the actor, the critics and their targets."""

    actor: MLPChain
    actor_target: MLPChain
    critics: list[tuple[MLPChain, MLPChain]]
    critic_targets: list[tuple[MLPChain, MLPChain]]


def _critic_chains(critic: ContinuousQNetwork) -> tuple[MLPChain, MLPChain] | None:
    encoder = MLPChain.from_mlps(MLPChain.encoder_mlp(critic.encoder))
    head = MLPChain.from_mlps(critic.head)
    return None if encoder is None or head is None else (encoder, head)


def _critic_forward(
    chains: tuple[MLPChain, MLPChain],
    obs: torch.Tensor,
    action: torch.Tensor,
    saved: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(latent, Q [B, 1])`` of a chained critic, saving layer inputs when asked."""
    encoder, head = chains
    latent = encoder.forward(obs, None if saved is None else saved[0])
    q = head.forward(torch.cat([latent, action], dim=1), None if saved is None else saved[1])
    return latent, q


class DDPG(OffPolicyAlgorithm):
    """DDPG: deterministic actor, Q critic, soft target networks.

    Every :meth:`learn` takes one critic step on
    ``(Q(s, a) - (r + gamma^n (1 - done) Q_target(s', actor_target(s'))))^2``;
    every ``policy_freq``-th call also takes an actor step on ``-Q(s, actor(s))``
    and then moves all target networks towards the online ones by ``tau``.

    Actions: the actor works in a normalised space (``[-1, 1]`` for a bounded
    Box, see :class:`DeterministicActor`); exploration noise (OU or Gaussian,
    one process per sub-env, scale ``expl_noise`` in that space) is added,
    the result clipped and mapped to the env's bounds. The replay buffer
    stores env actions; :meth:`learn` normalises them again.

    Args:
        observation_space: Single-env observation space.
        action_space: ``Box`` action space.
        index: Population index.
        device: Torch device.
        net_config: Network config dict, used by the actor and the critic(s).
        batch_size: Samples per gradient step (used by the training loop).
        lr_actor: Actor Adam learning rate.
        lr_critic: Critic Adam learning rate.
        learn_step: Env steps (summed over sub-envs) per gradient step.
        gamma: Discount factor.
        tau: Soft target-update rate.
        policy_freq: Critic updates per actor (and target) update.
        vect_noise_dim: Number of sub-envs (noise processes).
        O_U_noise: Ornstein-Uhlenbeck noise; ``False`` for Gaussian.
        expl_noise: Exploration noise scale (std / OU sigma).
        mean_noise: Exploration noise mean.
        theta: OU mean-reversion rate.
        dt: OU time step.
        share_encoders: The critic(s) use the actor's encoder; it is trained by
            the critic loss only (the actor sees its output detached).
        normalize_images: Divide ``uint8`` images by 255.
        max_grad_norm: Gradient-norm clip of both optimizers (``None``/``0`` disables).
        total_steps: Env steps of the whole run (informational).
        **kwargs: Unknown extra settings are ignored with a warning.

    Raises:
        ValueError: For a non-Box action space or invalid settings.
    """

    hp_names = (
        "lr_actor",
        "lr_critic",
        "batch_size",
        "learn_step",
        "gamma",
        "tau",
        "policy_freq",
    )
    arch_keys = _ARCH_KEYS
    lr_critic = OptimizerLR("critic_optimizer")
    lr_actor = OptimizerLR("actor_optimizer")
    network_names = ("actor", "actor_target", "critic", "critic_target")
    optimizer_names = ("actor_optimizer", "critic_optimizer")
    _critic_names: ClassVar[tuple[str, ...]] = ("critic",)

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        index: int = 0,
        device: str | torch.device = "cpu",
        net_config: Mapping[str, Any] | None = None,
        batch_size: int = 64,
        lr_actor: float = 1e-4,
        lr_critic: float = 1e-3,
        learn_step: int = 5,
        gamma: float = 0.99,
        tau: float = 1e-3,
        policy_freq: int = 2,
        vect_noise_dim: int = 1,
        O_U_noise: bool = True,
        expl_noise: float = 0.1,
        mean_noise: float = 0.0,
        theta: float = 0.15,
        dt: float = 1e-2,
        share_encoders: bool = False,
        normalize_images: bool = True,
        max_grad_norm: float | None = None,
        total_steps: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(observation_space, action_space, index=index, device=device)
        name = type(self).__name__
        if not isinstance(action_space, spaces.Box):
            raise ValueError(f"{name} needs a Box action space, got {type(action_space).__name__}")
        self._warn_unknown(kwargs)
        self._check_positive(
            name,
            batch_size=batch_size,
            learn_step=learn_step,
            policy_freq=policy_freq,
            vect_noise_dim=vect_noise_dim,
        )
        self.net_config = resolve_net_config(net_config, observation_space)
        self.batch_size = int(batch_size)
        self._lr_actor = float(lr_actor)
        self._lr_critic = float(lr_critic)
        self.learn_step = int(learn_step)
        self.gamma = float(gamma)
        self.tau = float(tau)
        self.policy_freq = int(policy_freq)
        self.vect_noise_dim = int(vect_noise_dim)
        self.O_U_noise = bool(O_U_noise)
        self.expl_noise = float(expl_noise)
        self.mean_noise = float(mean_noise)
        self.theta = float(theta)
        self.dt = float(dt)
        self.share_encoders = bool(share_encoders)
        self.normalize_images = bool(normalize_images)
        self.max_grad_norm = None if not max_grad_norm else float(max_grad_norm)
        self.total_steps = None if total_steps is None else int(total_steps)
        self.last_actor_loss = 0.0
        self._build()
        self._init_rng()
        self._make_noise()

    # --- construction -----------------------------------------------------------------
    def _build(self) -> None:
        """(Re)build actor, critic(s), their targets, optimizers and converters."""
        self.actor, critics = self._make_networks()
        self.actor_target, critic_targets = self._make_networks()
        self.actor_target.load_state_dict(self.actor.state_dict())
        self._freeze(self.actor_target)
        for critic, target in zip(critics, critic_targets, strict=True):
            target.load_state_dict(critic.state_dict())
            self._freeze(target)
        for name, critic, target in zip(self._critic_names, critics, critic_targets, strict=True):
            setattr(self, name, critic)
            setattr(self, f"{name}_target", target)
        self._critics = critics
        self._critic_targets = critic_targets
        actor_params = [
            p
            for p in self.actor.parameters()
            if not self.share_encoders or not _is_param_of(p, self.actor.encoder)
        ]
        self._actor_params = actor_params
        self.actor_optimizer = FlatAdam(actor_params, lr=self._lr_actor)
        self.critic_optimizer = FlatAdam(self._param_list(*critics), lr=self._lr_critic)
        self._online_params = self._param_list(self.actor, *critics)
        self._target_params = self._param_list(self.actor_target, *critic_targets)
        self._to_tensor = make_obs_converter(self.observation_space, self.device)
        self._chains = self._make_chains()
        self._numpy_act = self._chains is not None and self._chains.actor.numpy_ok

    def _make_chains(self) -> _Chains | None:
        """Manual-backward views when every network is a plain MLP (and nothing is shared)."""
        if self.share_encoders:
            return None
        actor = MLPChain.from_mlps(MLPChain.encoder_mlp(self.actor.encoder), self.actor.head)
        actor_target = MLPChain.from_mlps(
            MLPChain.encoder_mlp(self.actor_target.encoder), self.actor_target.head
        )
        critics = [_critic_chains(c) for c in self._critics]
        targets = [_critic_chains(c) for c in self._critic_targets]
        if actor is None or actor_target is None or None in critics or None in targets:
            return None
        return _Chains(actor, actor_target, critics, targets)

    def _make_networks(self) -> tuple[DeterministicActor, list[ContinuousQNetwork]]:
        actor = DeterministicActor(
            self.observation_space,
            self.action_space,
            net_config=self.net_config,
            normalize_images=self.normalize_images,
            detach_encoder=self.share_encoders,
        ).to(self.device)
        encoder = actor.encoder if self.share_encoders else None
        critics = [
            ContinuousQNetwork(
                self.observation_space,
                self.action_space,
                net_config=self.net_config,
                normalize_images=self.normalize_images,
                encoder=encoder,
                seed_offset=i + 1,
            ).to(self.device)
            for i in range(len(self._critic_names))
        ]
        return actor, critics

    def _make_noise(self) -> None:
        self.noise: ExplorationNoise = make_noise(
            self.O_U_noise,
            self.actor.action_dim,
            self.vect_noise_dim,
            mean=self.mean_noise,
            std=self.expl_noise,
            theta=self.theta,
            dt=self.dt,
            rng=self.rng,
        )

    def _after_rebuild(self, changed: set[str]) -> None:
        if _NOISE_KEYS & changed:
            self._make_noise()

    def init_kwargs(self) -> dict[str, Any]:
        """Constructor kwargs (current values) that rebuild this agent."""
        return {
            "observation_space": self.observation_space,
            "action_space": self.action_space,
            "net_config": self.net_config,
            "batch_size": self.batch_size,
            "lr_actor": self.lr_actor,
            "lr_critic": self.lr_critic,
            "learn_step": self.learn_step,
            "gamma": self.gamma,
            "tau": self.tau,
            "policy_freq": self.policy_freq,
            "vect_noise_dim": self.vect_noise_dim,
            "O_U_noise": self.O_U_noise,
            "expl_noise": self.expl_noise,
            "mean_noise": self.mean_noise,
            "theta": self.theta,
            "dt": self.dt,
            "share_encoders": self.share_encoders,
            "normalize_images": self.normalize_images,
            "max_grad_norm": self.max_grad_norm,
            "total_steps": self.total_steps,
        }

    def _extra_state(self) -> dict[str, Any]:
        return {"last_actor_loss": float(self.last_actor_loss)}

    def _load_extra_state(self, extra: dict[str, Any]) -> None:
        self.last_actor_loss = float(extra.get("last_actor_loss", 0.0))

    # --- acting -----------------------------------------------------------------------
    def get_action(self, obs: Any, epsilon: float = 0.0, greedy: bool = False) -> np.ndarray:
        """Env actions ``float32 [B, *action_shape]`` for an observation batch.

        Args:
            obs: Observation batch (numpy/tensors; dicts for Dict spaces).
            epsilon: Unused (accepted for a uniform off-policy interface).
            greedy: No exploration noise.
        """
        if self._numpy_act and type(obs) is np.ndarray:
            action = self._chains.actor.forward_numpy(obs)
        else:
            with torch.inference_mode():
                action = self.actor.forward(self._to_tensor(obs))
                if action.device.type != "cpu":
                    action = action.cpu()
                action = action.numpy()
        if not greedy:
            action = action + self.noise.sample(action.shape[0])
        return self.actor.to_env_action(action)

    def reset_noise(self, env_indices: Iterable[int] | np.ndarray | None = None) -> None:
        """Reset the exploration noise of the sub-envs that finished (all when ``None``)."""
        self.noise.reset(env_indices)

    # --- learning ---------------------------------------------------------------------
    def _smooth(self, action: torch.Tensor) -> torch.Tensor:
        """Target policy smoothing of the target action (none for DDPG; see TD3)."""
        return action

    def learn(
        self,
        batch: Mapping[str, Any],
        n_step_batch: Mapping[str, Any] | None = None,
        weights: torch.Tensor | None = None,
    ) -> dict[str, Any]:
        """One critic step, plus an actor step and target update every ``policy_freq`` calls.

        Args:
            batch: ``obs, action`` (env actions), ``reward, next_obs, done``
                (``done`` = terminated), optional ``n_steps``.
            n_step_batch: n-step transitions; when given they replace ``batch``
                (they must carry ``n_steps``).
            weights: Importance weights ``[B]`` for the critic loss; the result
                then holds ``priorities`` (mean ``|td error|`` + 1e-6).

        Returns:
            ``critic_loss`` and ``actor_loss`` floats (the latter from the most
            recent actor step, ``0.0`` before the first), ``actor_updated``
            (1.0 when this call stepped the actor) and ``q_mean``.

        Raises:
            FloatingPointError: If a loss is not finite (that step is not taken).
            ValueError: If ``n_step_batch`` has no ``n_steps``.
        """
        if n_step_batch is not None:
            if "n_steps" not in n_step_batch:
                name = type(self).__name__
                raise ValueError(f"{name} n_step_batch must carry 'n_steps' (steps per transition)")
            batch = n_step_batch
        b = self._prepare(batch)
        action = self.actor.normalize_action(b.action)
        w = None if weights is None else torch.as_tensor(weights, device=self.device)
        if w is not None:
            w = w.reshape(-1).float()
        if self._chains is not None:
            return self._learn_manual(b, action, w)
        with torch.no_grad():
            next_action = self._smooth(self.actor_target.forward(b.next_obs))
            targets = self._critic_targets
            next_q = targets[0].forward(b.next_obs, next_action)
            for target in targets[1:]:
                next_q = torch.minimum(next_q, target.forward(b.next_obs, next_action))
            y = torch.addcmul(b.reward, b.discount, next_q)
        tds = []
        critic_loss = None
        for critic in self._critics:
            td = critic.forward(b.obs, action) - y
            tds.append(td)
            sq = td.square() if w is None else td.square() * w
            critic_loss = sq.mean() if critic_loss is None else critic_loss + sq.mean()
        q_first = (tds[0].detach() + y).mean()
        critic_value, q_mean = torch.stack([critic_loss.detach(), q_first]).tolist()
        self._check_finite({"critic_loss": critic_value})
        optimizer = self.critic_optimizer
        optimizer.zero_grad()
        critic_loss.backward()
        if self.max_grad_norm is not None:
            optimizer.clip_grad_norm_(self.max_grad_norm)
        optimizer.step()
        self.num_updates += 1

        actor_updated = self.num_updates % self.policy_freq == 0
        if actor_updated:
            self._actor_step(b.obs)
            soft_update(self._target_params, self._online_params, self.tau)
        return self._result(critic_value, q_mean, actor_updated, tds, w)

    def _result(
        self,
        critic_loss: float,
        q_mean: float,
        actor_updated: bool,
        tds: list[torch.Tensor],
        weights: torch.Tensor | None,
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "critic_loss": critic_loss,
            "actor_loss": self.last_actor_loss,
            "actor_updated": float(actor_updated),
            "q_mean": q_mean,
        }
        if weights is not None:
            td_abs = torch.stack([td.detach().abs() for td in tds]).mean(0)
            out["priorities"] = (td_abs + 1e-6).cpu().numpy()
        return out

    @torch.no_grad()
    def _learn_manual(
        self, b: Batch, action: torch.Tensor, w: torch.Tensor | None
    ) -> dict[str, Any]:
        """:meth:`learn` for plain-MLP networks with hand-written backward passes."""
        chains = self._chains
        next_action = self._smooth(chains.actor_target.forward(b.next_obs))
        next_q = None
        for target in chains.critic_targets:
            q = _critic_forward(target, b.next_obs, next_action)[1]
            next_q = q if next_q is None else torch.minimum(next_q, q)
        y = torch.addcmul(b.reward, b.discount, next_q.squeeze(1))
        batch = y.shape[0]
        passes = []
        tds = []
        stats = []
        for critic in chains.critics:
            saved: tuple[list[torch.Tensor], list[torch.Tensor]] = ([], [])
            latent, q = _critic_forward(critic, b.obs, action, saved)
            td = q.squeeze(1) - y
            wtd = td if w is None else td * w
            passes.append((critic, saved, latent, q, wtd))
            tds.append(td)
            stats.append(torch.dot(wtd, td))
        stats.append(passes[0][3].sum())
        values = torch.stack(stats).tolist()
        critic_value = sum(values[:-1]) / batch
        q_mean = values[-1] / batch
        self._check_finite({"critic_loss": critic_value})
        optimizer = self.critic_optimizer
        optimizer.zero_grad()
        scale = 2.0 / batch
        for (encoder, head), saved, latent, q, wtd in passes:
            grad_in = head.backward((wtd * scale).unsqueeze(1), saved[1], q, input_grad=True)
            encoder.backward(grad_in[:, : latent.shape[1]], saved[0], latent)
        if self.max_grad_norm is not None:
            optimizer.clip_grad_norm_(self.max_grad_norm)
        optimizer.step()
        self.num_updates += 1

        actor_updated = self.num_updates % self.policy_freq == 0
        if actor_updated:
            self._actor_step_manual(b.obs, batch)
            soft_update(self._target_params, self._online_params, self.tau)
        return self._result(critic_value, q_mean, actor_updated, tds, w)

    def _actor_step_manual(self, obs: torch.Tensor, batch: int) -> None:
        chains = self._chains
        saved_actor: list[torch.Tensor] = []
        action = chains.actor.forward(obs, saved_actor)
        saved: tuple[list[torch.Tensor], list[torch.Tensor]] = ([], [])
        latent, q = _critic_forward(chains.critics[0], obs, action, saved)
        value = -q.sum().item() / batch
        self._check_finite({"actor_loss": value})
        grad_q = torch.full_like(q, -1.0 / batch)
        grad_in = chains.critics[0][1].backward(
            grad_q, saved[1], q, param_grads=False, input_grad=True
        )
        optimizer = self.actor_optimizer
        optimizer.zero_grad()
        chains.actor.backward(grad_in[:, latent.shape[1] :], saved_actor, action)
        if self.max_grad_norm is not None:
            optimizer.clip_grad_norm_(self.max_grad_norm)
        optimizer.step()
        self.last_actor_loss = value

    def _actor_step(self, obs: Any) -> None:
        actor_loss = -self._critics[0].forward(obs, self.actor.forward(obs)).mean()
        value = actor_loss.item()
        self._check_finite({"actor_loss": value})
        optimizer = self.actor_optimizer
        optimizer.zero_grad()
        torch.autograd.backward(actor_loss, inputs=self._actor_params)
        if self.max_grad_norm is not None:
            optimizer.clip_grad_norm_(self.max_grad_norm)
        optimizer.step()
        self.last_actor_loss = value


def _is_param_of(param: torch.Tensor, module: nn.Module) -> bool:
    return any(param is p for p in module.parameters())
