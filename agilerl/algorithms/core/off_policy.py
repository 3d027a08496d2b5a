"""Shared machinery of the off-policy algorithms (DQN, Rainbow DQN, DDPG, TD3).

:class:`OffPolicyAlgorithm` adds to :class:`SingleAgentAlgorithm`:

* Batch preparation for ``learn``: observations through the space's
  converter, flattened rewards/dones, and the per-sample discount
  ``gamma ** n_steps * (1 - done)``.
* Soft (Polyak) target updates over parameter lists in one fused op.
* The NaN guard (``FloatingPointError`` naming the loss and the update).
* A numpy generator for exploration, seeded from torch's RNG so that
  ``torch.manual_seed`` makes acting reproducible.
* :meth:`OffPolicyAlgorithm._step`: zero the gradients, back-propagate a loss
  through a :class:`~agilerl.networks.fastgrad.GradTape`, step the optimizer.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agilerl.algorithms.core.base import SingleAgentAlgorithm
from agilerl.algorithms.core.rng import generator_from_state, generator_state
from agilerl.networks import torch_internals as internals
from agilerl.networks.fastgrad import GradTape
from agilerl.networks.spaces import composite_items

__all__ = [
    "Batch",
    "OffPolicyAlgorithm",
    "batch_size_of",
    "hard_update",
    "soft_update",
]


class Batch(NamedTuple):
    """A prepared transition batch.

    Attributes:
        obs: Observations (tensor or dict of tensors).
        action: Actions as stored, ``[B, ...]``.
        reward: ``[B]`` float rewards.
        next_obs: Next observations.
        discount: ``[B]`` ``gamma ** n_steps * (1 - done)``.
        next_mask: Legal actions ``[B, n]`` (bool) in ``next_obs``; ``None`` when unmasked.
    """

    obs: Any
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: Any
    discount: torch.Tensor
    next_mask: torch.Tensor | None = None


def batch_size_of(obs: Any, observation_space: spaces.Space) -> int:
    """Number of observations in ``obs`` (1 for an unbatched observation).

    Args:
        obs: Array/tensor, or a dict/tuple of them for composite spaces.
        observation_space: The single-env observation space.
    """
    space = observation_space
    if isinstance(space, spaces.Dict | spaces.Tuple):
        key, space = composite_items(space)[0]
        obs = obs[key] if isinstance(obs, Mapping) else obs[int(key)]
    shape = tuple(obs.shape) if hasattr(obs, "shape") else np.shape(obs)
    return int(shape[0]) if len(shape) > len(space.shape or ()) else 1


def _params(modules: Iterable[nn.Module]) -> list[torch.Tensor]:
    seen: set[int] = set()
    out: list[torch.Tensor] = []
    for module in modules:
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


@torch.no_grad()
def soft_update(
    targets: Sequence[torch.Tensor], sources: Sequence[torch.Tensor], tau: float
) -> None:
    """``target <- (1 - tau) * target + tau * source`` for paired tensor lists (in place)."""
    if tau >= 1.0:
        internals.foreach_copy_(targets, sources)
    elif tau > 0.0:
        internals.foreach_lerp_(targets, sources, tau)


def hard_update(target: nn.Module, source: nn.Module) -> None:
    """Copy ``source``'s parameters and buffers into ``target`` (in place)."""
    target.load_state_dict(source.state_dict())


class OffPolicyAlgorithm(SingleAgentAlgorithm):
    """Base of the replay-buffer algorithms; see the module docstring.

    Attributes:
        uses_epsilon: ``get_action`` honours ``epsilon`` (DQN); the training
            loop only logs epsilon for such agents.
    """

    uses_epsilon: ClassVar[bool] = False

    def act(self, obs: Any, greedy: bool = False, epsilon: float = 0.0) -> np.ndarray:
        """Env actions for an observation batch (exploration unless ``greedy``)."""
        return self.get_action(obs, epsilon=epsilon, greedy=greedy)

    def get_action(self, obs: Any, epsilon: float = 0.0, greedy: bool = False) -> np.ndarray:
        """Env actions as a plain array (see the subclasses)."""
        raise NotImplementedError

    # --- construction helpers ---------------------------------------------------
    def _init_rng(self) -> None:
        """Numpy generator for exploration, seeded from torch's global RNG (once per agent)."""
        if hasattr(self, "rng"):
            return
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=None).item())
        self.rng = np.random.default_rng(seed)

    def _extra_state(self) -> dict[str, Any]:
        """The exploration generator's state (a resumed run explores alike)."""
        return {"rng": generator_state(self.rng)} if hasattr(self, "rng") else {}

    def _load_extra_state(self, extra: dict[str, Any]) -> None:
        if "rng" not in extra:
            return
        restored = generator_from_state(extra["rng"])
        if hasattr(self, "rng") and type(self.rng.bit_generator) is type(restored.bit_generator):
            self.rng.bit_generator.state = restored.bit_generator.state  # noise objects share it
        else:
            self.rng = restored

    @staticmethod
    def _target_of(
        module: nn.Module, shared: Mapping[nn.Module, nn.Module] | None = None
    ) -> nn.Module:
        """A frozen copy of ``module`` (a target network).

        Sub-modules with a ``follow(source)`` method (running observation
        statistics) are linked to their online originals.

        Args:
            module: The online network.
            shared: Sub-modules to map onto existing copies instead of copying
                them again (a shared encoder maps onto the actor target's).
        """
        memo = {id(k): v for k, v in (shared or {}).items()}
        target = copy.deepcopy(module, memo)
        for p in target.parameters():
            p.requires_grad_(False)
        for source, copied in zip(module.modules(), target.modules(), strict=True):
            if copied is not source and callable(getattr(copied, "follow", None)):
                copied.follow(source)  # running statistics (SimBa) follow the online network
        return target

    @staticmethod
    def _param_list(*modules: nn.Module) -> list[torch.Tensor]:
        """Unique parameters of ``modules`` in registration order."""
        return _params(modules)

    # --- learning helpers -------------------------------------------------------
    def _prepare(self, batch: Mapping[str, Any], default_n: int = 1) -> Batch:
        """Convert a sampled batch and compute the discount of each transition.

        Args:
            batch: ``obs, action, reward, next_obs, done`` (and optionally
                ``n_steps``), leading batch dimension.
            default_n: Steps assumed when ``n_steps`` is absent.
        """
        convert = self._to_tensor
        reward = torch.as_tensor(batch["reward"], device=self.device).reshape(-1).float()
        done = torch.as_tensor(batch["done"], device=self.device).reshape(-1).float()
        n_steps = batch.get("n_steps")
        gamma = self.spec.gamma
        if n_steps is None:
            discount = (1.0 - done).mul_(gamma**default_n)
        else:
            n = torch.as_tensor(n_steps, device=self.device).reshape(-1).float()
            discount = torch.pow(gamma, n).mul_(1.0 - done)
        action = torch.as_tensor(batch["action"], device=self.device)
        next_obs = batch["next_obs"]
        mask_of = getattr(self, "_masks", None)
        next_mask = mask_of.mask(next_obs) if mask_of is not None else None
        return Batch(convert(batch["obs"]), action, reward, convert(next_obs), discount, next_mask)

    def _weights(self, weights: Any) -> torch.Tensor | None:
        """Importance weights ``[B]`` as a float tensor, or ``None``."""
        if weights is None:
            return None
        return torch.as_tensor(weights, device=self.device).reshape(-1).float()

    @staticmethod
    def _n_step_batch(name: str, batch: Mapping[str, Any], n_step_batch: Any) -> Mapping[str, Any]:
        if n_step_batch is None:
            return batch
        if "n_steps" not in n_step_batch:
            raise ValueError(f"{name} n_step_batch must carry 'n_steps' (steps per transition)")
        return n_step_batch

    def _step(self, optimizer: Any, tape: GradTape, loss: torch.Tensor) -> None:
        """Zero ``optimizer``'s gradients, back-propagate ``loss`` and step."""
        optimizer.zero_grad()
        tape.backward(loss)
        optimizer.step()

    def _check_finite(self, values: Mapping[str, float]) -> None:
        """Raise ``FloatingPointError`` if any loss is not finite (before any step is taken)."""
        for name, value in values.items():
            if not math.isfinite(value):
                raise FloatingPointError(
                    f"{type(self).__name__} {name} became non-finite ({value}) at gradient "
                    f"update {self.num_updates + 1} (env step {self.steps}); no update was applied"
                )
