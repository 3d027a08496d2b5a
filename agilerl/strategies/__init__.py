"""Strategies: pick the training loop for a spec from its paradigm flags."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agilerl.arena.models.algorithms import (
    AlgorithmSpec,
    LLMAlgorithmSpec,
    MultiAgentAlgorithmSpec,
    SingleAgentAlgorithmSpec,
)
from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.training import TrainingSpec
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

if TYPE_CHECKING:
    from agilerl.arena.models.manifest import TrainingManifest

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


ALL_STRATEGIES: tuple[TrainingStrategy, ...] = (
    SINGLE_AGENT_ON_POLICY,
    SINGLE_AGENT_OFF_POLICY,
    OFFLINE,
    BANDIT,
    MULTI_AGENT_ON_POLICY,
    MULTI_AGENT_OFF_POLICY,
    LLM_ROLLOUT,
    LLM_DATASET,
)

_INSTEAD = {
    "checkpoint_path": "checkpoints are written to the run directory's checkpoints/ folder; "
    "choose that directory with run_dir=... (train.py) or LocalTrainer(run_dir=...)",
}
"""What to use instead of a ``training`` field no paradigm reads (kept for the seeds' layout)."""


RUN_EVAL_EPISODES = 10
"""Evaluation episodes of a run whose manifest leaves ``training.eval_loop`` unset."""


def with_run_defaults(manifest: TrainingManifest) -> TrainingManifest:
    """``manifest`` with ``training.eval_loop: 10`` written in, unless it sets one.

    ``TrainingSpec.eval_loop`` defaults to 1 (the seeds' schema), but a fitness, a
    "solved" and a spread from one episode mislead; a run (``train.py``, ``LocalTrainer``)
    of a paradigm that evaluates episodes therefore evaluates :data:`RUN_EVAL_EPISODES`
    unless the manifest (or its preset) chooses, and its ``manifest.yaml`` records it.
    """
    if "eval_loop" in manifest.training.model_fields_set:
        return manifest
    strategy = select_strategy(manifest.algorithm)
    if not strategy.evaluates_episodes:  # bandit and LLM evaluations are not episodes
        return manifest
    data = manifest.to_dict()
    data["training"]["eval_loop"] = RUN_EVAL_EPISODES
    return type(manifest).from_dict(data)


def refuse_unused_training_fields(manifest: TrainingManifest) -> None:
    """Refuse a ``training`` field set to a non-default value that this run would not read.

    Every field of the training section either acts on the run or is refused
    here: what a paradigm acts on is its strategy's
    :meth:`~agilerl.strategies.base.TrainingStrategy.acted_training_fields`.

    Raises:
        ConfigError: Naming the first such field, the paradigms that use it and the fix.
    """
    training = manifest.training
    strategy = select_strategy(manifest.algorithm)
    unread = training.model_fields_set - strategy.acted_training_fields(manifest.algorithm)
    for name in sorted(unread & set(TrainingSpec.model_fields)):
        if getattr(training, name) == TrainingSpec.model_fields[name].default:
            continue
        users = sorted(
            {s.paradigm for s in ALL_STRATEGIES if s.paradigm and name in s.training_fields}
        )
        if name in _INSTEAD:
            where = _INSTEAD[name]
        elif name in strategy.training_fields:
            where = f"it applies to other {strategy.paradigm} algorithms"
        else:
            where = f"it applies to {', '.join(users)} training"
        raise ConfigError(
            f"training.{name}: {manifest.algorithm.name} ({strategy.paradigm} training) does "
            f"not use it ({where}); remove training.{name}"
        )


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
