"""LLMBuilder: tokenizer required, pre-built actors used as given, LoRA, reference policy."""

from __future__ import annotations

import pytest
import torch

from agilerl.builders.llm import LLMBuilder

pytestmark = pytest.mark.llm


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_build_needs_a_tokenizer(make_spec) -> None:
    with pytest.raises(ValueError, match="tokenizer"):
        LLMBuilder.build(make_spec("SFT"))


def test_build_loads_lora_model_and_freezes_the_base(make_spec, tokenizer) -> None:
    from peft import PeftModel

    from agilerl.algorithms.llm_dataset import DPO

    algo = LLMBuilder.build(make_spec("DPO"), tokenizer=tokenizer)
    assert isinstance(algo, DPO) and isinstance(algo.actor, PeftModel)
    trainable = [n for n, p in algo.actor.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n and ".default." in n for n in trainable)
    assert "reference" in algo.actor.peft_config
    assert {id(p) for p in algo.trainable_parameters()} == {
        id(p) for g in algo.optimizer.param_groups for p in g["params"]
    }


def test_prebuilt_actor_is_used_as_given(make_spec, tokenizer, tiny_model_dir) -> None:
    from peft import get_peft_model

    from agilerl.builders.llm import to_peft_lora
    from agilerl.llm.model import load_causal_lm

    spec = make_spec("SFT")
    actor = get_peft_model(
        load_causal_lm(tiny_model_dir), to_peft_lora(spec.lora_config.model_dump())
    )
    algo = LLMBuilder.build(spec, tokenizer=tokenizer, actor_network=actor)
    assert algo.actor is actor


@pytest.mark.parametrize("separate", [True, False])
def test_reference_equals_base_model_before_and_after_training(
    make_spec, make_env, tokenizer, tiny_model_dir, separate: bool
) -> None:
    from agilerl.llm.model import load_causal_lm, reference_policy

    env = make_env("preference")
    spec = make_spec("DPO", use_separate_reference_adapter=separate, batch_size=8)
    algo = LLMBuilder.build(spec, tokenizer=tokenizer)
    assert ("reference" in algo.actor.peft_config) is separate
    base = load_causal_lm(tiny_model_dir).eval()
    ids = env.collate(env.test.rows[:4])["input_ids"]
    expected = _logits(base, ids)
    frozen = {n: p.detach().clone() for n, p in algo.actor.named_parameters() if "lora_" not in n}
    algo.actor.eval()
    with reference_policy(algo.actor):
        assert torch.allclose(_logits(algo.actor, ids), expected, atol=1e-6)
    for step in range(3):
        algo.learn(env.train.rows[step * 8 : (step + 1) * 8], env)
    algo.actor.eval()
    with reference_policy(algo.actor):
        assert torch.allclose(_logits(algo.actor, ids), expected, atol=1e-6)
    # The policy moved; the base weights did not.
    assert not torch.allclose(_logits(algo.actor, ids), expected, atol=1e-3)
    after = dict(algo.actor.named_parameters())
    assert all(torch.equal(after[n], t) for n, t in frozen.items())
    assert not any(after[n].requires_grad for n in after if ".reference." in n)


def test_gradient_checkpointing_gives_the_same_update(make_spec, make_env, tokenizer) -> None:
    env = make_env("sft")
    rows = env.train.rows[:8]
    states = []
    for checkpointing in (False, True):
        algo = LLMBuilder.build(
            make_spec("SFT", gradient_checkpointing=checkpointing), tokenizer=tokenizer
        )
        assert algo.actor.is_activation_checkpointing is checkpointing
        algo.learn(rows, env)
        states.append(algo.trainable_state())
    assert all(torch.allclose(states[0][k], states[1][k], atol=1e-6) for k in states[0])


def test_micro_batches_accumulate_to_the_full_batch_update(make_spec, make_env, tokenizer) -> None:
    env = make_env("preference")
    rows = env.train.rows[:8]
    states = []
    for micro in (None, 2):
        spec = make_spec("DPO", micro_batch_size_per_gpu=micro, mini_batch_size=8, batch_size=8)
        algo = LLMBuilder.build(spec, tokenizer=tokenizer)
        algo.learn(rows, env)
        states.append(algo.trainable_state())
    assert all(torch.allclose(states[0][k], states[1][k], atol=1e-5) for k in states[0])


def test_full_finetuning_dpo_asks_for_lora(make_spec, tokenizer) -> None:
    from agilerl.arena.models.errors import ConfigError

    with pytest.raises(ConfigError, match="lora_config"):
        LLMBuilder.build(make_spec("DPO", lora_config=None), tokenizer=tokenizer)


def test_fsdp_in_one_process_is_refused_naming_torchrun(make_spec, make_rollout_spec) -> None:
    from agilerl.arena.models import ConfigError
    from agilerl.strategies.llm import check_fsdp

    with pytest.raises(ConfigError, match=r"algorithm.fsdp .* torchrun --nproc_per_node"):
        check_fsdp(make_rollout_spec("GRPO", fsdp=True), multi_process=True)
    with pytest.raises(ConfigError, match=r"algorithm.fsdp .* SFT fine-tunes in one process"):
        check_fsdp(make_spec("SFT", fsdp=True), multi_process=False)
    check_fsdp(make_spec("SFT"), multi_process=False)  # unset: nothing to refuse


def test_mini_batches_and_update_epochs_set_the_optimizer_steps(
    make_spec, make_env, tokenizer
) -> None:
    env = make_env("preference")
    spec = make_spec("DPO", batch_size=8, mini_batch_size=4, micro_batch_size_per_gpu=2)
    algo = LLMBuilder.build(spec.model_copy(update={"update_epochs": 2}), tokenizer=tokenizer)
    calls = []
    prepare = algo.prepare
    algo.prepare = lambda rows, env: calls.append(len(rows)) or prepare(rows, env)
    metrics = algo.learn(env.train.rows[:8], env)
    assert algo.num_updates == 4 and algo.steps == 8
    # Reference log-probs: one pass over the whole batch, before the first update.
    assert calls == [8]
    assert metrics["reward_accuracy"] > 0
