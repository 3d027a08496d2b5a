"""Shared base of multi-agent algorithms: agent groups, networks from specs, checkpoints.

Subclass contract:

* ``_build()`` creates ``self.nets`` (``{name: nn.ModuleDict keyed by policy id}``)
  and ``self.opts`` (``{name: optimizer}``) from ``self.spec``.
* ``act(obs, greedy)`` returns env actions per agent; ``learn(...)`` updates.

Checkpoints (:meth:`MultiAgentAlgorithm.state_dict`) hold the spec as JSON
data (``spec.model_dump(mode="json")``), the spaces as plain dicts and the
weights/optimizer states as tensors, so they load with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agilerl.arena.models.algorithms.base import MultiAgentAlgorithmSpec
from agilerl.arena.models.networks import MlpSpec, NetworkSpec
from agilerl.networks.spaces import space_from_dict, space_to_dict

__all__ = [
    "MA_CHECKPOINT_FORMAT",
    "MultiAgentAlgorithm",
    "agent_group",
    "build_mlp",
    "flat_dim",
]

MA_CHECKPOINT_FORMAT = "agilerl.multi_agent"
MA_CHECKPOINT_VERSION = 1
_REGISTRY: dict[str, type[MultiAgentAlgorithm]] = {}
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

    Only ``arch: mlp`` encoders are supported (vector observations).
    """
    net = net or NetworkSpec()
    encoder = net.encoder_config or MlpSpec()
    if not isinstance(encoder, MlpSpec):
        raise ValueError(
            f"multi-agent networks support encoder arch 'mlp' only, got {encoder.arch!r}"
        )
    head = net.head_config or MlpSpec()
    parts = [(w, encoder) for w in (*encoder.hidden_size, net.latent_dim)]
    parts += [(w, head) for w in head.hidden_size]
    layers: list[nn.Module] = []
    seed = net.random_seed if seed is None else seed
    gen_state = torch.random.get_rng_state()
    if seed is not None:
        torch.manual_seed(seed)
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
    if seed is not None:
        torch.random.set_rng_state(gen_state)
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


class MultiAgentAlgorithm:
    """Root of multi-agent algorithms (IPPO, MADDPG, MATD3).

    Args:
        spec: The validated algorithm spec (single source of hyperparameters).
        observation_spaces: Per-agent observation spaces.
        action_spaces: Per-agent action spaces (same keys).
        index: Identity within a population.
        device: Torch device of the networks.

    Attributes:
        agents: Agent ids in env order.
        policy_of: ``{agent: policy id}``: the agent's group when
            ``spec.share_policies``, else the agent id.
        policies: Distinct policy ids, in first-seen order.
        steps, num_updates, fitness, scores, mut: As for single-agent algorithms.
    """

    spec_class: ClassVar[type[MultiAgentAlgorithmSpec]] = MultiAgentAlgorithmSpec

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _REGISTRY[cls.__name__] = cls

    def __init__(
        self,
        spec: MultiAgentAlgorithmSpec,
        observation_spaces: Mapping[str, spaces.Space] | None,
        action_spaces: Mapping[str, spaces.Space] | None,
        *,
        index: int | None = 0,
        device: str | torch.device = "cpu",
    ) -> None:
        if index is None:
            raise ValueError("index is required (the agent's slot in the population)")
        if not isinstance(spec, self.spec_class):
            raise TypeError(
                f"{type(self).__name__} needs a {self.spec_class.__name__}, "
                f"got {type(spec).__name__}"
            )
        self.observation_spaces = _check_spaces("observation_spaces", observation_spaces)
        self.action_spaces = _check_spaces("action_spaces", action_spaces)
        if set(self.observation_spaces) != set(self.action_spaces):
            raise ValueError(
                "observation_spaces and action_spaces name different agents: "
                f"{sorted(self.observation_spaces)} vs {sorted(self.action_spaces)}"
            )
        self.spec = spec
        self.agents = list(self.observation_spaces)
        self.index = int(index)
        self.device = torch.device(device)
        self.steps = 0
        self.num_updates = 0
        self.fitness: list[float] = []
        self.scores: list[float] = []
        self.mut: str | None = None
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
        self.nets: dict[str, nn.ModuleDict] = {}
        self.opts: dict[str, torch.optim.Optimizer] = {}

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

    def with_spec(self, **update: Any) -> None:
        """Change hyperparameters through the spec (validated); learning rates apply now."""
        data = {**self.spec.model_dump(), **update}
        new = type(self.spec).model_validate(data)
        new._registry_name = self.spec._registry_name
        self.spec = new
        self._apply_lrs()

    def _apply_lrs(self) -> None:
        """Push the spec's learning rates into the optimizers (subclasses map names)."""

    # --- acting -----------------------------------------------------------------
    def obs_tensor(self, obs: Mapping[str, Any], agent: str) -> torch.Tensor:
        """Float tensor ``(batch, obs_dim)`` of one agent's observations."""
        value = torch.as_tensor(np.asarray(obs[agent]), dtype=torch.float32, device=self.device)
        return value.reshape(value.shape[0], -1)

    def act(self, obs: Mapping[str, Any], greedy: bool = False) -> dict[str, np.ndarray]:
        """Env actions per agent for a batch of observations (leading ``num_envs`` axis)."""
        raise NotImplementedError

    def learn(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """One learning update; returns scalar losses."""
        raise NotImplementedError

    # --- state ------------------------------------------------------------------
    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _load_extra_state(self, extra: Mapping[str, Any]) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        """Spec (JSON data), spaces, weights, optimizer states, counters and history."""
        return {
            "format": MA_CHECKPOINT_FORMAT,
            "version": MA_CHECKPOINT_VERSION,
            "algorithm": type(self).__name__,
            "spec": self.spec.model_dump(mode="json"),
            "observation_spaces": {a: space_to_dict(s) for a, s in self.observation_spaces.items()},
            "action_spaces": {a: space_to_dict(s) for a, s in self.action_spaces.items()},
            "networks": {name: dict(net.state_dict()) for name, net in self.nets.items()},
            "optimizers": {name: opt.state_dict() for name, opt in self.opts.items()},
            "index": self.index,
            "steps": int(self.steps),
            "num_updates": int(self.num_updates),
            "fitness": [float(f) for f in self.fitness],
            "scores": [float(s) for s in self.scores],
            "mut": self.mut,
            "extra": self._extra_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore spec, weights, optimizer state, counters and history.

        Raises:
            ValueError: If ``state`` is not a checkpoint of this algorithm or
                its weights do not fit.
        """
        if state.get("format") != MA_CHECKPOINT_FORMAT:
            raise ValueError("not an agilerl multi-agent state dict")
        if state["algorithm"] != type(self).__name__:
            raise ValueError(f"state dict is for {state['algorithm']}, not {type(self).__name__}")
        spec = self.spec_class.model_validate(state["spec"])
        spec._registry_name = self.spec._registry_name
        rebuild = spec.model_dump(mode="json") != self.spec.model_dump(mode="json")
        self.spec = spec
        if rebuild:
            self._build()
        for name, net in self.nets.items():
            try:
                net.load_state_dict(state["networks"][name])
            except (RuntimeError, KeyError) as exc:
                raise ValueError(f"weights of {name!r} do not fit the network: {exc}") from exc
        for name, opt in self.opts.items():
            opt.load_state_dict(state["optimizers"][name])
        self._apply_lrs()
        self.index = int(state.get("index", self.index))
        self.steps = int(state.get("steps", 0))
        self.num_updates = int(state.get("num_updates", 0))
        self.fitness = [float(f) for f in state.get("fitness", [])]
        self.scores = [float(s) for s in state.get("scores", [])]
        self.mut = state.get("mut")
        self._load_extra_state(state.get("extra", {}))

    @classmethod
    def from_state(
        cls, state: Mapping[str, Any], device: str | torch.device = "cpu"
    ) -> MultiAgentAlgorithm:
        """Build an agent from a state dict alone (dispatching on the stored algorithm)."""
        name = state.get("algorithm")
        algo_cls = cls if name == cls.__name__ else _REGISTRY.get(str(name))
        if algo_cls is None or not issubclass(algo_cls, cls):
            raise ValueError(f"state dict holds a {name}, which is not a {cls.__name__}")
        spec = algo_cls.spec_class.model_validate(state["spec"])
        agent = algo_cls(
            spec,
            {a: space_from_dict(s) for a, s in state["observation_spaces"].items()},
            {a: space_from_dict(s) for a, s in state["action_spaces"].items()},
            index=int(state.get("index", 0)),
            device=device,
        )
        agent.load_state_dict(state)
        return agent

    def clone(self, index: int | None = None) -> MultiAgentAlgorithm:
        """An independent deep copy; ``index`` overrides the clone's index."""
        agent = type(self).from_state(copy.deepcopy(self.state_dict()), self.device)
        agent.spec._registry_name = self.spec._registry_name
        if index is not None:
            agent.index = int(index)
        return agent

    def save_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`state_dict` to ``path`` (atomically, via a temporary file)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        torch.save(self.state_dict(), tmp)
        os.replace(tmp, path)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], device: str | torch.device = "cpu"
    ) -> MultiAgentAlgorithm:
        """Build an agent from a checkpoint file (``torch.load(weights_only=True)``).

        Raises:
            ValueError: Naming the file if it cannot be read or holds another algorithm.
        """
        try:
            state = torch.load(path, map_location=device, weights_only=True)
        except Exception as exc:
            raise ValueError(
                f"checkpoint {path} cannot be read ({type(exc).__name__}: {exc})"
            ) from exc
        try:
            return cls.from_state(state, device)
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"checkpoint {path} cannot be loaded: {exc}") from exc

    # --- helpers for subclasses --------------------------------------------------
    def stacked(self, batch: Mapping[str, torch.Tensor], agents: Sequence[str]) -> torch.Tensor:
        """Concatenate per-agent ``(B, d)`` tensors along the feature axis."""
        return torch.cat([batch[a].reshape(batch[a].shape[0], -1) for a in agents], dim=-1)
