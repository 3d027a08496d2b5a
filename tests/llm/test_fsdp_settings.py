"""Every ``algorithm.fsdp`` setting changes what a sharded run does, or is refused.

The torchrun test launches :mod:`fsdp_worker` once (two processes, gloo on CPU, the
tiny model) and checks, per setting, the fact it changes against the float32 baseline
(``param_dtype: float32``, the rest at their defaults). The other tests need no process
group.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.llm.torchrun import run_two_processes

pytestmark = pytest.mark.llm
HERE = Path(__file__).parent
REPO = HERE.parents[1]


@pytest.fixture(scope="module")
def facts(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``{case: facts}`` from one two-process run of every case in ``fsdp_worker.CASES``."""
    out = tmp_path_factory.mktemp("fsdp") / "facts.json"
    run_two_processes(HERE / "fsdp_worker.py", str(tiny_model_dir), str(out))
    return json.loads(out.read_text())


def _same_update(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)
    assert a["sums"] == pytest.approx(b["sums"], abs=1e-5, rel=1e-5)
    for case in (a, b):  # the gathered checkpoint holds the same tensors, and Adam's state
        assert case["checkpoint"]["sums"] == pytest.approx(case["sums"], abs=1e-6)
        assert case["checkpoint"]["optimizer_slots"] == len(case["sums"])


@pytest.mark.slow
def test_mixed_precision_dtypes_act(facts: dict[str, Any]) -> None:
    """param_dtype: the gathered weights compute in it (the logits' dtype), the master
    weights stay float32; reduce_dtype: the reduce-scatter's dtype."""
    base, defaults, fp16 = facts["f32"], facts["defaults"], facts["fp16"]
    assert base["logits_dtype"] == ["torch.float32"] and base["dtypes"] == ["torch.float32"]
    assert defaults["logits_dtype"] == ["torch.bfloat16"]  # the default acts on a CPU
    assert fp16["logits_dtype"] == ["torch.float16"]
    # Only frozen, unsharded parameters are cast; sharded masters and Adam keep float32.
    assert defaults["dtypes"] == ["torch.bfloat16", "torch.float32"]
    assert defaults["reduce_dtypes"] == ["float32"] == base["reduce_dtypes"]
    assert facts["reduce_bf16"]["reduce_dtypes"] == ["bfloat16"]
    assert defaults["loss"] != base["loss"]  # bfloat16 arithmetic, not float32's
    assert defaults["loss"] == pytest.approx(base["loss"], abs=2e-3)


@pytest.mark.slow
def test_reshard_after_forward_false_skips_the_backward_gathers(facts: dict[str, Any]) -> None:
    # 5 units x 2 micro-batches: gathered in forward, and again in backward unless kept.
    assert facts["f32"]["all_gathers"] == 20 and facts["no_reshard"]["all_gathers"] == 10
    _same_update(facts["f32"], facts["no_reshard"])


@pytest.mark.slow
def test_defer_grad_sync_reduces_once_per_step_with_the_same_update(
    facts: dict[str, Any],
) -> None:
    deferred, every = facts["f32"], facts["f32_no_defer"]
    assert every["reduce_scatters"] == 2 * deferred["reduce_scatters"] == 10  # 5 units
    _same_update(deferred, every)


@pytest.mark.slow
def test_wrap_every_n_blocks_groups_blocks_into_fewer_units(facts: dict[str, Any]) -> None:
    one, two = facts["f32"], facts["wrap_2"]
    # 4 blocks + the root: 5 units -> 2 + the root; one gather each in forward and backward
    # per micro-batch (2), one reduce-scatter each per step.
    assert (one["all_gathers"], one["reduce_scatters"]) == (20, 5)
    assert (two["all_gathers"], two["reduce_scatters"]) == (12, 3)
    _same_update(one, two)


@pytest.mark.slow
def test_param_persistence_threshold_leaves_small_frozen_parameters_whole(
    facts: dict[str, Any],
) -> None:
    default, zero = facts["f32"], facts["threshold_0"]
    small_frozen = set(zero["sharded"]) - set(default["sharded"])
    assert small_frozen and all(zero["local_numel"][n][1] < 100_000 for n in small_frozen)
    assert not any("lora_" in n and ".default." in n for n in small_frozen)  # trainable stay
    assert any("q_proj.base_layer" in n for n in small_frozen)  # 65,536 elements
    assert any("layernorm" in n for n in small_frozen)
    assert all(
        default["local_numel"][n][1] >= 100_000 or "default" in n for n in default["sharded"]
    )
    _same_update(default, zero)


@pytest.mark.slow
def test_prefetch_units_gather_more_units_ahead(facts: dict[str, Any]) -> None:
    one, two = facts["f32"], facts["prefetch_2"]
    # Issued by the first block's compute: the root, block 0, then 1 or 2 blocks ahead.
    assert one["issued"]["forward"] == 3 and two["issued"]["forward"] == 4
    # Issued in backward by the last block's compute: the root, block 3, 1 or 2 behind it.
    assert one["issued"]["backward"] == 3 and two["issued"]["backward"] == 4
    assert one["all_gathers"] == two["all_gathers"]  # earlier, not more
    _same_update(one, two)


@pytest.mark.slow
def test_shard_group_size_replicates_across_groups(facts: dict[str, Any]) -> None:
    full, hsdp = facts["f32"], facts["hsdp_1"]
    assert all(local * 2 >= total > local for local, total in full["local_numel"].values())
    assert all(local == total for local, total in hsdp["local_numel"].values())
    # Groups of one rank: nothing to gather or reduce-scatter (gradients are all-reduced).
    assert (hsdp["all_gathers"], hsdp["reduce_scatters"]) == (0, 0)
    _same_update(full, hsdp)
    assert "use a divisor of 2" in facts["hsdp_3"]["refused"]
    assert "algorithm.fsdp.shard_group_size" in facts["hsdp_3"]["refused"]


@pytest.mark.slow
def test_checkpoint_settings_pick_the_recomputed_blocks(facts: dict[str, Any]) -> None:
    # Two micro-batches: a block runs forward twice, four times when recomputed.
    assert facts["f32"]["forwards"] == [2, 2, 2, 2]
    assert facts["checkpoint_all"]["forwards"] == [4, 4, 4, 4]
    assert facts["checkpoint_every_2"]["forwards"] == [4, 2, 4, 2]
    assert facts["checkpoint_skip_llama"]["forwards"] == [2, 2, 2, 2]
    for case in ("checkpoint_all", "checkpoint_every_2", "checkpoint_skip_llama"):
        _same_update(facts["f32"], facts[case])
    refused = facts["checkpoint_without_checkpointing"]["refused"]
    assert "algorithm.fsdp.checkpoint_every_n_blocks" in refused
    assert "algorithm.gradient_checkpointing is false" in refused
    unknown = facts["checkpoint_skip_unknown"]["refused"]
    assert (
        "algorithm.fsdp.checkpoint_skip_layer_types" in unknown and "LlamaDecoderLayer" in unknown
    )


@pytest.mark.slow
def test_optimizer_offload_hooks_and_cpu_offload_refused(facts: dict[str, Any]) -> None:
    assert facts["f32"]["optimizer_hooks"] == [1, 1]  # optim_cpu_offload (default)
    assert facts["no_optim_offload"]["optimizer_hooks"] == [0, 0]
    assert facts["f32"]["optimizer_state_devices"] == ["cpu"]
    refused = facts["cpu_offload"]["refused"]
    assert "algorithm.fsdp.cpu_offload" in refused and "needs CUDA" in refused


def test_checkpoint_selection_on_the_tiny_model(tiny_model_dir: Path) -> None:
    """Which blocks keep checkpointing, by kind and stride (no process group needed)."""
    from agilerl.arena.models.errors import ConfigError
    from agilerl.llm.distributed import decoder_layers
    from agilerl.llm.model import (
        enable_gradient_checkpointing,
        load_causal_lm,
        select_checkpointed_blocks,
    )

    model = load_causal_lm(str(tiny_model_dir))
    layers = decoder_layers(model)
    with pytest.raises(ConfigError, match="gradient_checkpointing is false"):
        select_checkpointed_blocks(layers, None, skip_types=[], every_n=2)
    enable_gradient_checkpointing(model)
    types = ["full_attention", "sliding_attention"] * 2
    assert select_checkpointed_blocks(layers, types, skip_types=[], every_n=3) == [0, 3]
    assert [layer.gradient_checkpointing for layer in layers] == [True, False, False, True]
    chosen = select_checkpointed_blocks(layers, types, skip_types=["sliding_attention"], every_n=1)
    assert chosen == [0, 2]
    with pytest.raises(ConfigError, match=r"\['mamba'\] match no block"):
        select_checkpointed_blocks(layers, types, skip_types=["mamba"], every_n=1)
    assert (
        select_checkpointed_blocks(layers, None, skip_types=["LlamaDecoderLayer"], every_n=1) == []
    )


def test_machine_dependent_refusals_name_the_field() -> None:
    from agilerl.arena.models.errors import ConfigError
    from agilerl.arena.models.fsdp import FSDPConfig
    from agilerl.llm.distributed import check_fsdp_config

    offload = FSDPConfig(cpu_offload=True, optim_cpu_offload=False)
    with pytest.raises(ConfigError, match=r"algorithm.fsdp.cpu_offload: needs CUDA"):
        check_fsdp_config(offload, world=2, cuda=False)
    check_fsdp_config(offload, world=2, cuda=True)
    with pytest.raises(ConfigError, match=r"algorithm.fsdp.shard_group_size: 3 .* divisor of 4"):
        check_fsdp_config(FSDPConfig(shard_group_size=3), world=4, cuda=False)
    check_fsdp_config(FSDPConfig(shard_group_size=2), world=4, cuda=False)
