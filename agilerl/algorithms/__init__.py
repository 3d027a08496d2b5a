"""RL algorithms."""

from __future__ import annotations

from agilerl.algorithms.core.base import (
    EvolvableAlgorithm,
    LLMAlgorithm,
    MultiAgentAlgorithm,
    SingleAgentAlgorithm,
)
from agilerl.algorithms.ddpg import DDPG
from agilerl.algorithms.dqn import DQN
from agilerl.algorithms.ppo import PPO
from agilerl.algorithms.rainbow_dqn import RainbowDQN
from agilerl.algorithms.sac import SAC
from agilerl.algorithms.td3 import TD3

__all__ = [
    "DDPG",
    "DQN",
    "PPO",
    "SAC",
    "TD3",
    "EvolvableAlgorithm",
    "LLMAlgorithm",
    "MultiAgentAlgorithm",
    "RainbowDQN",
    "SingleAgentAlgorithm",
]
