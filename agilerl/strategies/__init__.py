"""Strategies: pick the training loop for a spec from its paradigm flags."""

from __future__ import annotations

from agilerl.arena.models.algorithms import (
    AlgorithmSpec,
    LLMAlgorithmSpec,
    MultiAgentAlgorithmSpec,
    SingleAgentAlgorithmSpec,
)
from agilerl.strategies.bandit import BanditStrategy
from agilerl.strategies.base import (
    EnvSetup,
    PopulationRuntime,
    TrainingLoop,
    TrainingStrategy,
    resolve_loop,
)
from agilerl.strategies.llm import LLMDatasetStrategy, LLMRolloutStrategy, LLMStrategy
from agilerl.strategies.multi_agent import MultiAgentOffPolicyStrategy, MultiAgentOnPolicyStrategy
from agilerl.strategies.offline import OfflineStrategy
from agilerl.strategies.single_agent import (
    SingleAgentOffPolicyStrategy,
    SingleAgentOnPolicyStrategy,
)

SINGLE_AGENT_ON_POLICY = SingleAgentOnPolicyStrategy()
SINGLE_AGENT_OFF_POLICY = SingleAgentOffPolicyStrategy()
OFFLINE = OfflineStrategy()
BANDIT = BanditStrategy()
MULTI_AGENT_ON_POLICY = MultiAgentOnPolicyStrategy()
MULTI_AGENT_OFF_POLICY = MultiAgentOffPolicyStrategy()
LLM_ROLLOUT = LLMRolloutStrategy()
LLM_DATASET = LLMDatasetStrategy()
_LLM_BY_ENV_TYPE = {"rollout": LLM_ROLLOUT, "dataset": LLM_DATASET}


def select_strategy(spec: AlgorithmSpec) -> TrainingStrategy:
    """Return the strategy that trains ``spec``, from its paradigm flags.

    The contract declares ``off_policy`` / ``offline`` / ``bandit`` on the RL
    specs and ``env_type`` on the LLM specs; a subclass inherits them, so it
    trains like its parent.

    Raises:
        TypeError: If ``spec`` is not one of the contract's algorithm specs.
        KeyError: If an LLM spec's ``env_type`` has no strategy.
    """
    return strategy_for(type(spec))


def strategy_for(spec_cls: type) -> TrainingStrategy:
    """The strategy of a spec class (its paradigm flags are class-level).

    Raises:
        TypeError: If ``spec_cls`` is not one of the contract's algorithm specs.
        KeyError: If an LLM spec's ``env_type`` has no strategy.
    """
    if not isinstance(spec_cls, type):
        raise TypeError(f"{spec_cls!r} is not an algorithm spec class")
    if issubclass(spec_cls, LLMAlgorithmSpec):
        try:
            return _LLM_BY_ENV_TYPE[str(spec_cls.env_type)]
        except KeyError:
            raise KeyError(
                f"No training strategy for LLM env_type {spec_cls.env_type!r} "
                f"({spec_cls.__name__}); expected rollout or dataset"
            ) from None
    if issubclass(spec_cls, MultiAgentAlgorithmSpec):
        return MULTI_AGENT_OFF_POLICY if spec_cls.off_policy else MULTI_AGENT_ON_POLICY
    if issubclass(spec_cls, SingleAgentAlgorithmSpec):
        if spec_cls.bandit:
            return BANDIT
        if spec_cls.offline:
            return OFFLINE
        return SINGLE_AGENT_OFF_POLICY if spec_cls.off_policy else SINGLE_AGENT_ON_POLICY
    raise TypeError(f"{spec_cls.__name__} is not an algorithm spec")


__all__ = [
    "BANDIT",
    "LLM_DATASET",
    "LLM_ROLLOUT",
    "MULTI_AGENT_OFF_POLICY",
    "MULTI_AGENT_ON_POLICY",
    "OFFLINE",
    "SINGLE_AGENT_OFF_POLICY",
    "SINGLE_AGENT_ON_POLICY",
    "BanditStrategy",
    "EnvSetup",
    "LLMDatasetStrategy",
    "LLMRolloutStrategy",
    "LLMStrategy",
    "MultiAgentOffPolicyStrategy",
    "MultiAgentOnPolicyStrategy",
    "OfflineStrategy",
    "PopulationRuntime",
    "SingleAgentOffPolicyStrategy",
    "SingleAgentOnPolicyStrategy",
    "TrainingLoop",
    "TrainingStrategy",
    "resolve_loop",
    "select_strategy",
    "strategy_for",
]
