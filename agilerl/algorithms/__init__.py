"""RL algorithms."""

from __future__ import annotations

from agilerl.algorithms.core.base import (
    EvolvableAlgorithm,
    LLMAlgorithm,
    MultiAgentAlgorithm,
    SingleAgentAlgorithm,
)
from agilerl.algorithms.cqn import CQN
from agilerl.algorithms.ddpg import DDPG
from agilerl.algorithms.dqn import DQN
from agilerl.algorithms.ippo import IPPO
from agilerl.algorithms.maddpg import MADDPG
from agilerl.algorithms.matd3 import MATD3
from agilerl.algorithms.neural_ts import NeuralTS
from agilerl.algorithms.neural_ucb import NeuralUCB
from agilerl.algorithms.ppo import PPO
from agilerl.algorithms.rainbow_dqn import RainbowDQN
from agilerl.algorithms.sac import SAC
from agilerl.algorithms.td3 import TD3

__all__ = [
    "CQN",
    "DDPG",
    "DQN",
    "IPPO",
    "MADDPG",
    "MATD3",
    "PPO",
    "SAC",
    "TD3",
    "EvolvableAlgorithm",
    "LLMAlgorithm",
    "MultiAgentAlgorithm",
    "NeuralTS",
    "NeuralUCB",
    "RainbowDQN",
    "SingleAgentAlgorithm",
]
