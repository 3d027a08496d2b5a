"""The manifest contract: specs, registry and manifest, importable without torch.

Importing this package registers every algorithm spec in
:data:`~agilerl.arena.models.registry.MANIFEST_REGISTRY`.
"""

from agilerl.arena.models.algorithms import *  # noqa: F403
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
