"""FSDP2 sharding settings for LLM actors (``algorithm.fsdp``)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    ConfigDict,
    Field,
    TypeAdapter,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.dataclasses import dataclass

DTYPE_NAMES = ("bfloat16", "float16", "float32", "float64")
REFUSED_FSDP_FIELDS: dict[str, str] = {
    "ep": "this trainer has no expert-parallel path (packed MoE experts are sharded like "
    "any other weight); remove fsdp.ep",
    "ep_token_blocks": "it splits tokens for expert parallel, which this trainer does not "
    "have; remove fsdp.ep_token_blocks",
    "tp": "this trainer has no tensor-parallel path for the LoRA-wrapped layers; shard "
    "across more processes with FSDP instead, and remove fsdp.tp",
    "compile_blocks": "this trainer does not torch.compile transformer blocks (sharded "
    "or not); remove fsdp.compile_blocks",
    "compile_backend": "it picks the backend for compile_blocks, which this trainer does "
    "not do; remove fsdp.compile_backend",
}
"""FSDP settings refused away from their defaults, with why and what to do instead."""


def _dtype_name(value: Any) -> str:
    """Accept a dtype name or a ``torch.dtype`` (without importing torch)."""
    name = str(value).removeprefix("torch.")
    if name not in DTYPE_NAMES:
        raise ValueError(f"unknown dtype {value!r}; use one of {', '.join(DTYPE_NAMES)}")
    return name


@dataclass(config=ConfigDict(extra="forbid"))
class FSDPConfig:
    """Settings for sharding the LLM actor with PyTorch FSDP2 (``fully_shard``).

    See :func:`agilerl.llm.distributed.fully_shard_model` for how each one is applied.
    Settings a run's machine cannot honour (``cpu_offload`` without CUDA, a
    ``shard_group_size`` that does not divide the processes) are refused when the
    model is sharded; ``ep``, ``ep_token_blocks``, ``tp``, ``compile_blocks`` and
    ``compile_backend`` have no implementation here and are refused away from their
    defaults.
    """

    reshard_after_forward: bool = Field(
        True,
        description="Free gathered parameters after each FSDP unit's forward (gather them "
        "again in backward). False keeps them gathered: faster, more memory.",
    )
    cpu_offload: bool = Field(
        False,
        description="Keep sharded parameters, gradients and the optimizer step on the CPU "
        "(FSDP2 CPUOffloadPolicy). Needs CUDA: refused on a CPU run, where they already "
        "live in host memory. Mutually exclusive with optim_cpu_offload.",
    )
    optim_cpu_offload: bool = Field(
        True,
        description="Keep the optimizer state in host memory between steps: moved to the "
        "parameters' device for step() and back after (optimizer step hooks). On a CPU run "
        "the state lives in host memory anyway.",
    )
    defer_grad_sync: bool = Field(
        True,
        description="With several micro-batches per optimizer step, reduce-scatter "
        "gradients only in the last micro-batch's backward (the others accumulate "
        "locally); the update is the same, with fewer collectives.",
    )
    param_dtype: str = Field(
        "bfloat16",
        description="Dtype of gathered parameters, so of forward and backward compute "
        "(FSDP2 MixedPrecisionPolicy); the sharded master weights and the optimizer keep "
        "the model's dtype. Frozen parameters left unsharded (param_persistence_threshold) "
        "are cast to it. float32 on a float32 model turns mixed precision off. "
        "A torch.dtype is accepted and stored by name.",
    )
    reduce_dtype: str = Field(
        "float32",
        description="Dtype gradients are reduce-scattered (and accumulated, under "
        "defer_grad_sync) in.",
    )
    prefetch_units: int = Field(
        1,
        ge=1,
        description="FSDP units each block unit all-gathers ahead of it in forward "
        "(set_modules_to_forward_prefetch): more overlap, more gathered memory.",
    )
    backward_prefetch_units: int = Field(
        1,
        ge=1,
        description="FSDP units each block unit all-gathers ahead of it (the earlier "
        "blocks) in backward (set_modules_to_backward_prefetch).",
    )
    checkpoint_skip_layer_types: list[str] = Field(
        default_factory=list,
        description="Block kinds run without activation checkpointing: a block's class name "
        "(e.g. LlamaDecoderLayer) or its entry in the model config's layer_types (e.g. "
        "sliding_attention). Needs algorithm.gradient_checkpointing; a kind matching no block "
        "is refused.",
    )
    checkpoint_every_n_blocks: int = Field(
        1,
        ge=1,
        description="Of the blocks not skipped, checkpoint the first and then one in every n "
        "(the rest keep their activations). Needs algorithm.gradient_checkpointing.",
    )
    wrap_every_n_blocks: int = Field(
        1,
        ge=1,
        description="Consecutive transformer blocks per FSDP unit (gathered and "
        "reduce-scattered together in one collective each).",
    )
    param_persistence_threshold: int = Field(
        100_000,
        ge=0,
        description="Frozen parameters with fewer elements than this are not sharded: every "
        "process keeps them whole (in param_dtype) and never gathers them. Trainable "
        "parameters are always sharded. 0 shards all.",
    )
    ep: int = Field(
        1, ge=1, description="Expert-parallel degree for packed MoE experts. Refused above 1."
    )
    ep_token_blocks: int = Field(
        1,
        ge=1,
        description="Token blocks per routed MoE layer under expert parallel. Refused above 1.",
    )
    tp: int = Field(
        1, ge=1, description="Tensor-parallel degree for dense layers. Refused above 1."
    )
    shard_group_size: int | None = Field(
        None,
        ge=1,
        description="Ranks that shard weights between them; the groups replicate (HSDP, a "
        "(replicate, shard) device mesh). Must divide the trainer processes. "
        "None shards across all of them.",
    )
    compile_blocks: bool = Field(
        False,
        description="torch.compile the dense submodules of each transformer block. Refused: "
        "no compile path here.",
    )
    compile_backend: str = Field(
        "inductor",
        description="torch.compile backend for compile_blocks. Refused away from its default.",
    )

    @field_validator("param_dtype", "reduce_dtype", mode="before")
    @classmethod
    def _dtype(cls, value: Any) -> str:
        return _dtype_name(value)

    @model_validator(mode="after")
    def _offload_exclusive(self) -> FSDPConfig:
        if self.cpu_offload and self.optim_cpu_offload:
            raise ValueError(
                "cpu_offload and optim_cpu_offload are mutually exclusive; "
                "set optim_cpu_offload: false to offload parameters"
            )
        return self

    @model_validator(mode="after")
    def _only_what_acts(self) -> FSDPConfig:
        # Settings with no implementation here would be accepted and ignored.
        for name, reason in REFUSED_FSDP_FIELDS.items():
            info = type(self).__pydantic_fields__[name]
            value, default = getattr(self, name), info.get_default(call_default_factory=True)
            if value != default:
                raise ValueError(f"fsdp.{name}={value!r} cannot act here: {reason}")
        return self


def coerce_fsdp(value: Any) -> Any:
    """Turn the manifest's ``fsdp`` value into an :class:`FSDPConfig` or ``None``.

    ``true`` and ``{}`` mean the defaults; ``false`` and ``null`` mean off.
    """
    if value is None or value is False or isinstance(value, FSDPConfig):
        return None if value is False else value
    if value is True:
        return FSDPConfig()
    if isinstance(value, dict):
        return value
    raise ValueError(f"fsdp must be a boolean, null or a mapping of FSDP settings, got {value!r}")


FSDPField = Annotated[
    FSDPConfig | None,
    WithJsonSchema(
        {"anyOf": [{"type": "null"}, {"type": "boolean"}, TypeAdapter(FSDPConfig).json_schema()]}
    ),
]
"""The ``fsdp`` field type: FSDP settings or ``None``; the schema also admits a boolean."""
