"""Action masks: the one implementation every masked algorithm acts and learns through.

A masked env reports its legal actions in the observation, PettingZoo
classic's layout::

    {"observation": <what the networks read>, "action_mask": <0/1 per action>}

(an env that reports ``info["action_mask"]`` instead is wrapped into this
layout by :class:`agilerl.envs.masks.ActionMaskFromInfo`). Networks are built
for :func:`policy_space` (the observation without its mask), so the mask never
reaches an encoder; the mask travels with the observation through replay and
rollout buffers, so targets and log-probabilities read the mask of the state
they are about. Only ``Discrete`` actions can be masked.

Masked logits get :data:`MASKED_LOGIT` (finite, so a row of no legal action
gives no NaN); greedy choices and maxima are taken over legal actions only,
and a row with no legal action (a terminal state) has the value 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agilerl.networks.spaces import ObsTensor, make_obs_converter

__all__ = [
    "MASKED_LOGIT",
    "MASK_KEY",
    "OBSERVATION_KEY",
    "MaskReader",
    "has_action_mask",
    "legal_uniform",
    "mask_logits",
    "masked_argmax",
    "masked_argmax_numpy",
    "masked_max",
    "numpy_mask",
    "observation_part",
    "policy_space",
    "split_observation",
]

MASK_KEY = "action_mask"
"""The observation key holding the 0/1 legal-action vector."""
OBSERVATION_KEY = "observation"
"""The observation key holding what the networks read (when it is the only other key)."""
MASKED_LOGIT = -1e9
"""The logit of an illegal action: its probability is exactly 0 in float32."""


def has_action_mask(space: spaces.Space) -> bool:
    """Whether observations of ``space`` carry an action mask (a Dict with ``action_mask``)."""
    return isinstance(space, spaces.Dict) and MASK_KEY in space.spaces


def policy_space(space: spaces.Space) -> spaces.Space:
    """The space the networks read: ``space`` without its mask.

    ``{"observation": X, "action_mask": M}`` gives ``X``; a Dict with more keys
    gives the Dict of the other keys; an unmasked space is returned as is.
    """
    if not has_action_mask(space):
        return space
    rest = {k: v for k, v in space.spaces.items() if k != MASK_KEY}
    if set(rest) == {OBSERVATION_KEY}:
        return rest[OBSERVATION_KEY]
    if not rest:
        raise ValueError("an observation space of only an action_mask leaves nothing to observe")
    return spaces.Dict(rest)


def split_observation(obs: Any) -> tuple[Any, Any]:
    """``(what the networks read, mask)`` of a batch; the mask is ``None`` when absent."""
    if not isinstance(obs, Mapping) or MASK_KEY not in obs:
        return obs, None
    rest = {k: v for k, v in obs.items() if k != MASK_KEY}
    part = rest[OBSERVATION_KEY] if set(rest) == {OBSERVATION_KEY} else rest
    return part, obs[MASK_KEY]


def observation_part(obs: Any) -> Any:
    """The observation without its mask (see :func:`split_observation`)."""
    return split_observation(obs)[0]


def numpy_mask(obs: Any) -> np.ndarray | None:
    """The batch's mask as a numpy bool array ``[B, n]``, or ``None`` when unmasked."""
    mask = split_observation(obs)[1]
    if mask is None:
        return None
    if isinstance(mask, torch.Tensor):
        mask = mask.detach().cpu().numpy()
    mask = np.asarray(mask)
    return (mask if mask.ndim > 1 else mask[None]) != 0


def check_maskable(observation_space: spaces.Space, action_space: spaces.Space, who: str) -> None:
    """Refuse a mask that cannot apply: only ``Discrete(n)`` actions with an ``n``-wide mask.

    Raises:
        ValueError: Naming ``who`` and what does not fit.
    """
    if not has_action_mask(observation_space):
        return
    mask_space = observation_space.spaces[MASK_KEY]
    if not isinstance(action_space, spaces.Discrete):
        raise ValueError(
            f"{who}: the observations carry an action_mask, which only Discrete actions can "
            f"use; the action space is {action_space}"
        )
    width = int(np.prod(mask_space.shape)) if mask_space.shape else None
    if width != int(action_space.n):
        raise ValueError(
            f"{who}: the action_mask has {width} entries but there are {int(action_space.n)} "
            "actions"
        )


# --- torch ----------------------------------------------------------------------------------
def as_bool(mask: Any, device: torch.device | str | None = None) -> torch.Tensor:
    """A mask batch (0/1 numbers or bools, numpy or torch) as a bool tensor ``[B, n]``."""
    if isinstance(mask, torch.Tensor):
        out = mask if mask.dtype == torch.bool else mask != 0
    else:
        out = torch.from_numpy(np.asarray(mask) != 0)
    if out.ndim == 1:
        out = out.unsqueeze(0)
    return out if device is None else out.to(device)


def mask_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``logits`` with illegal actions (``mask`` false) set to :data:`MASKED_LOGIT`."""
    if mask is None:
        return logits
    return logits.masked_fill(~mask, MASKED_LOGIT)


def masked_argmax(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``argmax`` over the last dimension among legal actions (all when ``mask`` is ``None``)."""
    return mask_logits(values, mask).argmax(dim=-1)


def masked_max(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Max over the last dimension among legal actions; 0 where no action is legal."""
    if mask is None:
        return values.max(dim=-1).values
    best = mask_logits(values, mask).max(dim=-1).values
    return torch.where(mask.any(dim=-1), best, torch.zeros_like(best))


# --- numpy ----------------------------------------------------------------------------------
def masked_argmax_numpy(values: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """Numpy :func:`masked_argmax` (``values`` ``[B, n]``)."""
    if mask is None:
        return values.argmax(axis=-1)
    return np.where(mask, values, -np.inf).argmax(axis=-1)


def legal_uniform(rng: np.random.Generator, mask: np.ndarray) -> np.ndarray:
    """One action per row drawn uniformly among its legal ones (``mask`` ``[B, n]`` bool).

    One ``rng.random(B)`` draw: row ``i`` takes its ``floor(u_i * k_i)``-th legal
    action, ``k_i`` the row's legal count (a row with none takes action 0).
    """
    counts = mask.sum(axis=-1)
    pick = np.floor(rng.random(mask.shape[0]) * counts).astype(np.int64)
    return (np.cumsum(mask, axis=-1) > pick[:, None]).argmax(axis=-1)


# --- reading observations -------------------------------------------------------------------
class MaskReader:
    """How an agent reads its observation batches: the networks' part and the mask.

    Args:
        observation_space: The env's single observation space (masked or not).
        action_space: The agent's action space (``Discrete`` when masked).
        device: Where tensors go.
        who: Names the agent in errors.

    Attributes:
        masked: Observations carry an action mask.
        space: :func:`policy_space` of the observation space.
        to_tensor: ``obs -> tensor(s)`` of the networks' part (a batch as the
            env, a buffer or a caller gives it).

    Raises:
        ValueError: If the mask cannot apply to the action space.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: torch.device | str = "cpu",
        who: str = "agent",
    ) -> None:
        check_maskable(observation_space, action_space, who)
        self.masked = has_action_mask(observation_space)
        self.space = policy_space(observation_space)
        self.device = torch.device(device)
        convert = make_obs_converter(self.space, self.device)
        self.to_tensor: Callable[[Any], ObsTensor] = (
            (lambda obs: convert(observation_part(obs))) if self.masked else convert
        )

    def mask(self, obs: Any) -> torch.Tensor | None:
        """The batch's mask as a bool tensor ``[B, n]`` on the device (``None`` when unmasked)."""
        if not self.masked:
            return None
        mask = split_observation(obs)[1]
        if mask is None:
            raise ValueError("a masked agent was given observations without an action_mask")
        return as_bool(mask, self.device)

    def numpy_mask(self, obs: Any) -> np.ndarray | None:
        """The batch's mask as numpy bools ``[B, n]`` (``None`` when unmasked)."""
        return numpy_mask(obs) if self.masked else None
