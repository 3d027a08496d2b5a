"""Shared base of multi-agent algorithms: agent groups, networks from specs, checkpoints.

Subclass contract:

* ``_build()`` creates ``self.nets`` (``{name: nn.ModuleDict keyed by policy id}``)
  and ``self.opts`` (``{name: optimizer}``) from ``self.spec``.
* ``act(obs, greedy)`` returns env actions per agent; ``learn(...)`` updates.

Checkpoints come from the shared base (:mod:`agilerl.algorithms.core.base`):
the spec as JSON data, the spaces as plain dicts and the weights/optimizer
states as tensors, so they load with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agilerl.algorithms.core import base
from agilerl.arena.models.algorithms.base import MultiAgentAlgorithmSpec
from agilerl.arena.models.networks import CnnSpec, MlpSpec, NetworkSpec
from agilerl.networks import masking

__all__ = [
    "MultiAgentAlgorithm",
    "agent_group",
    "build_mlp",
    "build_net",
    "flat_dim",
]

_GROUP = re.compile(r"^(.*)_\d+$")


def agent_group(agent_id: str) -> str:
    """The group of an agent id: its prefix before a trailing ``_<number>`` (else the id)."""
    match = _GROUP.match(agent_id)
    return match.group(1) if match else agent_id


def flat_dim(space: spaces.Space) -> int:
    """Width of a flattened observation, or of a (one-hot) action of ``space``."""
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.Box):
        return int(np.prod(space.shape))
    raise ValueError(
        f"multi-agent networks support Box and Discrete spaces, got {type(space).__name__}"
    )


def build_mlp(
    in_dim: int, out_dim: int, net: NetworkSpec | None, seed: int | None = None
) -> nn.Sequential:
    """An MLP ``in -> encoder hidden -> latent_dim -> head hidden -> out`` from a network spec.

    Only ``arch: mlp`` encoders are supported here (vector observations; images:
    :func:`build_net`).
    """
    net = net or NetworkSpec()
    encoder = net.encoder_config or MlpSpec()
    if not isinstance(encoder, MlpSpec):
        raise ValueError(
            f"multi-agent networks support encoder arch 'mlp' (and 'cnn' for IPPO on image "
            f"observations) only, got {encoder.arch!r}"
        )
    if net.normalize_observations:
        raise ValueError(
            "multi-agent networks do not normalise observations; remove "
            "network.normalize_observations"
        )
    parts = [(w, encoder) for w in (*encoder.hidden_size, net.latent_dim)]
    with _seeded(net.random_seed if seed is None else seed):
        return _layers(in_dim, parts, out_dim, net.head_config or MlpSpec())


def build_net(
    space: spaces.Space,
    out_dim: int,
    net: NetworkSpec | None,
    normalize_images: bool = True,
    seed: int | None = None,
) -> nn.Module:
    """One agent's network for its observation ``space``: :func:`build_mlp` on the flattened
    observations, or for a ``cnn`` encoder a CNN over the image (:class:`FlatImageNet`).

    Raises:
        ValueError: For a ``cnn`` encoder on observations that are not images (a 3-D Box).
    """
    net = net or NetworkSpec()
    if not isinstance(net.encoder_config, CnnSpec):
        return build_mlp(flat_dim(space), out_dim, net, seed)
    if not isinstance(space, spaces.Box) or len(space.shape) != 3:
        raise ValueError(f"a cnn encoder needs image observations (a 3-D Box), got {space}")
    from agilerl.networks.flat_image import FlatImageNet

    with _seeded(net.random_seed if seed is None else seed):
        head = _layers(net.latent_dim, [], out_dim, net.head_config or MlpSpec())
        return FlatImageNet(space, net, head, normalize_images)


@contextmanager
def _seeded(seed: int | None) -> Iterator[None]:
    """Initialise under ``torch.manual_seed(seed)`` (when given), then restore torch's RNG."""
    if seed is None:
        yield
        return
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        yield
    finally:
        torch.random.set_rng_state(state)


def _layers(
    in_dim: int, parts: list[tuple[int, MlpSpec]], out_dim: int, head: MlpSpec
) -> nn.Sequential:
    """``Linear -> LayerNorm? -> activation`` per ``(width, section)`` of ``parts`` then of
    the head's hidden layers, and the output layer (scaled down if ``output_vanish``)."""
    parts = [*parts, *((w, head) for w in head.hidden_size)]
    layers: list[nn.Module] = []
    prev = in_dim
    for width, part in parts:
        layers.append(nn.Linear(prev, width))
        if part.layer_norm:
            layers.append(nn.LayerNorm(width))
        layers.append(getattr(nn, part.activation)())
        prev = width
    out = nn.Linear(prev, out_dim)
    if head.output_vanish:
        with torch.no_grad():
            out.weight.mul_(0.1)
            out.bias.zero_()
    layers.append(out)
    return nn.Sequential(*layers)


def _check_spaces(name: str, value: Any) -> dict[str, spaces.Space]:
    if value is None:
        raise ValueError(f"{name} is required: a dict of per-agent gymnasium spaces")
    if not isinstance(value, Mapping) or not value:
        raise ValueError(f"{name} must be a non-empty dict of per-agent spaces")
    for agent, space in value.items():
        if not isinstance(space, spaces.Space):
            raise TypeError(
                f"{name}[{agent!r}] must be a gymnasium Space, got {type(space).__name__}"
            )
    return dict(value)


class MultiAgentAlgorithm(base.MultiAgentAlgorithm):
    """Root of multi-agent algorithms (IPPO, MADDPG, MATD3).

    Built from the validated spec like every algorithm (see
    :mod:`agilerl.algorithms.core.base`); checkpoints, clones and
    hyperparameter changes (:meth:`set_hp`) come from the shared base.

    Args:
        spec: The validated algorithm spec (single source of hyperparameters).
        observation_spaces: Per-agent observation spaces.
        action_spaces: Per-agent action spaces (same keys).
        index: Identity within a population.
        device: Torch device of the networks.
        total_steps: Env steps of the whole run.
        **overrides: Spec fields to change, validated through the spec.

    Attributes:
        agents: Agent ids in env order.
        policy_of: ``{agent: policy id}``: the agent's group when
            ``spec.share_policies``, else the agent id.
        policies: Distinct policy ids, in first-seen order.
        nets: ``{name: nn.ModuleDict keyed by policy id}`` (saved and loaded).
        opts: ``{name: optimizer}`` (saved and loaded).
    """

    spec_class: ClassVar[type[MultiAgentAlgorithmSpec]] = MultiAgentAlgorithmSpec
    rebuild_fields: ClassVar[frozenset[str]] = frozenset(
        {"net_config", "share_policies", "normalize_images"}
    )

    def __init__(
        self,
        spec: MultiAgentAlgorithmSpec,
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
        if index is None:
            raise ValueError("index is required (the agent's slot in the population)")
        super().__init__(spec, index=index, device=device, total_steps=total_steps, **overrides)
        spec = self.spec
        self.observation_spaces = _check_spaces("observation_spaces", observation_spaces)
        self.action_spaces = _check_spaces("action_spaces", action_spaces)
        if set(self.observation_spaces) != set(self.action_spaces):
            raise ValueError(
                "observation_spaces and action_spaces name different agents: "
                f"{sorted(self.observation_spaces)} vs {sorted(self.action_spaces)}"
            )
        self.agents = list(self.observation_spaces)
        self.policy_of = {a: agent_group(a) if spec.share_policies else a for a in self.agents}
        self.policies = list(dict.fromkeys(self.policy_of.values()))
        self.members = {
            p: [a for a in self.agents if self.policy_of[a] == p] for p in self.policies
        }
        for policy, members in self.members.items():
            first = members[0]
            for other in members[1:]:
                if (
                    self.observation_spaces[other] != self.observation_spaces[first]
                    or self.action_spaces[other] != self.action_spaces[first]
                ):
                    raise ValueError(
                        f"share_policies: agents {first!r} and {other!r} of group {policy!r} "
                        "have different spaces; set share_policies: false"
                    )
        for space in self.action_spaces.values():
            if not isinstance(space, spaces.Discrete | spaces.Box):
                raise ValueError(
                    f"{type(self).__name__} supports Discrete and Box actions, got {space}"
                )
        for agent in self.agents:
            masking.check_maskable(
                self.observation_spaces[agent], self.action_spaces[agent], f"agent {agent!r}"
            )
        # what the networks read: the observations without their action masks
        self.policy_spaces = {
            a: masking.policy_space(s) for a, s in self.observation_spaces.items()
        }
        self.nets: dict[str, nn.ModuleDict] = {}
        self.opts: dict[str, torch.optim.Optimizer] = {}
        self._given = (actor_networks, critic_networks)  # pre-built networks, used as given
        self._build()

    # --- spec helpers -------------------------------------------------------------
    def net_spec(self, policy: str) -> NetworkSpec | None:
        """The network spec of ``policy``: its entry in a per-group ``net_config``, or the one.

        Raises:
            ValueError: If ``net_config`` is per group and names neither the
                policy, its group nor any of its agents.
        """
        config = getattr(self.spec, "net_config", None)
        if config is None or isinstance(config, NetworkSpec):
            return config
        candidates = [policy, agent_group(policy), *self.members[policy]]
        for key in candidates:
            if key in config:
                return config[key]
        raise ValueError(
            f"algorithm.net_config has sections {sorted(config)} but none for policy "
            f"{policy!r}; add one named after the group ({agent_group(policy)!r})"
        )

    def init_args(self) -> dict[str, Any]:
        """The per-agent spaces (with the spec and runtime, enough to rebuild the agent)."""
        return {
            "observation_spaces": dict(self.observation_spaces),
            "action_spaces": dict(self.action_spaces),
        }

    def _networks(self) -> dict[str, Any]:
        return dict(self.nets)

    def _optimizers(self) -> dict[str, Any]:
        return dict(self.opts)

    def _on_hp_change(self, changed: set[str]) -> None:
        self._apply_lrs()

    def _apply_lrs(self) -> None:
        """Push the spec's learning rates into the optimizers (subclasses map names)."""

    # --- acting -----------------------------------------------------------------
    def obs_tensor(self, obs: Mapping[str, Any], agent: str) -> torch.Tensor:
        """Float tensor ``(batch, obs_dim)`` of one agent's observations (without a mask)."""
        value = np.asarray(masking.observation_part(obs[agent]))
        value = torch.as_tensor(value, dtype=torch.float32, device=self.device)
        return value.reshape(value.shape[0], -1)

    def action_mask(self, obs: Mapping[str, Any], agent: str) -> torch.Tensor | None:
        """Bool ``(batch, n)`` legal actions of one agent's observations (``None``: unmasked)."""
        mask = masking.split_observation(obs[agent])[1]
        return None if mask is None else masking.as_bool(mask, self.device)

    def act(self, obs: Mapping[str, Any], greedy: bool = False) -> dict[str, np.ndarray]:
        """Env actions per agent for a batch of observations (leading ``num_envs`` axis)."""
        raise NotImplementedError

    def learn(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """One learning update; returns scalar losses."""
        raise NotImplementedError

    @classmethod
    def from_state(
        cls, state: Mapping[str, Any], device: str | torch.device = "cpu"
    ) -> MultiAgentAlgorithm:
        """Build an agent from a state dict alone (dispatching on the stored algorithm)."""
        return cls._from_state(state, device)

    # --- helpers for subclasses --------------------------------------------------
    def stacked(self, batch: Mapping[str, torch.Tensor], agents: Sequence[str]) -> torch.Tensor:
        """Concatenate per-agent ``(B, d)`` tensors along the feature axis."""
        return torch.cat([batch[a].reshape(batch[a].shape[0], -1) for a in agents], dim=-1)
