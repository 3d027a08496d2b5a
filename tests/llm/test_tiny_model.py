"""The tiny offline model: size, tokenizer, chat template, reload."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.llm


def test_tiny_model_is_small_llama_and_reloads(tiny_model_dir: Path, tokenizer) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    params = sum(p.numel() for p in model.parameters())
    assert 2e6 <= params <= 5e6
    assert model.config.model_type == "llama"
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 7 plus 5?"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert text == "<|im_start|>user\nWhat is 7 plus 5?<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert tokenizer.padding_side == "right" and tokenizer.pad_token_id != tokenizer.eos_token_id
    logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), len(tokenizer))


def test_tiny_model_build_is_deterministic(tmp_path: Path, tiny_model_dir: Path) -> None:
    from safetensors.torch import load_file

    from agilerl.llm.tiny import build_tiny_llm

    again = build_tiny_llm(tmp_path / "again")
    first = load_file(tiny_model_dir / "model.safetensors")
    second = load_file(again / "model.safetensors")
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
