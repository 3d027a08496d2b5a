"""Worker for the data-parallel test: ``torchrun --nproc_per_node=N dp_worker.py MODEL IN OUT``.

Options: ``--fsdp=JSON`` shards with those ``algorithm.fsdp`` settings, ``--chunk-rows=N``,
``--micro=N`` (``micro_batch_size_per_gpu``).

Every process builds the same GRPO agent, takes its share of the saved
rollout samples (whole groups), runs a few updates and rank 0 writes the
loss curve and the trained tensors' sums.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import torch


def run(
    model_dir: str,
    samples_file: str,
    updates: int = 4,
    fsdp: dict | None = None,
    chunk_rows: int | None = None,
    micro: int | None = None,
) -> tuple[list[float], list[float]]:
    """Loss curve and per-tensor sums after ``updates`` learn() calls on the saved samples.

    ``fsdp``: ``algorithm.fsdp`` settings to shard with (``None``: not sharded).
    """
    from agilerl.arena.models.algorithms import GRPOSpec
    from agilerl.builders.llm import LLMBuilder
    from agilerl.llm import distributed
    from agilerl.llm.model import load_tokenizer
    from agilerl.llm.rollout import Sample

    torch.set_num_threads(1)
    lora = {
        "lora_r": 8,
        "lora_alpha": 16,
        "target_modules": ["q_proj", "v_proj"],
        "lora_dropout": 0.0,
        "modules_to_save": ["lm_head"],
    }
    spec = GRPOSpec(
        pretrained_model_name_or_path=model_dir,
        lora_config=lora,
        group_size=4,
        batch_size=4,
        lr=1e-3,
        beta=0.01,
        max_model_len=128,
        max_output_tokens=8,
        gradient_checkpointing=False,
        max_grad_norm=1.0,
        seed=0,
        chunk_rows=chunk_rows,
        micro_batch_size_per_gpu=micro,
        # The mini-batch's token count: micro-batches split differently over 1 and 2
        # processes, so per-micro-batch normalisation (the default) would differ.
        loss_norm="accumulation_window" if micro else "micro_batch",
        fsdp=fsdp,
    )
    agent = LLMBuilder.build(spec, tokenizer=load_tokenizer(model_dir, padding_side="left"))
    if fsdp is not None:
        agent.shard()
    with open(samples_file) as handle:
        rows = json.loads(handle.read())
    samples = distributed.shard([Sample(**row) for row in rows])
    losses = []
    for _ in range(updates):
        copies = [Sample(**{**vars(s), "extra": {}}) for s in samples]
        losses.append(agent.learn(copies)["loss"])
    sums = [float(t.double().sum()) for t in agent.trainable_state().values()]
    global SHARDED
    SHARDED = any(type(p).__name__ == "DTensor" for p in agent.trainable_parameters())
    return losses, sums


SHARDED = False


if __name__ == "__main__":
    from agilerl.llm import distributed

    distributed.init_from_env("gloo")
    options = dict(a.removeprefix("--").split("=", 1) for a in sys.argv[4:])
    losses, sums = run(
        sys.argv[1],
        sys.argv[2],
        fsdp=json.loads(options["fsdp"]) if "fsdp" in options else None,
        chunk_rows=int(options["chunk-rows"]) if "chunk-rows" in options else None,
        micro=int(options["micro"]) if "micro" in options else None,
    )
    if distributed.rank() == 0:
        with open(sys.argv[3], "w") as handle:
            json.dump(
                {
                    "losses": losses,
                    "sums": sums,
                    "world": distributed.world_size(),
                    "sharded": SHARDED,
                },
                handle,
            )
