"""Strategies for LLM fine-tuning: generative rollouts and teacher-forced datasets."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from agilerl.arena.models.algorithms import AlgorithmSpec
from agilerl.arena.models.env import EnvSpecBase
from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.training import TrainingSpec
from agilerl.strategies.base import EnvSetup, PopulationRuntime, TrainingLoop, TrainingStrategy

if TYPE_CHECKING:
    from agilerl.arena.models.manifest import TrainingManifest

_IGNORED_BY_LLM_LOOPS = (
    "target_score",
    "eval_steps",
    "eval_loop",
    "learning_delay",
    "eps_start",
    "eps_end",
    "eps_decay",
    "overwrite_checkpoints",
)


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
    if not path.exists() and (path.is_absolute() or name.startswith(("models", "."))):
        raise ConfigError(
            f"network.pretrained_model_name_or_path: {name} does not exist; build the "
            "tiny model with python scripts/make_tiny_llm.py or point at a local model folder"
        )
    return path


class LLMStrategy(TrainingStrategy):
    """Shared orchestration for the LLM fine-tuning loops."""

    takes_epochs: ClassVar[bool] = False
    requires: ClassVar[tuple[str, ...]] = ("transformers", "peft")

    def check(self, manifest: TrainingManifest, *, local: bool = True) -> None:
        """Refuse a local model path that does not exist (dry runs and validate too).

        Raises:
            ConfigError: Naming ``network.pretrained_model_name_or_path``.
        """
        if local:
            model_path(manifest.algorithm)

    def get_trainer_kwargs(
        self,
        spec: AlgorithmSpec,
        *,
        training: TrainingSpec,
        env_spec: EnvSpecBase,
        memory: Any = None,
        n_step_memory: Any = None,
    ) -> dict[str, Any]:
        """evaluation_interval, checkpoints and their export, HPO, max_reward; num_epochs for
        dataset loops."""
        ignored = [
            k
            for k in _IGNORED_BY_LLM_LOOPS
            if k in training.model_fields_set
            and getattr(training, k) != TrainingSpec.model_fields[k].default
        ]
        if ignored:
            warnings.warn(
                f"LLM training loops ignore training.{', training.'.join(ignored)}",
                UserWarning,
                stacklevel=2,
            )
        kwargs: dict[str, Any] = {"evaluation_interval": training.evaluation_interval or 10}
        if training.checkpoint_steps is not None:
            kwargs["checkpoint_steps"] = training.checkpoint_steps
        if self.takes_epochs:
            kwargs["num_epochs"] = training.num_epochs
        elif training.num_epochs is not None:
            warnings.warn(
                "training.num_epochs is ignored by rollout fine-tuning", UserWarning, stacklevel=2
            )
        kwargs["checkpoint_export"] = training.effective_checkpoint_export()
        if not self.takes_epochs:  # the rollout loop scores completions against it
            max_reward = getattr(env_spec, "max_reward", None)
            if max_reward is not None:
                kwargs["max_reward"] = max_reward
        return kwargs


class LLMRolloutStrategy(LLMStrategy):
    """Generative rollout fine-tuning (GRPO family, LLM PPO, LLM REINFORCE).

    One loop for every rollout regime: single-turn reasoning is ``max_turns=1``.
    """

    paradigm: ClassVar[str] = "LLM rollout"
    multi_process: ClassVar[bool] = True
    default_loop: ClassVar[str | TrainingLoop | None] = (
        "agilerl.training.llm.train_llm_rollout:train_llm_rollout"
    )

    def make_envs(self, manifest: TrainingManifest, *, seed: int) -> EnvSetup:
        """The tokenizer (left padding) and the rollout env (train and held-out prompts).

        Code the env names (a ``module:attr`` reward or entry point, a reward
        file) was allowed by the run's ``trust_code`` in the trainer's
        preflight, which refuses such a manifest without it.

        Raises:
            ConfigError: If the llm extra is missing, vLLM/async rollouts are
                asked for without vllm and CUDA, or the model or dataset cannot be read.
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
            spec, envs.observation_space, runtime.pop_size, device=runtime.device, builder=builder
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
        """The shared LLM kwargs plus greedy evaluation and the held-out sample count."""
        kwargs = super().get_trainer_kwargs(
            spec, training=training, env_spec=env_spec, memory=memory, n_step_memory=n_step_memory
        )
        kwargs["eval_greedy"] = training.eval_greedy
        if training.eval_samples_per_task:
            kwargs["eval_rows"] = training.eval_samples_per_task
        return kwargs


def check_rollout_engine(spec: AlgorithmSpec, training: TrainingSpec) -> None:
    """Refuse vLLM generation or async rollouts where vllm or a CUDA device is missing.

    Raises:
        ConfigError: Naming the setting and what is missing.
    """
    wants = []
    if getattr(spec, "use_vllm", False):
        wants.append("algorithm.use_vllm=true")
    if training.rollout_mode == "async":
        wants.append("training.rollout_mode=async")
    if not wants:
        return
    import importlib.util

    import torch

    missing = []
    if importlib.util.find_spec("vllm") is None:
        missing.append("the vllm extra (pip install -e '.[vllm]')")
    if not torch.cuda.is_available():
        missing.append("a CUDA device")
    if missing:
        raise ConfigError(
            f"{' and '.join(wants)} needs {' and '.join(missing)}; set algorithm.use_vllm=false "
            "and training.rollout_mode=colocated to generate with HF generate"
        )
    raise ConfigError(
        f"{' and '.join(wants)}: vLLM rollout engines are not implemented in this version; "
        "set algorithm.use_vllm=false and training.rollout_mode=colocated"
    )


class LLMDatasetStrategy(LLMStrategy):
    """Teacher-forced fine-tuning over dataset rows (DPO and SFT).

    One loop for both objectives; the env's objective picks the loss.
    """

    paradigm: ClassVar[str] = "LLM dataset"
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
