"""Proximal Policy Optimization (clipped surrogate, GAE, shared or separate encoders)."""

from __future__ import annotations

import math
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch
from torch import nn

from agilerl.algorithms.core.base import SingleAgentAlgorithm
from agilerl.algorithms.core.ppo_objective import PPOCoefs, kl_stops, ppo_objective
from agilerl.algorithms.core.ppo_updates import UpdateTally, diagnoses
from agilerl.algorithms.core.rng import restore_generator
from agilerl.arena.models.algorithms.ppo import PPOSpec
from agilerl.components.recurrent_rollout_buffer import RecurrentRolloutBuffer
from agilerl.components.return_scaler import ReturnScaler
from agilerl.components.rollout_buffer import RolloutBuffer
from agilerl.networks import masking
from agilerl.networks.actors import StochasticActor, action_kind
from agilerl.networks.fastgrad import GradTape, run
from agilerl.networks.fused import FusedActorCritic, build_fused_actor_critic
from agilerl.networks.optim import FlatAdam
from agilerl.networks.torch_internals import version_of
from agilerl.networks.value import ValueNetwork

_BUFFER_KEYS = frozenset({"device"})


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

    Hyperparameters are the fields of
    :class:`~agilerl.arena.models.algorithms.ppo.PPOSpec`: ``learn_step`` is
    the rollout length summed over all envs (each env collects
    ``ceil(learn_step / num_envs)`` steps), ``lr_schedule`` anneals ``lr``
    over ``total_steps`` env steps (applied at the start of every
    :meth:`learn` from ``self.steps``), ``target_kl`` stops an update once a
    minibatch's approximate KL exceeds ``1.5 * target_kl``.

    Args:
        spec: The validated PPO spec.
        observation_space: Single-env observation space.
        action_space: Single-env action space (Discrete, MultiDiscrete,
            MultiBinary or Box).
        index: Population index.
        device: Torch device.
        total_steps: Env steps of the whole run (needed by a linear schedule).
        actor_network: A pre-built :class:`StochasticActor` to use as is.
        critic_network: A pre-built :class:`ValueNetwork` to use as is.
        **overrides: Spec fields to change, validated through the spec.

    Typical loop (see :func:`agilerl.training.collect.collect_rollouts`)::

        buffer = agent.create_rollout_buffer()
        obs, _ = env.reset(seed=0)  # vector env in SAME_STEP autoreset mode
        while agent.steps < total_steps:
            obs, episode_returns, _ = collect_rollouts(agent, env, buffer, obs)
            losses = agent.learn(buffer)

    Create a new buffer after ``learn_step`` or ``num_envs`` change (mutation).

    Recurrent PPO (``recurrent: true``, an ``arch: lstm`` encoder, inferred when
    the network section names none): the policy carries an LSTM state per env
    (:func:`agilerl.training.collect_recurrent.collect_recurrent_rollouts` keeps
    it across rollouts and zeroes it at episode ends), the buffer stores the
    state of every step, and :meth:`learn` runs the same loss over sequence
    minibatches (truncated BPTT over ``max_seq_len`` steps, the whole rollout
    when unset, cut as ``bptt_sequence_type`` says; see
    :mod:`agilerl.components.recurrent_rollout_buffer`). :meth:`act` keeps its
    own state for evaluation; :meth:`reset_state` starts episodes over.

    Raises:
        ValueError: For an unsupported action space or invalid settings.
    """

    spec_class: ClassVar[type] = PPOSpec
    lr_optimizers: ClassVar[dict[str, str]] = {"lr": "optimizer"}
    rebuild_fields = frozenset(
        {"net_config", "share_encoders", "normalize_images", "action_std_init", "adam_eps"}
    )
    network_names = ("actor", "critic")
    reads_action_masks = True
    optimizer_names = ("optimizer",)

    @property
    def net_config(self) -> dict[str, Any]:
        """The network section resolved for the observation space (``lstm`` when recurrent)."""
        section = self.spec.net_config
        if self._net_key is not section:
            from agilerl.networks.config import resolve_net_config

            self._net_config = resolve_net_config(
                section, self.policy_space, recurrent=self.spec.recurrent
            )
            self._net_key = section
        return self._net_config

    def _check(self) -> None:
        action_kind(self.action_space)  # raises ValueError naming an unsupported space
        arch = self.net_config["encoder_config"]["arch"]
        if self.spec.recurrent and arch != "lstm":
            raise ValueError(f"recurrent: true needs an arch: lstm encoder, not {arch!r}")
        if arch == "lstm" and not self.spec.recurrent:
            raise ValueError(
                "an arch: lstm encoder needs recurrent: true (algorithm=recurrent_ppo)"
            )
        schedule = self.spec.lr_schedule
        if schedule is not None and schedule.kind == "linear" and not self.total_steps:
            raise ValueError("A linear lr_schedule needs total_steps (the run's env steps)")
        unknown = set(self.spec.rollout_buffer_config or {}) - _BUFFER_KEYS
        if unknown:
            raise ValueError(f"Unknown rollout_buffer_config keys: {sorted(unknown)}")

    # --- construction ---------------------------------------------------------------
    def _build(
        self, actor_network: nn.Module | None = None, critic_network: nn.Module | None = None
    ) -> None:
        """(Re)build actor, critic, optimizer and observation converter."""
        spec, actor, critic = self.spec, actor_network, critic_network
        if actor is None:
            actor = StochasticActor(
                self.policy_space,
                self.action_space,
                net_config=self.net_config,
                action_std_init=spec.action_std_init,
                normalize_images=spec.normalize_images,
            )
        self.actor = actor.to(self.device)
        if critic is None:
            critic = ValueNetwork(
                self.policy_space,
                net_config=self.net_config,
                normalize_images=spec.normalize_images,
                encoder=self.actor.encoder if spec.share_encoders else None,
            )
        self.critic = critic.to(self.device)
        self.optimizer = FlatAdam(
            [*self.actor.parameters(), *self.critic.parameters()], lr=spec.lr, eps=spec.adam_eps
        )
        self._masks = masking.MaskReader(self.observation_space, self.action_space, self.device)
        self._to_tensor = self._masks.to_tensor
        self._fused: FusedActorCritic | None = None
        self._fused_key: tuple[int, ...] | None = None
        self._act_state: torch.Tensor | None = None
        if not hasattr(self, "generator"):
            # The agent's own RNG (action sampling, minibatch order), seeded from torch's
            # global one once: a stacked population draws every member's numbers from it.
            seed = int(torch.randint(0, 2**31 - 1, (1,)).item())
            self.generator = torch.Generator(device=self.device).manual_seed(seed)
        if not hasattr(self, "return_scaler"):  # statistics of normalize_rewards; kept on rebuilds
            self.return_scaler = ReturnScaler()

    def _extra_state(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"generator": self.generator.get_state()}
        if self.spec.normalize_rewards:
            extra["return_scaler"] = self.return_scaler.state_dict()
        return extra

    def _load_extra_state(self, extra: dict[str, Any]) -> None:
        if "generator" in extra:
            restore_generator(self.generator, extra["generator"])
        if "return_scaler" in extra:
            self.return_scaler.load_state_dict(extra["return_scaler"])

    def scale_rollout_rewards(self, buffer: RolloutBuffer) -> None:
        """With ``normalize_rewards``, scale a filled buffer's rewards in place before its
        advantages are computed (see :mod:`agilerl.components.return_scaler`); else nothing.

        The collectors call this; the returns they report are the env's own.
        """
        if not self.spec.normalize_rewards:
            return
        steps = buffer.pos
        done = (buffer.terminated[:steps] | buffer.truncated[:steps]).numpy()
        rewards = buffer.rewards[:steps].numpy()  # a view: scaled in place
        self.return_scaler.scale(rewards, done, buffer.discounted_returns, self.gamma)

    @property
    def steps_per_env(self) -> int:
        """Rollout steps per sub-env: ``ceil(learn_step / num_envs)``."""
        return math.ceil(self.spec.learn_step / self.spec.num_envs)

    def create_rollout_buffer(self) -> RolloutBuffer:
        """A :class:`RolloutBuffer` sized for ``learn_step`` and ``num_envs``.

        A :class:`RecurrentRolloutBuffer` (with room for the policy's states) when recurrent.
        """
        args = (self.steps_per_env, self.spec.num_envs, self.observation_space, self.action_space)
        kwargs = {
            "device": (self.spec.rollout_buffer_config or {}).get("device", self.device),
            "gamma": self.gamma,
            "gae_lambda": self.gae_lambda,
        }
        if self.spec.recurrent:
            return RecurrentRolloutBuffer(*args, state_shape=self.state_shape, **kwargs)
        return RolloutBuffer(*args, **kwargs)

    # --- recurrent state --------------------------------------------------------------
    @property
    def state_shape(self) -> tuple[int, int]:
        """Per-env recurrent state: the actor encoder's, then the critic's unless shared."""
        rows, width = self.actor.encoder.state_shape
        return (rows if self.spec.share_encoders else 2 * rows, width)

    def initial_state(self, batch_size: int) -> torch.Tensor:
        """A zero (episode-start) recurrent state for ``batch_size`` envs."""
        return torch.zeros((batch_size, *self.state_shape), device=self.device)

    def reset_state(self, done: Any = None) -> None:
        """Start the episodes of :meth:`act` over: all (``done=None``) or where ``done`` is set."""
        if done is None or self._act_state is None:
            self._act_state = None
            return
        mask = torch.as_tensor(np.asarray(done, dtype=bool), device=self._act_state.device)
        self._act_state = self._act_state.masked_fill(mask[:, None, None], 0.0)

    def _recurrent_outputs(
        self, obs: Any, state: torch.Tensor, sequences: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(actor latent, critic latent, next state)`` from the LSTM encoders.

        ``obs`` is one step ``[B, ...]`` or, with ``sequences``, ``[L, B, ...]``.
        """
        encode = "sequence" if sequences else "step"
        rows = self.actor.encoder.state_shape[0]
        actor_latent, actor_next = getattr(self.actor.encoder, encode)(obs, state[:, :rows])
        if self.spec.share_encoders:
            return actor_latent, actor_latent, actor_next
        critic_latent, critic_next = getattr(self.critic.encoder, encode)(obs, state[:, rows:])
        return actor_latent, critic_latent, torch.cat((actor_next, critic_next), dim=1)

    def recurrent_step(
        self, obs: Any, state: torch.Tensor, greedy: bool = False
    ) -> tuple[PolicyStep, torch.Tensor]:
        """Act from recurrent ``state`` (``[B, *state_shape]``): the step and the next state."""
        with torch.inference_mode():
            actor_latent, critic_latent, state = self._recurrent_outputs(
                self._to_tensor(obs), state.to(self.device)
            )
            params = masking.mask_logits(
                self.actor.head.forward(actor_latent), self._masks.mask(obs)
            )
            value = self.critic.head.forward(critic_latent).squeeze(-1)
            action, log_prob = self.actor.sample(params, greedy, self.generator)
            raw = action.cpu().numpy()
            step = PolicyStep(
                raw, self.actor.to_env_action(raw), log_prob.cpu().numpy(), value.cpu().numpy()
            )
            return step, state

    # --- acting -----------------------------------------------------------------------
    def _fused_policy(self) -> FusedActorCritic | None:
        """Fused inference snapshot of actor+critic, rebuilt whenever any weight changed.

        The key combines the optimizer's flat buffer version (bumped by every
        update) with each parameter's own version (bumped by in-place loads)
        and storage address (changed when a parameter's data is replaced).
        """
        params = self.optimizer.params
        key = (
            version_of(self.optimizer.flat),
            *[version_of(p) for p in params],
            *[p.data_ptr() for p in params],
        )
        if key != self._fused_key:
            self._fused = build_fused_actor_critic(
                self.actor, self.critic, self.spec.share_encoders
            )
            self._fused_key = key
        return self._fused

    def _act(
        self, obs: Any, greedy: bool, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One actor+critic pass: ``(raw action, log_prob, value)`` tensors.

        Uses the fused MLP snapshot when the networks qualify (see
        :mod:`agilerl.networks.fused`); call under ``torch.inference_mode()``.
        ``mask`` (legal actions) restricts the distribution.
        """
        fused = self._fused_policy()
        if fused is not None:
            params, value = fused(obs)
        else:
            params, value = self._forward_all(obs)
        params = masking.mask_logits(params, mask)
        action, log_prob = self.actor.sample(params, greedy, self.generator)
        return action, log_prob, value

    def policy_step(self, obs: Any, greedy: bool = False) -> PolicyStep:
        """Act on an observation batch; everything the collector needs, as numpy.

        Args:
            obs: Observation batch from a vector env (numpy or tensors).
            greedy: Take the distribution's mode.
        """
        if self.spec.recurrent:  # acting state of act()/test(); see reset_state
            batch = len(obs[next(iter(obs))]) if isinstance(obs, dict) else len(obs)
            state = self._act_state
            if state is None or state.shape[0] != batch:
                state = self.initial_state(batch)
            step, self._act_state = self.recurrent_step(obs, state, greedy)
            return step
        with torch.inference_mode():
            action, log_prob, value = self._act(self._to_tensor(obs), greedy, self._masks.mask(obs))
            if self.device.type != "cpu":
                action, log_prob, value = action.cpu(), log_prob.cpu(), value.cpu()
            raw = action.numpy()
            return PolicyStep(raw, self.actor.to_env_action(raw), log_prob.numpy(), value.numpy())

    def act(self, obs: Any, greedy: bool = False) -> np.ndarray:
        """Env actions for an observation batch (ready for ``env.step``)."""
        return self.policy_step(obs, greedy).env_action

    def get_action(
        self, obs: Any, greedy: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(env_action, log_prob, value)`` for an observation batch.

        ``env_action`` is ready for ``env.step`` (clipped/squashed for Box); use
        :meth:`policy_step` to also get the raw action stored for learning.
        """
        step = self.policy_step(obs, greedy)
        return step.env_action, step.log_prob, step.value

    def get_value(self, obs: Any, state: torch.Tensor | None = None) -> np.ndarray:
        """``V(obs)`` as a numpy array ``[B]`` (from recurrent ``state`` when recurrent)."""
        with torch.inference_mode():
            if self.spec.recurrent:
                obs = self._to_tensor(obs)
                if state is None:
                    state = self.initial_state(obs.shape[0])
                latent = self._recurrent_outputs(obs, state.to(self.device))[1]
                return self.critic.head.forward(latent).squeeze(-1).cpu().numpy()
            return self.critic.forward(self._to_tensor(obs)).cpu().numpy()

    # --- learning ---------------------------------------------------------------------
    def current_lr(self, current_step: int | None = None) -> float:
        """Learning rate the schedule gives at ``current_step`` (default ``self.steps``)."""
        lr, schedule = self.spec.lr, self.spec.lr_schedule
        if schedule is None or schedule.kind == "constant":
            return lr
        step = self.steps if current_step is None else current_step
        fraction = min(1.0, max(0.0, step / float(self.total_steps)))
        return lr + (schedule.end - lr) * fraction

    def update_lr_schedule(self, current_step: int | None = None) -> float:
        """Apply the schedule's learning rate for ``current_step``; returns it."""
        lr = self.current_lr(current_step)
        self.set_lr(lr)
        return lr

    def _forward_all(self, obs: Any, tape: GradTape | None = None) -> tuple[torch.Tensor, ...]:
        """Actor-head output and value (``[B]``) for an observation batch."""
        actor, critic = self.actor, self.critic
        if self.spec.share_encoders:
            latent = run(actor.encoder, obs, tape)
            params = run(actor.head, latent, tape)
            value = run(critic.head, latent, tape)
        else:
            params = run(actor.head, run(actor.encoder, obs, tape), tape)
            value = run(critic.head, run(critic.encoder, obs, tape), tape)
        return params, value.squeeze(-1)

    def _batch_outputs(self, batch: dict[str, Any], tape: GradTape) -> tuple[torch.Tensor, ...]:
        """Actor-head output (masked by the stored action masks) and value of a minibatch's
        steps (flat or sequences)."""
        obs, legal = masking.split_observation(batch["observations"])
        if "states" not in batch:
            params, value = self._forward_all(obs, tape)
            return masking.mask_logits(params, self._legal(legal)), value
        actor_latent, critic_latent, _ = self._recurrent_outputs(
            obs, batch["states"], sequences=True
        )
        mask = batch["mask"]
        params = run(self.actor.head, actor_latent[mask], tape)
        value = run(self.critic.head, critic_latent[mask], tape)
        legal = None if legal is None else legal[mask]
        return masking.mask_logits(params, self._legal(legal)), value.squeeze(-1)

    def _legal(self, mask: Any) -> torch.Tensor | None:
        """A stored mask batch as bools on the device (``None`` stays ``None``)."""
        return None if mask is None else masking.as_bool(mask, self.device)

    def _minibatches(self, buffer: RolloutBuffer) -> Any:
        """One epoch of minibatches: BPTT sequences when recurrent, else shuffled steps."""
        spec = self.spec
        if not spec.recurrent:
            return buffer.get_minibatches(spec.batch_size, self.generator)
        return buffer.get_sequence_minibatches(
            spec.batch_size,
            spec.max_seq_len or buffer.pos,
            spec.bptt_sequence_type,
            generator=self.generator,
        )

    def evaluate_actions(
        self, obs: Any, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(log_prob, entropy, value)`` of stored raw actions for an observation batch
        (under the masked distribution when the observations carry action masks)."""
        if self._masks.masked:
            mask = self._masks.mask(obs)
            params, value = self._forward_all(self._to_tensor(obs))
            params = masking.mask_logits(params, mask)
        else:
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
            only the final epoch); plus ``lr``, ``updates`` and ``epochs``
            (fractional when ``target_kl`` stopped the update early).

        Raises:
            FloatingPointError: If a loss becomes non-finite (named, with the
                update and env step); no optimizer step is taken then.
        """
        spec = self.spec
        lr = self.update_lr_schedule() if spec.lr_schedule is not None else spec.lr
        tally = UpdateTally(math.ceil(buffer.size / spec.batch_size))
        for epoch in range(spec.update_epochs):
            diagnose = diagnoses(spec.target_kl, epoch, spec.update_epochs)
            for index, batch in enumerate(self._minibatches(buffer)):
                tape = GradTape()
                loss, stats = self._loss(batch, tape, diagnose)
                self._check_finite(stats, epoch, index)
                if kl_stops(stats[3], spec.target_kl):
                    tally.stop()
                    break
                self.optimizer.zero_grad()
                tape.backward(loss)
                self.optimizer.clip_grad_norm_(spec.max_grad_norm)
                self.optimizer.step()
                self.num_updates += 1
                tally.step(stats)
            tally.end_epoch()
            if tally.stopped:
                break
        return tally.result(lr)

    def _loss(
        self, batch: dict[str, Any], tape: GradTape, diagnose: bool
    ) -> tuple[torch.Tensor, list[float | None]]:
        """The PPO loss of one minibatch and ``[policy, value, entropy, approx_kl, clip_frac]``.

        Entropy is computed when it is part of the loss or ``diagnose`` is set;
        the KL and the clip fraction only when ``diagnose`` is set (``None``
        otherwise).
        """
        spec = self.spec
        want_entropy = spec.ent_coef != 0.0 or diagnose
        params, value = self._batch_outputs(batch, tape)
        log_prob, entropy = self.actor.evaluate(params, batch["actions"], with_entropy=want_entropy)
        loss, tracked = ppo_objective(
            log_prob,
            entropy,
            value,
            batch,
            PPOCoefs.of(spec),
            spec.normalize_advantages,
            diagnose,
        )
        values = torch.stack(tracked).tolist()
        stats: list[float | None] = [values[0], values[1], None, None, None]
        if entropy is not None:
            stats[2] = values[2]
        if diagnose:
            stats[3], stats[4] = values[-2], values[-1]
        return loss, stats

    def _check_finite(self, stats: list[float | None], epoch: int, batch_index: int) -> None:
        for name, value in zip(("policy_loss", "value_loss", "entropy"), stats, strict=False):
            if value is not None and not math.isfinite(value):
                raise FloatingPointError(
                    f"PPO {name} became non-finite ({value}) at gradient update "
                    f"{self.num_updates + 1} (env step {self.steps}, epoch {epoch + 1}, "
                    f"minibatch {batch_index + 1}); no update was applied"
                )
