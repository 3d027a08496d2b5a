"""Builder for LLM fine-tuning algorithms (GRPO, LLM PPO, LLM REINFORCE, DPO, SFT)."""

from __future__ import annotations

import importlib
from typing import Any

from agilerl.arena.models.algorithms import (
    AlgorithmSpec,
    LLMAlgorithmSpec,
    RolloutLLMSpec,
    VLLMConfig,
)
from agilerl.builders.base import AlgorithmBuilder, apply_checkpoint
from agilerl.builders.runtime import AlgorithmBuildRuntime

COLOCATED_VLLM_DEFAULTS = {
    "max_num_seqs": 16,
    "tensor_parallel_size": 1,
    "sleep_mode": True,
}
"""``vllm_config`` of a colocated engine when the spec has none: it shares the trainer's
device, so on CUDA it sleeps through updates (the CPU backend cannot)."""


def to_peft_lora(lora: dict[str, Any]) -> Any:
    """Convert the manifest's LoRA mapping into a ``peft.LoraConfig``."""
    try:
        from peft import LoraConfig
    except ImportError as exc:
        raise ImportError("LoRA needs the llm extra: pip install 'agilerl[llm]'") from exc
    fields = dict(lora)
    return LoraConfig(
        r=fields.pop("lora_r"),
        lora_alpha=fields.pop("lora_alpha"),
        lora_dropout=fields.pop("lora_dropout"),
        **{k: v for k, v in fields.items() if v is not None},
    )


_LLM_MODULES = (
    "agilerl.algorithms",
    "agilerl.algorithms.llm_dataset",
    "agilerl.algorithms.llm_rollout",
    "agilerl.algorithms.grpo",
)


class LLMBuilder(AlgorithmBuilder):
    """LLM fine-tuning."""

    required_base = "LLMAlgorithm"

    @classmethod
    def algo_class(cls, spec: AlgorithmSpec) -> type:
        """The algorithm class named by the spec (``<Name>Spec -> <Name>``), LLM modules included.

        Raises:
            AttributeError: If no LLM algorithm matches the spec's name.
        """
        try:
            return super().algo_class(spec)
        except AttributeError as exc:
            missing = exc
        from agilerl.algorithms.core.base import LLMAlgorithm

        for klass in type(spec).__mro__:
            if klass is LLMAlgorithmSpec or not klass.__name__.endswith("Spec"):
                continue
            name = klass.__name__.removesuffix("Spec")
            for module in _LLM_MODULES[1:]:
                try:
                    found = getattr(importlib.import_module(module), name, None)
                except ImportError as exc:
                    raise ImportError(
                        "LLM algorithms need the llm extra: pip install 'agilerl[llm]'"
                    ) from exc
                if isinstance(found, type) and issubclass(found, LLMAlgorithm):
                    return found
        raise missing

    @classmethod
    def build(
        cls,
        spec: AlgorithmSpec,
        *,
        tokenizer: Any = None,
        runtime: AlgorithmBuildRuntime | None = None,
        actor_network: Any = None,
        rollout_mode: str = "",
    ) -> Any:
        """Build an LLM algorithm.

        Args:
            spec: The algorithm spec.
            tokenizer: A HuggingFace tokenizer.
            runtime: Population slot, device, HPO, and optional checkpoint; index defaults to 0.
            actor_network: Pre-built or cloned actor, used as given instead of loading
                ``spec.pretrained_model_name_or_path``.
            rollout_mode: ``training.rollout_mode``; colocated runs vLLM in the trainer.

        Raises:
            ValueError: If ``tokenizer`` is None.
            TypeError: If ``spec`` is not an LLM spec.
        """
        if not isinstance(spec, LLMAlgorithmSpec):
            raise TypeError(f"{type(spec).__name__} is not an LLM algorithm spec")
        if tokenizer is None:
            raise ValueError("LLMBuilder.build needs a tokenizer")
        runtime = runtime or AlgorithmBuildRuntime(index=0)
        algo_cls = cls.checked_class(spec)
        colocated = rollout_mode == "colocated" and isinstance(spec, RolloutLLMSpec)
        if colocated and spec.use_vllm and spec.vllm_config is None:
            config = VLLMConfig(**COLOCATED_VLLM_DEFAULTS)
            spec = spec.model_copy(update={"vllm_config": config})
        if tokenizer.pad_token_id is None and getattr(tokenizer, "eos_token_id", None) is not None:
            tokenizer.pad_token = tokenizer.eos_token
        algo = algo_cls(
            spec,
            tokenizer=tokenizer,
            actor_network=actor_network,
            index=runtime.index if runtime.index is not None else 0,
            device=runtime.device,
        )
        return apply_checkpoint(algo, spec, runtime)


def population_on_one_base(
    spec: Any,
    tokenizer: Any,
    size: int,
    *,
    device: str = "cpu",
    builder: Any = None,
    rollout_mode: str = "",
) -> list[Any]:
    """``size`` agents whose LoRA adapters sit on one shared base model.

    Args:
        spec: The algorithm spec (every agent starts from it).
        tokenizer: The model's tokenizer.
        size: Population size.
        device: Torch device.
        builder: The builder class (default :class:`LLMBuilder`).
        rollout_mode: ``training.rollout_mode`` (see :meth:`LLMBuilder.build`).
    """
    builder = builder or LLMBuilder
    first = builder.build(
        spec,
        tokenizer=tokenizer,
        runtime=AlgorithmBuildRuntime(0, device),
        rollout_mode=rollout_mode,
    )
    rest = [
        builder.build(
            spec,
            tokenizer=tokenizer,
            runtime=AlgorithmBuildRuntime(i, device),
            actor_network=first.actor,
            rollout_mode=rollout_mode,
        )
        for i in range(1, size)
    ]
    return [first, *rest]
