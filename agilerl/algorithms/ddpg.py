"""Deep Deterministic Policy Gradient (and the actor-critic update TD3 specialises)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agilerl.algorithms.core.off_policy import Batch, OffPolicyAlgorithm, soft_update
from agilerl.arena.models.algorithms.ddpg import DDPGSpec
from agilerl.components.noise import ExplorationNoise, make_noise
from agilerl.networks.deterministic import ContinuousQNetwork, DeterministicActor
from agilerl.networks.fastgrad import GradTape, joined_chain
from agilerl.networks.optim import FlatAdam
from agilerl.networks.spaces import make_obs_converter

_NOISE_FIELDS = frozenset(
    {"vect_noise_dim", "O_U_noise", "expl_noise", "mean_noise", "theta", "dt"}
)

QFunction = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``q(obs, normalised action) -> Q``: ``[B]`` for one agent, ``[N, B]`` for stacked members."""


def ddpg_critic_loss(
    critics: Sequence[QFunction],
    target_critics: Sequence[QFunction],
    target_action: Callable[[torch.Tensor], torch.Tensor],
    batch: Batch,
    action: torch.Tensor,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
    """The critic objective of DDPG and TD3: ``sum_i mean((Q_i(s, a) - y)^2)``.

    ``y = r + discount * min_i Q_i_target(s', target_action(s'))`` (no gradient).
    Written once for one agent (``[B]`` batches, a scalar loss) and for stacked
    members (``[N, B]`` batches, one loss per member: the members' rows never
    mix, so the gradient of the sum is each member's own).

    Args:
        critics: The online critics.
        target_critics: The target critics.
        target_action: The target policy's (normalised, possibly smoothed) action at ``s'``.
        batch: ``obs, reward, next_obs, discount`` (``discount = gamma^n (1 - done)``).
        action: The batch's actions, normalised.
        weights: Importance weights (same shape as ``batch.reward``), or ``None``.

    Returns:
        ``(loss, tds, q)``: the loss (mean over the last dimension), each critic's
        TD errors ``Q_i - y`` and the first critic's ``Q``.
    """
    with torch.no_grad():
        next_action = target_action(batch.next_obs)
        next_q = torch.stack([t(batch.next_obs, next_action) for t in target_critics]).amin(dim=0)
        y = batch.reward + batch.discount * next_q
    qs = [critic(batch.obs, action) for critic in critics]
    tds = [q - y for q in qs]
    loss = sum(
        td.square().mean(dim=-1) if weights is None else (td.square() * weights).mean(dim=-1)
        for td in tds
    )
    return loss, tds, qs[0]


def ddpg_actor_loss(
    critic: QFunction, policy: Callable[[torch.Tensor], torch.Tensor], obs: torch.Tensor
) -> torch.Tensor:
    """The actor objective of DDPG and TD3: ``-mean Q_1(s, policy(s))`` (per member when stacked).

    Args:
        critic: The first online critic (its parameters take no gradient here).
        policy: The online actor.
        obs: Observations ``[B, ...]`` (or ``[N, B, ...]``).
    """
    return -critic(obs, policy(obs)).mean(dim=-1)


class DDPG(OffPolicyAlgorithm):
    """DDPG: deterministic actor, Q critic(s), soft target networks.

    Every :meth:`learn` takes one critic step on
    ``sum_i (Q_i(s, a) - y)^2`` with ``y = r + gamma^n (1 - done) min_i
    Q_i_target(s', a')`` and ``a' = actor_target(s')`` (smoothed by TD3); every
    ``policy_freq``-th call also takes an actor step on ``-Q_1(s, actor(s))``
    and moves all target networks towards the online ones by ``tau``. DDPG has
    one critic, TD3 two. The objectives are :func:`ddpg_critic_loss` and
    :func:`ddpg_actor_loss`, which a batched population's
    :class:`~agilerl.algorithms.batched.ddpg.DDPGGroup` calls too.

    Actions: the actor works in a normalised space (``[-1, 1]`` for a bounded
    Box, see :class:`DeterministicActor`); exploration noise (OU or Gaussian,
    one process per sub-env, scale ``expl_noise`` in that space) is added,
    the result clipped and mapped to the env's bounds. The replay buffer
    stores env actions; :meth:`learn` normalises them again. Hyperparameters
    are the fields of the spec (:class:`DDPGSpec` / ``TD3Spec``).

    Args:
        spec: The validated spec.
        observation_space: Single-env observation space.
        action_space: ``Box`` action space.
        index: Population index.
        device: Torch device.
        total_steps: Env steps of the whole run (informational).
        actor_network: A pre-built actor to use as is.
        critic_networks: Pre-built critics (one per critic) to use as is
            (``critic_network`` for a single one).
        **overrides: Spec fields to change, validated through the spec.

    Raises:
        ValueError: For a non-Box action space or the wrong number of critics.
    """

    spec_class: ClassVar[type] = DDPGSpec
    num_critics: ClassVar[int] = 1
    lr_optimizers: ClassVar[dict[str, str]] = {
        "lr_actor": "actor_optimizer",
        "lr_critic": "critic_optimizer",
    }
    rebuild_fields = frozenset({"net_config", "normalize_images", "share_encoders"})
    network_names = ("actor", "actor_target", "critic", "critic_target")
    optimizer_names = ("actor_optimizer", "critic_optimizer")
    action_space_types = (spaces.Box,)

    # --- construction -----------------------------------------------------------------
    @property
    def _critic_names(self) -> tuple[str, ...]:
        names = [n for n in self.network_names if n.startswith("critic")]
        return tuple(n for n in names if not n.endswith("_target"))

    def _build(
        self,
        actor_network: nn.Module | None = None,
        critic_networks: Sequence[nn.Module] | None = None,
        critic_network: nn.Module | None = None,
    ) -> None:
        """(Re)build actor, critic(s), their targets, optimizers, converters and noise."""
        self._init_rng()
        self.last_actor_loss = getattr(self, "last_actor_loss", 0.0)
        spec, actor = self.spec, actor_network
        critics = [critic_network] if critic_network is not None else critic_networks
        if critics is not None and len(critics) != self.num_critics:
            raise ValueError(f"{type(self).__name__} takes {self.num_critics} critic network(s)")
        if actor is None:
            actor = DeterministicActor(
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
        self.actor_target = self._target_of(self.actor)
        shared = {self.actor.encoder: self.actor_target.encoder} if spec.share_encoders else None
        self._critic_targets = [self._target_of(critic, shared) for critic in self._critics]
        for name, critic, target in zip(
            self._critic_names, self._critics, self._critic_targets, strict=True
        ):
            setattr(self, name, critic)
            setattr(self, f"{name}_target", target)
        shared = {id(p) for p in self.actor.encoder.parameters()} if spec.share_encoders else set()
        actor_params = [p for p in self.actor.parameters() if id(p) not in shared]
        self.actor_optimizer = FlatAdam(actor_params, lr=spec.lr_actor)
        self.critic_optimizer = FlatAdam(self._param_list(*self._critics), lr=spec.lr_critic)
        self._online_params = self._param_list(self.actor, *self._critics)
        self._target_params = self._param_list(self.actor_target, *self._critic_targets)
        self._to_tensor = make_obs_converter(self.observation_space, self.device)
        chain = None
        if isinstance(self.actor, DeterministicActor):
            chain = joined_chain(self.actor.encoder, self.actor.head)
        self._numpy_chain = chain if chain is not None and chain.numpy_ok else None
        self._make_noise()

    def _make_noise(self) -> None:
        spec = self.spec
        self.noise: ExplorationNoise = make_noise(
            spec.O_U_noise,
            self.actor.action_dim,
            spec.vect_noise_dim,
            mean=spec.mean_noise,
            std=spec.expl_noise,
            theta=spec.theta,
            dt=spec.dt,
            rng=self.rng,
        )

    def _on_hp_change(self, changed: set[str]) -> None:
        if _NOISE_FIELDS & changed:
            self._make_noise()

    def _extra_state(self) -> dict[str, Any]:
        return {**super()._extra_state(), "last_actor_loss": float(self.last_actor_loss)}

    def _load_extra_state(self, extra: dict[str, Any]) -> None:
        super()._load_extra_state(extra)
        self.last_actor_loss = float(extra.get("last_actor_loss", 0.0))

    # --- acting -----------------------------------------------------------------------
    def get_action(self, obs: Any, epsilon: float = 0.0, greedy: bool = False) -> np.ndarray:
        """Env actions ``float32 [B, *action_shape]`` for an observation batch.

        Args:
            obs: Observation batch (numpy/tensors; dicts for Dict spaces).
            epsilon: Unused (accepted for a uniform off-policy interface).
            greedy: No exploration noise.
        """
        if self._numpy_chain is not None and type(obs) is np.ndarray:
            action = self._numpy_chain.forward_numpy(obs)
        else:
            with torch.inference_mode():
                action = self.actor.forward(self._to_tensor(obs)).cpu().numpy()
        if not greedy:
            action = action + self.noise.sample(action.shape[0])
        return self.actor.to_env_action(action)

    def reset_noise(self, env_indices: Iterable[int] | np.ndarray | None = None) -> None:
        """Reset the exploration noise of the sub-envs that finished (all when ``None``)."""
        self.noise.reset(env_indices)

    # --- learning ---------------------------------------------------------------------
    def target_action(self, next_obs: Any, tape: GradTape) -> torch.Tensor:
        """The target policy's action at ``next_obs`` (TD3 smooths it)."""
        return self.actor_target.forward(next_obs, tape)

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
        b = self._prepare(self._n_step_batch(type(self).__name__, batch, n_step_batch))
        w = self._weights(weights)
        action = self.actor.normalize_action(b.action)
        tape = GradTape()
        critic_loss, tds, q = ddpg_critic_loss(
            [lambda o, a, c=critic: c.forward(o, a, tape) for critic in self._critics],
            [lambda o, a, t=target: t.forward(o, a, tape) for target in self._critic_targets],
            lambda o: self.target_action(o, tape),
            b,
            action,
            w,
        )
        critic_value, q_mean = torch.stack([critic_loss.detach(), q.detach().mean()]).tolist()
        self._check_finite({"critic_loss": critic_value})
        self._step(self.critic_optimizer, tape, critic_loss)
        self.num_updates += 1

        actor_updated = self.num_updates % self.spec.policy_freq == 0
        if actor_updated:
            tape = GradTape()
            actor_loss = ddpg_actor_loss(
                lambda o, a: self._critics[0].forward(o, a, tape, params=False),
                lambda o: self.actor.forward(o, tape),
                b.obs,
            )
            value = actor_loss.item()
            self._check_finite({"actor_loss": value})
            self._step(self.actor_optimizer, tape, actor_loss)
            self.last_actor_loss = value
            soft_update(self._target_params, self._online_params, self.spec.tau)
        out: dict[str, Any] = {
            "critic_loss": critic_value,
            "actor_loss": self.last_actor_loss,
            "actor_updated": float(actor_updated),
            "q_mean": q_mean,
        }
        if w is not None:
            td_abs = torch.stack([td.detach().abs() for td in tds]).mean(0)
            out["priorities"] = (td_abs + 1e-6).cpu().numpy()
        return out
