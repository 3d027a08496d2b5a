"""use_sequence_packing and chunk_rows: which specs take them and which refuse them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agilerl.arena.models.registry import MANIFEST_REGISTRY


@pytest.mark.parametrize("name", ["SFT", "DPO"])
def test_dataset_algorithms_take_packing_and_row_chunks(name: str) -> None:
    spec = MANIFEST_REGISTRY.create(name, use_sequence_packing=True, chunk_rows=4)
    assert spec.use_sequence_packing and spec.chunk_rows == 4
    assert "use_sequence_packing" not in type(spec).refused_fields


def test_packing_needs_position_ids() -> None:
    with pytest.raises(ValidationError, match="calc_position_embeddings"):
        MANIFEST_REGISTRY.create("SFT", use_sequence_packing=True, calc_position_embeddings=False)


@pytest.mark.parametrize("name", ["GRPO", "LLMPPO", "LLMREINFORCE"])
def test_rollout_algorithms_take_row_chunks_and_refuse_packing(name: str) -> None:
    base = {"group_size": 2} if name == "GRPO" else {}
    assert MANIFEST_REGISTRY.create(name, chunk_rows=2, **base).chunk_rows == 2
    with pytest.raises(ValidationError, match=r"use_sequence_packing=True cannot act here: .*SFT"):
        MANIFEST_REGISTRY.create(name, use_sequence_packing=True, **base)
