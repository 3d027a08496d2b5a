"""Rainbow DQN: dueling, noisy, distributional (C51) double DQN with n-step returns and PER."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces

from agilerl.algorithms.core.off_policy import (
    Batch,
    MLPChain,
    OffPolicyAlgorithm,
    OptimizerLR,
    soft_update,
)
from agilerl.networks.config import resolve_net_config
from agilerl.networks.optim import FlatAdam
from agilerl.networks.q_networks import RainbowQNetwork, project_distribution
from agilerl.networks.spaces import make_obs_converter

_ARCH_KEYS = frozenset(
    {
        "observation_space",
        "action_space",
        "net_config",
        "normalize_images",
        "num_atoms",
        "v_min",
        "v_max",
        "noise_std",
    }
)


class _Chains(NamedTuple):
    """Manual-backward views of a plain-MLP :class:`RainbowQNetwork`."""

    encoder: MLPChain
    value: MLPChain
    advantage: MLPChain

    @classmethod
    def of(cls, net: RainbowQNetwork) -> _Chains | None:
        encoder = MLPChain.from_mlps(MLPChain.encoder_mlp(net.encoder))
        value = MLPChain.from_noisy(net.value)
        advantage = MLPChain.from_noisy(net.advantage)
        if encoder is None or value is None or advantage is None:
            return None
        return cls(encoder, value, advantage)

    def logits(self, obs: torch.Tensor, num_actions: int) -> torch.Tensor:
        """Dueling atom logits ``[B, n, atoms]`` (with the current noise)."""
        latent = self.encoder.forward(obs)
        value = self.value.forward(latent)
        adv = self.advantage.forward(latent)
        adv = adv.view(adv.shape[0], num_actions, -1)
        return (adv - adv.mean(dim=1, keepdim=True)).add_(value.unsqueeze(1))


class RainbowDQN(OffPolicyAlgorithm):
    """Rainbow DQN.

    * Dueling, noisy (factorised Gaussian) C51 head (:class:`RainbowQNetwork`);
      exploration comes from the parameter noise, so ``epsilon`` is ignored.
    * Double-DQN target: the online network (with its current noise) picks
      the next action, the target network gives its value distribution,
      which is projected onto the support after ``r + gamma^n (1 - done) z``.
    * Loss: per-sample cross-entropy between the projected target and the
      predicted distribution, weighted by PER importance weights when given;
      the per-sample losses (``+ prior_eps``) are returned as new priorities.
    * n-step: the training loop passes n-step transitions as ``n_step_batch``;
      with ``combined_reward`` the one-step and n-step losses are added,
      otherwise only the n-step loss is used.

    New noise is drawn for the online and target networks at the start of
    every :meth:`learn`; acting uses the current noise (or none when greedy).
    ``beta`` (PER exponent) is held here for the training loop to anneal.

    Args:
        observation_space: Single-env observation space.
        action_space: ``Discrete`` action space.
        index: Population index.
        device: Torch device.
        net_config: Network config dict.
        batch_size: Samples per gradient step.
        lr: Adam learning rate.
        learn_step: Env steps (summed over sub-envs) per gradient step.
        gamma: Discount factor.
        tau: Soft target-update rate.
        beta: Initial PER importance-sampling exponent.
        prior_eps: Added to priorities so that none is zero.
        num_atoms: Atoms of the value distribution (>= 2).
        v_min: Lowest atom.
        v_max: Highest atom.
        noise_std: Initial noise scale of the noisy layers.
        n_step: Steps of the n-step return.
        combined_reward: Add the one-step and n-step losses.
        normalize_images: Divide ``uint8`` images by 255.
        max_grad_norm: Global gradient-norm clip (``None``/``0`` disables).
        total_steps: Env steps of the whole run (informational).
        **kwargs: Unknown extra settings are ignored with a warning.

    Raises:
        ValueError: For a non-Discrete action space or invalid settings.
    """

    hp_names = ("lr", "batch_size", "learn_step", "gamma", "tau")
    arch_keys = _ARCH_KEYS
    lr = OptimizerLR("optimizer")
    network_names = ("actor", "actor_target")
    optimizer_names = ("optimizer",)
    uses_epsilon = False

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        index: int = 0,
        device: str | torch.device = "cpu",
        net_config: Mapping[str, Any] | None = None,
        batch_size: int = 64,
        lr: float = 1e-4,
        learn_step: int = 5,
        gamma: float = 0.99,
        tau: float = 1e-3,
        beta: float = 0.4,
        prior_eps: float = 1e-6,
        num_atoms: int = 51,
        v_min: float = 0.0,
        v_max: float = 200.0,
        noise_std: float = 0.5,
        n_step: int = 3,
        combined_reward: bool = False,
        normalize_images: bool = True,
        max_grad_norm: float | None = 10.0,
        total_steps: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(observation_space, action_space, index=index, device=device)
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(
                f"RainbowDQN needs a Discrete action space, got {type(action_space).__name__}"
            )
        self._warn_unknown(kwargs)
        self._check_positive(
            "RainbowDQN", batch_size=batch_size, learn_step=learn_step, n_step=n_step
        )
        if int(num_atoms) < 2:
            raise ValueError(f"RainbowDQN num_atoms must be >= 2, got {num_atoms}")
        if float(v_min) >= float(v_max):
            raise ValueError(f"RainbowDQN v_min ({v_min}) must be below v_max ({v_max})")
        self.net_config = resolve_net_config(net_config, observation_space)
        self.batch_size = int(batch_size)
        self._lr = float(lr)
        self.learn_step = int(learn_step)
        self.gamma = float(gamma)
        self.tau = float(tau)
        self.beta = float(beta)
        self.prior_eps = float(prior_eps)
        self.num_atoms = int(num_atoms)
        self.v_min = float(v_min)
        self.v_max = float(v_max)
        self.noise_std = float(noise_std)
        self.n_step = int(n_step)
        self.combined_reward = bool(combined_reward)
        self.normalize_images = bool(normalize_images)
        self.max_grad_norm = None if not max_grad_norm else float(max_grad_norm)
        self.total_steps = None if total_steps is None else int(total_steps)
        self._build()
        self._init_rng()

    # --- construction -----------------------------------------------------------------
    def _build(self) -> None:
        """(Re)build the online and target networks, optimizer and converters."""
        self.actor = RainbowQNetwork(
            self.observation_space,
            self.action_space,
            net_config=self.net_config,
            num_atoms=self.num_atoms,
            v_min=self.v_min,
            v_max=self.v_max,
            noise_std=self.noise_std,
            normalize_images=self.normalize_images,
        ).to(self.device)
        self.actor_target = self._freeze(
            RainbowQNetwork.from_config(self.actor.config).to(self.device)
        )
        self.actor_target.load_state_dict(self.actor.state_dict())
        self.actor_target.reset_noise()
        self.optimizer = FlatAdam(self.actor.parameters(), lr=self._lr)
        self._online_params = self._param_list(self.actor)
        self._target_params = self._param_list(self.actor_target)
        self._to_tensor = make_obs_converter(self.observation_space, self.device)
        self.num_actions = int(self.action_space.n)
        self._start = int(self.action_space.start)
        self._chains = _Chains.of(self.actor)
        self._target_chains = _Chains.of(self.actor_target)
        if self._target_chains is None:
            self._chains = None
        self._numpy_act = self._chains is not None and self._chains.encoder.numpy_ok
        self._support_np = self.actor.support.detach().cpu().numpy()

    def init_kwargs(self) -> dict[str, Any]:
        """Constructor kwargs (current values) that rebuild this agent."""
        return {
            "observation_space": self.observation_space,
            "action_space": self.action_space,
            "net_config": self.net_config,
            "batch_size": self.batch_size,
            "lr": self.lr,
            "learn_step": self.learn_step,
            "gamma": self.gamma,
            "tau": self.tau,
            "beta": self.beta,
            "prior_eps": self.prior_eps,
            "num_atoms": self.num_atoms,
            "v_min": self.v_min,
            "v_max": self.v_max,
            "noise_std": self.noise_std,
            "n_step": self.n_step,
            "combined_reward": self.combined_reward,
            "normalize_images": self.normalize_images,
            "max_grad_norm": self.max_grad_norm,
            "total_steps": self.total_steps,
        }

    @property
    def support(self) -> torch.Tensor:
        """The ``[num_atoms]`` value support."""
        return self.actor.support

    # --- acting -----------------------------------------------------------------------
    def get_action(self, obs: Any, epsilon: float = 0.0, greedy: bool = False) -> np.ndarray:
        """Env actions ``int64 [B]`` maximising the expected value.

        Args:
            obs: Observation batch (numpy/tensors; dicts for Dict spaces).
            epsilon: Ignored (noisy networks explore).
            greedy: Use the noise-free mean weights.
        """
        if self._numpy_act and type(obs) is np.ndarray:
            action = self._q_numpy(obs, noise=not greedy).argmax(axis=-1)
        else:
            with torch.inference_mode():
                q = self.actor.q_values(self._to_tensor(obs), noise=not greedy)
                action = q.argmax(dim=-1)
                if action.device.type != "cpu":
                    action = action.cpu()
                action = action.numpy()
        return action + self._start if self._start else action

    def _q_numpy(self, obs: np.ndarray, noise: bool) -> np.ndarray:
        """Expected values ``[B, n]`` computed in numpy (plain-MLP networks on the CPU)."""
        chains = self._chains
        latent = chains.encoder.forward_numpy(obs)
        value = chains.value.forward_numpy(latent, noise)
        adv = chains.advantage.forward_numpy(latent, noise)
        adv = adv.reshape(adv.shape[0], self.num_actions, self.num_atoms)
        logits = adv - adv.mean(axis=1, keepdims=True)
        logits += value[:, None]
        logits -= logits.max(axis=-1, keepdims=True)
        np.exp(logits, out=logits)
        return (logits @ self._support_np) / logits.sum(axis=-1)

    def get_q_values(self, obs: Any, noise: bool = False) -> np.ndarray:
        """Expected values ``[B, n]`` as numpy."""
        with torch.inference_mode():
            return self.actor.q_values(self._to_tensor(obs), noise=noise).cpu().numpy()

    def reset_noise(self, env_indices: Iterable[int] | np.ndarray | None = None) -> None:
        """Draw new noise for the online and target networks' noisy layers.

        Args:
            env_indices: Accepted for the training loop's per-env reset call;
                the parameter noise is shared by all sub-envs, so any call
                resamples it.
        """
        self.actor.reset_noise()
        self.actor_target.reset_noise()

    # --- learning ---------------------------------------------------------------------
    def _elementwise_loss(self, b: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-sample cross-entropy ``[B]`` and predicted ``Q(s, a)`` ``[B]``."""
        action = b.action.reshape(-1).long()
        if self._start:
            action = action - self._start
        batch = action.shape[0]
        atoms = self.num_atoms
        index = action.view(batch, 1, 1).expand(batch, 1, atoms)
        logits = self.actor.logits(b.obs).gather(1, index).squeeze(1)
        log_p = F.log_softmax(logits, dim=-1)
        support = self.actor.support
        with torch.no_grad():
            next_action = self.actor.q_values(b.next_obs).argmax(dim=1)
            next_index = next_action.view(batch, 1, 1).expand(batch, 1, atoms)
            next_logits = self.actor_target.logits(b.next_obs).gather(1, next_index).squeeze(1)
            target = project_distribution(
                F.softmax(next_logits, dim=-1),
                b.reward,
                b.discount,
                support,
                self.v_min,
                self.v_max,
            )
            q = log_p.detach().exp() @ support
        return -(target * log_p).sum(dim=-1), q

    def learn(
        self,
        batch: Mapping[str, Any],
        n_step_batch: Mapping[str, Any] | None = None,
        weights: torch.Tensor | None = None,
    ) -> dict[str, Any]:
        """One gradient step on the distributional loss.

        Args:
            batch: One-step ``obs, action, reward, next_obs, done`` (``done`` =
                terminated), optional ``n_steps``.
            n_step_batch: n-step transitions at the same indices (optional
                ``n_steps``, default ``n_step``); used alone, or added to the
                one-step loss with ``combined_reward``.
            weights: PER importance weights ``[B]``.

        Returns:
            ``loss``, ``q_mean`` floats and ``priorities`` (numpy ``[B]``:
            per-sample loss ``+ prior_eps``).

        Raises:
            FloatingPointError: If the loss is not finite (no step is taken).
        """
        self.reset_noise()
        w = None if weights is None else torch.as_tensor(weights, device=self.device)
        if w is not None:
            w = w.reshape(-1).float()
        if self._chains is not None and not (self.combined_reward and n_step_batch is not None):
            if n_step_batch is None:
                return self._learn_manual(self._prepare(batch), w)
            return self._learn_manual(self._prepare(n_step_batch, self.n_step), w)
        if n_step_batch is None:
            elementwise, q = self._elementwise_loss(self._prepare(batch))
        else:
            elementwise, q = self._elementwise_loss(self._prepare(n_step_batch, self.n_step))
            if self.combined_reward:
                elementwise = elementwise + self._elementwise_loss(self._prepare(batch))[0]
        loss = elementwise.mean() if w is None else (elementwise * w).mean()
        loss_value, q_mean = torch.stack([loss.detach(), q.mean()]).tolist()
        self._check_finite({"loss": loss_value})
        optimizer = self.optimizer
        optimizer.zero_grad()
        loss.backward()
        if self.max_grad_norm is not None:
            optimizer.clip_grad_norm_(self.max_grad_norm)
        optimizer.step()
        soft_update(self._target_params, self._online_params, self.tau)
        self.num_updates += 1
        priorities = (elementwise.detach() + self.prior_eps).cpu().numpy()
        return {"loss": loss_value, "q_mean": q_mean, "priorities": priorities}

    @torch.no_grad()
    def _learn_manual(self, b: Batch, w: torch.Tensor | None) -> dict[str, Any]:
        """:meth:`learn` for plain-MLP networks with a hand-written backward pass.

        With ``p = softmax(logits_a)`` and the projected target ``m`` (which
        sums to one), ``d loss_i / d logits_a = (p - m) w_i / B``; the dueling
        combination routes that to the value stream unchanged and to the
        advantage stream as ``g (1[a' = a] - 1 / n)``.
        """
        chains = self._chains
        n, atoms = self.num_actions, self.num_atoms
        action = b.action.reshape(-1).long()
        if self._start:
            action = action - self._start
        batch = action.shape[0]
        index = action.view(batch, 1, 1).expand(batch, 1, atoms)
        saved: tuple[list, list, list] = ([], [], [])
        latent = chains.encoder.forward(b.obs, saved[0])
        value = chains.value.forward(latent, saved[1])
        adv = chains.advantage.forward(latent, saved[2])
        adv3 = adv.view(batch, n, atoms)
        logits = adv3.gather(1, index).squeeze(1).sub_(adv3.mean(dim=1)).add_(value)
        log_p = F.log_softmax(logits, dim=-1)
        support = self.actor.support
        next_q = F.softmax(chains.logits(b.next_obs, n), dim=-1) @ support
        next_index = next_q.argmax(dim=1).view(batch, 1, 1).expand(batch, 1, atoms)
        next_logits = self._target_chains.logits(b.next_obs, n).gather(1, next_index).squeeze(1)
        target = project_distribution(
            F.softmax(next_logits, dim=-1), b.reward, b.discount, support, self.v_min, self.v_max
        )
        elementwise = (target * log_p).sum(dim=-1).neg_()
        probs = log_p.exp()
        weighted = elementwise if w is None else elementwise * w
        loss_sum, q_sum = torch.stack([weighted.sum(), (probs @ support).sum()]).tolist()
        loss_value, q_mean = loss_sum / batch, q_sum / batch
        self._check_finite({"loss": loss_value})
        grad = probs.sub_(target)
        grad = grad.mul_(1.0 / batch) if w is None else grad.mul_((w * (1.0 / batch)).unsqueeze(1))
        grad_adv = (grad * (-1.0 / n)).unsqueeze(1).expand(batch, n, atoms).contiguous()
        grad_adv.scatter_add_(1, index, grad.unsqueeze(1))
        optimizer = self.optimizer
        optimizer.zero_grad()
        grad_latent = chains.value.backward(grad, saved[1], value, input_grad=True)
        grad_latent += chains.advantage.backward(
            grad_adv.view(batch, n * atoms), saved[2], adv, input_grad=True
        )
        chains.encoder.backward(grad_latent, saved[0], latent)
        if self.max_grad_norm is not None:
            optimizer.clip_grad_norm_(self.max_grad_norm)
        optimizer.step()
        soft_update(self._target_params, self._online_params, self.tau)
        self.num_updates += 1
        priorities = (elementwise + self.prior_eps).cpu().numpy()
        return {"loss": loss_value, "q_mean": q_mean, "priorities": priorities}
