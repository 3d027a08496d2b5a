"""The manifest contract: specs, registry and manifest, importable without torch.

Importing this package registers every algorithm name in
:data:`~agilerl.arena.models.registry.MANIFEST_REGISTRY`; each algorithm's spec
module is imported on first use (see :mod:`agilerl.arena.models.algorithms`).
"""

from typing import Any as _Any

from agilerl.arena.models import algorithms as _algorithms
from agilerl.arena.models.algorithms import __all__ as _algorithm_names
from agilerl.arena.models.env import (
    ACTION_SPACE_KINDS,
    ENV_SPECS,
    BanditEnvSpec,
    EnvSpecBase,
    EnvSpecType,
    GymEnvSpec,
    LLMEnvSpec,
    LLMEnvType,
    OfflineEnvSpec,
    PettingZooEnvSpec,
)
from agilerl.arena.models.errors import EXIT_USER_ERROR, ConfigError, Problem
from agilerl.arena.models.fsdp import FSDPConfig
from agilerl.arena.models.hpo import (
    MutationProbabilities,
    MutationSpec,
    NetworkMutationRanges,
    RLHyperparameter,
    TournamentSelectionSpec,
    no_op_mutation_probabilities,
)
from agilerl.arena.models.manifest import API_VERSION, SECTIONS, TrainingManifest
from agilerl.arena.models.networks import (
    CnnSpec,
    ContinuousQNetworkSpec,
    DeterministicActorSpec,
    FinetuningNetworkSpec,
    LoraConfigDict,
    LstmSpec,
    MlpSpec,
    MultiInputSpec,
    NetworkSpec,
    QNetworkSpec,
    RainbowQNetworkSpec,
    SimbaSpec,
    StochasticActorSpec,
    ValueNetworkSpec,
)
from agilerl.arena.models.registry import MANIFEST_REGISTRY, AlgorithmRegistry, register
from agilerl.arena.models.training import (
    CheckpointExportSpec,
    NStepBufferArgs,
    PerBufferArgs,
    ReplayBufferSpec,
    TrainingSpec,
)

__all__ = [
    *_algorithm_names,
    "ACTION_SPACE_KINDS",
    "API_VERSION",
    "ENV_SPECS",
    "EXIT_USER_ERROR",
    "MANIFEST_REGISTRY",
    "SECTIONS",
    "AlgorithmRegistry",
    "BanditEnvSpec",
    "CheckpointExportSpec",
    "CnnSpec",
    "ConfigError",
    "ContinuousQNetworkSpec",
    "DeterministicActorSpec",
    "EnvSpecBase",
    "EnvSpecType",
    "FSDPConfig",
    "FinetuningNetworkSpec",
    "GymEnvSpec",
    "LLMEnvSpec",
    "LLMEnvType",
    "LoraConfigDict",
    "LstmSpec",
    "MlpSpec",
    "MultiInputSpec",
    "MutationProbabilities",
    "MutationSpec",
    "NStepBufferArgs",
    "NetworkMutationRanges",
    "NetworkSpec",
    "OfflineEnvSpec",
    "PerBufferArgs",
    "PettingZooEnvSpec",
    "Problem",
    "QNetworkSpec",
    "RLHyperparameter",
    "RainbowQNetworkSpec",
    "ReplayBufferSpec",
    "SimbaSpec",
    "StochasticActorSpec",
    "TournamentSelectionSpec",
    "TrainingManifest",
    "TrainingSpec",
    "ValueNetworkSpec",
    "no_op_mutation_probabilities",
    "register",
]


def __getattr__(name: str) -> _Any:
    if name in _algorithm_names:
        return getattr(_algorithms, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
