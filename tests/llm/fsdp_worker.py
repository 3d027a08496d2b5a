"""Worker for the FSDP settings test: ``torchrun --nproc_per_node=2 fsdp_worker.py MODEL OUT``.

Every process builds the same GRPO agent on the tiny model once per case of
:data:`CASES` (``algorithm.fsdp`` settings plus spec overrides), shards it, and takes
one update on the same synthetic samples (each process its own group), with two
micro-batches per optimizer step. It records what the settings change: collective
counts and dtypes (FSDP's ``dist.all_gather_single`` / ``dist.reduce_scatter_single``
are wrapped), which parameters are sharded and their local sizes, the logits' dtype,
the all-gathers issued before a block runs (prefetch), per-block forward counts
(activation checkpointing), the optimizer's step hooks, the loss and the trained
tensors' sums. Cases whose settings the run refuses record the ``ConfigError``.
Rank 0 writes ``{case: facts}`` as JSON to OUT.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import torch
import torch.distributed as dist

F32 = {"param_dtype": "float32"}
CASES: dict[str, dict[str, Any]] = {
    "f32": {"fsdp": F32},
    "f32_no_defer": {"fsdp": {**F32, "defer_grad_sync": False}},
    "no_reshard": {"fsdp": {**F32, "reshard_after_forward": False}},
    "defaults": {"fsdp": {}},
    "reduce_bf16": {"fsdp": {**F32, "reduce_dtype": "bfloat16"}},
    "fp16": {"fsdp": {"param_dtype": "float16"}},
    "wrap_2": {"fsdp": {**F32, "wrap_every_n_blocks": 2}},
    "threshold_0": {"fsdp": {**F32, "param_persistence_threshold": 0}},
    "prefetch_2": {"fsdp": {**F32, "prefetch_units": 2, "backward_prefetch_units": 2}},
    "hsdp_1": {"fsdp": {**F32, "shard_group_size": 1}},
    "checkpoint_all": {"fsdp": F32, "gradient_checkpointing": True},
    "checkpoint_every_2": {
        "fsdp": {**F32, "checkpoint_every_n_blocks": 2},
        "gradient_checkpointing": True,
    },
    "checkpoint_skip_llama": {
        "fsdp": {**F32, "checkpoint_skip_layer_types": ["LlamaDecoderLayer"]},
        "gradient_checkpointing": True,
    },
    "no_optim_offload": {"fsdp": {**F32, "optim_cpu_offload": False}},
    # Refused on this machine / process group (ConfigError when sharding):
    "cpu_offload": {"fsdp": {**F32, "cpu_offload": True, "optim_cpu_offload": False}},
    "hsdp_3": {"fsdp": {**F32, "shard_group_size": 3}},
    "checkpoint_without_checkpointing": {"fsdp": {**F32, "checkpoint_every_n_blocks": 2}},
    "checkpoint_skip_unknown": {
        "fsdp": {**F32, "checkpoint_skip_layer_types": ["mamba"]},
        "gradient_checkpointing": True,
    },
}

COUNTS: dict[str, list[str]] = {"all_gather": [], "reduce_scatter": []}


def _count_collectives() -> None:
    """Record each FSDP all-gather and reduce-scatter (with the reduced tensor's dtype)."""
    for name, key in (
        ("all_gather_single", "all_gather"),
        ("reduce_scatter_single", "reduce_scatter"),
    ):
        original = getattr(dist, name)

        def wrapped(*args: Any, _original: Any = original, _key: str = key, **kwargs: Any) -> Any:
            tensor = kwargs.get("input", args[1] if len(args) > 1 else None)
            COUNTS[_key].append(str(getattr(tensor, "dtype", "?")).removeprefix("torch."))
            return _original(*args, **kwargs)

        setattr(dist, name, wrapped)


def _samples() -> list[Any]:
    """Two groups of four synthetic completions (6 prompt and 5 generated tokens each)."""
    from agilerl.llm.rollout import Sample

    generator = torch.Generator().manual_seed(0)
    samples = []
    for group in range(2):
        prompt = torch.randint(5, 200, (6,), generator=generator).tolist()
        for k in range(4):
            completion = torch.randint(5, 200, (5,), generator=generator).tolist()
            samples.append(
                Sample(
                    ids=prompt + completion,
                    action_mask=[0] * 6 + [1] * 5,
                    old_logps=[0.0] * 6 + [-5.0] * 5,
                    reward=float(k % 3) + group,
                    group=group,
                    text="",
                )
            )
    return samples


def run_case(model_dir: str, tokenizer: Any, case: dict[str, Any]) -> dict[str, Any]:
    """Build, shard and update one agent; the facts the case's settings change."""
    from torch.distributed.tensor import DTensor

    from agilerl.arena.models.algorithms import GRPOSpec
    from agilerl.arena.models.errors import ConfigError
    from agilerl.builders.llm import LLMBuilder
    from agilerl.llm import distributed

    lora = {"lora_r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"],
            "lora_dropout": 0.0, "modules_to_save": ["lm_head"]}  # fmt: skip
    spec = GRPOSpec(
        pretrained_model_name_or_path=model_dir, lora_config=lora, group_size=4, batch_size=2,
        lr=1e-3, beta=0.0, max_model_len=64, max_output_tokens=5, max_grad_norm=1.0, seed=0,
        micro_batch_size_per_gpu=2, use_liger_loss=False,
        **{"gradient_checkpointing": False, **case},
    )  # fmt: skip
    agent = LLMBuilder.build(spec, tokenizer=tokenizer)
    try:
        agent.shard()
    except ConfigError as error:
        return {"refused": str(error)}
    layers = distributed.decoder_layers(agent.actor)
    facts: dict[str, Any] = {
        "sharded": sorted(n for n, p in agent.actor.named_parameters() if isinstance(p, DTensor)),
        "local_numel": {
            n: [p.to_local().numel(), p.numel()]
            for n, p in agent.actor.named_parameters()
            if isinstance(p, DTensor)
        },
        "dtypes": sorted({str(p.dtype) for p in agent.actor.parameters()}),
        "optimizer_hooks": [
            len(agent.optimizer._optimizer_step_pre_hooks),
            len(agent.optimizer._optimizer_step_post_hooks),
        ],
    }
    forwards = [0] * len(layers)
    # All-gathers issued (FSDP's own plus prefetches) by the time the first block computes
    # in forward, and between the end of forward and the last block's backward.
    issued: dict[str, int] = {}
    logits: list[str] = []

    def on_forward(index: int) -> Any:
        def hook(module: Any, args: Any) -> None:
            forwards[index] += 1
            issued.setdefault("forward", len(COUNTS["all_gather"]))

        return hook

    def on_head(module: Any, args: Any, out: torch.Tensor) -> None:
        logits.append(str(out.dtype))
        issued.setdefault("forward_end", len(COUNTS["all_gather"]))

    def on_backward(module: Any, grad: Any) -> None:
        issued.setdefault("backward", len(COUNTS["all_gather"]) - issued["forward_end"])

    for i, layer in enumerate(layers):
        layer.self_attn.register_forward_pre_hook(on_forward(i))
    layers[-1].mlp.register_full_backward_pre_hook(on_backward)
    agent.actor.get_base_model().lm_head.register_forward_hook(on_head)
    for key in COUNTS:
        COUNTS[key].clear()
    samples = distributed.shard(_samples())
    metrics = agent.learn(samples)
    state = agent.optimizer.state
    facts.update(
        loss=metrics["loss"],
        sums=[float(t.double().sum()) for t in agent.trainable_state().values()],
        forwards=forwards,
        issued=issued,
        logits_dtype=sorted(set(logits)),
        all_gathers=len(COUNTS["all_gather"]),
        reduce_scatters=len(COUNTS["reduce_scatter"]),
        reduce_dtypes=sorted(set(COUNTS["reduce_scatter"])),
        optimizer_state_devices=sorted(
            {str(v.device) for s in state.values() for v in s.values() if torch.is_tensor(v)}
        ),
    )
    # The checkpoint gathers whole tensors and optimizer state (rank 0's is non-empty).
    checkpoint = agent.checkpoint_state()
    facts["checkpoint"] = {
        "sums": [float(t.double().sum()) for t in checkpoint["trainable"].values()],
        "optimizer_slots": len(checkpoint["optimizer"].get("state", {})),
    }
    return facts


def main(model_dir: str, out: str, names: list[str]) -> None:
    """Run the named cases (all when none are named); rank 0 writes their facts."""
    from agilerl.llm import distributed
    from agilerl.llm.model import load_tokenizer

    torch.set_num_threads(1)
    distributed.init_from_env("gloo")
    _count_collectives()
    tokenizer = load_tokenizer(model_dir, padding_side="left")
    results = {name: run_case(model_dir, tokenizer, CASES[name]) for name in names or CASES}
    if distributed.rank() == 0:
        with open(out, "w") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
