"""``algorithm.quantization``: QLoRA, a LoRA adapter trained on a base model loaded 4- or
8-bit by bitsandbytes (which runs on a CPU). Issue 29: the field was refused."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from agilerl.arena.models.errors import ConfigError
from agilerl.launch.compose import build_manifest
from agilerl.trainer import LocalTrainer

pytestmark = pytest.mark.llm
REPO = Path(__file__).resolve().parents[2]


def _sft(compose, tiny_model_dir: Path, *overrides: str):
    manifest, _ = build_manifest(
        compose(
            "experiment=sft_chat",
            f"network.pretrained_model_name_or_path={tiny_model_dir}",
            "network.max_context_length=64",
            "algorithm.batch_size=8",
            "algorithm.lr=0.003",
            "algorithm.gradient_checkpointing=false",
            "training.max_steps=12",
            "training.evaluation_interval=4",
            *overrides,
        )
    )
    return manifest


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["network.lora_config=null"], "network.lora_config"),
        (["training.checkpoint_export.format=merged"], "training.checkpoint_export.format"),
    ],
)
def test_settings_a_quantized_base_cannot_train_with_are_refused(
    compose, tiny_model_dir: Path, overrides: list[str], field: str
) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        _sft(compose, tiny_model_dir, "algorithm.quantization=nf4", *overrides)


@pytest.mark.slow  # two SFT runs a preset (~10 s)
@pytest.mark.parametrize("preset", ["nf4", "int8"])
def test_qlora_trains_the_adapter_on_a_quantized_base_that_takes_less_memory(
    compose, tiny_model_dir: Path, tmp_path: Path, monkeypatch, preset: str
) -> None:
    pytest.importorskip("bitsandbytes")
    import bitsandbytes as bnb

    monkeypatch.chdir(REPO)  # the preset's dataset paths are relative to the checkout
    runs = {}
    for name, extra in (("lora", []), ("qlora", [f"algorithm.quantization={preset}"])):
        trainer = LocalTrainer.from_manifest(
            _sft(compose, tiny_model_dir, *extra), run_dir=tmp_path / name, verbose=False
        )
        population, _ = trainer.train()
        losses = [
            float(r["loss"]) for r in csv.DictReader((tmp_path / name / "metrics.csv").open())
        ]
        runs[name] = (population[0].actor, losses)
    qlora, losses = runs["qlora"]
    quantized = (bnb.nn.Linear4bit, bnb.nn.Linear8bitLt)
    layers = [m for m in qlora.modules() if isinstance(m, quantized)]
    assert layers and all(not p.requires_grad for m in layers for p in m.parameters())
    assert losses[-1] < losses[0] - 0.1, losses  # the held-out loss falls: the adapter learns
    lora_bytes = runs["lora"][0].get_memory_footprint()
    bound = 0.5 if preset == "nf4" else 0.7  # 4 bits vs 8 bits a weight, the rest float32
    assert qlora.get_memory_footprint() < bound * lora_bytes


@pytest.mark.slow  # two 10-round GRPO runs on the tiny model (~20 s)
def test_qlora_grpo_learns_the_digit_reward(compose, tiny_model_dir: Path, tmp_path: Path,
                                            monkeypatch) -> None:  # fmt: skip
    pytest.importorskip("bitsandbytes")
    monkeypatch.chdir(REPO)

    def held_out(name: str, *overrides: str) -> float:
        manifest, _ = build_manifest(
            compose(
                "experiment=grpo_digits",
                f"network.pretrained_model_name_or_path={tiny_model_dir}",
                "algorithm.quantization=nf4",
                "training.evaluation_interval=5",
                *overrides,
            )
        )
        LocalTrainer.from_manifest(manifest, run_dir=tmp_path / name, verbose=False).train()
        rows = list(csv.DictReader((tmp_path / name / "metrics.csv").open()))
        return float(rows[-1]["fitness"])

    untrained = held_out("untrained", "algorithm.lr=0", "training.max_steps=5")
    trained = held_out("trained", "training.max_steps=15")
    assert trained >= max(0.6, untrained + 0.4), (untrained, trained)


def test_an_evaluation_leaves_the_quantized_layers_trainable(tiny_model_dir: Path) -> None:
    """bitsandbytes repacks 4-bit weights for a CPU inference kernel without autograd at
    the first no-grad eval forward: the update after an evaluation must still get the
    gradients an update without one gets."""
    pytest.importorskip("bitsandbytes")
    import torch

    from agilerl.arena.models.networks import LoraConfigDict
    from agilerl.builders.llm import to_peft_lora
    from agilerl.llm.model import add_lora, load_causal_lm

    LORA_QV = LoraConfigDict(lora_r=4, target_modules=["q_proj", "v_proj"]).model_dump()

    def first_layer_grad(evaluate_first: bool) -> torch.Tensor:
        torch.manual_seed(0)
        model = add_lora(
            load_causal_lm(tiny_model_dir, quantization="nf4"),
            to_peft_lora(LORA_QV),
            separate_reference=False,
        )
        ids = torch.arange(2, 18).view(2, 8)
        if evaluate_first:
            model.eval()
            with torch.no_grad():
                model(input_ids=ids)
        model.train()
        for name, param in model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(param, std=0.1)  # B starts at 0: no gradient reaches A
        model(input_ids=ids, labels=ids).loss.backward()
        name = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"
        return dict(model.named_parameters())[name].grad

    plain = first_layer_grad(evaluate_first=False)
    assert plain.abs().sum() > 0
    torch.testing.assert_close(first_layer_grad(evaluate_first=True), plain)
