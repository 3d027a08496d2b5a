"""Deep Q-Network with soft target updates and an optional double-DQN target."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agilerl.algorithms.core.off_policy import (
    Batch,
    MLPChain,
    OffPolicyAlgorithm,
    OptimizerLR,
    batch_size_of,
    soft_update,
)
from agilerl.networks.config import resolve_net_config
from agilerl.networks.optim import FlatAdam
from agilerl.networks.q_networks import QNetwork
from agilerl.networks.spaces import make_obs_converter

_ARCH_KEYS = frozenset({"observation_space", "action_space", "net_config", "normalize_images"})


class DQN(OffPolicyAlgorithm):
    """DQN: ``Q(s, a) <- r + gamma^n (1 - done) max_a' Q_target(s', a')``.

    With ``double`` the next action is chosen by the online network and
    evaluated by the target network. The target network follows the online
    one by Polyak averaging with ``tau`` after every update.

    Args:
        observation_space: Single-env observation space.
        action_space: ``Discrete`` action space.
        index: Population index.
        device: Torch device.
        net_config: Network config dict (see :mod:`agilerl.networks.config`).
        batch_size: Samples per gradient step (used by the training loop).
        lr: Adam learning rate.
        learn_step: Env steps (summed over sub-envs) per gradient step.
        gamma: Discount factor.
        tau: Soft target-update rate (``1.0`` copies the online network).
        double: Double-DQN targets.
        normalize_images: Divide ``uint8`` images by 255.
        cudagraphs: Accepted for manifest compatibility; updates always run eagerly.
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
    uses_epsilon = True

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
        double: bool = False,
        normalize_images: bool = True,
        cudagraphs: bool = False,
        max_grad_norm: float | None = None,
        total_steps: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(observation_space, action_space, index=index, device=device)
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(
                f"DQN needs a Discrete action space, got {type(action_space).__name__}"
            )
        self._warn_unknown(kwargs)
        self._check_positive("DQN", batch_size=batch_size, learn_step=learn_step)
        self.net_config = resolve_net_config(net_config, observation_space)
        self.batch_size = int(batch_size)
        self._lr = float(lr)
        self.learn_step = int(learn_step)
        self.gamma = float(gamma)
        self.tau = float(tau)
        self.double = bool(double)
        self.normalize_images = bool(normalize_images)
        self.cudagraphs = bool(cudagraphs)
        self.max_grad_norm = None if not max_grad_norm else float(max_grad_norm)
        self.total_steps = None if total_steps is None else int(total_steps)
        self._build()
        self._init_rng()

    # --- construction -----------------------------------------------------------------
    def _build(self) -> None:
        """(Re)build the online and target Q networks, optimizer and converters."""
        self.actor = QNetwork(
            self.observation_space,
            self.action_space,
            net_config=self.net_config,
            normalize_images=self.normalize_images,
        ).to(self.device)
        self.actor_target = self._freeze(QNetwork.from_config(self.actor.config).to(self.device))
        self.actor_target.load_state_dict(self.actor.state_dict())
        self.optimizer = FlatAdam(self.actor.parameters(), lr=self._lr)
        self._online_params = self._param_list(self.actor)
        self._target_params = self._param_list(self.actor_target)
        self._to_tensor = make_obs_converter(self.observation_space, self.device)
        self.num_actions = int(self.action_space.n)
        self._start = int(self.action_space.start)
        self._chain = _q_chain(self.actor)
        self._target_chain = _q_chain(self.actor_target)
        self._numpy_act = self._chain is not None and self._chain.numpy_ok

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
            "double": self.double,
            "normalize_images": self.normalize_images,
            "cudagraphs": self.cudagraphs,
            "max_grad_norm": self.max_grad_norm,
            "total_steps": self.total_steps,
        }

    # --- acting -----------------------------------------------------------------------
    def get_action(self, obs: Any, epsilon: float = 0.0, greedy: bool = False) -> np.ndarray:
        """Epsilon-greedy env actions ``int64 [B]`` for an observation batch.

        Args:
            obs: Observation batch (numpy/tensors; dicts for Dict spaces).
            epsilon: Probability of a uniformly random action, per sub-env.
            greedy: Always take ``argmax_a Q`` (epsilon 0).
        """
        if greedy:
            epsilon = 0.0
        if epsilon >= 1.0:
            n = batch_size_of(obs, self.observation_space)
            return self.rng.integers(0, self.num_actions, n) + self._start
        if self._numpy_act and type(obs) is np.ndarray:
            action = self._chain.forward_numpy(obs).argmax(axis=-1)
        else:
            with torch.inference_mode():
                q = self.actor.forward(self._to_tensor(obs))
                action = q.argmax(dim=-1)
                if action.device.type != "cpu":
                    action = action.cpu()
                action = action.numpy()
        if epsilon > 0.0:
            explore = self.rng.random(action.shape[0]) < epsilon
            if explore.any():
                action = action.copy()
                action[explore] = self.rng.integers(0, self.num_actions, int(explore.sum()))
        return action + self._start if self._start else action

    def get_q_values(self, obs: Any) -> np.ndarray:
        """``Q(obs, .)`` as numpy ``[B, n]``."""
        with torch.inference_mode():
            return self.actor.forward(self._to_tensor(obs)).cpu().numpy()

    # --- learning ---------------------------------------------------------------------
    def td_target(
        self, reward: torch.Tensor, next_obs: Any, discount: torch.Tensor
    ) -> torch.Tensor:
        """``r + discount * Q_target(s', a')``; ``a'`` from the online (double) or target net."""
        with torch.no_grad():
            next_q = self.actor_target.forward(next_obs)
            if self.double:
                next_action = self.actor.forward(next_obs).argmax(dim=1, keepdim=True)
                next_value = next_q.gather(1, next_action).squeeze(1)
            else:
                next_value = next_q.max(dim=1).values
            return torch.addcmul(reward, discount, next_value)

    def learn(
        self,
        batch: Mapping[str, Any],
        n_step_batch: Mapping[str, Any] | None = None,
        weights: torch.Tensor | None = None,
    ) -> dict[str, Any]:
        """One gradient step on the mean squared TD error.

        Args:
            batch: ``obs, action, reward, next_obs, done`` (``done`` = terminated)
                and optional ``n_steps`` (discount ``gamma ** n_steps``).
            n_step_batch: n-step transitions; when given they replace ``batch``
                (they must carry ``n_steps``).
            weights: Importance weights ``[B]`` (prioritised replay); the
                result then holds ``priorities`` (``|td error| + 1e-6``).

        Returns:
            ``loss`` and ``q_mean`` floats (plus ``priorities`` as numpy).

        Raises:
            FloatingPointError: If the loss is not finite (no step is taken).
            ValueError: If ``n_step_batch`` has no ``n_steps``.
        """
        if n_step_batch is not None:
            if "n_steps" not in n_step_batch:
                raise ValueError("DQN n_step_batch must carry 'n_steps' (steps per transition)")
            batch = n_step_batch
        b = self._prepare(batch)
        action = b.action.reshape(-1, 1).long()
        if self._start:
            action = action - self._start
        w = None if weights is None else torch.as_tensor(weights, device=self.device)
        if w is not None:
            w = w.reshape(-1).float()
        if self._chain is not None:
            return self._learn_manual(b, action, w)
        q = self.actor.forward(b.obs).gather(1, action).squeeze(1)
        target = self.td_target(b.reward, b.next_obs, b.discount)
        td = q - target
        loss = td.square().mean() if w is None else (td.square() * w).mean()
        loss_value, q_mean = torch.stack([loss.detach(), q.detach().mean()]).tolist()
        self._check_finite({"loss": loss_value})
        optimizer = self.optimizer
        optimizer.zero_grad()
        loss.backward()
        if self.max_grad_norm is not None:
            optimizer.clip_grad_norm_(self.max_grad_norm)
        optimizer.step()
        soft_update(self._target_params, self._online_params, self.tau)
        self.num_updates += 1
        return self._result(loss_value, q_mean, td.detach(), w)

    def _result(
        self, loss: float, q_mean: float, td: torch.Tensor, weights: torch.Tensor | None
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"loss": loss, "q_mean": q_mean}
        if weights is not None:
            out["priorities"] = (td.abs() + 1e-6).cpu().numpy()
        return out

    @torch.no_grad()
    def _learn_manual(
        self, b: Batch, action: torch.Tensor, w: torch.Tensor | None
    ) -> dict[str, Any]:
        """:meth:`learn` for plain-MLP networks with a hand-written backward pass."""
        chain = self._chain
        saved: list[torch.Tensor] = []
        q_all = chain.forward(b.obs, saved)
        q = q_all.gather(1, action).squeeze(1)
        next_q = self._target_chain.forward(b.next_obs)
        if self.double:
            next_action = chain.forward(b.next_obs).argmax(dim=1, keepdim=True)
            next_value = next_q.gather(1, next_action).squeeze(1)
        else:
            next_value = next_q.amax(dim=1)
        td = q - torch.addcmul(b.reward, b.discount, next_value)
        batch = td.shape[0]
        grad = td * (2.0 / batch) if w is None else td * w * (2.0 / batch)
        sq_sum = torch.dot(td, td) if w is None else torch.dot(td * w, td)
        loss_sum, q_sum = torch.stack([sq_sum, q.sum()]).tolist()
        loss_value, q_mean = loss_sum / batch, q_sum / batch
        self._check_finite({"loss": loss_value})
        grad_q = torch.zeros_like(q_all).scatter_(1, action, grad.unsqueeze(1))
        optimizer = self.optimizer
        optimizer.zero_grad()
        chain.backward(grad_q, saved, q_all)
        if self.max_grad_norm is not None:
            optimizer.clip_grad_norm_(self.max_grad_norm)
        optimizer.step()
        soft_update(self._target_params, self._online_params, self.tau)
        self.num_updates += 1
        return self._result(loss_value, q_mean, td, w)


def _q_chain(net: QNetwork) -> MLPChain | None:
    """Manual-backward view of a plain-MLP :class:`QNetwork`, else ``None``."""
    return MLPChain.from_mlps(MLPChain.encoder_mlp(net.encoder), net.head)
