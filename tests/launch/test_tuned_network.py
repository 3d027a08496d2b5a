"""A tuned preset's network is a base: the user's network choice and overrides win over it."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

from agilerl.algorithms import TD3
from agilerl.launch.compose import build_manifest
from agilerl.launch.presets import merge_tuned_network
from agilerl.networks.simba import SimbaEncoder
from agilerl.trainer import LocalTrainer

TUNED = {
    "latent_dim": 64,
    "encoder_config": {"arch": "mlp", "hidden_size": [64], "layer_norm": False},
    "head_config": {"hidden_size": [64], "layer_norm": False},
}


def _agent(manifest, tmp_path: Path) -> TD3:
    trainer = LocalTrainer.from_manifest(manifest, run_dir=tmp_path / "run", verbose=False)
    env = gym.make("Pendulum-v1")
    return TD3(trainer.spec, env.observation_space, env.action_space)


def test_network_simba_with_a_tuned_preset_builds_a_simba_encoder(compose, tmp_path: Path) -> None:
    manifest, _ = build_manifest(compose("algorithm=td3", "env=pendulum", "network=simba"))
    assert manifest.network.arch == "simba"
    agent = _agent(manifest, tmp_path)
    for name in agent.network_names:
        assert isinstance(getattr(agent, name).encoder, SimbaEncoder), name
    # the preset's MLP widths are not forced onto SimBa: its blocks keep the spec's width
    assert (
        manifest.network.encoder_config.hidden_size
        == type(manifest.network.encoder_config).model_fields["hidden_size"].default
    )


@pytest.mark.parametrize(
    "override", ["network.encoder_config.arch=simba", "network.arch=simba"], ids=["field", "top"]
)
def test_an_arch_override_also_replaces_the_tuned_encoder(compose, override: str) -> None:
    manifest, _ = build_manifest(compose("algorithm=td3", "env=pendulum", override))
    assert manifest.network.arch == "simba"


def test_without_a_choice_the_tuned_network_applies_and_field_overrides_win(compose) -> None:
    tuned, _ = build_manifest(compose("algorithm=td3", "env=pendulum"))
    # conf/tuned/td3_pendulum.yaml: one ReLU layer straight into the latent
    assert tuned.network.encoder_config.hidden_size == []
    assert tuned.network.encoder_config.output_activation == "ReLU"
    assert tuned.network.encoder_config.layer_norm is False
    both, _ = build_manifest(
        compose("algorithm=td3", "env=pendulum", "network.encoder_config.hidden_size=[16]")
    )
    assert both.network.encoder_config.hidden_size == [16]
    assert both.network.encoder_config.layer_norm is False  # the rest of the preset stays
    assert both.network.encoder_config.output_activation == "ReLU"
    assert both.network.head_config.hidden_size == [64]
    same_arch, _ = build_manifest(compose("algorithm=td3", "env=pendulum", "network=mlp"))
    assert same_arch.network == tuned.network


def test_training_smoke_still_overrides_a_tuned_budget(compose) -> None:
    manifest, _ = build_manifest(compose("algorithm=td3", "env=pendulum", "training=smoke"))
    assert manifest.training.max_steps == 4096
    assert manifest.network.encoder_config.hidden_size == []  # the preset's network still applies
    assert manifest.network.encoder_config.output_activation == "ReLU"


def test_merge_keeps_the_tuned_head_for_another_encoder() -> None:
    merged = merge_tuned_network(TUNED, {"encoder_config": {"arch": "simba"}})
    assert merged == {
        "latent_dim": 64,
        "head_config": {"hidden_size": [64], "layer_norm": False},
        "encoder_config": {"arch": "simba"},
    }
    assert merge_tuned_network(TUNED, None) == TUNED
    assert merge_tuned_network(None, {"latent_dim": 8}) == {"latent_dim": 8}
    assert merge_tuned_network(TUNED, {"latent_dim": 8})["latent_dim"] == 8
