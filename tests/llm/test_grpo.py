"""GRPO, LLM REINFORCE and LLM PPO on the tiny model: updates, advantages, learning."""

from __future__ import annotations

import pytest
import torch

from agilerl.builders.llm import LLMBuilder
from agilerl.llm.rollout import Sample

pytestmark = pytest.mark.llm


def rounds_to_target(agent, env, budget: int, target: float = 0.8) -> tuple[int | None, list]:
    """Train round by round; the first round whose 3-round mean reward exceeds ``target``."""
    rewards = []
    for step in range(budget):
        metrics = agent.learn(agent.rollout(env, env.batch(step, agent.spec.batch_size, 0)))
        rewards.append(metrics["reward"])
        if len(rewards) >= 3 and sum(rewards[-3:]) / 3 > target:
            return step + 1, rewards
    return None, rewards


def test_one_round_changes_only_the_adapter_and_lm_head(
    make_rollout_spec, digit_env, left_tokenizer
) -> None:
    agent = LLMBuilder.build(make_rollout_spec("GRPO", beta=0.01), tokenizer=left_tokenizer)
    before = {n: p.detach().clone() for n, p in agent.actor.named_parameters()}
    samples = agent.rollout(digit_env, digit_env.batch(0, 4, 0))
    assert len(samples) == 32 and [s.group for s in samples[:9]] == [0] * 8 + [1]
    metrics = agent.learn(samples)
    assert {"loss", "kl", "reward", "frac_reward_zero_std", "clip_fraction"} <= set(metrics)
    changed = {n for n, p in agent.actor.named_parameters() if not torch.equal(p, before[n])}
    assert changed
    assert all(".default." in n and ("lora_" in n or "modules_to_save" in n) for n in changed)
    assert any("lm_head.modules_to_save" in n for n in changed)
    assert agent.num_updates == 2  # update_epochs=2, one mini-batch each


def test_group_relative_advantages_and_zero_std_filter(make_rollout_spec, left_tokenizer) -> None:
    spec = make_rollout_spec("GRPO", group_size=2, filter_zero_adv=True)
    agent = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    samples = [
        Sample([1, 2], [0, 1], [0.0, -1.0], r, i // 2, "")
        for i, r in enumerate([1.0, 0.0, 0.5, 0.5])
    ]
    kept, metrics = agent.assign_advantages(samples)
    assert [s.advantage for s in samples] == [0.5, -0.5, 0.0, 0.0]
    assert metrics["frac_reward_zero_std"] == 0.5 and kept == samples[:2]
    agent.set_hyperparameters(adv_norm="mean_std")
    agent.assign_advantages(samples)
    assert samples[0].advantage == pytest.approx(0.5 / (0.7071 + 1e-4), rel=1e-3)


@pytest.mark.slow
def test_grpo_learns_the_digit_reward_and_a_frozen_lm_head_does_not(
    make_rollout_spec, digit_env, left_tokenizer
) -> None:
    """The same budget and seed: with LoRA on the output layer the reward rises to the
    target; with LoRA on q and v only (the negative control) it stays low. One test, so a
    broken learner fails it instead of passing the control."""
    agent = LLMBuilder.build(make_rollout_spec("GRPO"), tokenizer=left_tokenizer)
    reached, rewards = rounds_to_target(agent, digit_env, budget=25)
    assert rewards[0] < 0.3
    assert reached is not None, rewards
    frozen = LLMBuilder.build(make_rollout_spec("GRPO", lm_head=False), tokenizer=left_tokenizer)
    control, control_rewards = rounds_to_target(frozen, digit_env, budget=25)
    assert control is None and max(control_rewards) < 0.5, control_rewards
    assert max(control_rewards) < max(rewards) - 0.4, (control_rewards, rewards)


def _many_prompts_env(digit_env):
    """The digit env with each prompt four times (32 rows), for one-completion-per-prompt rounds."""
    rows = [{**row, "copy": k} for k in range(4) for row in digit_env.train]
    digit_env.train = rows
    return digit_env


@pytest.mark.slow
def test_llm_reinforce_learns_the_digit_reward(
    make_rollout_spec, digit_env, left_tokenizer
) -> None:
    spec = make_rollout_spec("LLMREINFORCE", batch_size=32, lr=1e-3)
    agent = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    reached, rewards = rounds_to_target(agent, _many_prompts_env(digit_env), budget=40)
    assert reached is not None, rewards


@pytest.mark.slow
def test_llm_ppo_learns_the_digit_reward_and_its_value_loss_falls(
    make_rollout_spec, digit_env, left_tokenizer
) -> None:
    spec = make_rollout_spec("LLMPPO", batch_size=32, lr=1e-3, lr_critic=1e-3)
    agent = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    env = _many_prompts_env(digit_env)
    rewards, value_losses = [], []
    for step in range(30):  # past the point where the reward saturates, so the values settle
        metrics = agent.learn(agent.rollout(env, env.batch(step, 32, 0)))
        rewards.append(metrics["reward"])
        value_losses.append(metrics["value_loss"])
    windows = [sum(rewards[i - 3 : i]) / 3 for i in range(3, len(rewards) + 1)]
    assert max(windows) > 0.8, rewards
    assert sum(value_losses[-3:]) / 3 < 0.5 * max(value_losses[:5]), value_losses


def test_ppo_value_head_is_checkpointed_and_reinforce_uses_a_baseline(
    make_rollout_spec, left_tokenizer
) -> None:
    ppo = LLMBuilder.build(make_rollout_spec("LLMPPO"), tokenizer=left_tokenizer)
    state = ppo.checkpoint_state()
    assert {"value_head.weight", "value_head.bias"} <= set(state["trainable"])
    assert len(ppo.optimizer.param_groups) == 2
    ppo.set_hyperparameters(lr_critic=1e-4)
    assert ppo.optimizer.param_groups[1]["lr"] == 1e-4
    reinforce = LLMBuilder.build(make_rollout_spec("LLMREINFORCE"), tokenizer=left_tokenizer)
    samples = [Sample([1, 2], [0, 1], [0.0, -1.0], r, i, "") for i, r in enumerate([1.0, 0.0])]
    reinforce.assign_advantages(samples)
    assert [s.advantage for s in samples] == [0.5, -0.5]


def test_micro_batches_accumulate_to_the_same_update(
    make_rollout_spec, digit_env, left_tokenizer
) -> None:
    spec = make_rollout_spec("GRPO", group_size=4, max_output_tokens=8, beta=0.01)
    sampler = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    samples = sampler.rollout(digit_env, digit_env.batch(0, 4, 0))
    states = []
    for micro in (8, 2):
        agent = LLMBuilder.build(
            spec.model_copy(
                update={
                    "mini_batch_size": 8,
                    "micro_batch_size_per_gpu": micro,
                    "loss_norm": "accumulation_window",  # every micro-batch over the window
                }
            ),
            tokenizer=left_tokenizer,
        )
        copies = [Sample(**{**vars(s), "extra": {}}) for s in samples]
        agent.learn(copies)
        assert agent.num_updates == 4  # 2 mini-batches x update_epochs=2
        states.append(agent.trainable_state())
    a, b = states
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)
