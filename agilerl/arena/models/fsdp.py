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
ACTING_FSDP_FIELDS = frozenset({"reshard_after_forward"})
"""The FSDP settings sharding reads; any other set away from its default is refused."""


def _dtype_name(value: Any) -> str:
    """Accept a dtype name or a ``torch.dtype`` (without importing torch)."""
    name = str(value).removeprefix("torch.")
    if name not in DTYPE_NAMES:
        raise ValueError(f"unknown dtype {value!r}; use one of {', '.join(DTYPE_NAMES)}")
    return name


@dataclass(config=ConfigDict(extra="forbid"))
class FSDPConfig:
    """Settings for sharding the LLM actor with PyTorch FSDP2 (``fully_shard``)."""

    reshard_after_forward: bool = Field(
        True,
        description="Free gathered parameters after each module's forward. "
        "False keeps them gathered: faster, more VRAM.",
    )
    cpu_offload: bool = Field(
        False,
        description="Offload sharded parameters and gradients to CPU. Needs colocated vLLM. "
        "Mutually exclusive with optim_cpu_offload.",
    )
    optim_cpu_offload: bool = Field(
        True,
        description="Keep Adam state on CPU and move it to GPU only for step(). "
        "Parameters and gradients stay on GPU.",
    )
    defer_grad_sync: bool = Field(
        True,
        description="Reduce-scatter gradients only on the last micro-batch of an optimizer step.",
    )
    param_dtype: str = Field(
        "bfloat16",
        description="Mixed-precision parameter dtype, e.g. 'bfloat16'. "
        "A torch.dtype is accepted and stored by name.",
    )
    reduce_dtype: str = Field(
        "float32", description="Dtype for gradient reduce-scatter and all-reduce."
    )
    prefetch_units: int = Field(
        1, ge=1, description="Neighbouring FSDP units to all-gather ahead during forward."
    )
    backward_prefetch_units: int = Field(
        1, ge=1, description="Neighbouring FSDP units to all-gather ahead during backward."
    )
    checkpoint_skip_layer_types: list[str] = Field(
        default_factory=list,
        description="Transformer block kinds left out of activation checkpointing.",
    )
    checkpoint_every_n_blocks: int = Field(
        1, ge=1, description="Checkpoint one in every n blocks not skipped."
    )
    wrap_every_n_blocks: int = Field(
        1, ge=1, description="Consecutive transformer blocks per FSDP unit."
    )
    param_persistence_threshold: int = Field(
        100_000,
        ge=0,
        description="Parameters with fewer elements than this stay unsharded; 0 shards all.",
    )
    ep: int = Field(1, ge=1, description="Expert-parallel degree for packed MoE experts.")
    ep_token_blocks: int = Field(
        1, ge=1, description="Token blocks per routed MoE layer under expert parallel."
    )
    tp: int = Field(1, ge=1, description="Tensor-parallel degree for dense layers.")
    shard_group_size: int | None = Field(
        None,
        ge=1,
        description="Ranks that shard weights between them; groups replicate (HSDP). "
        "None shards across all trainer ranks.",
    )
    compile_blocks: bool = Field(
        False, description="torch.compile the dense submodules of each transformer block."
    )
    compile_backend: str = Field(
        "inductor", description="torch.compile backend for compile_blocks."
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
        # FSDP2 here shards every transformer block and the root (fully_shard, gloo or NCCL)
        # and takes reshard_after_forward; any other setting would be accepted and ignored.
        for name, info in type(self).__pydantic_fields__.items():
            if name in ACTING_FSDP_FIELDS:
                continue
            value, default = getattr(self, name), info.get_default(call_default_factory=True)
            if value != default:
                raise ValueError(
                    f"fsdp.{name}={value!r} cannot act here: sharding takes "
                    f"{', '.join(sorted(ACTING_FSDP_FIELDS))} only; remove fsdp.{name}"
                )
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
