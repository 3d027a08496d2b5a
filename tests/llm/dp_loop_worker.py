"""Worker for the data-parallel loop test: ``torchrun ... dp_loop_worker.py MODEL RUN_DIR``."""

from __future__ import annotations

import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import torch

if __name__ == "__main__":
    from agilerl.arena.models.algorithms import GRPOSpec
    from agilerl.arena.models.training import TrainingSpec
    from agilerl.builders.llm import LLMBuilder
    from agilerl.llm import distributed
    from agilerl.llm.model import load_tokenizer
    from agilerl.llm.rewards import digit_fraction_reward
    from agilerl.llm.rollout_env import PromptEpisode, RolloutEnv
    from agilerl.training.llm.train_llm_rollout import train_llm_rollout

    torch.set_num_threads(1)
    distributed.init_from_env("gloo")
    model_dir, run_dir = sys.argv[1], sys.argv[2]
    tokenizer = load_tokenizer(model_dir, padding_side="left")
    lora = {"lora_r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"],
            "lora_dropout": 0.0, "modules_to_save": ["lm_head"]}  # fmt: skip
    spec = GRPOSpec(
        pretrained_model_name_or_path=model_dir, lora_config=lora, group_size=4, batch_size=4,
        lr=1e-3, beta=0.0, max_model_len=128, max_output_tokens=8,
        gradient_checkpointing=False, max_grad_norm=1.0, seed=0,
    )  # fmt: skip
    agent = LLMBuilder.build(spec, tokenizer=tokenizer)
    rows = [{"prompt": p} for p in ("Write a number.", "Hello!", "Count to ten.", "Hi there.")]

    def episode(row: dict) -> PromptEpisode:
        return PromptEpisode(
            [{"role": "user", "content": row["prompt"]}], row, digit_fraction_reward
        )

    env = RolloutEnv(train=rows * 2, test=rows, make_episode=episode, tokenizer=tokenizer)
    training = TrainingSpec(max_steps=3, evaluation_interval=3)
    train_llm_rollout([agent], env, training=training, run_dir=run_dir)
    # Every process ends with the same adapter (gradients were combined).
    total = sum(float(t.double().sum()) for t in agent.trainable_state().values())
    sums = [0.0] * distributed.world_size()
    sums[distributed.rank()] = total
    agreed = [distributed.global_sum(x) for x in sums]
    assert max(agreed) - min(agreed) < 1e-6, agreed
