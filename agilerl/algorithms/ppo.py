"""Proximal Policy Optimization (clipped surrogate, GAE, shared or separate encoders)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import torch
from gymnasium import spaces

from agilerl.algorithms.core.base import SingleAgentAlgorithm
from agilerl.components.rollout_buffer import RolloutBuffer
from agilerl.networks.actors import StochasticActor, action_kind
from agilerl.networks.config import resolve_net_config
from agilerl.networks.fused import FusedActorCritic, build_fused_actor_critic
from agilerl.networks.optim import FlatAdam
from agilerl.networks.spaces import make_obs_converter
from agilerl.networks.value import ValueNetwork

_ARCH_KEYS = frozenset(
    {
        "observation_space",
        "action_space",
        "net_config",
        "share_encoders",
        "normalize_images",
        "action_std_init",
        "adam_eps",
    }
)
_BUFFER_KEYS = frozenset({"device"})
LR_SCHEDULE_KINDS = ("constant", "linear")


class PolicyStep(NamedTuple):
    """One batched policy evaluation, as numpy arrays.

    Attributes:
        action: Raw policy actions (what the rollout buffer stores).
        env_action: Actions mapped to the env's action space (clipped/squashed/offset).
        log_prob: Log-probabilities of ``action``.
        value: ``V(obs)``.
    """

    action: np.ndarray
    env_action: np.ndarray
    log_prob: np.ndarray
    value: np.ndarray


class PPO(SingleAgentAlgorithm):
    """PPO with a clipped surrogate objective and GAE.

    Args:
        observation_space: Single-env observation space.
        action_space: Single-env action space (Discrete, MultiDiscrete,
            MultiBinary or Box).
        index: Population index.
        device: Torch device.
        net_config: Network config dict (see :mod:`agilerl.networks.config`).
        batch_size: Minibatch size.
        lr: Adam learning rate (the start value when ``lr_schedule`` is set).
        learn_step: Rollout length summed over all envs; each env collects
            ``ceil(learn_step / num_envs)`` steps.
        num_envs: Number of vector sub-envs.
        gamma: Discount factor.
        gae_lambda: GAE lambda.
        action_std_init: Initial *log* std of the Gaussian policy (Box).
        clip_coef: Surrogate clipping range.
        ent_coef: Entropy bonus coefficient.
        vf_coef: Value loss coefficient (the value loss is the plain MSE).
        max_grad_norm: Global gradient-norm clip (``0``/``None`` disables).
        target_kl: Stop the update (before the optimizer step) once a
            minibatch's approximate KL exceeds ``1.5 * target_kl``.
        update_epochs: Passes over each rollout.
        share_encoders: Actor and critic share one encoder.
        normalize_images: Divide ``uint8`` images by 255.
        lr_schedule: ``None`` or ``{"kind": "linear" | "constant", "end": float}``;
            linear anneals ``lr`` to ``end`` over ``total_steps`` env steps,
            applied at the start of every :meth:`learn` from ``self.steps``.
        total_steps: Env steps of the whole run (needed by a linear schedule).
        recurrent: Recurrent policy (not implemented yet).
        max_seq_len: BPTT length (recurrent only).
        rollout_buffer_config: Extra :class:`RolloutBuffer` settings (``device``).
        bptt_sequence_type: Recurrent sequence cutting (recurrent only).
        normalize_advantages: Standardise advantages per minibatch.
        value_clip_coef: Clip the value update around the rollout values
            (``None`` disables).
        adam_eps: Adam epsilon.
        **kwargs: Unknown extra settings are ignored with a warning.

    Typical loop (see :func:`agilerl.training.collect.collect_rollouts`)::

        buffer = agent.create_rollout_buffer()
        obs, _ = env.reset(seed=0)  # vector env in SAME_STEP autoreset mode
        while agent.steps < total_steps:
            obs, episode_returns, _ = collect_rollouts(agent, env, buffer, obs)
            losses = agent.learn(buffer)

    Create a new buffer after ``learn_step`` or ``num_envs`` change (mutation).

    Raises:
        ValueError: For an unsupported action space or invalid settings.
        NotImplementedError: For ``recurrent=True`` or an ``lstm``/``simba`` encoder.
    """

    hp_names = (
        "lr",
        "batch_size",
        "learn_step",
        "gamma",
        "gae_lambda",
        "clip_coef",
        "ent_coef",
        "vf_coef",
        "max_grad_norm",
        "update_epochs",
    )
    arch_keys = _ARCH_KEYS
    network_names = ("actor", "critic")
    optimizer_names = ("optimizer",)

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        index: int = 0,
        device: str | torch.device = "cpu",
        net_config: Mapping[str, Any] | None = None,
        batch_size: int = 64,
        lr: float = 1e-4,
        learn_step: int = 4096,
        num_envs: int = 1,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        action_std_init: float = 0.0,
        clip_coef: float = 0.2,
        ent_coef: float = 0.01,
        vf_coef: float = 0.5,
        max_grad_norm: float | None = 0.5,
        target_kl: float | None = None,
        update_epochs: int = 4,
        share_encoders: bool = True,
        normalize_images: bool = True,
        lr_schedule: Mapping[str, Any] | None = None,
        total_steps: int | None = None,
        recurrent: bool = False,
        max_seq_len: int | None = None,
        rollout_buffer_config: Mapping[str, Any] | None = None,
        bptt_sequence_type: str = "chunked",
        normalize_advantages: bool = True,
        value_clip_coef: float | None = None,
        adam_eps: float = 1e-5,
        **kwargs: Any,
    ) -> None:
        super().__init__(observation_space, action_space, index=index, device=device)
        if recurrent:
            raise NotImplementedError(
                "Recurrent PPO (recurrent=True) is not implemented yet; use recurrent=False"
            )
        action_kind(action_space)  # raises ValueError naming an unsupported space
        if kwargs:
            warnings.warn(f"PPO ignores unknown settings: {sorted(kwargs)}", stacklevel=2)
        for name, value in (
            ("batch_size", batch_size),
            ("learn_step", learn_step),
            ("num_envs", num_envs),
            ("update_epochs", update_epochs),
        ):
            if int(value) < 1:
                raise ValueError(f"PPO {name} must be >= 1, got {value}")
        self.net_config = resolve_net_config(net_config, observation_space)
        self.batch_size = int(batch_size)
        self.lr = float(lr)
        self.learn_step = int(learn_step)
        self.num_envs = int(num_envs)
        self.gamma = float(gamma)
        self.gae_lambda = float(gae_lambda)
        self.action_std_init = float(action_std_init)
        self.clip_coef = float(clip_coef)
        self.ent_coef = float(ent_coef)
        self.vf_coef = float(vf_coef)
        self.max_grad_norm = None if max_grad_norm is None else float(max_grad_norm)
        self.target_kl = None if target_kl is None else float(target_kl)
        self.update_epochs = int(update_epochs)
        self.share_encoders = bool(share_encoders)
        self.normalize_images = bool(normalize_images)
        self.lr_schedule = self._check_schedule(lr_schedule, total_steps)
        self.total_steps = None if total_steps is None else int(total_steps)
        self.recurrent = False
        self.max_seq_len = max_seq_len
        self.rollout_buffer_config = dict(rollout_buffer_config or {})
        unknown = set(self.rollout_buffer_config) - _BUFFER_KEYS
        if unknown:
            raise ValueError(f"Unknown rollout_buffer_config keys: {sorted(unknown)}")
        self.bptt_sequence_type = str(bptt_sequence_type)
        self.normalize_advantages = bool(normalize_advantages)
        self.value_clip_coef = None if value_clip_coef is None else float(value_clip_coef)
        self.adam_eps = float(adam_eps)
        self._build()

    # --- construction ---------------------------------------------------------------
    @staticmethod
    def _check_schedule(
        schedule: Mapping[str, Any] | None, total_steps: int | None
    ) -> dict[str, Any] | None:
        if schedule is None:
            return None
        schedule = {"kind": "linear", "end": 0.0, **dict(schedule)}
        if schedule["kind"] not in LR_SCHEDULE_KINDS:
            raise ValueError(
                f"Unknown lr_schedule kind {schedule['kind']!r}; choose one of {LR_SCHEDULE_KINDS}"
            )
        if schedule["kind"] == "linear" and not total_steps:
            raise ValueError("A linear lr_schedule needs total_steps (the run's env steps)")
        schedule["end"] = float(schedule["end"])
        return schedule

    def _build(self) -> None:
        """(Re)build actor, critic, optimizer and observation converter."""
        self.actor = StochasticActor(
            self.observation_space,
            self.action_space,
            net_config=self.net_config,
            action_std_init=self.action_std_init,
            normalize_images=self.normalize_images,
        ).to(self.device)
        self.critic = ValueNetwork(
            self.observation_space,
            net_config=self.net_config,
            normalize_images=self.normalize_images,
            encoder=self.actor.encoder if self.share_encoders else None,
        ).to(self.device)
        self.optimizer = FlatAdam(
            [*self.actor.parameters(), *self.critic.parameters()], lr=self.lr, eps=self.adam_eps
        )
        self._to_tensor = make_obs_converter(self.observation_space, self.device)
        self._fused: FusedActorCritic | None = None
        self._fused_key: tuple[int, ...] | None = None

    def _normalise_kwarg(self, key: str, value: Any, kwargs: dict[str, Any]) -> Any:
        if key == "lr_schedule":
            return self._check_schedule(value, kwargs.get("total_steps", self.total_steps))
        return super()._normalise_kwarg(key, value, kwargs)

    def init_kwargs(self) -> dict[str, Any]:
        """Constructor kwargs (current values) that rebuild this agent."""
        return {
            "observation_space": self.observation_space,
            "action_space": self.action_space,
            "net_config": self.net_config,
            "batch_size": self.batch_size,
            "lr": self.lr,
            "learn_step": self.learn_step,
            "num_envs": self.num_envs,
            "gamma": self.gamma,
            "gae_lambda": self.gae_lambda,
            "action_std_init": self.action_std_init,
            "clip_coef": self.clip_coef,
            "ent_coef": self.ent_coef,
            "vf_coef": self.vf_coef,
            "max_grad_norm": self.max_grad_norm,
            "target_kl": self.target_kl,
            "update_epochs": self.update_epochs,
            "share_encoders": self.share_encoders,
            "normalize_images": self.normalize_images,
            "lr_schedule": self.lr_schedule,
            "total_steps": self.total_steps,
            "recurrent": self.recurrent,
            "max_seq_len": self.max_seq_len,
            "rollout_buffer_config": self.rollout_buffer_config,
            "bptt_sequence_type": self.bptt_sequence_type,
            "normalize_advantages": self.normalize_advantages,
            "value_clip_coef": self.value_clip_coef,
            "adam_eps": self.adam_eps,
        }

    @property
    def steps_per_env(self) -> int:
        """Rollout steps per sub-env: ``ceil(learn_step / num_envs)``."""
        return math.ceil(self.learn_step / self.num_envs)

    def create_rollout_buffer(self) -> RolloutBuffer:
        """A :class:`RolloutBuffer` sized for ``learn_step`` and ``num_envs``."""
        return RolloutBuffer(
            self.steps_per_env,
            self.num_envs,
            self.observation_space,
            self.action_space,
            device=self.rollout_buffer_config.get("device", self.device),
            gamma=self.gamma,
            gae_lambda=self.gae_lambda,
        )

    # --- acting -----------------------------------------------------------------------
    def _fused_policy(self) -> FusedActorCritic | None:
        """Fused inference snapshot of actor+critic, rebuilt whenever any weight changed.

        The key combines the optimizer's flat buffer version (bumped by every
        update) with each parameter's own version (bumped by in-place loads)
        and storage address (changed when a parameter's data is replaced).
        """
        params = self.optimizer.params
        key = (
            self.optimizer.flat._version,
            *[p._version for p in params],
            *[p.data_ptr() for p in params],
        )
        if key != self._fused_key:
            self._fused = build_fused_actor_critic(self.actor, self.critic, self.share_encoders)
            self._fused_key = key
        return self._fused

    def _act(self, obs: Any, greedy: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One actor+critic pass: ``(raw action, log_prob, value)`` tensors.

        Uses the fused MLP snapshot when the networks qualify (see
        :mod:`agilerl.networks.fused`); call under ``torch.inference_mode()``.
        """
        fused = self._fused_policy()
        if fused is not None:
            params, value = fused(obs)
        else:
            params, value = self._forward_all(obs)
        action, log_prob = self.actor.sample(params, greedy)
        return action, log_prob, value

    def policy_step(self, obs: Any, greedy: bool = False) -> PolicyStep:
        """Act on an observation batch; everything the collector needs, as numpy.

        Args:
            obs: Observation batch from a vector env (numpy or tensors).
            greedy: Take the distribution's mode.
        """
        with torch.inference_mode():
            action, log_prob, value = self._act(self._to_tensor(obs), greedy)
            if self.device.type != "cpu":
                action, log_prob, value = action.cpu(), log_prob.cpu(), value.cpu()
            raw = action.numpy()
            return PolicyStep(raw, self.actor.to_env_action(raw), log_prob.numpy(), value.numpy())

    def get_action(
        self, obs: Any, greedy: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(env_action, log_prob, value)`` for an observation batch.

        ``env_action`` is ready for ``env.step`` (clipped/squashed for Box); use
        :meth:`policy_step` to also get the raw action stored for learning.
        """
        step = self.policy_step(obs, greedy)
        return step.env_action, step.log_prob, step.value

    def get_value(self, obs: Any) -> np.ndarray:
        """``V(obs)`` as a numpy array ``[B]``."""
        with torch.inference_mode():
            return self.critic.forward(self._to_tensor(obs)).cpu().numpy()

    # --- learning ---------------------------------------------------------------------
    def current_lr(self, current_step: int | None = None) -> float:
        """Learning rate the schedule gives at ``current_step`` (default ``self.steps``)."""
        schedule = self.lr_schedule
        if schedule is None or schedule["kind"] == "constant":
            return self.lr
        step = self.steps if current_step is None else current_step
        fraction = min(1.0, max(0.0, step / float(self.total_steps)))
        return self.lr + (schedule["end"] - self.lr) * fraction

    def update_lr_schedule(self, current_step: int | None = None) -> float:
        """Apply the schedule's learning rate for ``current_step``; returns it."""
        lr = self.current_lr(current_step)
        self.set_lr(lr)
        return lr

    def _forward_all(self, obs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Unfused actor-head output and value (``[B]``) for an observation batch."""
        actor = self.actor
        if self.share_encoders:
            latent = actor.encoder.forward(obs)
            params = actor.head.forward(latent)
            value = self.critic.head.forward(latent)
        else:
            params = actor.head.forward(actor.encoder.forward(obs))
            critic = self.critic
            value = critic.head.forward(critic.encoder.forward(obs))
        return params, value.squeeze(-1)

    def evaluate_actions(
        self, obs: Any, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(log_prob, entropy, value)`` of stored raw actions for an observation batch.

        Args:
            obs: Observation tensor (or dict of tensors) batch.
            actions: Raw actions as stored in the rollout buffer.
        """
        params, value = self._forward_all(obs)
        log_prob, entropy = self.actor.evaluate(params, actions)
        return log_prob, entropy, value

    def learn(self, buffer: RolloutBuffer) -> dict[str, float]:
        """Run ``update_epochs`` epochs of clipped-surrogate updates on a filled buffer.

        Loss: ``policy_loss + vf_coef * value_loss - ent_coef * entropy`` with
        ``value_loss`` the (optionally clipped) MSE to the GAE returns.

        Args:
            buffer: Rollout buffer with returns/advantages computed.

        Returns:
            ``policy_loss`` and ``value_loss`` averaged over all updates;
            ``approx_kl``, ``clip_fraction`` and ``entropy`` averaged over the
            updates where they were computed (every update when ``target_kl``
            is set or, for ``entropy``, when ``ent_coef`` is non-zero; otherwise
            only the final epoch, which saves work on tiny networks); plus
            ``lr``, ``updates`` and ``epochs`` (fractional when ``target_kl``
            stopped the update early).

        Raises:
            FloatingPointError: If a loss becomes non-finite (named, with the
                update and env step); no optimizer step is taken then.
        """
        lr = self.update_lr_schedule() if self.lr_schedule is not None else self.lr
        optimizer = self.optimizer
        full_batch = self.batch_size >= buffer.size
        batches_per_epoch = max(1, math.ceil(buffer.size / self.batch_size))
        last_epoch = self.update_epochs - 1
        always_diagnose = self.target_kl is not None
        sums = [0.0, 0.0, 0.0, 0.0, 0.0]
        counts = [0, 0, 0, 0, 0]
        cached_adv: tuple[torch.Tensor, torch.Tensor] | None = None
        updates = 0
        epochs_done = 0.0
        stop = False
        for epoch in range(self.update_epochs):
            diagnose = always_diagnose or epoch == last_epoch
            batches = 0
            for batch_index, batch in enumerate(buffer.get_minibatches(self.batch_size)):
                if cached_adv is not None and cached_adv[0] is batch["advantages"]:
                    neg_adv = cached_adv[1]
                else:
                    neg_adv = self._negated_advantages(batch["advantages"])
                    if full_batch:
                        cached_adv = (batch["advantages"], neg_adv)
                outputs, grads, stats = self._loss_grads(batch, neg_adv, diagnose)
                self._check_finite(stats, epoch, batch_index)
                if always_diagnose and stats[3] > 1.5 * self.target_kl:
                    stop = True
                    break
                optimizer.zero_grad()
                torch.autograd.backward(outputs, grads)
                optimizer.clip_grad_norm_(self.max_grad_norm)
                optimizer.step()
                self.num_updates += 1
                updates += 1
                batches += 1
                for i, value in enumerate(stats):
                    if value is not None:
                        sums[i] += value
                        counts[i] += 1
            if stop:
                epochs_done += batches / batches_per_epoch
                break
            epochs_done += 1.0
        means = [total / n if n else float("nan") for total, n in zip(sums, counts, strict=True)]
        return {
            "policy_loss": means[0],
            "value_loss": means[1],
            "entropy": means[2],
            "approx_kl": means[3],
            "clip_fraction": means[4],
            "lr": lr,
            "updates": float(updates),
            "epochs": epochs_done,
        }

    def _negated_advantages(self, advantages: torch.Tensor) -> torch.Tensor:
        """``-A`` (standardised when ``normalize_advantages``), as the surrogate uses it."""
        if self.normalize_advantages and advantages.numel() > 1:
            mean, std = advantages.mean(), advantages.std()
            return (mean - advantages) / (std + 1e-8)
        return -advantages

    def _loss_grads(
        self, batch: dict[str, Any], neg_adv: torch.Tensor, diagnose: bool
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[float | None]]:
        """Network outputs, the loss gradient w.r.t. them, and loss statistics.

        The loss ``mean(max(-A r, -A clip(r, 1 - c, 1 + c))) + vf_coef * value_loss
        - ent_coef * mean(entropy)`` (``r = exp(log_prob - old_log_prob)``) is
        differentiated by hand with respect to ``log_prob``, ``value`` and
        ``entropy``; autograd then only runs through the networks and the
        distribution (``torch.autograd.backward(outputs, grads)``). This gives
        the same gradients as back-propagating the loss expression (ties of the
        ``max`` terms, a measure-zero event, take the unclipped branch) with
        far fewer autograd nodes, which dominate the cost for small networks.

        Returns:
            ``(outputs, grads, [policy, value, entropy, approx_kl, clip_fraction])``;
            entropy is computed when it is part of the loss or ``diagnose`` is
            set, the KL and clip fraction only when ``diagnose`` is set
            (``None`` otherwise).
        """
        clip, vf_coef, ent_coef = self.clip_coef, self.vf_coef, self.ent_coef
        want_entropy = ent_coef != 0.0 or diagnose
        params, value = self._forward_all(batch["observations"])
        log_prob, entropy = self.actor.evaluate(params, batch["actions"], with_entropy=want_entropy)
        outputs = [log_prob, value]
        with torch.no_grad():
            scale = 1.0 / value.shape[0]
            logratio = log_prob - batch["log_probs"]
            ratio = logratio.exp()
            unclipped = neg_adv * ratio
            clipped = neg_adv * ratio.clamp(1.0 - clip, 1.0 + clip)
            tracked = [torch.maximum(unclipped, clipped).mean()]
            # d/dlog_prob of -A * r is -A * r; it flows only where the unclipped term is the max
            grad_log_prob = (unclipped * (unclipped >= clipped)).mul_(scale)
            diff = value - batch["returns"]
            if self.value_clip_coef is None:
                tracked.append(diff.square().mean())
                grad_value = diff * (2.0 * vf_coef * scale)
            else:
                c = self.value_clip_coef
                delta = value - batch["values"]
                diff_clipped = diff - delta + delta.clamp(-c, c)
                sq, sq_clipped = diff.square(), diff_clipped.square()
                tracked.append(torch.maximum(sq, sq_clipped).mean())
                grad_value = torch.where(
                    sq >= sq_clipped, diff, diff_clipped * (delta.abs() <= c)
                ).mul_(2.0 * vf_coef * scale)
            grads = [grad_log_prob, grad_value]
            if entropy is not None:
                tracked.append(entropy.mean())
                if ent_coef != 0.0:
                    outputs.append(entropy)
                    grads.append(torch.full_like(entropy, -ent_coef * scale))
            if diagnose:
                ratio_m1 = ratio - 1.0
                tracked.append((ratio_m1 - logratio).mean())
                tracked.append((ratio_m1.abs() > clip).float().mean())
            values = torch.stack(tracked).tolist()
        stats: list[float | None] = [values[0], values[1], None, None, None]
        if entropy is not None:
            stats[2] = values[2]
        if diagnose:
            stats[3], stats[4] = values[-2], values[-1]
        return outputs, grads, stats

    def _check_finite(self, stats: list[float | None], epoch: int, batch_index: int) -> None:
        for name, value in zip(("policy_loss", "value_loss", "entropy"), stats, strict=False):
            if value is not None and not math.isfinite(value):
                raise FloatingPointError(
                    f"PPO {name} became non-finite ({value}) at gradient update "
                    f"{self.num_updates + 1} (env step {self.steps}, epoch {epoch + 1}, "
                    f"minibatch {batch_index + 1}); no update was applied"
                )
