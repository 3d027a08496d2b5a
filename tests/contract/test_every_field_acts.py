"""Every field of every registered spec acts on the run or is refused at validation.

A field is *refused* when its spec lists it in ``refused_fields``: any value but
its default fails validation naming the field and what to do instead. Every
other field must be read by the code that trains (outside the contract
package); the behaviour it drives is tested where that code is. A field that
neither code reads nor the spec refuses is the accept-and-ignore this test
exists to stop.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from agilerl.arena.models.registry import MANIFEST_REGISTRY
from agilerl.arena.models.training import ReplayBufferSpec, TrainingSpec

AGILERL = Path(__file__).resolve().parents[2] / "agilerl"
CONTRACT = AGILERL / "arena" / "models"

# A non-default value for each refused field (the generation controls are refused by the
# dataset specs, DPO and SFT, which generate nothing).
SAMPLES = {
    "use_liger_kernel": True,
    "use_mamba_kernels": True,
    "activation_offload": True,
    "moe_lora_recompute": True,
    "use_sequence_packing": True,
    "lora_target_scope": "attention",
    "thinking_token_budget": 4,
    "constrain_answer_pattern": "[0-9]+",
    "answer_continuation": True,
    "cosine_lr_schedule_config": {"num_epochs": 2},
    "torch_compiler": "default",
    "action_batch_size": 2,
    "use_memory_efficient_params": False,
    "turn_advantage_trajectory_fallback": False,
    "turn_level_clip": False,
    "turn_value_reduction": "mean",
}
# Fields no code reads by name, and why they still act or cannot be set.
BY_VALIDATION = {
    "cudagraphs": "Literal[False]: any other value fails validation",
    "advantage_granularity": "turn is refused by the spec; auto and trajectory are the "
    "group-relative advantage every GRPO sample gets",
    "kind": "Literal['classic']: the one buffer family",
    "loss_type": "Literal['cispo']: CISPO's one loss (the algorithm class computes it)",
    "standard_buffer": "false is refused: the main memory is always kept",
    "name": "TrainingSpec.name labels the run; ReplayBufferSpec refuses a name",
}


def _code_identifiers() -> set[str]:
    """Identifiers in the non-contract source (``spec.lr``, ``getattr(spec, "lr")``, ...)."""
    found: set[str] = set()
    for path in AGILERL.rglob("*.py"):
        if CONTRACT in path.parents:
            continue
        found |= set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", path.read_text()))
    return found


def _spec_classes() -> dict[str, type]:
    MANIFEST_REGISTRY._load_all()
    return dict(MANIFEST_REGISTRY._specs)


def test_every_field_is_read_by_the_code_or_refused() -> None:
    read = _code_identifiers()
    unread = []
    classes = {**_spec_classes(), "TrainingSpec": TrainingSpec}
    classes["ReplayBufferSpec"] = ReplayBufferSpec
    for name, cls in classes.items():
        refused = getattr(cls, "refused_fields", {})
        for field in cls.model_fields:
            if field in refused or field in read or field in BY_VALIDATION:
                continue
            unread.append(f"{name}.{field}")
    assert not unread, f"fields validated and read by nothing: {unread}"


def test_refused_fields_fail_validation_naming_the_field_and_the_way_out() -> None:
    checked = 0
    for name, cls in _spec_classes().items():
        base = {"group_size": 2} if "group_size" in cls.model_fields else {}
        for field in cls.refused_fields:
            if field not in cls.model_fields:
                continue
            assert field in SAMPLES, f"{name}.{field}: add a non-default sample value"
            with pytest.raises(ValidationError, match=rf"{field}=.* cannot act here: .+"):
                cls(**base, **{field: SAMPLES[field]})
            cls(**base, **{field: cls.model_fields[field].default})  # the default is accepted
            checked += 1
    assert checked > 20
