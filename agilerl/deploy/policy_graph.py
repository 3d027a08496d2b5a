"""A trained agent's deterministic policy as one torch module: observations in, env actions out.

This is what :mod:`agilerl.deploy.exporting` traces to ONNX or TorchScript.
Everything between the observation the run's env yields and the action it
takes is inside the module, so a deployment needs nothing else:

* the networks' own preprocessing: one-hot encoding of discrete observations,
  ``uint8`` images divided by 255 (``normalize_images``), running observation
  normalisation with the agent's statistics (``network.normalize_observations``, the
  SimBa encoder's);
* the greedy action: argmax of Q (DQN, CQN), of the expected Q with the noisy
  layers off (Rainbow DQN), of the logits (PPO); the Gaussian mean (PPO on a
  Box), ``tanh(mean)`` (SAC), the actor's output (DDPG, TD3);
* the mapping onto the env's action space: squashing or clipping to the Box
  bounds, the ``start`` offset of a Discrete space, the action's shape.

The env's own wrappers (Atari preprocessing, frame stacking, anything in
``environment.env_wrappers``) stay outside: they hold state across steps, and
the module reads the observations they produce.

Inputs: one tensor per observation (a Dict or Tuple space gives one per key,
in the space's order), batch first, in the dtype of the observation space
(``float32`` Box, ``uint8`` images, ``int64`` discrete). Output: the env
actions, batch first (``int64`` for discrete spaces, ``int8`` for MultiBinary,
``float32`` for Box).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agilerl.algorithms.core.base import EvolvableAlgorithm
from agilerl.algorithms.ddpg import DDPG
from agilerl.algorithms.dqn import DQN
from agilerl.algorithms.ppo import PPO
from agilerl.algorithms.rainbow_dqn import RainbowDQN
from agilerl.algorithms.sac import SAC
from agilerl.arena.models.errors import ConfigError
from agilerl.networks import masking
from agilerl.networks.spaces import composite_items, storage_dtype

__all__ = ["EXPORTABLE", "PolicyGraph", "input_names", "policy_graph"]


def input_names(space: spaces.Space) -> list[str]:
    """Names of the graph's inputs: ``obs``, or ``obs.<key>`` per key of a Dict/Tuple space."""
    if isinstance(space, spaces.Dict | spaces.Tuple):
        return [f"obs.{key}" for key, _ in composite_items(space)]
    return ["obs"]


def _frozen(module: nn.Module) -> nn.Module:
    """A copy of ``module`` in eval mode without gradients (the agent's own stays as it is)."""
    copied = copy.deepcopy(module).eval()
    for parameter in copied.parameters():
        parameter.requires_grad_(False)
    return copied


def _as_tensor(values: Any) -> torch.Tensor:
    return torch.as_tensor(np.asarray(values, dtype=np.float32).reshape(-1))


class PolicyGraph(nn.Module):
    """Base of the policy modules: unpacks the observation inputs, shapes the actions.

    Args:
        observation_space: The agent's single-env observation space.
        action_space: The agent's single-env action space.
    """

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        super().__init__()
        self.observation_space = observation_space
        self.action_space = action_space
        composite = isinstance(observation_space, spaces.Dict | spaces.Tuple)
        self.keys = [key for key, _ in composite_items(observation_space)] if composite else None
        self.action_shape = tuple(action_space.shape or ())

    def forward(self, *obs: torch.Tensor) -> torch.Tensor:
        """Env actions ``[B, *action_shape]`` for observation batches (one per input)."""
        observation = dict(zip(self.keys, obs, strict=True)) if self.keys else obs[0]
        return self.act(observation)

    def act(self, obs: Any) -> torch.Tensor:
        """Env actions for one observation batch (a tensor, or a dict of them)."""
        raise NotImplementedError

    def example_inputs(self, batch: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
        """``batch`` observations sampled from the observation space, as the graph's inputs."""
        space = self.observation_space
        space.seed(seed)
        samples = [space.sample() for _ in range(batch)]
        if self.keys is None:
            return (_leaf_batch(space, samples),)
        leaves = composite_items(space)
        if isinstance(space, spaces.Tuple):
            return tuple(_leaf_batch(sub, [s[int(key)] for s in samples]) for key, sub in leaves)
        return tuple(_leaf_batch(sub, [s[key] for s in samples]) for key, sub in leaves)

    def _box_action(self, action: torch.Tensor) -> torch.Tensor:
        """A float32 action batch in the env's shape."""
        return action.float().reshape(-1, *self.action_shape)


def _leaf_batch(space: spaces.Space, samples: list[Any]) -> torch.Tensor:
    dtype = storage_dtype(space)
    return torch.as_tensor(np.stack([np.asarray(s) for s in samples])).to(dtype)


class DiscreteQPolicy(PolicyGraph):
    """``argmax_a Q(obs, a) + start`` (DQN, CQN; Rainbow DQN from the expected values)."""

    def __init__(self, agent: DQN | RainbowDQN) -> None:
        super().__init__(agent.observation_space, agent.action_space)
        self.actor = _frozen(agent.actor)
        self.rainbow = isinstance(agent, RainbowDQN)
        self.start = int(agent.action_space.start)

    def act(self, obs: Any) -> torch.Tensor:
        """Greedy env actions ``int64 [B]`` (the best legal one with an action mask)."""
        obs, mask = masking.split_observation(obs)
        q = self.actor.q_values(obs, noise=False) if self.rainbow else self.actor.forward(obs)
        action = masking.masked_argmax(q, None if mask is None else mask != 0)
        return action + self.start if self.start else action


class PPOPolicy(PolicyGraph):
    """The mode of PPO's policy, mapped onto the env's action space as ``PPO.act`` does."""

    def __init__(self, agent: PPO) -> None:
        super().__init__(agent.observation_space, agent.action_space)
        if agent.spec.recurrent:
            raise ConfigError(
                "a recurrent PPO policy carries an LSTM state between steps, which export "
                "does not take yet; load it with agilerl.load(RUN) and act from Python"
            )
        self.actor = _frozen(agent.actor)
        self.kind = self.actor.kind
        space = agent.action_space
        self.squash = bool(self.actor.squash_output)
        self.bounded = self.kind == "box" and bool(
            np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))
        )
        if self.bounded:
            self.register_buffer("low", _as_tensor(space.low))
            self.register_buffer("high", _as_tensor(space.high))
        start = getattr(space, "start", None)
        offset = np.zeros(1) if start is None else np.asarray(start).reshape(-1)
        self.register_buffer("start", torch.as_tensor(offset, dtype=torch.int64))
        self.offset = bool(np.any(offset != 0))

    def act(self, obs: Any) -> torch.Tensor:
        """Greedy env actions: ``int64`` (Discrete, MultiDiscrete), ``int8``, ``float32`` (Box);
        with an action mask the most likely legal action."""
        obs, mask = masking.split_observation(obs)
        params = self.actor.head.forward(self.actor.encoder(obs))
        params = masking.mask_logits(params, None if mask is None else mask != 0)
        if self.kind == "box":
            action = params
            if self.squash:
                action = self.low + (torch.tanh(action) + 1.0) * ((self.high - self.low) / 2.0)
            elif self.bounded:
                action = torch.clamp(action, self.low, self.high)
            return self._box_action(action)
        action = self.actor.sample(params, greedy=True)[0]
        if self.kind == "multibinary":
            return action.to(torch.int8).reshape(-1, *self.action_shape)
        return action + self.start if self.offset else action


class SACPolicy(PolicyGraph):
    """``tanh(mean)`` of SAC's squashed Gaussian, scaled onto the Box bounds."""

    def __init__(self, agent: SAC) -> None:
        super().__init__(agent.observation_space, agent.action_space)
        self.actor = _frozen(agent.actor)

    def act(self, obs: Any) -> torch.Tensor:
        """Greedy env actions ``float32 [B, *shape]``."""
        mean = self.actor.forward(obs)[0]
        action = torch.clamp(torch.tanh(mean), -1.0, 1.0)
        return self._box_action(action * self.actor.action_half_range + self.actor.action_mid)


class DeterministicActorPolicy(PolicyGraph):
    """DDPG's and TD3's actor without exploration noise, scaled onto the Box bounds."""

    def __init__(self, agent: DDPG) -> None:
        super().__init__(agent.observation_space, agent.action_space)
        self.actor = _frozen(agent.actor)
        self.bounded = bool(self.actor.bounded)

    def act(self, obs: Any) -> torch.Tensor:
        """Env actions ``float32 [B, *shape]``."""
        action = self.actor.forward(obs)
        if self.bounded:
            action = torch.clamp(action, -1.0, 1.0)
            action = action * self.actor.action_half_range + self.actor.action_mid
        return self._box_action(action)


EXPORTABLE: dict[type[EvolvableAlgorithm], Callable[[Any], PolicyGraph]] = {
    RainbowDQN: DiscreteQPolicy,
    DQN: DiscreteQPolicy,
    PPO: PPOPolicy,
    SAC: SACPolicy,
    DDPG: DeterministicActorPolicy,
}
"""Algorithm class -> its policy module (subclasses too: CQN is a DQN, TD3 a DDPG)."""


def policy_graph(agent: EvolvableAlgorithm) -> PolicyGraph:
    """The deterministic policy of ``agent`` as a module (its networks are copied).

    Raises:
        ConfigError: For an agent whose policy cannot be exported (multi-agent,
            bandit, LLM or recurrent policies), naming what can be.
    """
    for algorithm, build in EXPORTABLE.items():
        if isinstance(agent, algorithm):
            return build(agent).eval()
    names = ", ".join(sorted({"CQN", "TD3", *(cls.__name__ for cls in EXPORTABLE)}))
    raise ConfigError(
        f"{type(agent).__name__} cannot be exported: export writes single-agent policies "
        f"({names}); load it with agilerl.load(RUN) and act from Python"
    )
