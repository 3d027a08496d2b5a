"""Multi-agent conf presets compose into manifests whose specs and envs build."""

from __future__ import annotations

import pytest
import torch

from agilerl.algorithms.core.multi_agent import MultiAgentAlgorithm
from agilerl.algorithms.ippo import IPPO
from agilerl.algorithms.maddpg import MADDPG
from agilerl.algorithms.matd3 import MATD3
from agilerl.arena.models.manifest import TrainingManifest
from agilerl.envs.pettingzoo import make_vector_env
from agilerl.launch.compose import build_manifest

CLASSES = {"IPPO": IPPO, "MADDPG": MADDPG, "MATD3": MATD3}


@pytest.mark.parametrize(
    ("algorithm", "env", "expected"),
    [
        ("ippo", "mpe_simple_speaker_listener", {"lr": 0.0003, "batch_size": 512}),
        ("maddpg", "mpe_simple_speaker_listener_continuous", {"learn_step": 8, "batch_size": 256}),
        ("matd3", "mpe_simple_speaker_listener_continuous", {"learn_step": 8, "policy_freq": 2}),
        ("matd3", "mpe_simple_speaker_listener", {"learn_step": 8, "batch_size": 256}),
        ("ippo", "mpe_simple_spread", {}),
        ("maddpg", "mpe_simple_reference", {}),
    ],
)
def test_presets_compose_and_build(compose, algorithm, env, expected) -> None:
    manifest, _ = build_manifest(compose(f"algorithm={algorithm}", f"env={env}"))
    spec = manifest.algorithm_with_network()
    for key, value in expected.items():
        assert getattr(spec, key) == value
    venv = make_vector_env(
        manifest.environment.name,
        manifest.environment.env_config,
        num_envs=2,
        sync=manifest.environment.sync,
    )
    agent = CLASSES[spec.name](spec, venv.observation_spaces, venv.action_spaces)
    obs, _ = venv.reset(seed=0)
    venv.step(agent.act(obs))
    venv.close()


def test_per_group_network_sections_survive_manifest_spec_checkpoint_manifest(tmp_path) -> None:
    per_group = {
        "speaker": {"latent_dim": 8, "encoder_config": {"arch": "mlp", "hidden_size": [16]}},
        "listener": {"latent_dim": 24, "encoder_config": {"arch": "mlp", "hidden_size": [32]}},
    }
    raw = {
        "algorithm": {"name": "MATD3", "share_policies": True, "net_config": per_group},
        "environment": {
            "env_type": "pettingzoo",
            "name": "mpe2.simple_speaker_listener_v4",
            "num_envs": 2,
            "env_config": {"continuous_actions": True},
        },
        "network": {"latent_dim": 64},
        "training": {"max_steps": 1000},
    }
    manifest = TrainingManifest.from_dict(raw)
    spec = manifest.algorithm_with_network()
    assert spec.net_config["speaker"].latent_dim == 8
    env = make_vector_env("mpe2.simple_speaker_listener_v4", {"continuous_actions": True}, 2)
    agent = MATD3(spec, env.observation_spaces, env.action_spaces)
    agent.save_checkpoint(tmp_path / "a.pt")
    stored = torch.load(tmp_path / "a.pt", weights_only=True)["spec"]
    loaded = MultiAgentAlgorithm.load(tmp_path / "a.pt")
    assert loaded.spec.net_config == spec.net_config
    rebuilt = TrainingManifest.from_dict(
        {**manifest.to_dict(), "algorithm": {"name": "MATD3", **stored}}
    )
    assert rebuilt.algorithm_with_network().net_config == spec.net_config
    assert TrainingManifest.from_dict(manifest.to_dict()) == manifest
    env.close()


def _matd3_manifest(**buffer) -> TrainingManifest:
    return TrainingManifest.from_dict(
        {
            "algorithm": {"name": "MATD3"},
            "environment": {
                "env_type": "pettingzoo",
                "name": "mpe2.simple_speaker_listener_v4",
                "num_envs": 2,
            },
            "replay_buffer": buffer,
        }
    )


def test_replay_buffer_section_is_checked_against_memory_and_its_flags() -> None:
    from agilerl.arena.models.errors import ConfigError
    from agilerl.strategies import select_strategy

    manifest = _matd3_manifest(max_size=1234, store_in_checkpoint=True)
    spec = manifest.algorithm_with_network()
    strategy = select_strategy(spec)
    envs = strategy.make_envs(manifest, seed=0)
    try:
        kwargs = strategy.loop_kwargs(spec, manifest, envs, device="cpu")
        assert kwargs["memory_size"] == 1234 and kwargs["save_memory"] is True
        huge = _matd3_manifest(max_size=10**11)
        with pytest.raises(ConfigError, match=r"replay_buffer\.max_size"):
            strategy.loop_kwargs(spec, huge, envs, device="cpu")
        for flag in ("n_step_buffer", "per_buffer"):  # refused by the manifest, naming it
            with pytest.raises(ConfigError, match=rf"replay_buffer.{flag}: MATD3 keeps a one"):
                _matd3_manifest(**{flag: True})
    finally:
        envs.close()


def test_a_budget_shorter_than_one_ippo_rollout_is_refused_before_anything_is_written(
    tmp_path,
) -> None:
    """The loop starts whole rollouts only: max_steps under one rollout used to train
    nothing and report ``completed`` with no fitness."""
    from agilerl.arena.models.errors import ConfigError
    from agilerl.launch.preflight import preflight
    from tests.reliability.helpers import no_traceback, train

    def manifest(max_steps: int, learn_step: int = 2048) -> TrainingManifest:
        return TrainingManifest.from_dict(
            {
                "algorithm": {"name": "IPPO", "learn_step": learn_step},
                "environment": {
                    "env_type": "pettingzoo",
                    "name": "mpe2.simple_speaker_listener_v4",
                    "num_envs": 8,
                },
                "training": {"max_steps": max_steps, "evo_steps": 512},
            }
        )

    with pytest.raises(ConfigError, match=r"algorithm\.learn_step: one IPPO rollout is 2,048"):
        preflight(manifest(1024))
    preflight(manifest(2048))  # exactly one rollout trains
    preflight(manifest(1024, learn_step=1030))  # 128 vector steps of 8: 1,024 env steps

    run = tmp_path / "run"
    done = train(
        "algorithm=ippo",
        "env=mpe_simple_speaker_listener",
        "training.max_steps=1024",
        "training.evo_steps=512",
        f"run_dir={run}",
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "raise training.max_steps to at least 2,048" in done.stderr + done.stdout
    assert no_traceback(done)
    assert not run.exists()
