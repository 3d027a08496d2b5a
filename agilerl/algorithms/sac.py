"""Soft Actor-Critic: squashed Gaussian policy, twin critics, automatic entropy tuning."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agilerl.algorithms.core.off_policy import Batch, OffPolicyAlgorithm, soft_update
from agilerl.algorithms.core.rng import device_generator, restore_generator
from agilerl.arena.models.algorithms.sac import SACSpec
from agilerl.networks.deterministic import ContinuousQNetwork, critic_values
from agilerl.networks.fastgrad import (
    GradTape,
    interleaved_parameters,
    joined_chain,
    pack_parameters,
    run,
)
from agilerl.networks.optim import FlatAdam
from agilerl.networks.spaces import make_obs_converter
from agilerl.networks.squashed_gaussian import (
    _SQUASHED_SAMPLE,
    LOG_STD_MAX,
    LOG_STD_MIN,
    SquashedGaussianActor,
)

CriticValues = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``critics(obs, normalised action) -> Q``: ``[num_critics, B]`` (``[num_critics, N, B]`` for
stacked members)."""
Sampler = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
"""``sample(obs) -> (action, log_prob)``: a reparameterised policy sample."""


def sac_critic_loss(
    critics: CriticValues,
    target_critics: CriticValues,
    sample: Sampler,
    batch: Batch,
    action: torch.Tensor,
    alpha: float | torch.Tensor,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SAC's critic objective: ``sum_i mean((Q_i(s, a) - y)^2)``.

    ``y = r + discount * (min_i Q_i_target(s', a') - alpha log pi(a'|s'))`` with
    ``a' ~ pi(.|s')`` (no gradient). Written once for one agent (``[B]``
    batches, a scalar loss, a float ``alpha``) and for stacked members (``[N, B]``
    batches, one loss per member, ``alpha`` a ``[N, 1]`` column).

    Returns:
        ``(loss, td, q)``: the loss, the TD errors ``[num_critics, ...]`` and the
        first critic's ``Q``.
    """
    with torch.no_grad():
        next_action, next_log_prob = sample(batch.next_obs)
        next_q = target_critics(batch.next_obs, next_action).amin(0)
        y = torch.addcmul(batch.reward, batch.discount, next_q.sub_(next_log_prob * alpha))
    qs = critics(batch.obs, action)
    td = qs - y
    loss = (td.square() if weights is None else td.square() * weights).mean(-1).sum(0)
    return loss, td, qs[0]


def sac_actor_loss(
    critics: CriticValues, sample: Sampler, obs: torch.Tensor, alpha: float | torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """SAC's actor objective ``mean(alpha log pi(a|s) - min_i Q_i(s, a))``, ``a ~ pi(.|s)``.

    Returns:
        ``(loss, log_prob)`` (per member when stacked; the critics' parameters take
        no gradient here).
    """
    action, log_prob = sample(obs)
    q_pi = critics(obs, action).amin(0)
    return (alpha * log_prob - q_pi).mean(dim=-1), log_prob


def sac_temperature_loss(
    log_alpha: float, log_prob_mean: float, target_entropy: float
) -> tuple[float, float]:
    """The temperature loss ``-log_alpha (mean log pi + target_entropy)`` and its gradient.

    The log-probabilities are detached, so the gradient with respect to
    ``log_alpha`` is ``-(mean log pi + target_entropy)``: set directly.

    Returns:
        ``(loss, gradient)``.
    """
    gap = log_prob_mean + target_entropy
    return -log_alpha * gap, -gap


class SAC(OffPolicyAlgorithm):
    """SAC (Haarnoja et al., 2018), with the learned temperature of the follow-up paper.

    Every :meth:`learn` takes one critic step on ``sum_i (Q_i(s, a) - y)^2``
    with the entropy-regularised target ``y = r + gamma^n (1 - done)
    (min_i Q_i_target(s', a') - alpha log pi(a'|s'))``, ``a' ~ pi(.|s')``,
    and moves the target critics towards the online ones by ``tau``. Every
    ``policy_freq``-th call also takes an actor step on ``alpha log pi(a|s) -
    min_i Q_i(s, a)`` (``a ~ pi(.|s)``, reparameterised) and, with
    ``learn_alpha``, a temperature step on ``-log_alpha (log pi(a|s) +
    target_entropy)``, which raises alpha while the policy's entropy is below
    ``target_entropy`` (default ``-action_dim``) and lowers it above. The
    objectives are :func:`sac_critic_loss`, :func:`sac_actor_loss` and
    :func:`sac_temperature_loss`, which a batched population's
    :class:`~agilerl.algorithms.batched.sac.SACGroup` calls too; the
    reparameterised samples draw from the agent's own :attr:`sample_rng`.

    Actions: the policy is a tanh-squashed Gaussian in ``[-1, 1]`` mapped onto
    the env's bounds (:class:`SquashedGaussianActor`); acting samples from it,
    greedy acting takes ``tanh(mean)``. With ``noise_correlation`` rho > 0 the
    sample's standard-normal draws follow one unit-variance AR(1) process per
    sub-env (restarted by :meth:`reset_noise` at episode ends), for temporally
    extended exploration. The replay buffer stores env actions;
    :meth:`learn` normalises them again. Hyperparameters are the fields of
    :class:`SACSpec`.

    Args:
        spec: The validated spec.
        observation_space: Single-env observation space.
        action_space: ``Box`` action space with finite bounds.
        index: Population index.
        device: Torch device.
        total_steps: Env steps of the whole run (informational).
        actor_network: A pre-built actor to use as is.
        critic_networks: Two pre-built critics to use as is.
        **overrides: Spec fields to change, validated through the spec.

    Raises:
        ValueError: For a non-Box or unbounded action space, or not two critics.
    """

    spec_class: ClassVar[type] = SACSpec
    num_critics: ClassVar[int] = 2
    lr_optimizers: ClassVar[dict[str, str]] = {
        "lr_actor": "actor_optimizer",
        "lr_critic": "critic_optimizer",
        "lr_alpha": "alpha_optimizer",
    }
    rebuild_fields = frozenset({"net_config", "normalize_images", "share_encoders"})
    network_names = ("actor", "critic_1", "critic_1_target", "critic_2", "critic_2_target")
    optimizer_names = ("actor_optimizer", "critic_optimizer", "alpha_optimizer")
    action_space_types = (spaces.Box,)

    # --- construction -----------------------------------------------------------------
    def _build(
        self,
        actor_network: nn.Module | None = None,
        critic_networks: Sequence[nn.Module] | None = None,
    ) -> None:
        """(Re)build actor, critics, target critics, temperature, optimizers and converters."""
        self._init_rng()
        self.last_actor_loss = getattr(self, "last_actor_loss", 0.0)
        self.last_alpha_loss = getattr(self, "last_alpha_loss", 0.0)
        self.last_entropy = getattr(self, "last_entropy", 0.0)
        self._noise: np.ndarray | None = getattr(self, "_noise", None)
        spec, actor, critics = self.spec, actor_network, critic_networks
        if critics is not None and len(critics) != self.num_critics:
            raise ValueError(f"SAC takes {self.num_critics} critic networks")
        if actor is None:
            actor = SquashedGaussianActor(
                self.observation_space,
                self.action_space,
                net_config=self.net_config,
                normalize_images=spec.normalize_images,
                detach_encoder=spec.share_encoders,
            )
        self.actor = actor.to(self.device)
        if critics is None:
            encoder = self.actor.encoder if spec.share_encoders else None
            critics = [
                ContinuousQNetwork(
                    self.observation_space,
                    self.action_space,
                    net_config=self.net_config,
                    normalize_images=spec.normalize_images,
                    encoder=encoder,
                    seed_offset=i + 1,
                )
                for i in range(self.num_critics)
            ]
        self._critics = [critic.to(self.device) for critic in critics]
        self._critic_targets = [self._target_of(self._critics[0])]
        shared = None
        if spec.share_encoders:
            shared = {self.actor.encoder: self._critic_targets[0].encoder}
        self._critic_targets += [self._target_of(c, shared) for c in self._critics[1:]]
        self.critic_1, self.critic_2 = self._critics
        self.critic_1_target, self.critic_2_target = self._critic_targets

        # the temperature survives a rebuild (e.g. a network mutation of this agent)
        log_alpha = getattr(self, "log_alpha", None)
        value = math.log(spec.alpha_init) if log_alpha is None else log_alpha.item()
        self.log_alpha = nn.Parameter(torch.tensor(value, device=self.device))

        shared_ids = set()
        if spec.share_encoders:
            shared_ids = {id(p) for p in self.actor.encoder.parameters()}
        actor_params = [p for p in self.actor.parameters() if id(p) not in shared_ids]
        self.actor_optimizer = FlatAdam(actor_params, lr=spec.lr_actor, fused=True)
        # twin critics' tensors side by side, so that they run as one stacked pass
        self._online_params = interleaved_parameters(*self._critics)
        self._target_params = interleaved_parameters(*self._critic_targets)
        pack_parameters(self._target_params)
        self.critic_optimizer = FlatAdam(self._online_params, lr=spec.lr_critic, fused=True)
        self.alpha_optimizer = FlatAdam([self.log_alpha], lr=spec.lr_alpha, fused=True)
        self._to_tensor = make_obs_converter(self.observation_space, self.device)
        self.sample_rng = device_generator(getattr(self, "sample_rng", None), self.device, self.rng)
        chain = None
        if isinstance(self.actor, SquashedGaussianActor):
            chain = joined_chain(self.actor.encoder, self.actor.head)
        self._numpy_chain = chain if chain is not None and chain.numpy_ok else None

    def _extra_state(self) -> dict[str, Any]:
        return {
            **super()._extra_state(),
            "log_alpha": self.log_alpha.item(),
            "last_actor_loss": float(self.last_actor_loss),
            "last_alpha_loss": float(self.last_alpha_loss),
            "last_entropy": float(self.last_entropy),
            "noise": None if self._noise is None else self._noise.tolist(),
            "sample_rng": self.sample_rng.get_state(),
        }

    def _load_extra_state(self, extra: dict[str, Any]) -> None:
        super()._load_extra_state(extra)
        if "log_alpha" in extra:
            with torch.no_grad():  # in place: the optimizer holds this parameter
                self.log_alpha.fill_(float(extra["log_alpha"]))
        self.last_actor_loss = float(extra.get("last_actor_loss", 0.0))
        self.last_alpha_loss = float(extra.get("last_alpha_loss", 0.0))
        self.last_entropy = float(extra.get("last_entropy", 0.0))
        noise = extra.get("noise")
        self._noise = None if noise is None else np.asarray(noise, dtype=np.float32)
        state = extra.get("sample_rng")
        if state is not None:
            restore_generator(self.sample_rng, torch.as_tensor(state))

    # --- temperature ------------------------------------------------------------------
    @property
    def alpha(self) -> float:
        """The entropy temperature in use (``alpha_init`` when it is not learned)."""
        if not self.spec.learn_alpha:
            return float(self.spec.alpha_init)
        return math.exp(self.log_alpha.item())

    @property
    def target_entropy_value(self) -> float:
        """``target_entropy``, or ``-action_dim`` when the spec leaves it null."""
        target = self.spec.target_entropy
        return -float(self.actor.action_dim) if target is None else float(target)

    # --- acting -----------------------------------------------------------------------
    def get_action(self, obs: Any, epsilon: float = 0.0, greedy: bool = False) -> np.ndarray:
        """Env actions ``float32 [B, *action_shape]`` for an observation batch.

        Args:
            obs: Observation batch (numpy/tensors; dicts for Dict spaces).
            epsilon: Unused (accepted for a uniform off-policy interface).
            greedy: The mean action ``tanh(mean)`` instead of a sample.
        """
        if self._numpy_chain is not None and type(obs) is np.ndarray:
            mean, log_std = np.split(self._numpy_chain.forward_numpy(obs), 2, axis=-1)
        else:
            with torch.inference_mode():
                mean, log_std = (t.cpu().numpy() for t in self.actor.forward(self._to_tensor(obs)))
        if greedy:
            action = np.tanh(mean)
        else:
            std = np.exp(np.clip(log_std, LOG_STD_MIN, LOG_STD_MAX))
            action = np.tanh(mean + std * self._exploration_noise(mean.shape))
        return self.actor.to_env_action(action)

    def _exploration_noise(self, shape: tuple[int, ...]) -> np.ndarray:
        """Standard-normal draws ``shape``, correlated over steps by ``noise_correlation``."""
        fresh = self.rng.standard_normal(shape, dtype=np.float32)
        rho = self.spec.noise_correlation
        if rho == 0.0:
            return fresh
        if self._noise is None or self._noise.shape != shape:
            self._noise = fresh  # a new process starts from its stationary distribution
        else:
            self._noise = rho * self._noise + math.sqrt(1.0 - rho * rho) * fresh
        return self._noise

    def reset_noise(self, env_indices: Iterable[int] | np.ndarray | None = None) -> None:
        """Restart the correlated noise of the sub-envs that finished (all on ``None``)."""
        if self._noise is None:
            return
        if env_indices is None:
            self._noise = None
            return
        rows = np.asarray(list(env_indices), dtype=np.int64)
        draw = self.rng.standard_normal((len(rows), *self._noise.shape[1:]), dtype=np.float32)
        self._noise[rows] = draw

    # --- learning ---------------------------------------------------------------------
    def sample_noise(self, shape: torch.Size | tuple[int, ...]) -> torch.Tensor:
        """Standard normal draws of ``shape`` for a reparameterised sample, from
        :attr:`sample_rng` (the agent's own generator, saved in checkpoints, so an agent
        draws the same whether it learns alone or stacked with others)."""
        return torch.randn(shape, generator=self.sample_rng, device=self.sample_rng.device)

    def _sample(self, obs: Any, tape: GradTape) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`SquashedGaussianActor.sample` with the noise from :meth:`sample_noise`."""
        actor = self.actor
        if not isinstance(actor, SquashedGaussianActor):
            return actor.sample(obs, tape)
        latent = run(actor.encoder, obs, tape)
        if actor.detach_encoder:
            latent = latent.detach()
        out = run(actor.head, latent, tape)
        noise = self.sample_noise((*out.shape[:-1], actor.action_dim)).to(out.dtype)
        action, log_prob = tape.apply(_SQUASHED_SAMPLE, out, noise)
        return action, log_prob

    def _alpha_step(self, grad: float) -> None:
        """One temperature step with d loss / d log_alpha ``grad`` (when ``learn_alpha``)."""
        if self.spec.learn_alpha:
            self.alpha_optimizer.zero_grad()
            self.log_alpha.grad.fill_(grad)
            self.alpha_optimizer.step()

    def learn(
        self,
        batch: Mapping[str, Any],
        n_step_batch: Mapping[str, Any] | None = None,
        weights: torch.Tensor | None = None,
    ) -> dict[str, Any]:
        """One critic step and target update; every ``policy_freq`` calls an actor (and alpha) step.

        Args:
            batch: ``obs, action`` (env actions), ``reward, next_obs, done``
                (``done`` = terminated), optional ``n_steps``.
            n_step_batch: n-step transitions; when given they replace ``batch``
                (they must carry ``n_steps``).
            weights: Importance weights ``[B]`` for the critic loss; the result
                then holds ``priorities`` (mean ``|td error|`` + 1e-6).

        Returns:
            ``critic_loss``, ``q_mean``, ``actor_loss``, ``alpha_loss`` and
            ``entropy`` (the latter three from the most recent actor step,
            ``0.0`` before the first), ``alpha`` and ``actor_updated`` (1.0 when
            this call stepped the actor).

        Raises:
            FloatingPointError: If a loss is not finite (that step is not taken).
            ValueError: If ``n_step_batch`` has no ``n_steps``.
        """
        b = self._prepare(self._n_step_batch("SAC", batch, n_step_batch))
        w = self._weights(weights)
        action = self.actor.normalize_action(b.action)
        alpha = self.alpha
        tape = GradTape()
        critic_loss, td, q = sac_critic_loss(
            lambda o, a: critic_values(self._critics, o, a, tape),
            lambda o, a: critic_values(self._critic_targets, o, a, tape),
            lambda o: self._sample(o, tape),
            b,
            action,
            alpha,
            w,
        )

        critic_value, q_mean = torch.stack([critic_loss.detach(), q.detach().mean()]).tolist()
        self._check_finite({"critic_loss": critic_value})
        self._step(self.critic_optimizer, tape, critic_loss)
        self.num_updates += 1
        soft_update(self._target_params, self._online_params, self.spec.tau)

        actor_updated = self.num_updates % self.spec.policy_freq == 0
        if actor_updated:
            tape = GradTape()
            actor_loss, log_prob = sac_actor_loss(
                lambda o, a: critic_values(self._critics, o, a, tape, params=False),
                lambda o: self._sample(o, tape),
                b.obs,
                alpha,
            )
            values = torch.stack([actor_loss.detach(), log_prob.detach().mean()])
            actor_value, log_prob_mean = values.tolist()
            alpha_value, alpha_grad = sac_temperature_loss(
                self.log_alpha.item(), log_prob_mean, self.target_entropy_value
            )
            self._check_finite({"actor_loss": actor_value, "alpha_loss": alpha_value})
            self._step(self.actor_optimizer, tape, actor_loss)
            self._alpha_step(alpha_grad)
            self.last_actor_loss, self.last_alpha_loss = actor_value, alpha_value
            self.last_entropy = -log_prob_mean
        out: dict[str, Any] = {
            "critic_loss": critic_value,
            "actor_loss": self.last_actor_loss,
            "alpha_loss": self.last_alpha_loss,
            "entropy": self.last_entropy,
            "alpha": self.alpha,
            "actor_updated": float(actor_updated),
            "q_mean": q_mean,
        }
        if w is not None:
            td_abs = td.detach().abs().mean(0)
            out["priorities"] = (td_abs + 1e-6).cpu().numpy()
        return out
