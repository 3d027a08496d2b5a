"""The dataset loop: exact resume, checkpoints in the run directory, peft-loadable exports."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agilerl.arena.models.training import CheckpointExportSpec, TrainingSpec
from agilerl.builders.llm import LLMBuilder
from agilerl.training.llm.train_llm_dataset import train_llm_dataset

pytestmark = pytest.mark.llm


@pytest.mark.parametrize("name", ["SFT", "DPO"])
def test_resume_mid_run_equals_an_uninterrupted_run(
    tmp_path: Path, make_spec, make_env, tokenizer, name: str
) -> None:
    env = make_env("sft" if name == "SFT" else "preference")
    # Dropout on, 2 epochs of a small subset: resume must restore the RNG and the data position.
    env.train.rows, env.test.rows = env.train.rows[:12], env.test.rows[:8]
    lora = {
        "lora_r": 4,
        "lora_alpha": 8,
        "target_modules": ["q_proj", "v_proj"],
        "lora_dropout": 0.1,
    }
    spec = make_spec(name, batch_size=4, lora_config=lora, micro_batch_size_per_gpu=2)
    training = TrainingSpec(num_epochs=2, evaluation_interval=2)

    straight = LLMBuilder.build(spec, tokenizer=tokenizer)
    _, fit_straight = train_llm_dataset([straight], env, run_dir=tmp_path / "a", training=training)

    first = LLMBuilder.build(spec, tokenizer=tokenizer)
    train_llm_dataset([first], env, run_dir=tmp_path / "b", stop_after=4, training=training)
    assert first.num_updates < straight.num_updates
    resumed = LLMBuilder.build(spec, tokenizer=tokenizer)
    _, fit_resumed = train_llm_dataset(
        [resumed], env, run_dir=tmp_path / "b", resume=True, training=training
    )
    assert fit_resumed == fit_straight
    assert resumed.num_updates == straight.num_updates and resumed.steps == straight.steps
    a, b = straight.trainable_state(), resumed.trainable_state()
    assert all(torch.equal(a[k], b[k]) for k in a)
    opt_a, opt_b = straight.optimizer.state_dict(), resumed.optimizer.state_dict()
    assert all(
        torch.equal(opt_a["state"][k]["exp_avg"], opt_b["state"][k]["exp_avg"])
        for k in opt_a["state"]
    )
    latest = (tmp_path / "b" / "checkpoints" / "latest").read_text().strip()
    assert latest == "step_000000000006"
    assert (tmp_path / "b" / "metrics.csv").is_file()


def test_checkpoints_load_weights_only(tmp_path: Path, make_spec, make_env, tokenizer) -> None:
    env = make_env("sft")
    algo = LLMBuilder.build(make_spec("SFT", batch_size=4), tokenizer=tokenizer)
    train_llm_dataset([algo], env, training=TrainingSpec(max_steps=2), run_dir=tmp_path)
    agent = torch.load(
        tmp_path / "checkpoints" / "step_000000000002" / "agent_0.pt", weights_only=True
    )
    assert agent["spec"]["lr"] == algo.spec.lr and agent["num_updates"] == 2
    fresh = LLMBuilder.build(make_spec("SFT", batch_size=4), tokenizer=tokenizer)
    fresh.load_checkpoint_state(agent)
    assert all(
        torch.equal(v, fresh.trainable_state()[k]) for k, v in algo.trainable_state().items()
    )
    with pytest.raises(ValueError, match="for SFT, not DPO"):
        LLMBuilder.build(make_spec("DPO"), tokenizer=tokenizer).load_checkpoint_state(agent)


def test_exported_adapter_and_merged_model_give_the_same_logits(
    tmp_path: Path, make_spec, make_env, tokenizer, tiny_model_dir: Path
) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    env = make_env("preference")
    algo = LLMBuilder.build(make_spec("DPO", batch_size=4), tokenizer=tokenizer)
    export = CheckpointExportSpec(format="merged", trigger="final")
    train_llm_dataset(
        [algo], env, training=TrainingSpec(max_steps=3, checkpoint_export=export), run_dir=tmp_path
    )
    where = tmp_path / "checkpoints" / "step_000000000003"
    ids = env.collate(env.test.rows[:3])["input_ids"]
    algo.actor.eval()
    with torch.no_grad():
        expected = algo.actor(input_ids=ids).logits
        base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
        reloaded = PeftModel.from_pretrained(base, where / "adapter_0").eval()
        assert list(reloaded.peft_config) == ["default"]
        assert torch.allclose(reloaded(input_ids=ids).logits, expected, atol=1e-5)
        merged = AutoModelForCausalLM.from_pretrained(where / "merged_0", dtype=torch.float32)
        assert not any("lora" in n for n, _ in merged.named_parameters())
        assert torch.allclose(merged.eval()(input_ids=ids).logits, expected, atol=1e-4)
