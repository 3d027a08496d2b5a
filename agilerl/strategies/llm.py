"""Strategies for LLM fine-tuning: generative rollouts and teacher-forced datasets."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from agilerl.arena.models.algorithms import AlgorithmSpec
from agilerl.arena.models.env import EnvSpecBase
from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.training import TrainingSpec
from agilerl.extras import require
from agilerl.strategies.base import EnvSetup, PopulationRuntime, TrainingLoop, TrainingStrategy

if TYPE_CHECKING:
    from agilerl.arena.models.manifest import TrainingManifest

LLM_FIELDS: frozenset[str] = frozenset({"evaluation_interval", "checkpoint_export"})
"""``training`` fields both LLM paradigms act on besides the run's own."""


def model_path(spec: AlgorithmSpec) -> Path:
    """``spec.pretrained_model_name_or_path`` as a path, once a local one is known to exist.

    An absolute path, or one under ``models/`` or starting with ``.`` (relative to
    the working directory), must exist; any other name may be a cached hub model
    and is left to the loader.

    Raises:
        ConfigError: Naming ``network.pretrained_model_name_or_path`` and the fix.
    """
    name = getattr(spec, "pretrained_model_name_or_path", None) or ""
    path = Path(name)  # (Path drops a leading "./": the prefix is read from the name)
    field = "network.pretrained_model_name_or_path"
    if not path.exists() and (path.is_absolute() or name.startswith(("models", "."))):
        raise ConfigError(
            f"{field}: {name} does not exist; build the "
            "tiny model with python scripts/make_tiny_llm.py or point at a local model folder"
        )
    if path.is_dir():
        check_model_folder(path, field)
    elif not path.exists():
        check_hub_cache(name, field)
    return path


def check_model_folder(path: Path, field: str) -> None:
    """A local model folder: a config, safetensors weights, no code of its own.

    Raises:
        ConfigError: For a folder that is not a model, holds only pickle weights (which can
            run code when loaded, and whose keys are not checked), or needs remote code.
    """
    import json

    config = path / "config.json"
    if not config.is_file():
        raise ConfigError(f"{field}: {path} is not a model folder (no config.json)")
    try:
        settings = json.loads(config.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{field}: {config} is not readable JSON ({exc})") from None
    if isinstance(settings, dict) and settings.get("auto_map"):
        raise ConfigError(
            f"{field}: {path} needs the model's own code (auto_map in config.json); agilerl "
            "never runs code shipped with a model: use an architecture transformers knows"
        )
    if not any(path.glob("*.safetensors")):
        pickles = sorted(p.name for p in path.glob("*.bin")) + sorted(
            p.name for p in path.glob("*.pt")
        )
        held = f"only pickle weights ({', '.join(pickles[:3])})" if pickles else "no weights"
        raise ConfigError(
            f"{field}: {path} holds {held}; agilerl loads safetensors only (pickle files can "
            "run code): save the model with save_pretrained(..., safe_serialization=True)"
        )
    stored = sum(safetensors_elements(f, field) for f in sorted(path.glob("*.safetensors")))
    if isinstance(settings, dict):
        check_config_size(settings, stored, config, field)


def safetensors_elements(file: Path, field: str) -> int:
    """How many tensor elements a safetensors file holds, from its header alone (the
    ``safetensors`` library checks the header's size, shapes and data offsets).

    Raises:
        ConfigError: If the file is truncated or not safetensors.
    """
    import math

    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(file, "pt") as handle:
            names = handle.keys()  # (a safe_open handle is not iterable)
            return sum(math.prod(handle.get_slice(k).get_shape()) for k in names)
    except (SafetensorError, OSError, ValueError) as exc:
        raise ConfigError(
            f"{field}: {file} is not a whole safetensors file ({exc}); save the model again "
            "with save_pretrained(..., safe_serialization=True)"
        ) from None


def check_config_size(settings: dict, stored: int, config: Path, field: str) -> None:
    """Refuse a config whose sizes imply more weights than the folder stores, before
    transformers allocates them (a config can otherwise ask for terabytes).

    Only lower bounds are used: the embedding (vocabulary x width) and one width-sized
    vector per layer are in every decoder's weights.
    """
    sizes = {}
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size"):
        value = settings.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"{field}: {config}: {key} must be a positive integer, not {value!r}")
        sizes[key] = value
    width = sizes.get("hidden_size", 1)
    implied = max(
        sizes.get("vocab_size", 0) * width,
        sizes.get("num_hidden_layers", 0) * width,
        sizes.get("num_hidden_layers", 0) * sizes.get("intermediate_size", 0),
    )
    if implied > stored:
        raise ConfigError(
            f"{field}: {config} describes a model of at least {implied:,} weights, but the "
            f"folder's safetensors files hold {stored:,}: the config and weights disagree; "
            "save the model again with save_pretrained"
        )


def check_hub_cache(name: str, field: str) -> None:
    """A hub id must already be in the local cache when downloads are off.

    Raises:
        ConfigError: Naming the id and how to make it available.
    """
    import os

    if os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("1", "true", "yes"):
        return
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return
    try:
        cached = try_to_load_from_cache(name, "config.json")
    except ValueError:  # not a valid repo id either
        cached = None
    if not isinstance(cached, str):
        raise ConfigError(
            f"{field}: {name} is neither a local folder nor in the Hugging Face cache, and "
            "downloads are off (HF_HUB_OFFLINE=1): download it where there is network "
            "access, or point at a local model folder"
        )


def check_fsdp(spec: AlgorithmSpec, *, multi_process: bool) -> None:
    """Refuse ``algorithm.fsdp`` where there is nothing to shard across (one process), and
    FSDP settings this machine cannot honour (:func:`~agilerl.llm.distributed.check_fsdp_config`).

    Raises:
        ConfigError: Naming ``algorithm.fsdp`` (or its field) and what to do instead.
    """
    import torch

    from agilerl.llm.distributed import check_fsdp_config
    from agilerl.training.distributed_run import process_info

    config = getattr(spec, "fsdp", None)
    if config is None:
        return
    info = process_info()
    if multi_process and info.multi:
        # before the model loads; the agent checks again with its actual device
        check_fsdp_config(config, world=info.world_size, cuda=torch.cuda.is_available())
        return
    how = (
        "start the run with torchrun --nproc_per_node=N train.py ..."
        if multi_process
        else f"{spec.name} fine-tunes in one process"
    )
    raise ConfigError(
        f"algorithm.fsdp shards the model across the processes of a multi-process run, and "
        f"this run has one: {how}, or remove algorithm.fsdp"
    )


def check_quantization(manifest: TrainingManifest, *, local: bool) -> None:
    """Refuse ``algorithm.quantization`` on a machine without bitsandbytes (``local``).

    The settings a quantized base cannot train with are refused by the manifest itself.

    Raises:
        ConfigError: Naming the qlora extra and how to install it.
    """
    if local and getattr(manifest.algorithm, "quantization", None) is not None:
        require("bitsandbytes", "algorithm.quantization (QLoRA)", "algorithm.quantization")


class LLMStrategy(TrainingStrategy):
    """Shared orchestration for the LLM fine-tuning loops."""

    takes_epochs: ClassVar[bool] = False
    requires: ClassVar[tuple[str, ...]] = ("transformers", "peft")

    def check(self, manifest: TrainingManifest, *, local: bool = True) -> None:
        """Refuse a local model path that does not exist (dry runs and validate too).

        Raises:
            ConfigError: Naming ``network.pretrained_model_name_or_path``.
        """
        check_quantization(manifest, local=local)
        if local:
            model_path(manifest.algorithm)
            check_fsdp(manifest.algorithm, multi_process=self.multi_process)

    def get_trainer_kwargs(
        self,
        spec: AlgorithmSpec,
        *,
        training: TrainingSpec,
        env_spec: EnvSpecBase,
        memory: Any = None,
        n_step_memory: Any = None,
    ) -> dict[str, Any]:
        """The training spec, and the env's ``max_reward`` for the rollout loop (which scores
        completions against it); fields the paradigm does not read are refused earlier
        (:func:`~agilerl.strategies.refuse_unused_training_fields`)."""
        kwargs: dict[str, Any] = {"training": training}
        if not self.takes_epochs:
            max_reward = getattr(env_spec, "max_reward", None)
            if max_reward is not None:
                kwargs["max_reward"] = max_reward
        return kwargs


class LLMRolloutStrategy(LLMStrategy):
    """Generative rollout fine-tuning (GRPO family, LLM PPO, LLM REINFORCE).

    One loop for every rollout regime: single-turn reasoning is ``max_turns=1``.
    """

    paradigm: ClassVar[str] = "LLM rollout"
    step_unit: ClassVar[tuple[str, str]] = ("round", "rounds")
    fitness_name: ClassVar[str] = "held-out reward"
    smoke_budget: ClassVar[dict[str, int]] = {
        "max_steps": 3,
        "evo_steps": 3,
        "pop_size": 1,
        "evaluation_interval": 3,
        "checkpoint_steps": 3,
    }
    training_fields: ClassVar[frozenset[str]] = LLM_FIELDS | {
        "eval_samples_per_task",
        "eval_greedy",
        "env_resource_ratio",
        "rollout_mode",
        "rollout_batch_size",
        "rollout_engines_per_agent",
        "training_gpus_per_agent",
        "weight_sync_backend",
        "weight_sync_interval",
        "reuse_prefix_cache_across_syncs",
        "rollout_version_stamp",
    }
    multi_process: ClassVar[bool] = True

    def check(self, manifest: TrainingManifest, *, local: bool = True) -> None:
        """Also refuse rollout-engine settings that cannot be honoured (dry runs too).

        Raises:
            ConfigError: Naming the field (see :func:`check_rollout_engine`).
        """
        super().check(manifest, local=local)
        check_rollout_engine(manifest.algorithm, manifest.training, local=local)

    default_loop: ClassVar[str | TrainingLoop | None] = (
        "agilerl.training.llm.train_llm_rollout:train_llm_rollout"
    )

    def make_envs(self, manifest: TrainingManifest, *, seed: int) -> EnvSetup:
        """The tokenizer (left padding) and the rollout env (train and held-out prompts).

        Code the env names (a ``module:attr`` reward or entry point, a reward
        file) was allowed by the run's ``trust_code`` in the trainer's
        preflight, which refuses such a manifest without it.

        Raises:
            ConfigError: If the llm extra is missing, the rollout-engine settings
                cannot be honoured (:func:`check_rollout_engine`), or the model or
                dataset cannot be read.
        """
        from agilerl.arena.models.trust import code_fields

        try:
            from agilerl.llm.model import load_tokenizer
            from agilerl.llm.rollout_env import load_rollout_env
        except ImportError as exc:
            raise ConfigError(
                f"algorithm: {manifest.algorithm.name} needs the llm extra ({exc.name} is "
                "missing): pip install -e '.[llm]'"
            ) from None
        spec = manifest.algorithm
        check_rollout_engine(spec, manifest.training)
        path = model_path(spec)
        tokenizer = load_tokenizer(path, padding_side="left")
        env = load_rollout_env(
            manifest.environment,
            tokenizer,
            max_model_len=spec.max_model_len,
            seed=spec.seed,
            trust_code=bool(code_fields(manifest.environment)),
        )
        return EnvSetup(env, None, tokenizer, None)

    def build_population(
        self, spec: AlgorithmSpec, builder: Any, envs: EnvSetup, runtime: PopulationRuntime
    ) -> list[Any]:
        """``pop_size`` adapters on one shared base model (the tokenizer rides in ``envs``).

        In a multi-process run the one agent is sharded with FSDP2 when ``algorithm.fsdp`` is set.

        Raises:
            ConfigError: If a multi-process run asks for more than one agent.
        """
        from agilerl.builders.llm import population_on_one_base
        from agilerl.llm import distributed

        if distributed.active() and runtime.pop_size != 1:
            raise ConfigError(
                f"training.pop_size={runtime.pop_size}: a multi-process (torchrun) run trains "
                "one agent data-parallel; set training.pop_size=1"
            )
        population = population_on_one_base(
            spec,
            envs.observation_space,
            runtime.pop_size,
            device=runtime.device,
            builder=builder,
            rollout_mode=runtime.rollout_mode,
        )
        if distributed.active() and spec.fsdp is not None:
            if getattr(population[0], "value_head", None) is not None:
                raise ConfigError(
                    f"algorithm.fsdp: {spec.name}'s value head is outside the model FSDP2 "
                    "shards; set algorithm.fsdp=null (the adapters are then replicated)"
                )
            population[0].shard()
        return population

    def get_trainer_kwargs(
        self,
        spec: AlgorithmSpec,
        *,
        training: TrainingSpec,
        env_spec: EnvSpecBase,
        memory: Any = None,
        n_step_memory: Any = None,
    ) -> dict[str, Any]:
        """The shared LLM kwargs plus, for ``rollout_mode: async``, the engines' layout
        (``rollout_engines_per_agent`` resolved against this machine's devices and CPUs)."""
        kwargs = super().get_trainer_kwargs(
            spec, training=training, env_spec=env_spec, memory=memory, n_step_memory=n_step_memory
        )
        if training.rollout_mode == "async":
            from agilerl.training.llm.train_llm_rollout import EngineLayout

            kwargs["engine_layout"] = EngineLayout(
                engines=rollout_engines(training), threads=engine_threads(training)
            )
        return kwargs


def rollout_engines(training: TrainingSpec) -> int:
    """``rollout_engines_per_agent``; ``auto``: the CUDA devices the trainer leaves, else 1."""
    if training.rollout_engines_per_agent != "auto":
        return int(training.rollout_engines_per_agent)
    import torch

    spare = torch.cuda.device_count() - training.training_gpus_per_agent
    return max(1, spare)


def engine_threads(training: TrainingSpec) -> int | None:
    """OpenMP threads per engine process: ``env_resource_ratio`` of the CPUs, split."""
    if training.env_resource_ratio is None:
        return None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    share = training.env_resource_ratio * (cpus or 1) / rollout_engines(training)
    return max(1, int(share))


def check_rollout_engine(
    spec: AlgorithmSpec, training: TrainingSpec, *, local: bool = True
) -> None:
    """Refuse rollout-engine settings this machine or this combination cannot honour.

    vLLM generation (``algorithm.use_vllm``) runs colocated in the trainer
    process, or in engine processes of its own (``rollout_mode: async``), and
    receives a LoRA adapter through files after each weight sync.
    ``local``: also check this machine (vLLM installed, CUDA where needed).

    Raises:
        ConfigError: Naming the field and what to do instead.
    """
    import importlib.util

    import torch

    use_vllm = bool(getattr(spec, "use_vllm", False))
    cuda = torch.cuda.is_available()
    if training.rollout_mode == "async" and not use_vllm:
        raise ConfigError(
            "training.rollout_mode=async runs vLLM engines in processes of their own; set "
            "algorithm.use_vllm=true, or training.rollout_mode=colocated"
        )
    if training.rollout_version_stamp is not None:
        raise ConfigError(
            f"training.rollout_version_stamp={training.rollout_version_stamp}: weights are "
            "synced between rounds, so every turn of an episode comes from one version and "
            "'publish' and 'oldest_turn' stamp the same; remove the setting"
        )
    if local and training.training_gpus_per_agent > 1 and not cuda:
        raise ConfigError(
            f"training.training_gpus_per_agent={training.training_gpus_per_agent} needs CUDA "
            "devices; on a CPU set it to 1"
        )
    async_only = {
        "training.env_resource_ratio": training.env_resource_ratio is not None,
        "training.rollout_batch_size": training.rollout_batch_size is not None,
        "training.rollout_engines_per_agent": training.rollout_engines_per_agent != 0,
    }
    named = [field for field, is_set in async_only.items() if is_set]
    if named and training.rollout_mode != "async":
        raise ConfigError(
            f"{', '.join(named)}: only asynchronous rollout engines read "
            f"{'it' if len(named) == 1 else 'them'}; set training.rollout_mode=async or remove "
            "the setting"
        )
    vllm_only = {
        "training.weight_sync_interval": training.weight_sync_interval is not None,
        "training.weight_sync_backend": training.weight_sync_backend is not None,
        "training.reuse_prefix_cache_across_syncs": training.reuse_prefix_cache_across_syncs,
        "algorithm.vllm_lora_export_dir": getattr(spec, "vllm_lora_export_dir", None) is not None,
        "algorithm.vllm_engine_args": bool(getattr(spec, "vllm_engine_args", None)),
        "algorithm.vllm_config": getattr(spec, "vllm_config", None) is not None,
    }
    if not use_vllm:
        named = [field for field, is_set in vllm_only.items() if is_set]
        if named:
            raise ConfigError(
                f"{', '.join(named)}: only vLLM generation reads "
                f"{'it' if len(named) == 1 else 'them'}; set algorithm.use_vllm=true or "
                "remove the setting (HF generate always samples with the live weights)"
            )
        return
    if local and importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            "algorithm.use_vllm=true needs vLLM: bash scripts/install_vllm.sh (the CPU build "
            "on a machine without CUDA), or set algorithm.use_vllm=false to generate with HF"
        )
    lora = getattr(spec, "lora_config", None)
    if lora is None:
        raise ConfigError(
            "algorithm.use_vllm=true syncs weights to vLLM as LoRA adapter files; set "
            "network.lora_config (full-weight syncing is not available)"
        )
    if lora.modules_to_save:
        raise ConfigError(
            f"network.lora_config.modules_to_save={lora.modules_to_save}: vLLM serves LoRA "
            "adapters only, not fully trained module copies; adapt the module with LoRA "
            "instead (add it to network.lora_config.target_modules) or set "
            "algorithm.use_vllm=false"
        )
    config = getattr(spec, "vllm_config", None)
    if config is not None and config.sleep_mode:
        if local and not cuda:
            raise ConfigError(
                "algorithm.vllm_config.sleep_mode=true releases GPU memory between rollouts; "
                "vLLM's CPU backend cannot sleep: set it to false"
            )
        if training.rollout_mode == "async":
            raise ConfigError(
                "algorithm.vllm_config.sleep_mode=true: asynchronous engines generate while "
                "the trainer learns, on devices of their own, so they never sleep; set it "
                "to false or training.rollout_mode=colocated"
            )
        if config.sleep_mode_level != 1:
            raise ConfigError(
                f"algorithm.vllm_config.sleep_mode_level={config.sleep_mode_level} discards "
                "the base weights, which LoRA syncing never sends again; set it to 1"
            )
    if training.weight_sync_backend == "nccl":
        reason = " and a CUDA device" if local and not cuda else ""
        raise ConfigError(
            f"training.weight_sync_backend=nccl needs full-weight syncing{reason}; set "
            "training.weight_sync_backend=filesystem (LoRA adapters through files)"
        )


class LLMDatasetStrategy(LLMStrategy):
    """Teacher-forced fine-tuning over dataset rows (DPO and SFT).

    One loop for both objectives; the env's objective picks the loss.
    """

    paradigm: ClassVar[str] = "LLM dataset"
    step_unit: ClassVar[tuple[str, str]] = ("batch", "batches")
    fitness_name: ClassVar[str] = "held-out score"
    smoke_budget: ClassVar[dict[str, int]] = {
        "max_steps": 4,
        "evo_steps": 2,
        "pop_size": 1,
        "evaluation_interval": 2,
        "checkpoint_steps": 2,
    }
    training_fields: ClassVar[frozenset[str]] = LLM_FIELDS | {"num_epochs", "evo_epochs"}
    takes_epochs: ClassVar[bool] = True
    default_loop: ClassVar[str | TrainingLoop | None] = (
        "agilerl.training.llm.train_llm_dataset:train_llm_dataset"
    )

    def make_envs(self, manifest: TrainingManifest, *, seed: int) -> EnvSetup:
        """The tokenizer of the model and the dataset env (train and held-out rows).

        Raises:
            ConfigError: If the llm extra is missing, or the model or dataset cannot be read.
        """
        try:
            from agilerl.llm.datasets import load_dataset_env
            from agilerl.llm.model import load_tokenizer
        except ImportError as exc:
            raise ConfigError(
                f"algorithm: {manifest.algorithm.name} needs the llm extra ({exc.name} is "
                "missing): pip install -e '.[llm]'"
            ) from None
        spec = manifest.algorithm
        path = model_path(spec)
        tokenizer = load_tokenizer(path, padding_side="right")
        env = load_dataset_env(
            manifest.environment, tokenizer, max_model_len=spec.max_model_len, seed=spec.seed
        )
        return EnvSetup(env, None, tokenizer, None)

    def build_population(
        self, spec: AlgorithmSpec, builder: Any, envs: EnvSetup, runtime: PopulationRuntime
    ) -> list[Any]:
        """``pop_size`` adapters on one shared base model (the tokenizer rides in ``envs``)."""
        from agilerl.builders.llm import population_on_one_base

        return population_on_one_base(
            spec, envs.observation_space, runtime.pop_size, device=runtime.device, builder=builder
        )
