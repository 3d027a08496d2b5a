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


DIGIT_PROMPTS = [
    "Write a number.",
    "Count to ten.",
    "What is 2 plus 2?",
    "Hello!",
    "Say something.",
    "Give me digits.",
    "What colour is the sky?",
    "Tell a story.",
]
QV = ["q_proj", "v_proj"]


@pytest.fixture(scope="session")
def left_tokenizer(tiny_model_dir: Path) -> Any:
    from agilerl.llm.model import load_tokenizer

    return load_tokenizer(tiny_model_dir, padding_side="left")


@pytest.fixture
def make_rollout_spec(tiny_model_dir: Path) -> Callable[..., Any]:
    """A GRPO, LLMREINFORCE or LLMPPO spec on the tiny model, LoRA on q,v + trainable lm_head."""
    from agilerl.arena.models.algorithms import GRPOSpec, LLMPPOSpec, LLMREINFORCESpec

    def _make(name: str = "GRPO", lm_head: bool = True, **overrides: Any) -> Any:
        lora = {"lora_r": 8, "lora_alpha": 16, "target_modules": QV, "lora_dropout": 0.0}
        if lm_head:
            lora["modules_to_save"] = ["lm_head"]
        fields: dict[str, Any] = {
            "pretrained_model_name_or_path": str(tiny_model_dir),
            "lora_config": lora,
            "batch_size": 4,
            "max_output_tokens": 16,
            "max_model_len": 128,
            "gradient_checkpointing": False,
            "seed": 0,
            "beta": 0.0,
            "temperature": 1.0,
            "top_k": 0,
            "max_grad_norm": 1.0,
            "update_epochs": 2,
        }
        if name == "GRPO":
            fields.update(group_size=8, lr=1e-3)
        fields.update(overrides)
        klass = {"GRPO": GRPOSpec, "LLMPPO": LLMPPOSpec, "LLMREINFORCE": LLMREINFORCESpec}[name]
        return klass(**fields)

    return _make


@pytest.fixture
def digit_env(left_tokenizer: Any) -> Any:
    """Eight chat prompts scored by the fraction of digit characters (a dense toy reward)."""
    from agilerl.llm.rewards import digit_fraction_reward
    from agilerl.llm.rollout_env import PromptEpisode, RolloutEnv

    rows = [{"prompt": p} for p in DIGIT_PROMPTS]

    def episode(row: dict[str, Any]) -> Any:
        return PromptEpisode(
            [{"role": "user", "content": row["prompt"]}], row, digit_fraction_reward
        )

    return RolloutEnv(
        train=rows, test=rows[:4], make_episode=episode, tokenizer=left_tokenizer, name="digits"
    )
