"""Spec fields, defaults, constraints and class-level paradigm flags."""

from __future__ import annotations

import inspect

import pydantic
import pytest
from pydantic import ValidationError

import agilerl.arena.models as m
from agilerl.arena.models import (
    MANIFEST_REGISTRY,
    AlgorithmSpec,
    LLMAlgorithmSpec,
    MultiAgentAlgorithmSpec,
    SingleAgentAlgorithmSpec,
    TrainingSpec,
)


def _all_models() -> list[type[pydantic.BaseModel]]:
    return [
        obj
        for _, obj in inspect.getmembers(m)
        if isinstance(obj, type) and issubclass(obj, pydantic.BaseModel)
    ]


@pytest.mark.parametrize("model", _all_models(), ids=lambda c: c.__name__)
def test_every_model_forbids_unknown_keys_and_describes_fields(model: type) -> None:
    assert model.model_config.get("extra") == "forbid"
    for name, info in model.model_fields.items():
        assert info.description, f"{model.__name__}.{name} has no description"


def test_fsdp_dataclass_forbids_unknown_keys() -> None:
    with pytest.raises(ValidationError):
        m.FSDPConfig(nope=1)
    assert m.FSDPConfig(param_dtype="torch.bfloat16").param_dtype == "bfloat16"
    with pytest.raises(ValidationError, match=r"fsdp.tp=2 cannot act here.*remove fsdp.tp"):
        m.FSDPConfig(tp=2)


def test_base_spec_defaults_match_the_seed() -> None:
    assert AlgorithmSpec.model_fields["batch_size"].default == 64
    single = SingleAgentAlgorithmSpec.model_fields
    assert (single["learn_step"].default, single["gamma"].default) == (5, 0.99)
    assert single["normalize_images"].default is True and single["net_config"].default is None
    multi = MultiAgentAlgorithmSpec.model_fields
    assert (multi["learn_step"].default, multi["torch_compiler"].default) == (2048, None)
    llm = LLMAlgorithmSpec.model_fields
    assert llm["batch_size"].default == 16 and llm["beta"].default == 0.001
    assert llm["max_grad_norm"].default == 0.1 and llm["use_liger_loss"].default is True
    assert llm["seed"].default == 42 and llm["max_model_len"].default == 1024
    assert llm["fsdp"].default is None and llm["vllm_engine_args"].default_factory is dict


def test_training_spec_defaults_match_the_seed() -> None:
    spec = TrainingSpec()
    assert spec.max_steps == 1_000_000 and spec.pop_size == 1 and spec.eval_loop == 1
    assert spec.hpo is False and spec.learning_delay is None and spec.evo_steps is None
    assert spec.reporting_interval == 1024 and spec.rollout_mode == "colocated"
    assert spec.rollout_engines_per_agent == 0 and spec.training_gpus_per_agent == 1
    assert spec.checkpoint_optimizer is True and spec.eval_greedy is True
    assert spec.async_rollout is False
    assert spec.effective_checkpoint_export() == m.CheckpointExportSpec()
    assert spec.effective_rollout_version_stamp() is None
    async_spec = TrainingSpec(rollout_mode="async", rollout_engines_per_agent="auto")
    assert (
        async_spec.async_rollout and async_spec.effective_rollout_version_stamp() == "oldest_turn"
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"max_steps": 0},
        {"evo_steps": 10, "max_steps": 5},
        {"eps_start": 0.1, "eps_end": 0.5},
        {"evo_epochs": 2},
        {"async_rollout": True},
        {"rollout_mode": "async"},
        {"eval_greedy": False},
        {"env_resource_ratio": 1.5},
    ],
)
def test_training_spec_rejects(fields: dict) -> None:
    with pytest.raises(ValidationError):
        TrainingSpec(**fields)


def test_training_aliases() -> None:
    spec = TrainingSpec(population_size=3, metrics_interval=100)
    assert (spec.pop_size, spec.evo_steps) == (3, 100)
    assert TrainingSpec(pop_size=2, evo_steps=10).model_dump()["pop_size"] == 2
    dumped = spec.model_dump()
    assert {"pop_size", "evo_steps"} <= set(dumped)
    assert not {"population_size", "metrics_interval"} & set(dumped)


def test_seed_names_come_first_in_signature_and_schema() -> None:
    import inspect

    from agilerl.arena.models.schema import manifest_schema

    TrainingSpec.model_rebuild()
    m.ReplayBufferSpec.model_rebuild()
    assert {"evo_steps", "pop_size"} <= set(inspect.signature(TrainingSpec).parameters)
    assert "max_size" in inspect.signature(m.ReplayBufferSpec).parameters
    schema = manifest_schema()
    training = schema["properties"]["training"]["properties"]
    assert {"evo_steps", "pop_size"} <= set(training)
    assert "population_size" not in training and "metrics_interval" not in training
    grpo = next(s for s in schema["properties"]["algorithm"]["oneOf"] if s["title"] == "GRPO")
    assert "constrain_answer_pattern" in grpo["properties"]
    assert {"type": "boolean"} in grpo["properties"]["fsdp"]["anyOf"]


def test_buffer_spec_nulls_and_alias() -> None:
    spec = m.ReplayBufferSpec(
        memory_size=10, n_step_buffer_args={"n_step": None}, per_buffer_args={"alpha": None}
    )
    assert (spec.max_size, spec.n_step_buffer_args.n_step, spec.per_buffer_args.alpha) == (
        10,
        3,
        0.5,
    )
    with pytest.raises(ValidationError):
        m.ReplayBufferSpec(kind="llm")


def test_checkpoint_export_should_merge() -> None:
    adapter = m.CheckpointExportSpec(format="adapter", trigger="every")
    assert not adapter.should_merge(True, True)
    merged = {
        t: m.CheckpointExportSpec(format="merged", trigger=t)
        for t in ("final", "best", "every", "on_demand")
    }
    assert merged["every"].should_merge(False, False)
    assert merged["final"].should_merge(True, False) and not merged["final"].should_merge(
        False, True
    )
    assert merged["best"].should_merge(False, True) and merged["best"].should_merge(True, False)
    assert not merged["on_demand"].should_merge(True, True)
    with pytest.raises(ValidationError):
        m.CheckpointExportSpec(format="full")


def test_paradigm_flags_are_class_level() -> None:
    flags = {
        name: (cls.off_policy, cls.offline, cls.bandit, cls.env_type)
        for name, cls in MANIFEST_REGISTRY.items()
    }
    assert flags["DQN"] == (True, False, False, "gym")
    assert flags["PPO"] == (False, False, False, "gym")
    assert flags["CQN"] == (False, True, False, "offline")
    assert flags["NeuralUCB"] == (False, False, True, "bandit")
    assert flags["MADDPG"][0] and not flags["IPPO"][0]
    assert flags["GRPO"][3] == "rollout" and flags["DPO"][3] == "dataset"
    assert "off_policy" not in m.DQNSpec.model_fields


@pytest.mark.parametrize(
    ("name", "fields", "match"),
    [
        ("RainbowDQN", {"v_min": 10, "v_max": 0}, "v_min"),
        ("GRPO", {"group_size": 2, "clip_coef": [0.1, 0.2]}, "clip_coef"),
        ("GRPO", {"group_size": 2, "answer_continuation": True}, "answer_continuation=True"),
        ("GRPO", {"group_size": 2, "constrain_answer_pattern": "^x"}, "anchored"),
        ("GRPO", {"group_size": 2, "constrain_answer_pattern": "(x"}, "regular expression"),
        ("GRPO", {"group_size": 2, "thinking_token_budget": 4}, "max_output_tokens"),
        ("DPO", {"quantization": "nf5"}, "unknown preset 'nf5'"),
        ("DPO", {"quantization": {"load_in_4bit": True, "load_in_8bit": True}}, "exactly one"),
        ("DPO", {"quantization": {"load_in_4bit": True, "bits": 3}}, "unknown setting"),
        ("SFT", {"quantization": {"load_in_4bit": True, "bnb_4bit_quant_type": "q3"}}, "nf4"),
        ("DPO", {"chunk_rows": 0}, "chunk_rows"),
        ("SFT", {"activation_offload": True}, "activation_offload"),
        ("GRPO", {"group_size": 2, "use_sequence_packing": True}, "padded, not packed"),
        (
            "GRPO",
            {"group_size": 2, "mini_batch_size": 6, "micro_batch_size_per_gpu": 4},
            "multiple",
        ),
        ("GRPO", {"group_size": 2, "fsdp": "yes"}, "fsdp"),
        ("TD3", {"tau": 5}, "tau"),
        ("DQN", {"tau": 5}, "tau"),
        ("DQN", {"cudagraphs": True}, "cudagraphs"),
        ("GRPO", {"group_size": 2, "fsdp": {"nope": 1}}, "nope"),
        ("GRPO", {}, "group_size"),
        ("PPO", {"clip_coef": 1.5}, "clip_coef"),
    ],
)
def test_spec_rules(name: str, fields: dict, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        MANIFEST_REGISTRY.create(name, **fields)


def test_fsdp_true_means_defaults_and_aliases_work() -> None:
    spec = MANIFEST_REGISTRY.create("GRPO", group_size=2, fsdp=True)
    assert spec.fsdp == m.FSDPConfig()
    # the old key fills the field it became
    aliased = MANIFEST_REGISTRY.create("GRPO", group_size=2, answer_pattern="[0-9]+")
    assert aliased.constrain_answer_pattern == "[0-9]+"
    assert MANIFEST_REGISTRY.create("GRPO", group_size=2, fsdp=False).fsdp is None
    dumped = spec.model_dump()
    assert "constrain_answer_pattern" in dumped and "answer_pattern" not in dumped
    assert MANIFEST_REGISTRY.create("LLMPPO", lr=1e-6).lr_actor == 1e-6


def test_network_bounds() -> None:
    with pytest.raises(ValidationError, match="max_mlp_nodes"):
        m.NetworkSpec(encoder_config={"arch": "mlp", "hidden_size": [512]})
    with pytest.raises(ValidationError, match="same length"):
        m.NetworkSpec(encoder_config={"arch": "cnn", "channel_size": [8], "kernel_size": [3, 3]})
    with pytest.raises(ValidationError, match="latent_dim"):
        m.NetworkSpec(latent_dim=4)
    with pytest.raises(ValidationError, match="set arch"):
        m.NetworkSpec(encoder_config={"layer_norm": False})
    spec = m.NetworkSpec(arch="simba")
    assert spec.simba and spec.arch == "simba"
    assert (
        m.NetworkSpec(
            encoder_config={"channel_size": [16], "kernel_size": [3], "stride_size": [1]}
        ).arch
        == "cnn"
    )
    assert m.NetworkSpec().arch is None
