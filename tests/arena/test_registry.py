"""Registry semantics as the seed documents them."""

from __future__ import annotations

import pytest

import agilerl.arena.models as arena
import agilerl.arena.models.algorithms as arena_algorithms
import agilerl.models as framework
from agilerl.arena.models import MANIFEST_REGISTRY, AlgorithmRegistry, PPOSpec, register

EXPECTED = {
    "PPO",
    "RecurrentPPO",
    "Recurrent PPO",
    "DQN",
    "RainbowDQN",
    "Rainbow DQN",
    "DDPG",
    "TD3",
    "SAC",
    "CQN",
    "NeuralTS",
    "NeuralUCB",
    "IPPO",
    "MADDPG",
    "MATD3",
    "GRPO",
    "GSPO",
    "CISPO",
    "LLMPPO",
    "LLMREINFORCE",
    "DPO",
    "SFT",
}


def test_every_algorithm_is_registered() -> None:
    assert set(MANIFEST_REGISTRY.names()) >= EXPECTED


def test_names_and_items_are_sorted() -> None:
    names = MANIFEST_REGISTRY.names()
    assert names == sorted(names)
    assert [n for n, _ in MANIFEST_REGISTRY.items()] == names
    assert all(isinstance(cls, type) for _, cls in MANIFEST_REGISTRY.items())


def test_get_unknown_name_lists_registered_names() -> None:
    with pytest.raises(KeyError) as info:
        MANIFEST_REGISTRY.get("PPPO")
    message = str(info.value)
    assert "PPPO" in message
    for name in ("PPO", "DQN", "GRPO"):
        assert name in message


def test_create_builds_a_spec_with_fields() -> None:
    spec = MANIFEST_REGISTRY.create("PPO", lr=3e-4, batch_size=32)
    assert isinstance(spec, PPOSpec)
    assert (spec.lr, spec.batch_size) == (3e-4, 32)
    assert spec.name == "PPO"
    with pytest.raises(KeyError):
        MANIFEST_REGISTRY.create("Nope")


def test_alias_implies_recurrent_and_rejects_contradiction() -> None:
    for alias in ("RecurrentPPO", "Recurrent PPO"):
        spec = MANIFEST_REGISTRY.create(alias)
        assert spec.recurrent is True
        assert spec.name == alias
    with pytest.raises(ValueError, match="implies recurrent=True"):
        MANIFEST_REGISTRY.create("RecurrentPPO", recurrent=False)
    # name is the registry key the spec was resolved from, whatever its fields say
    assert MANIFEST_REGISTRY.create("PPO", recurrent=True).name == "PPO"


def test_rainbow_alias_resolves_to_same_class() -> None:
    assert MANIFEST_REGISTRY.get("Rainbow DQN") is MANIFEST_REGISTRY.get("RainbowDQN")
    assert MANIFEST_REGISTRY.create("Rainbow DQN").name == "Rainbow DQN"


def test_add_overrides_with_warning_and_decorator_names() -> None:
    registry = AlgorithmRegistry()
    registry.add("X", PPOSpec)
    with pytest.warns(UserWarning, match="overriding"):
        registry.add("X", arena.DQNSpec)
    assert registry.get("X") is arena.DQNSpec

    @register()
    class MyPPOSpec(PPOSpec):
        pass

    try:
        assert MANIFEST_REGISTRY.get("MyPPO") is MyPPOSpec
        assert MANIFEST_REGISTRY.create("MyPPO").name == "MyPPO"
    finally:
        MANIFEST_REGISTRY._specs.pop("MyPPO")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_framework_view_is_the_same_class(name: str) -> None:
    cls = MANIFEST_REGISTRY.get(name)
    assert getattr(framework, cls.__name__) is cls
    assert getattr(arena_algorithms, cls.__name__) is cls
    import agilerl.models.algorithms as fw_algorithms

    assert getattr(fw_algorithms, cls.__name__) is cls


def test_framework_training_view() -> None:
    import agilerl.arena.models.training as a
    import agilerl.models.training as f

    assert f.TrainingSpec is a.TrainingSpec
    assert f.ReplayBufferSpec is a.ReplayBufferSpec
