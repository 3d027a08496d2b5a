"""Rainbow DQN: dueling, noisy, distributional (C51) double DQN with n-step returns and PER."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from agilerl.algorithms.core.off_policy import Batch, OffPolicyAlgorithm, soft_update
from agilerl.algorithms.core.rng import device_generator, restore_generator
from agilerl.arena.models.algorithms.rainbow_dqn import RainbowDQNSpec
from agilerl.networks import masking
from agilerl.networks.fastgrad import GradTape, chain_of
from agilerl.networks.optim import FlatAdam
from agilerl.networks.q_networks import RainbowQNetwork, project_distribution

_ARCH_FIELDS = frozenset(
    {"net_config", "normalize_images", "num_atoms", "v_min", "v_max", "noise_std"}
)


def rainbow_loss(
    logits_of: Callable[[Any], torch.Tensor],
    target_logits_of: Callable[[Any], torch.Tensor],
    b: Batch,
    support: torch.Tensor,
    v_min: float,
    v_max: float,
    start: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rainbow's per-sample loss: cross-entropy to the projected double-DQN target.

    The online network (with its current noise) picks the next action (the
    best legal one under ``b.next_mask``), the target network gives its atom
    probabilities, and the distribution of ``r + discount * z`` is projected
    onto ``support`` (:func:`project_distribution`). Any leading dimensions
    work: one agent's ``[B]`` batch, or a stacked group's ``[N, B]``.

    Args:
        logits_of: Online dueling atom logits, ``obs -> [..., n, atoms]``.
        target_logits_of: The target network's logits, same shapes.
        b: The batch; ``b.reward`` and ``b.discount`` give the leading shape.
        support: The ``[atoms]`` value support.
        v_min: ``support[0]``.
        v_max: ``support[-1]``.
        start: The action space's first action.

    Returns:
        The per-sample losses and ``Q(s, a)`` (detached), both ``b.reward``'s shape.
    """
    atoms = support.shape[0]
    action = b.action.reshape(b.reward.shape).long() - start
    index = action[..., None, None].expand(*action.shape, 1, atoms)
    with torch.no_grad():
        next_q = F.softmax(logits_of(b.next_obs), dim=-1) @ support
        next_action = masking.masked_argmax(next_q, b.next_mask)
        next_index = next_action[..., None, None].expand(*next_action.shape, 1, atoms)
        next_logits = target_logits_of(b.next_obs).gather(-2, next_index).squeeze(-2)
        next_probs = F.softmax(next_logits, dim=-1)
        target = project_distribution(
            next_probs.reshape(-1, atoms),
            b.reward.reshape(-1),
            b.discount.reshape(-1),
            support,
            v_min,
            v_max,
        ).view_as(next_probs)
    logits = logits_of(b.obs).gather(-2, index).squeeze(-2)
    log_p = F.log_softmax(logits, dim=-1)
    q = log_p.detach().exp() @ support
    return -(target * log_p).sum(dim=-1), q


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
    The draws come from the agent's own torch generator (:attr:`noise_rng`,
    seeded once from its exploration generator and saved in checkpoints), so
    an agent draws the same noise whether it trains alone or stacked with others.
    ``beta`` (PER exponent) is held here for the training loop to anneal.

    Hyperparameters are the fields of
    :class:`~agilerl.arena.models.algorithms.rainbow_dqn.RainbowDQNSpec`.

    Args:
        spec: The validated Rainbow DQN spec.
        observation_space: Single-env observation space.
        action_space: ``Discrete`` action space.
        index: Population index.
        device: Torch device.
        total_steps: Env steps of the whole run (informational).
        actor_network: A pre-built :class:`RainbowQNetwork` to use as is.
        **overrides: Spec fields to change, validated through the spec.

    Raises:
        ValueError: For a non-Discrete action space.
    """

    spec_class: ClassVar[type] = RainbowDQNSpec
    lr_optimizers: ClassVar[dict[str, str]] = {"lr": "optimizer"}
    rebuild_fields = _ARCH_FIELDS
    action_space_types = (spaces.Discrete,)
    reads_action_masks = True
    network_names = ("actor", "actor_target")
    optimizer_names = ("optimizer",)
    uses_epsilon = False

    def _build(self, actor_network: nn.Module | None = None) -> None:
        """(Re)build the online and target networks, optimizer and converters."""
        self._init_rng()
        spec, actor = self.spec, actor_network
        if actor is None:
            actor = RainbowQNetwork(
                self.policy_space,
                self.action_space,
                net_config=self.net_config,
                num_atoms=spec.num_atoms,
                v_min=spec.v_min,
                v_max=spec.v_max,
                noise_std=spec.noise_std,
                normalize_images=spec.normalize_images,
            )
        self.noise_rng = device_generator(getattr(self, "noise_rng", None), self.device, self.rng)
        self.actor = actor.to(self.device)
        self.actor_target = self._target_of(self.actor)
        self.actor_target.reset_noise(self.noise_rng)
        self.optimizer = FlatAdam(self.actor.parameters(), lr=spec.lr)
        self._online_params = self._param_list(self.actor)
        self._target_params = self._param_list(self.actor_target)
        self._masks = masking.MaskReader(self.observation_space, self.action_space, self.device)
        self._to_tensor = self._masks.to_tensor
        self.num_actions = int(self.action_space.n)
        self._start = int(self.action_space.start)
        chains = [chain_of(m) for m in (self.actor.encoder, self.actor.value, self.actor.advantage)]
        usable = all(c is not None for c in chains) and chains[0].numpy_ok
        self._numpy_chains = chains if usable else None
        self._support_np = self.actor.support.detach().cpu().numpy()

    @property
    def support(self) -> torch.Tensor:
        """The ``[num_atoms]`` value support."""
        return self.actor.support

    # --- acting -----------------------------------------------------------------------
    def get_action(self, obs: Any, epsilon: float = 0.0, greedy: bool = False) -> np.ndarray:
        """Env actions ``int64 [B]`` maximising the expected value.

        Args:
            obs: Observation batch (numpy/tensors; dicts for Dict spaces). With an
                action mask, the best legal action.
            epsilon: Ignored (noisy networks explore).
            greedy: Use the noise-free mean weights.
        """
        mask = self._masks.numpy_mask(obs)
        part = masking.observation_part(obs) if mask is not None else obs
        if self._numpy_chains is not None and type(part) is np.ndarray:
            action = masking.masked_argmax_numpy(self._q_numpy(part, noise=not greedy), mask)
        else:
            with torch.inference_mode():
                q = self.actor.q_values(self._to_tensor(obs), noise=not greedy)
                action = masking.masked_argmax(q, self._masks.mask(obs))
                if action.device.type != "cpu":
                    action = action.cpu()
                action = action.numpy()
        return action + self._start if self._start else action

    def _q_numpy(self, obs: np.ndarray, noise: bool) -> np.ndarray:
        """Expected values ``[B, n]`` computed in numpy (plain-MLP networks on the CPU)."""
        encoder, value_chain, adv_chain = self._numpy_chains
        latent = encoder.forward_numpy(obs)
        value = value_chain.forward_numpy(latent, noise)
        adv = adv_chain.forward_numpy(latent, noise)
        adv = adv.reshape(adv.shape[0], self.num_actions, self.spec.num_atoms)
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
        self.actor.reset_noise(self.noise_rng)
        self.actor_target.reset_noise(self.noise_rng)

    def _extra_state(self) -> dict[str, Any]:
        return {**super()._extra_state(), "noise_rng": self.noise_rng.get_state()}

    def _load_extra_state(self, extra: dict[str, Any]) -> None:
        super()._load_extra_state(extra)
        state = extra.get("noise_rng")
        if state is not None:
            restore_generator(self.noise_rng, torch.as_tensor(state))

    # --- learning ---------------------------------------------------------------------
    def _elementwise_loss(self, b: Batch, tape: GradTape) -> tuple[torch.Tensor, torch.Tensor]:
        """:func:`rainbow_loss` of this agent's networks (through ``tape``) on ``b``."""
        return rainbow_loss(
            lambda x: self.actor.logits(x, tape=tape),
            lambda x: self.actor_target.logits(x, tape=tape),
            b,
            self.actor.support,
            self.spec.v_min,
            self.spec.v_max,
            start=self._start,
        )

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
        w = self._weights(weights)
        tape = GradTape()
        if n_step_batch is None:
            elementwise, q = self._elementwise_loss(self._prepare(batch), tape)
        else:
            b = self._prepare(n_step_batch, self.spec.n_step)
            elementwise, q = self._elementwise_loss(b, tape)
            if self.spec.combined_reward:
                elementwise = elementwise + self._elementwise_loss(self._prepare(batch), tape)[0]
        loss = elementwise.mean() if w is None else (elementwise * w).mean()

        loss_value, q_mean = torch.stack([loss.detach(), q.mean()]).tolist()
        self._check_finite({"loss": loss_value})
        self.optimizer.zero_grad()
        tape.backward(loss)
        self.optimizer.clip_grad_norm_(self.spec.max_grad_norm)
        self.optimizer.step()
        soft_update(self._target_params, self._online_params, self.spec.tau)
        self.num_updates += 1
        priorities = (elementwise.detach() + self.spec.prior_eps).cpu().numpy()
        return {"loss": loss_value, "q_mean": q_mean, "priorities": priorities}
