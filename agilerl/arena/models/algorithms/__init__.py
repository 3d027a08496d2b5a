"""Algorithm specs, one module per algorithm.

Importing this package registers every algorithm name; a spec module is imported
when its class or its name is first used (``DQNSpec``, ``MANIFEST_REGISTRY.get("DQN")``).
"""

import importlib
from typing import Any

from agilerl.arena.models.algorithms.base import (
    AlgorithmSpec,
    BanditSpec,
    CosineLRScheduleConfig,
    LLMAlgorithmSpec,
    MultiAgentAlgorithmSpec,
    RolloutLLMSpec,
    SingleAgentAlgorithmSpec,
    VLLMConfig,
)
from agilerl.arena.models.registry import MANIFEST_REGISTRY

_SPEC_MODULES: dict[str, str] = {
    "CQNSpec": "cqn",
    "DDPGSpec": "ddpg",
    "DeterministicPolicySpec": "ddpg",
    "DPOSpec": "dpo",
    "DatasetLLMSpec": "dpo",
    "DQNSpec": "dqn",
    "GRPOSpec": "grpo",
    "GSPOSpec": "gspo",
    "CISPOSpec": "cispo",
    "IPPOSpec": "ippo",
    "LLMPPOSpec": "llm_ppo",
    "LLMREINFORCESpec": "llm_reinforce",
    "MADDPGSpec": "maddpg",
    "MATD3Spec": "matd3",
    "NeuralTSSpec": "neural_ts",
    "NeuralUCBSpec": "neural_ucb",
    "LRScheduleSpec": "ppo",
    "PPOSpec": "ppo",
    "RecurrentPPOSpec": "ppo",
    "RainbowDQNSpec": "rainbow_dqn",
    "SACSpec": "sac",
    "SFTSpec": "sft",
    "TD3Spec": "td3",
}
"""Spec classes of this package and their modules, imported on first use (``__getattr__``)."""

_REGISTERED_BY: dict[str, str] = {
    "CQN": "cqn",
    "DDPG": "ddpg",
    "DPO": "dpo",
    "DQN": "dqn",
    "GRPO": "grpo",
    "GSPO": "gspo",
    "CISPO": "cispo",
    "IPPO": "ippo",
    "LLMPPO": "llm_ppo",
    "LLMREINFORCE": "llm_reinforce",
    "MADDPG": "maddpg",
    "MATD3": "matd3",
    "NeuralTS": "neural_ts",
    "NeuralUCB": "neural_ucb",
    "PPO": "ppo",
    "RainbowDQN": "rainbow_dqn",
    "Rainbow DQN": "rainbow_dqn",
    "RecurrentPPO": "ppo",
    "Recurrent PPO": "ppo",
    "SAC": "sac",
    "SFT": "sft",
    "TD3": "td3",
}
"""Registry names and the module whose import registers them: validating a manifest
imports only its algorithm's module (a dry run stays fast); listing imports all."""

for _name, _module in _REGISTERED_BY.items():
    MANIFEST_REGISTRY.add_lazy(_name, f"{__name__}.{_module}")


def __getattr__(name: str) -> Any:
    module = _SPEC_MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


AlgoSpec = SingleAgentAlgorithmSpec | MultiAgentAlgorithmSpec | LLMAlgorithmSpec
"""Any concrete algorithm spec."""

__all__ = [
    "AlgoSpec",
    "AlgorithmSpec",
    "BanditSpec",
    "CISPOSpec",
    "CQNSpec",
    "CosineLRScheduleConfig",
    "DDPGSpec",
    "DPOSpec",
    "DQNSpec",
    "DatasetLLMSpec",
    "DeterministicPolicySpec",
    "GRPOSpec",
    "GSPOSpec",
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
