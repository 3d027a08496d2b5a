"""Algorithm specs, one module per algorithm; importing this registers them all."""

from agilerl.arena.models.algorithms.base import (
    LLM_HPO_RANGES,
    ON_POLICY_HPO_RANGES,
    RL_HPO_RANGES,
    AlgorithmSpec,
    BanditSpec,
    CosineLRScheduleConfig,
    LLMAlgorithmSpec,
    MultiAgentAlgorithmSpec,
    RolloutLLMSpec,
    SingleAgentAlgorithmSpec,
    VLLMConfig,
)
from agilerl.arena.models.algorithms.cqn import CQNSpec
from agilerl.arena.models.algorithms.ddpg import DDPGSpec, DeterministicPolicySpec
from agilerl.arena.models.algorithms.dpo import DatasetLLMSpec, DPOSpec
from agilerl.arena.models.algorithms.dqn import DQNSpec
from agilerl.arena.models.algorithms.grpo import GRPOSpec
from agilerl.arena.models.algorithms.ippo import IPPOSpec
from agilerl.arena.models.algorithms.llm_ppo import LLMPPOSpec
from agilerl.arena.models.algorithms.llm_reinforce import LLMREINFORCESpec
from agilerl.arena.models.algorithms.maddpg import MADDPGSpec
from agilerl.arena.models.algorithms.matd3 import MATD3Spec
from agilerl.arena.models.algorithms.neural_ts import NeuralTSSpec
from agilerl.arena.models.algorithms.neural_ucb import NeuralUCBSpec
from agilerl.arena.models.algorithms.ppo import LRScheduleSpec, PPOSpec, RecurrentPPOSpec
from agilerl.arena.models.algorithms.rainbow_dqn import RainbowDQNSpec
from agilerl.arena.models.algorithms.sac import SACSpec
from agilerl.arena.models.algorithms.sft import SFTSpec
from agilerl.arena.models.algorithms.td3 import TD3Spec

AlgoSpec = SingleAgentAlgorithmSpec | MultiAgentAlgorithmSpec | LLMAlgorithmSpec
"""Any concrete algorithm spec."""

__all__ = [
    "LLM_HPO_RANGES",
    "ON_POLICY_HPO_RANGES",
    "RL_HPO_RANGES",
    "AlgoSpec",
    "AlgorithmSpec",
    "BanditSpec",
    "CQNSpec",
    "CosineLRScheduleConfig",
    "DDPGSpec",
    "DPOSpec",
    "DQNSpec",
    "DatasetLLMSpec",
    "DeterministicPolicySpec",
    "GRPOSpec",
    "IPPOSpec",
    "LLMAlgorithmSpec",
    "LLMPPOSpec",
    "LLMREINFORCESpec",
    "LRScheduleSpec",
    "MADDPGSpec",
    "MATD3Spec",
    "MultiAgentAlgorithmSpec",
    "NeuralTSSpec",
    "NeuralUCBSpec",
    "PPOSpec",
    "RainbowDQNSpec",
    "RecurrentPPOSpec",
    "RolloutLLMSpec",
    "SACSpec",
    "SFTSpec",
    "SingleAgentAlgorithmSpec",
    "TD3Spec",
    "VLLMConfig",
]
