"""The top-level :class:`TrainingManifest`: one validated description of a run.

Validation resolves ``algorithm.name`` through the registry, infers
``environment.env_type`` from the algorithm, checks every section, then the
rules that span sections (algorithm x environment, network kind, buffer
support, mutated hyperparameters). All problems are reported together, each
with its dotted path.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    SerializeAsAny,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from agilerl.arena.models.algorithms import (
    AlgorithmSpec,
    LLMAlgorithmSpec,
    MultiAgentAlgorithmSpec,
    PPOSpec,
)
from agilerl.arena.models.algorithms.base import MUTATION_KINDS
from agilerl.arena.models.base import StrictModel
from agilerl.arena.models.env import ENV_SPECS, EnvSpecBase, action_space_kind_of
from agilerl.arena.models.errors import (
    ConfigError,
    did_you_mean,
    field_names,
    input_names,
    problems_from_validation,
)
from agilerl.arena.models.hpo import MutationSpec, TournamentSelectionSpec
from agilerl.arena.models.networks import FinetuningNetworkSpec, NetworkSpec
from agilerl.arena.models.registry import MANIFEST_REGISTRY
from agilerl.arena.models.training import ReplayBufferSpec, TrainingSpec

API_VERSION = "agilerl.com/v1"
SECTIONS = (
    "algorithm",
    "environment",
    "network",
    "training",
    "replay_buffer",
    "mutation",
    "tournament_selection",
)
_SECTION_ALIASES = {"selection_strategy": "tournament_selection", "api_version": "apiVersion"}
_LLM_NETWORK_KEYS = {"pretrained_model_name_or_path", "max_context_length", "lora_config"}
_ENV_TYPE_HINT = {
    "gym": "a gymnasium env (env=cartpole, env=pendulum, ...)",
    "pettingzoo": "a PettingZoo env (env=mpe_simple_spread)",
    "offline": "an offline dataset env (env=cartpole_offline)",
    "bandit": "a bandit env (env=iris_bandit)",
    "rollout": "an LLM rollout env (env=llm_countdown)",
    "dataset": "an LLM dataset env (env=llm_preference or env=llm_sft)",
}


class _Errors:
    """Collects line errors for one combined ``ValidationError``."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def add(self, loc: tuple[Any, ...], message: str, value: Any = None) -> None:
        self.lines.append(
            {
                "type": PydanticCustomError("manifest", "{reason}", {"reason": message}),
                "loc": loc,
                "input": value,
            }
        )

    def extend(self, prefix: tuple[Any, ...], exc: ValidationError) -> None:
        for error in exc.errors():
            self.lines.append({**error, "loc": prefix + tuple(error["loc"])})


def _expected_env_type(spec_cls: type[AlgorithmSpec]) -> str:
    return spec_cls.env_type


def spec_class_for(algorithm: Any) -> type[AlgorithmSpec] | None:
    """The spec class an ``algorithm`` section resolves to, or ``None``."""
    if isinstance(algorithm, AlgorithmSpec):
        return type(algorithm)
    if isinstance(algorithm, dict) and isinstance(algorithm.get("name"), str):
        name = algorithm["name"]
        return MANIFEST_REGISTRY.get(name) if name in MANIFEST_REGISTRY else None
    return None


def _explicit(section: Any, key: str) -> bool:
    if isinstance(section, dict):
        return key in section
    if isinstance(section, StrictModel):
        return key in section.model_fields_set
    return False


class TrainingManifest(StrictModel):
    """One run: algorithm, environment, network, training, buffer and HPO sections."""

    api_version: Literal["agilerl.com/v1"] = Field(
        API_VERSION, alias="apiVersion", description="Manifest format version."
    )
    algorithm: SerializeAsAny[AlgorithmSpec] = Field(
        ..., description="The algorithm: name picks the spec, other keys are its fields."
    )
    environment: SerializeAsAny[EnvSpecBase] = Field(
        ..., description="The environment, chosen by env_type (inferred from the algorithm)."
    )
    network: NetworkSpec | FinetuningNetworkSpec | None = Field(
        None, description="RL encoder and head, or the LLM to fine-tune."
    )
    training: TrainingSpec = Field(default_factory=TrainingSpec, description="Run length etc.")
    replay_buffer: ReplayBufferSpec | None = Field(None, description="Off-policy replay memory.")
    mutation: MutationSpec | None = Field(None, description="Mutations between generations.")
    tournament_selection: TournamentSelectionSpec | None = Field(
        None, alias="selection_strategy", description="Selection between generations."
    )

    @model_validator(mode="wrap")
    @classmethod
    def _validate_sections(cls, data: Any, handler: Any) -> TrainingManifest:
        if isinstance(data, TrainingManifest):
            return data
        if not isinstance(data, dict):
            raise ValueError(f"a manifest must be a mapping of sections, got {type(data).__name__}")
        errors = _Errors()
        raw = {_SECTION_ALIASES.get(k, k): v for k, v in data.items()}
        built: dict[str, Any] = {}
        for key in raw:
            if key not in (*SECTIONS, "apiVersion"):
                guess = did_you_mean(key, SECTIONS)
                hint = (
                    f" (did you mean {guess}?)" if guess else f"; sections: {', '.join(SECTIONS)}"
                )
                errors.add((key,), f"unknown section{hint}", raw[key])
        if "apiVersion" in raw:
            if raw["apiVersion"] != API_VERSION:
                errors.add(("apiVersion",), f"must be {API_VERSION!r}", raw["apiVersion"])
            built["apiVersion"] = API_VERSION

        spec_cls = _resolve_algorithm_class(raw.get("algorithm"), errors)
        environment = _build_environment(raw, spec_cls, errors)
        network = _build_network(raw.get("network"), spec_cls, errors)
        for key, model in (
            ("training", TrainingSpec),
            ("replay_buffer", ReplayBufferSpec),
            ("mutation", MutationSpec),
            ("tournament_selection", TournamentSelectionSpec),
        ):
            value = raw.get(key)
            if value is None or (key == "mutation" and value == {}):
                continue
            try:
                built[key] = model.model_validate(value)
            except ValidationError as exc:
                errors.extend((key,), exc)
        algorithm = None
        if spec_cls is not None:
            fields = _algorithm_fields(raw["algorithm"], spec_cls, environment, network, built)
            algorithm = _build_algorithm(raw["algorithm"]["name"], fields, errors)
        if algorithm is not None and environment is not None:
            _cross_checks(algorithm, environment, network, built, raw, errors)
        if errors.lines:
            raise ValidationError.from_exception_data(cls.__name__, errors.lines)
        built.update(algorithm=algorithm, environment=environment, network=network)
        training = built.setdefault("training", TrainingSpec())
        if training.evo_steps is None and training.evo_epochs is None:
            steps = min(algorithm.default_evo_steps, training.max_steps)
            built["training"] = training.model_copy(update={"evo_steps": steps})
        return handler(built)

    @classmethod
    def from_dict(cls, data: Any, source: str | None = None) -> TrainingManifest:
        """Validate a plain mapping, raising :class:`ConfigError` on any mistake.

        Args:
            data: The manifest as loaded from YAML/JSON or composed by Hydra.
            source: File or command named in error messages.

        Raises:
            ConfigError: Listing every problem with its dotted path.
        """
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(
                problems_from_validation(exc, lambda key: section_models(key, data)), source
            ) from None

    @classmethod
    def from_file(cls, path: str | Path) -> TrainingManifest:
        """Load and validate a YAML or JSON manifest file.

        Raises:
            ConfigError: If the file is missing, unreadable, not a mapping, or invalid.
        """
        from agilerl.arena.models.loading import read_manifest_file

        return cls.from_dict(read_manifest_file(path), source=str(path))

    def to_dict(self) -> dict[str, Any]:
        """The manifest as plain data (JSON types), with ``algorithm.name`` written back."""
        data = self.model_dump(mode="json", by_alias=False, exclude_none=True)
        data = {"apiVersion": data.pop("api_version"), **data}
        algorithm = self.algorithm.model_dump(mode="json", exclude_none=True)
        if not isinstance(getattr(self.algorithm, "net_config", None), dict):
            # One network comes from (and goes back to) the network section; per-group
            # sections of multi-agent algorithms live only here and must survive.
            algorithm.pop("net_config", None)
        data["algorithm"] = {"name": self.algorithm.name, **algorithm}
        data["environment"] = self.environment.model_dump(mode="json", exclude_none=True)
        return data

    def algorithm_with_network(self) -> AlgorithmSpec:
        """The algorithm spec with the network section copied into ``net_config``."""
        if (
            isinstance(self.network, NetworkSpec)
            and "net_config" in type(self.algorithm).model_fields
            and not isinstance(getattr(self.algorithm, "net_config", None), dict)
        ):
            annotation_cls = type(self.algorithm).model_fields["net_config"].annotation
            from agilerl.arena.models.errors import model_classes

            target = next(iter(model_classes(annotation_cls)), NetworkSpec)
            net = target.model_validate(self.network.model_dump(exclude_unset=True))
            spec = self.algorithm.model_copy(update={"net_config": net})
            spec._registry_name = self.algorithm._registry_name
            return spec
        return self.algorithm


def section_models(key: str | None, data: Any) -> list[type[StrictModel]]:
    """Model classes that validate manifest section ``key`` of ``data`` (for hints)."""
    if key is None:
        return [TrainingManifest]
    data = data if isinstance(data, dict) else {}
    if key == "algorithm":
        spec_cls = spec_class_for(data.get("algorithm"))
        return [spec_cls] if spec_cls else []
    if key == "environment":
        env = data.get("environment")
        env_type = env.get("env_type") if isinstance(env, dict) else None
        if env_type is None:
            spec_cls = spec_class_for(data.get("algorithm"))
            env_type = spec_cls.env_type if spec_cls else "gym"
        cls = ENV_SPECS.get(str(env_type))
        return [cls] if cls else []
    if key == "network":
        return [NetworkSpec, FinetuningNetworkSpec]
    models = {
        "training": TrainingSpec,
        "replay_buffer": ReplayBufferSpec,
        "mutation": MutationSpec,
        "tournament_selection": TournamentSelectionSpec,
        "selection_strategy": TournamentSelectionSpec,
    }
    return [models[key]] if key in models else []


def _resolve_algorithm_class(section: Any, errors: _Errors) -> type[AlgorithmSpec] | None:
    names = MANIFEST_REGISTRY.names()
    if section is None:
        errors.add(("algorithm",), f"missing; set algorithm.name to one of {', '.join(names)}")
        return None
    if not isinstance(section, dict):
        errors.add(
            ("algorithm",), "must be a mapping with a name and the algorithm's fields", section
        )
        return None
    name = section.get("name")
    if name is None:
        errors.add(("algorithm", "name"), f"missing; one of {', '.join(names)}")
        return None
    if not isinstance(name, str) or name not in MANIFEST_REGISTRY:
        guess = did_you_mean(str(name), names)
        hint = f" (did you mean {guess}?)" if guess else ""
        errors.add(
            ("algorithm", "name"),
            f"{name!r} is not a registered algorithm{hint}; registered: {', '.join(names)}",
            name,
        )
        return None
    return MANIFEST_REGISTRY.get(name)


def _build_environment(
    raw: dict[str, Any], spec_cls: type[AlgorithmSpec] | None, errors: _Errors
) -> EnvSpecBase | None:
    section = raw.get("environment")
    if isinstance(section, EnvSpecBase):
        return section
    if section is None:
        errors.add(("environment",), "missing; choose one with env=<name> or write the section")
        return None
    if not isinstance(section, dict):
        errors.add(("environment",), "must be a mapping", section)
        return None
    section = dict(section)
    if "env_type" not in section and spec_cls is not None:
        section["env_type"] = spec_cls.env_type
        if spec_cls.objective is not None:
            section.setdefault("objective", spec_cls.objective)
    env_type = str(section.get("env_type", "gym"))
    env_cls = ENV_SPECS.get(env_type)
    if env_cls is None:
        errors.add(
            ("environment", "env_type"),
            f"unknown env_type {env_type!r}; one of {', '.join(ENV_SPECS)}",
            env_type,
        )
        return None
    try:
        return env_cls.model_validate(section)
    except ValidationError as exc:
        errors.extend(("environment",), exc)
        return None


def _build_network(
    section: Any, spec_cls: type[AlgorithmSpec] | None, errors: _Errors
) -> NetworkSpec | FinetuningNetworkSpec | None:
    if section is None or isinstance(section, NetworkSpec | FinetuningNetworkSpec):
        return section
    if section == {}:  # "all defaults" (network=auto) is the same run as no section at all
        return None
    if not isinstance(section, dict):
        errors.add(("network",), "must be a mapping", section)
        return None
    is_llm_section = bool(_LLM_NETWORK_KEYS & section.keys())
    if spec_cls is not None and issubclass(spec_cls, LLMAlgorithmSpec) != is_llm_section:
        if is_llm_section:
            errors.add(
                ("network",),
                f"{spec_cls.__name__.removesuffix('Spec')} is an RL algorithm and takes an "
                "RL network (latent_dim, encoder_config, head_config), not a pretrained "
                "model: use network=mlp",
            )
        else:
            errors.add(
                ("network",),
                "an LLM algorithm needs network.pretrained_model_name_or_path (and "
                "max_context_length, lora_config): use network=llm_lora",
            )
        return None
    model = FinetuningNetworkSpec if is_llm_section else NetworkSpec
    try:
        return model.model_validate(section)
    except ValidationError as exc:
        errors.extend(("network",), exc)
        return None


def _algorithm_fields(
    section: dict[str, Any],
    spec_cls: type[AlgorithmSpec],
    environment: EnvSpecBase | None,
    network: Any,
    built: dict[str, Any],
) -> dict[str, Any]:
    """The algorithm's fields plus values implied by other sections."""
    fields = {k: v for k, v in section.items() if k != "name"}
    implied: dict[str, Any] = {}
    known = spec_cls.model_fields
    if environment is not None:
        for target in ("num_envs", "vect_noise_dim"):
            if target in known:
                implied[target] = environment.num_envs
    if isinstance(network, FinetuningNetworkSpec):
        implied["pretrained_model_name_or_path"] = network.pretrained_model_name_or_path
        implied["max_model_len"] = network.max_context_length
        if network.lora_config is not None:
            implied["lora_config"] = network.lora_config
    buffer = built.get("replay_buffer")
    if buffer is not None and buffer.n_step_buffer and "n_step" in known:
        implied["n_step"] = buffer.n_step_buffer_args.n_step
    for key, value in implied.items():
        fields.setdefault(key, value)
    fields["__implied__"] = implied
    return fields


def _build_algorithm(name: str, fields: dict[str, Any], errors: _Errors) -> AlgorithmSpec | None:
    implied = fields.pop("__implied__")
    try:
        spec = MANIFEST_REGISTRY.create(name, **fields)
    except ValidationError as exc:
        errors.extend(("algorithm",), exc)
        return None
    except ValueError as exc:  # a name that implies a contradicted field
        errors.add(("algorithm", "name"), str(exc), name)
        return None
    for key, value in implied.items():
        actual = getattr(spec, key)
        normalised = value.model_dump() if hasattr(value, "model_dump") else value
        current = actual.model_dump() if hasattr(actual, "model_dump") else actual
        if current != normalised:
            errors.add(
                ("algorithm", key),
                f"{current!r} disagrees with {value!r} set by another section; "
                "set it in one place only",
                current,
            )
    return spec


def _cross_checks(
    algorithm: AlgorithmSpec,
    environment: EnvSpecBase,
    network: Any,
    built: dict[str, Any],
    raw: dict[str, Any],
    errors: _Errors,
) -> None:
    name = algorithm.name
    env_type = str(getattr(environment, "env_type", ""))
    expected = algorithm.env_type
    if env_type != expected:
        errors.add(
            ("environment", "env_type"),
            f"{name} trains on {_ENV_TYPE_HINT.get(expected, expected)}, "
            f"not {_ENV_TYPE_HINT.get(env_type, env_type)}",
            env_type,
        )
        return
    if algorithm.objective is not None and getattr(environment, "objective", None) not in (
        None,
        algorithm.objective,
    ):
        errors.add(
            ("environment", "objective"),
            f"{name} needs objective {algorithm.objective!r}",
            environment.objective,
        )
    env_name = getattr(environment, "name", None)
    kind = action_space_kind_of(env_name)
    if kind is not None and kind not in algorithm.action_space_kinds:
        supported = " or ".join(sorted(algorithm.action_space_kinds))
        errors.add(
            ("environment", "name"),
            f"{name} needs a {supported} action space, but {env_name} has a {kind} one",
            env_name,
        )
    if isinstance(algorithm, LLMAlgorithmSpec) and not algorithm.pretrained_model_name_or_path:
        errors.add(
            ("network", "pretrained_model_name_or_path"),
            f"{name} needs a model to fine-tune: use network=llm_lora or set "
            "network.pretrained_model_name_or_path",
        )
    if (
        isinstance(algorithm, PPOSpec)
        and algorithm.recurrent
        and isinstance(network, NetworkSpec)
        and network.simba
    ):
        errors.add(("network", "simba"), "a recurrent PPO policy cannot use a SimBa encoder")
    _check_normalization(algorithm, network, errors)
    if isinstance(algorithm, PPOSpec) and isinstance(network, NetworkSpec) and not network.simba:
        arch = network.arch
        if algorithm.recurrent and arch not in (None, "lstm"):
            errors.add(
                ("network", "encoder_config", "arch"),
                f"a recurrent PPO policy needs an LSTM encoder: use network=lstm (arch: lstm) "
                f"or leave arch unset, not {arch!r}",
                arch,
            )
        elif not algorithm.recurrent and arch == "lstm":
            errors.add(
                ("network", "encoder_config", "arch"),
                "an LSTM encoder needs a recurrent policy: use algorithm=recurrent_ppo "
                "(or algorithm.recurrent: true)",
                arch,
            )
    buffer = built.get("replay_buffer")
    uses_memory = algorithm.off_policy or algorithm.offline or algorithm.bandit
    if buffer is not None and not uses_memory:
        errors.add(
            ("replay_buffer",),
            f"{name} learns from its own rollouts and keeps no replay memory; remove the "
            "replay_buffer section",
            True,
        )
        buffer = None
    if buffer is not None and isinstance(algorithm, MultiAgentAlgorithmSpec):
        for flag in ("per_buffer", "n_step_buffer"):
            if getattr(buffer, flag):
                errors.add(
                    ("replay_buffer", flag),
                    f"{name} keeps a one-step uniform multi-agent replay memory; set {flag}: false",
                    True,
                )
    if buffer is not None and buffer.per_buffer and not algorithm.supports_per_buffer:
        errors.add(
            ("replay_buffer", "per_buffer"),
            f"prioritized replay is supported by RainbowDQN only, not {name}; "
            "set per_buffer: false",
            True,
        )
    _check_hpo(algorithm, built, raw, errors)
    _check_multi_agent_encoder(algorithm, network, errors)
    _check_quantization(algorithm, built, errors)


def _check_normalization(algorithm: AlgorithmSpec, network: Any, errors: _Errors) -> None:
    """``network.normalize_observations`` acts on the mlp encoders of single-agent algorithms
    (the network spec refuses the other encoders): refuse it where the network is built
    another way (multi-agent) or is recurrent (an lstm encoder inferred for recurrent PPO)."""
    per_group = getattr(algorithm, "net_config", None)
    sections = [network, *(per_group.values() if isinstance(per_group, dict) else [])]
    if not any(getattr(s, "normalize_observations", False) for s in sections):
        return
    if isinstance(algorithm, MultiAgentAlgorithmSpec):
        reason = f"{algorithm.name} builds its networks per agent group without it"
    elif isinstance(algorithm, PPOSpec) and algorithm.recurrent:
        reason = "a recurrent PPO policy does not normalise observations"
    else:
        return
    errors.add(
        ("network", "normalize_observations"),
        f"{reason}; remove network.normalize_observations",
        True,
    )


def _check_multi_agent_encoder(algorithm: AlgorithmSpec, network: Any, errors: _Errors) -> None:
    """Multi-agent networks are MLPs on flattened observations; IPPO's may be a CNN over
    each agent's own image (not with ``shared_critic_input``, whose critic reads every
    agent's observations concatenated)."""
    if not isinstance(algorithm, MultiAgentAlgorithmSpec):
        return
    per_group = getattr(algorithm, "net_config", None)
    sections = [network, *(per_group.values() if isinstance(per_group, dict) else [])]
    for arch in {getattr(section, "arch", None) for section in sections} - {None, "mlp"}:
        cnn_ok = algorithm.name == "IPPO" and not getattr(algorithm, "shared_critic_input", False)
        if arch == "cnn" and cnn_ok:
            continue
        why = (
            "with shared_critic_input: true (set it false for a CNN critic per agent)"
            if arch == "cnn" and algorithm.name == "IPPO"
            else "(IPPO also takes arch: cnn on image observations)"
        )
        errors.add(
            ("network", "encoder_config", "arch"),
            f"{algorithm.name} builds MLP networks on flattened observations, not {arch!r} ones "
            f"{why}; use network=mlp (or leave arch unset)",
            arch,
        )


def _check_quantization(algorithm: AlgorithmSpec, built: dict[str, Any], errors: _Errors) -> None:
    """QLoRA trains a LoRA adapter on a frozen quantized base: it needs the adapter, and
    neither a merged export (into quantized weights), vLLM (which serves the adapter on its
    own full-precision base) nor FSDP sharding applies to it."""
    if getattr(algorithm, "quantization", None) is None:
        return
    training = built.get("training")
    export = training.effective_checkpoint_export().format if training is not None else None
    clashes = {
        ("network", "lora_config"): (
            algorithm.lora_config is None,
            "a quantized base model is frozen: set network.lora_config to train an adapter",
        ),
        ("algorithm", "use_vllm"): (
            bool(getattr(algorithm, "use_vllm", False)),
            "vLLM serves the adapter on a full-precision base, not the quantized one it "
            "learnt on: set algorithm.use_vllm=false or remove algorithm.quantization",
        ),
        ("algorithm", "fsdp"): (
            algorithm.fsdp is not None,
            "FSDP does not shard bitsandbytes' quantized weights: remove algorithm.fsdp or "
            "algorithm.quantization",
        ),
        ("training", "checkpoint_export", "format"): (
            export == "merged",
            "a LoRA adapter cannot be merged into quantized weights: export the adapter "
            "(format: adapter) or remove algorithm.quantization",
        ),
    }
    for loc, (bad, why) in clashes.items():
        if bad:
            errors.add(loc, why)


_KIND_REASONS = {
    "llm_agent": "a population shares one base model; members differ in their LoRA adapters "
    "and hyperparameters only",
    "multi_agent": "members hold one network per agent group; there is no single activation "
    "to swap",
}


def _check_hpo(
    algorithm: AlgorithmSpec, built: dict[str, Any], raw: dict[str, Any], errors: _Errors
) -> None:
    mutation: MutationSpec | None = built.get("mutation")
    training: TrainingSpec = built.get("training") or TrainingSpec()
    if mutation is not None:
        numeric = {
            n
            for n, info in type(algorithm).model_fields.items()
            if info.annotation in (int, float, int | None, float | None)
        }
        for key in mutation.rl_hp_selection:
            aliases = {
                alias: n
                for n, info in type(algorithm).model_fields.items()
                for alias in input_names(n, info)
            }
            target = aliases.get(key, key)
            if target not in numeric:
                guess = did_you_mean(key, sorted(numeric))
                hint = f" (did you mean {guess}?)" if guess else ""
                errors.add(
                    ("mutation", "rl_hp_selection", key),
                    f"{algorithm.name} has no numeric hyperparameter {key!r}{hint}; "
                    f"it has: {', '.join(sorted(numeric))}",
                    key,
                )
    if not training.hpo:
        return
    if training.pop_size == 1:
        warnings.warn(
            "training.hpo is on with pop_size 1: selection has nothing to choose from; "
            "set training.pop_size >= 2",
            UserWarning,
            stacklevel=2,
        )
    if mutation is not None:
        probabilities = mutation.probabilities
        for kind in sorted(MUTATION_KINDS - type(algorithm).mutation_kinds):
            value = getattr(probabilities, kind)
            if kind in probabilities.model_fields_set and value > 0:
                errors.add(
                    ("mutation", "probabilities", kind),
                    f"{algorithm.name} cannot apply {kind} mutations "
                    f"({_KIND_REASONS.get(type(algorithm).agent_type, 'not in its paradigm')}); "
                    f"set mutation.probabilities.{kind}=0",
                    value,
                )
    if mutation is not None and mutation.probabilities.total() == 0:
        errors.add(
            ("mutation", "probabilities"),
            "all mutation probabilities are zero with training.hpo on; raise no_mut, "
            "arch_mut, params_mut, act_mut or rl_hp_mut above 0",
        )
    selection: TournamentSelectionSpec = built.get("tournament_selection") or (
        TournamentSelectionSpec()
    )
    if selection.tournament_size > training.pop_size and training.pop_size > 1:
        errors.add(
            ("tournament_selection", "tournament_size"),
            f"{selection.tournament_size} is larger than training.pop_size ({training.pop_size})",
            selection.tournament_size,
        )


def manifest_field_names() -> list[str]:
    """Top-level keys a manifest accepts."""
    return [*field_names(TrainingManifest), "selection_strategy"]
