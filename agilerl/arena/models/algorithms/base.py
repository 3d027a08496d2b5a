"""Base algorithm specs: the fields every algorithm's manifest section carries.

Paradigm flags (``off_policy``, ``offline``, ``bandit``, ``env_type``) are
class-level, so a user's subclass of a spec trains like its parent. Specs are
data: no method here builds a module, an env or a loop.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from pydantic import (
    AliasChoices,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from agilerl.arena.models.algorithms.fields import (
    batch_size_field,
    gamma_field,
    learn_step_field,
    rollout_length_field,
)
from agilerl.arena.models.base import StrictModel
from agilerl.arena.models.fsdp import FSDPField, coerce_fsdp
from agilerl.arena.models.mutable import MutationRange, mutable_field, mutation_range
from agilerl.arena.models.networks import LoraConfigDict, NetworkSpec

HpRange = tuple[float, float, float, float]
"""(low, high, grow_factor, shrink_factor) of a mutable hyperparameter."""

MUTATION_KINDS: frozenset[str] = frozenset(
    {"no_mut", "arch_mut", "params_mut", "act_mut", "rl_hp_mut"}
)
"""Every mutation kind (the keys of ``mutation.probabilities`` that pick one)."""

DISCRETE = frozenset({"discrete"})
CONTINUOUS = frozenset({"continuous"})
ANY_ACTION = frozenset({"discrete", "continuous", "multidiscrete", "multibinary"})


class AlgorithmSpec(StrictModel):
    """Fields every algorithm's manifest section carries.

    Runtime-only state (torch modules, resolved hyperparameter configs) is not
    declared here. Builders and strategies sit beside this spec; they do not
    subclass it to add construction.
    """

    off_policy: ClassVar[bool] = False
    offline: ClassVar[bool] = False
    bandit: ClassVar[bool] = False
    env_type: ClassVar[str] = "gym"
    objective: ClassVar[str | None] = None
    agent_type: ClassVar[str] = "single_agent"
    default_evo_steps: ClassVar[int] = 10_000
    mutation_kinds: ClassVar[frozenset[str]] = MUTATION_KINDS
    """Mutation kinds evolutionary HPO can apply to this paradigm; a manifest that
    asks for another (a non-zero ``mutation.probabilities`` entry) is refused."""
    alias_implies: ClassVar[dict[str, dict[str, Any]]] = {}
    supports_per_buffer: ClassVar[bool] = False
    action_space_kinds: ClassVar[frozenset[str]] = ANY_ACTION
    uses_epsilon: ClassVar[bool] = False
    """Explores epsilon-greedily, so ``training.eps_start/eps_end/eps_decay`` act on it."""
    refused_fields: ClassVar[dict[str, str]] = {}
    """Fields kept for the manifest layout that this build cannot act on, each with what to
    do instead: any value but the default is refused at validation (exit 2)."""

    batch_size: int = Field(64, ge=1, description="Samples per gradient step.")

    _registry_name: str | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _refuse_fields_that_cannot_act(self) -> AlgorithmSpec:
        for name, instead in self.refused_fields.items():
            if name not in self.model_fields_set:
                continue
            value, default = getattr(self, name), type(self).model_fields[name].default
            if value != default:
                raise ValueError(f"{name}={value!r} cannot act here: {instead}")
        return self

    @property
    def name(self) -> str:
        """The registry key this spec was resolved from."""
        return self._registry_name or type(self).__name__.removesuffix("Spec")

    @classmethod
    def mutation_ranges(cls) -> dict[str, MutationRange]:
        """The mutable hyperparameters (fields declared with ``mutable_field``) and their ranges."""
        out = {}
        for name, info in cls.model_fields.items():
            span = mutation_range(info)
            if span is not None:
                out[name] = span
        return out


class SingleAgentAlgorithmSpec(AlgorithmSpec):
    """Single-agent reinforcement learning algorithms."""

    batch_size: int = batch_size_field(64)
    learn_step: int = Field(5, ge=1, description="Environment steps between learning updates.")
    gamma: float = gamma_field(0.99)
    normalize_images: bool = Field(True, description="Scale image observations to [0, 1].")
    net_config: NetworkSpec | None = Field(
        None, description="Network settings; normally filled from the manifest's network section."
    )


class MultiAgentAlgorithmSpec(AlgorithmSpec):
    """Multi-agent reinforcement learning algorithms."""

    env_type: ClassVar[str] = "pettingzoo"
    agent_type: ClassVar[str] = "multi_agent"
    # Members are stacks of per-group networks: parameter noise and architecture edits
    # apply per group; a global activation swap does not.
    mutation_kinds: ClassVar[frozenset[str]] = frozenset(
        {"no_mut", "arch_mut", "params_mut", "rl_hp_mut"}
    )
    refused_fields: ClassVar[dict[str, str]] = {
        "torch_compiler": "multi-agent networks run eagerly (their updates are batched per "
        "policy already); remove algorithm.torch_compiler",
    }

    batch_size: int = batch_size_field(64)
    learn_step: int = rollout_length_field(2048)
    gamma: float = gamma_field(0.99)
    normalize_images: bool = Field(True, description="Scale image observations to [0, 1].")
    torch_compiler: str | None = Field(
        None, description="torch.compile mode for the networks; null runs eagerly."
    )
    share_policies: bool = Field(
        False,
        description=(
            "Agents whose ids share a prefix (speaker_0, speaker_1 -> group speaker) share "
            "one policy; their spaces must match."
        ),
    )


class LLMAlgorithmSpec(AlgorithmSpec):
    """LLM fine-tuning algorithms.

    ``pretrained_model_name_or_path``, ``max_model_len`` and ``lora_config``
    are written under the manifest's network section and lifted onto the
    algorithm when the manifest is validated.
    """

    agent_type: ClassVar[str] = "llm_agent"
    env_type: ClassVar[str] = ""
    default_evo_steps: ClassVar[int] = 5
    # A population shares one base model: its members differ in their LoRA adapters
    # (parameter noise) and hyperparameters, never in architecture or activation.
    mutation_kinds: ClassVar[frozenset[str]] = frozenset({"no_mut", "params_mut", "rl_hp_mut"})
    refused_fields: ClassVar[dict[str, str]] = {
        "use_liger_kernel": "Liger's Triton kernels are not used (they need CUDA); remove "
        "algorithm.use_liger_kernel",
        "use_mamba_kernels": "Mamba CUDA kernels are not used; remove algorithm.use_mamba_kernels",
        "moe_lora_recompute": "MoE LoRA recomputation is not offered; remove "
        "algorithm.moe_lora_recompute",
        "use_sequence_packing": "rollout samples are padded, not packed (packing acts on SFT "
        "and DPO); remove algorithm.use_sequence_packing (algorithm.chunk_rows or "
        "algorithm.micro_batch_size_per_gpu bounds memory)",
        "lora_target_scope": "choose the adapted modules with network.lora_config.target_modules",
        "cosine_lr_schedule_config": "LLM fine-tuning keeps a constant learning rate; remove "
        "algorithm.cosine_lr_schedule_config",
    }

    batch_size: int = Field(16, ge=1, description="Prompts (or dataset rows) per step.")
    beta: float = Field(0.001, ge=0.0, le=1.0, description="KL penalty coefficient.")
    max_grad_norm: float = Field(0.1, ge=0.0, description="Gradient clipping norm.")
    update_epochs: int = Field(1, ge=1, description="Passes over each batch.")
    use_separate_reference_adapter: bool = Field(
        True, description="Hold the frozen reference policy in its own LoRA adapter."
    )
    calc_position_embeddings: bool = Field(True, description="Compute position ids from the mask.")
    gradient_checkpointing: bool = Field(True, description="Recompute activations in backward.")
    use_liger_loss: bool = Field(
        True,
        description="Fused log-probs: the LM head and log-softmax run on the last hidden "
        "states 1,024 positions at a time (checkpointed), never holding the full logits; "
        "false takes them from the model's logits (as does a run with algorithm.fsdp).",
    )
    use_liger_kernel: bool | None = Field(
        None, description="Liger kernels; null decides per model."
    )
    use_mamba_kernels: bool | None = Field(
        None, description="Mamba kernels; null decides per model."
    )
    cast_logprobs_to_fp32: bool = Field(True, description="Compute log-probs in float32.")
    seed: int = Field(42, ge=0, description="Seed for the LLM run.")
    quantization: str | dict[str, Any] | None = Field(
        None,
        description="Load the frozen base model quantized with bitsandbytes and train the "
        "LoRA adapter on it (QLoRA; the qlora extra): a preset ('nf4', 'fp4', 'int8') or "
        "BitsAndBytesConfig settings (load_in_4bit or load_in_8bit, bnb_4bit_quant_type, "
        "bnb_4bit_use_double_quant, bnb_4bit_compute_dtype, llm_int8_threshold, "
        "llm_int8_skip_modules).",
    )
    activation_offload: bool = Field(
        False,
        description="Keep the activations each training forward saves for backward in pinned "
        "host memory (torch.autograd.graph.save_on_cpu) and copy them back for backward: less "
        "GPU memory for a copy each way. Needs a CUDA device (on a CPU they already are in "
        "host memory: refused when the agent is built). SFT refuses it.",
    )
    moe_lora_recompute: bool | None = Field(None, description="Recompute MoE LoRA activations.")
    use_sequence_packing: bool = Field(
        False,
        description="SFT and DPO: lay a micro-batch's sequences end to end in rows of at most "
        "twice its longest (a preference pair in one row), position ids restarting per "
        "sequence so attention stays within it: the same loss with fewer padded positions. "
        "Refused by rollout algorithms.",
    )
    lora_target_scope: str | None = Field(None, description="Restrict LoRA to a module scope.")
    chunk_rows: int | None = Field(
        None,
        ge=1,
        description="Rows per forward pass wherever log-probs are computed (micro-batches, "
        "reference and old-policy passes, packed rows): the same values and gradients with a "
        "smaller peak; null runs each batch at once.",
    )
    attn_implementation: str | None = Field(
        None, description="Attention kernel: sdpa, eager, flash_attention_2, flex_attention."
    )
    micro_batch_size_per_gpu: int | None = Field(None, ge=1, description="Rows per forward pass.")
    mini_batch_size: int | None = Field(
        None, ge=1, description="Rows per optimizer step; a multiple of the micro batch."
    )
    hf_generate_chunk_size: int | None = Field(None, ge=1, description="Prompts per HF generate().")
    thinking_token_budget: int | None = Field(
        None,
        ge=0,
        description="Tokens allowed for thinking; below the output cap. A completion thinks "
        "inside <think>...</think> (from its first token when the prompt ends in an open "
        "<think>); once a thought holds this many tokens unclosed, the tokens of </think> "
        "are forced and generation goes on into the answer. Forced tokens stay in the "
        "completion but are left out of the loss (the policy did not sample them). Needs "
        "max_output_tokens, above it (the rest is the answer's). HF generate only (refused "
        "with use_vllm). Null: thoughts are unbounded.",
    )
    constrain_answer_pattern: str | None = Field(
        None,
        validation_alias=AliasChoices("constrain_answer_pattern", "answer_pattern"),
        description="Regex the answer must match; no ^ or $ anchors. The answer is the "
        "completion after its thought (all of it without one), leading spaces, tabs and "
        "newlines aside: "
        "while decoding, only tokens that keep it a prefix of a match may be sampled and "
        "EOS only at a full match, so a finished answer is a full match (one cut by "
        "max_output_tokens is a prefix of one); thoughts are not constrained. HF generate "
        "only (refused with use_vllm).",
    )
    answer_continuation: bool = Field(
        False,
        description="Continue generation past the answer pattern: the pattern constrains only "
        "the start of the answer, and once the answer is a full match the model continues "
        "freely (to EOS or max_output_tokens). False: the whole answer must match, and the "
        "completion ends when no token can extend the match. Needs an answer pattern.",
    )
    # A boolean is accepted on input only: true becomes FSDPConfig(), false None.
    fsdp: FSDPField = Field(
        None, description="FSDP2 sharding; true for defaults, a mapping to tune, null for off."
    )
    vllm_engine_args: dict[str, Any] = Field(
        default_factory=dict, description="Extra arguments forwarded verbatim to vLLM."
    )
    vllm_lora_export_dir: str | None = Field(None, description="Where LoRA weights go for vLLM.")
    pretrained_model_name_or_path: str | None = Field(
        None, min_length=1, description="Model to fine-tune (lifted from the network section)."
    )
    max_model_len: int = Field(
        1024, ge=1, description="Context length (lifted from network.max_context_length)."
    )
    lora_config: LoraConfigDict | None = Field(
        None, description="LoRA adapter (lifted from network.lora_config)."
    )

    model_config = {**StrictModel.model_config, "populate_by_name": True}

    @field_validator("fsdp", mode="before")
    @classmethod
    def _fsdp(cls, value: Any) -> Any:
        return coerce_fsdp(value)

    @field_validator("quantization")
    @classmethod
    def _quantization(cls, value: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
        if value is None:
            return None
        return check_quantization(value)

    @field_validator("constrain_answer_pattern")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        if value.startswith("^") or (value.endswith("$") and not value.endswith("\\$")):
            raise ValueError("must not be anchored with ^ or $; the answer is matched in place")
        return value

    def _max_output_tokens(self) -> int | None:
        """The per-turn generation cap (``None``: this spec does not generate)."""
        return None

    @model_validator(mode="after")
    def _llm_rules(self) -> LLMAlgorithmSpec:
        refused = self.refused_fields
        if (
            self.answer_continuation
            and self.constrain_answer_pattern is None
            and "answer_continuation" not in refused
        ):
            raise ValueError(
                "answer_continuation=True continues generation past the answer pattern: set "
                "algorithm.constrain_answer_pattern, or remove answer_continuation"
            )
        budget = self.thinking_token_budget
        if budget is not None and "thinking_token_budget" not in refused:
            cap = self._max_output_tokens()
            if cap is None:
                raise ValueError(
                    f"thinking_token_budget={budget} needs a per-turn output cap above it: "
                    "set algorithm.max_output_tokens"
                )
            if budget >= cap:
                raise ValueError(
                    f"thinking_token_budget={budget} must be below max_output_tokens={cap}: "
                    "the rest of the cap is for the closing tag and the answer"
                )
        if (
            self.mini_batch_size is not None
            and self.micro_batch_size_per_gpu is not None
            and self.mini_batch_size % self.micro_batch_size_per_gpu
        ):
            raise ValueError(
                f"mini_batch_size ({self.mini_batch_size}) must be a multiple of "
                f"micro_batch_size_per_gpu ({self.micro_batch_size_per_gpu})"
            )
        return self


QUANTIZATION_PRESETS: dict[str, dict[str, Any]] = {
    "nf4": {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
    "fp4": {"load_in_4bit": True, "bnb_4bit_quant_type": "fp4"},
    "int8": {"load_in_8bit": True},
}
"""``quantization`` names and the bitsandbytes settings each stands for."""
QUANTIZATION_KEYS = frozenset(
    {
        "load_in_4bit",
        "load_in_8bit",
        "bnb_4bit_quant_type",
        "bnb_4bit_use_double_quant",
        "bnb_4bit_compute_dtype",
        "llm_int8_threshold",
        "llm_int8_skip_modules",
    }
)
_DTYPES = ("float32", "bfloat16", "float16")


def check_quantization(value: str | dict[str, Any]) -> str | dict[str, Any]:
    """A valid ``quantization`` value: a preset name, or bitsandbytes settings that ask
    for exactly one of 4-bit and 8-bit loading.

    Raises:
        ValueError: Naming the preset or setting that is wrong and what is allowed.
    """
    if isinstance(value, str):
        if value not in QUANTIZATION_PRESETS:
            raise ValueError(f"unknown preset {value!r}: use one of {sorted(QUANTIZATION_PRESETS)}")
        return value
    unknown = sorted(set(value) - QUANTIZATION_KEYS)
    if unknown:
        raise ValueError(f"unknown setting(s) {unknown}: allowed are {sorted(QUANTIZATION_KEYS)}")
    if bool(value.get("load_in_4bit")) == bool(value.get("load_in_8bit")):
        raise ValueError("set exactly one of load_in_4bit and load_in_8bit to true")
    kind = value.get("bnb_4bit_quant_type", "nf4")
    if kind not in ("nf4", "fp4"):
        raise ValueError(f"bnb_4bit_quant_type={kind!r}: use nf4 or fp4")
    dtype = value.get("bnb_4bit_compute_dtype", "float32")
    if dtype not in _DTYPES:
        raise ValueError(f"bnb_4bit_compute_dtype={dtype!r}: use one of {list(_DTYPES)}")
    return value


class CosineLRScheduleConfig(StrictModel):
    """Cosine learning-rate schedule for LLM rollout training."""

    num_epochs: int = Field(100, ge=1, description="Length of the schedule in epochs.")
    warmup_proportion: float = Field(0.0, ge=0.0, le=1.0, description="Share spent warming up.")


class VLLMConfig(StrictModel):
    """vLLM rollout-engine settings (used where a GPU is present)."""

    tensor_parallel_size: int = Field(1, ge=1, description="GPUs per vLLM engine.")
    gpu_memory_utilization: float = Field(0.3, ge=0.0, le=1.0, description="GPU memory share.")
    max_num_seqs: int = Field(8, ge=1, description="Concurrent sequences per engine.")
    max_num_batched_tokens: int | None = Field(None, ge=1, description="Tokens per engine step.")
    enforce_eager: bool | None = Field(None, description="Disable CUDA graphs.")
    sleep_mode: bool = Field(False, description="Release GPU memory between rollouts.")
    sleep_mode_level: int = Field(1, ge=1, le=2, description="vLLM sleep level (1 or 2).")
    dtype: str | None = Field(None, min_length=1, description="Engine dtype.")
    quantization: str | None = Field(None, min_length=1, description="Engine quantization.")
    max_lora_rank: int = Field(16, ge=1, description="Largest LoRA rank the engine serves.")
    max_loras: int = Field(1, ge=1, description="LoRA adapters served at once.")
    stop_sequences: list[str] | None = Field(None, description="Extra stop strings.")
    presence_penalty: float = Field(0.0, ge=0.0, description="vLLM presence penalty.")
    frequency_penalty: float = Field(0.0, ge=0.0, description="vLLM frequency penalty.")


def check_ratio_pooling(pooling: str, level: str | None) -> None:
    """``turn_ratio_pooling`` other than its default needs a span to pool over.

    Raises:
        ValueError: For ``mean`` pooling with token-level ratios.
    """
    if pooling != "sum" and level in ("token", "auto", None):
        raise ValueError(
            "turn_ratio_pooling pools the ratios of a turn or trajectory: set "
            "importance_sampling_level to turn or trajectory, or remove turn_ratio_pooling"
        )


class RolloutLLMSpec(LLMAlgorithmSpec):
    """LLM algorithms that learn from generated rollouts (GRPO, LLM PPO, LLM REINFORCE)."""

    env_type: ClassVar[str] = "rollout"

    beta: float = mutable_field(
        0.001, ge=0.0, le=1.0, low=1e-4, high=0.1, description="KL penalty coefficient."
    )
    temperature: float = Field(0.9, gt=0.0, description="Sampling temperature.")
    repetition_penalty: float = Field(1.0, ge=0.0, description="Sampling repetition penalty.")
    top_p: float = Field(1.0, ge=0.0, le=1.0, description="Nucleus sampling mass.")
    top_k: int = Field(50, ge=0, description="Top-k sampling; 0 disables.")
    min_p: float = Field(0.0, ge=0.0, le=1.0, description="Min-p sampling.")
    max_output_tokens: int | None = Field(None, ge=1, description="Per-turn generation cap.")
    min_output_tokens: int | None = Field(None, ge=0, description="Per-turn generation floor.")
    cosine_lr_schedule_config: CosineLRScheduleConfig | None = Field(
        None, description="Cosine learning-rate schedule."
    )
    vllm_config: VLLMConfig | None = Field(
        None, description="vLLM engine settings (null: the defaults; only with use_vllm)."
    )
    use_vllm: bool = Field(
        False,
        description="Generate with vLLM in the trainer process (CUDA, or the CPU build); "
        "weights reach it as LoRA adapter files.",
    )
    vllm_importance_sampling_correction: bool = Field(
        True,
        description="Weight each generated token by min(pi_trainer / pi_vllm, cap): the "
        "update's reference is the trainer's log-probs, the samples came from vLLM's.",
    )
    vllm_importance_sampling_cap: float = Field(2.0, ge=0.0, description="Cap of that correction.")

    def _max_output_tokens(self) -> int | None:
        return self.max_output_tokens


class BanditSpec(SingleAgentAlgorithmSpec):
    """Contextual bandit algorithms (NeuralTS, NeuralUCB)."""

    bandit: ClassVar[bool] = True
    env_type: ClassVar[str] = "bandit"
    agent_type: ClassVar[str] = "bandit_agent"
    default_evo_steps: ClassVar[int] = 500
    action_space_kinds: ClassVar[frozenset[str]] = DISCRETE

    gamma: float = mutable_field(
        1.0, ge=0.0, le=100.0, low=0.1, high=10.0, description="Exploration scale (not a discount)."
    )
    lamb: float = mutable_field(
        1.0, gt=0.0, low=0.1, high=10.0,
        description="Regularisation of the exploration covariance.",
    )  # fmt: skip
    reg: float = mutable_field(
        0.000625, ge=0.0, low=1e-5, high=1e-2, description="L2 regularisation of the network."
    )
    learn_step: int = learn_step_field(2, "Steps between learning updates.")
