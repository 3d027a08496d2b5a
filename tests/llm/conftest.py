"""Fixtures for the LLM tests: offline mode, one torch thread, a tiny model built once."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("datasets")

import torch

REPO = Path(__file__).resolve().parents[2]
LORA = {"lora_r": 8, "lora_alpha": 16, "target_modules": "all-linear", "lora_dropout": 0.0}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama model and tokenizer, built once per test session."""
    from agilerl.llm.tiny import build_tiny_llm

    return build_tiny_llm(tmp_path_factory.mktemp("tiny-llm") / "model")


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir: Path) -> Any:
    from agilerl.llm.model import load_tokenizer

    return load_tokenizer(tiny_model_dir)


@pytest.fixture
def make_spec(tiny_model_dir: Path) -> Callable[..., Any]:
    """An SFT or DPO spec on the tiny model with test-sized settings."""
    from agilerl.arena.models.algorithms import DPOSpec, SFTSpec

    def _make(name: str = "SFT", **overrides: Any) -> Any:
        fields: dict[str, Any] = {
            "pretrained_model_name_or_path": str(tiny_model_dir),
            "lora_config": LORA,
            "batch_size": 16,
            "lr": 3e-3,
            "max_model_len": 128,
            "gradient_checkpointing": False,
            "seed": 0,
        }
        fields.update(overrides)
        return (SFTSpec if name == "SFT" else DPOSpec)(**fields)

    return _make


@pytest.fixture
def make_env(tokenizer: Any) -> Callable[..., Any]:
    """The sample SFT or preference dataset env (data/ in the repository)."""
    from agilerl.arena.models.env import LLMEnvSpec
    from agilerl.llm.datasets import load_dataset_env

    def _make(objective: str = "sft", max_model_len: int = 128, **fields: Any) -> Any:
        dataset = "data/sft.jsonl" if objective == "sft" else "data/preference.jsonl"
        spec = LLMEnvSpec(
            env_type="dataset",
            objective=objective,
            dataset=fields.pop("dataset", dataset),
            **fields,
        )
        return load_dataset_env(spec, tokenizer, max_model_len=max_model_len, base_dir=REPO)

    return _make
