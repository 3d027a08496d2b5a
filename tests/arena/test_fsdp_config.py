"""``algorithm.fsdp`` validation: what acts is accepted, what has no implementation is refused.

What each accepted setting changes in a sharded run is tested in
``tests/llm/test_fsdp_settings.py`` (two processes, gloo).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from agilerl.arena.models.fsdp import REFUSED_FSDP_FIELDS, FSDPConfig

# A non-default value for every setting that acts (tests/llm/test_fsdp_settings.py).
ACTING = {
    "reshard_after_forward": False,
    "cpu_offload": True,  # refused on a CPU run when sharding, not here
    "optim_cpu_offload": False,
    "defer_grad_sync": False,
    "param_dtype": "float32",
    "reduce_dtype": "bfloat16",
    "prefetch_units": 2,
    "backward_prefetch_units": 2,
    "checkpoint_skip_layer_types": ["sliding_attention"],
    "checkpoint_every_n_blocks": 2,
    "wrap_every_n_blocks": 2,
    "param_persistence_threshold": 0,
    "shard_group_size": 1,
}
REFUSED = {
    "ep": 2,
    "ep_token_blocks": 4,
    "tp": 2,
    "compile_blocks": True,
    "compile_backend": "eager",
}


def test_every_field_either_acts_or_is_refused() -> None:
    fields = set(FSDPConfig.__pydantic_fields__)
    assert set(ACTING) | set(REFUSED) == fields
    assert set(REFUSED) == set(REFUSED_FSDP_FIELDS)


@pytest.mark.parametrize("name", sorted(ACTING))
def test_acting_settings_validate(name: str) -> None:
    extra = {"optim_cpu_offload": False} if name == "cpu_offload" else {}
    config = FSDPConfig(**{name: ACTING[name], **extra})
    assert getattr(config, name) == ACTING[name]


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_settings_without_an_implementation_are_refused(name: str) -> None:
    with pytest.raises(
        ValidationError, match=rf"fsdp\.{name}=.* cannot act here: .*remove fsdp\.{name}"
    ):
        FSDPConfig(**{name: REFUSED[name]})
    FSDPConfig(**{name: FSDPConfig.__pydantic_fields__[name].default})  # the default is fine


def test_offload_settings_are_exclusive_and_dtypes_are_named() -> None:
    with pytest.raises(ValidationError, match="mutually exclusive"):
        FSDPConfig(cpu_offload=True)
    assert FSDPConfig(param_dtype="torch.float16").param_dtype == "float16"
    with pytest.raises(ValidationError, match="unknown dtype"):
        FSDPConfig(reduce_dtype="int8")
    with pytest.raises(ValidationError):
        FSDPConfig(wrap_every_n_blocks=0)


def test_the_fsdp_model_imports_without_torch() -> None:
    code = "import sys, agilerl.arena.models.fsdp; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
