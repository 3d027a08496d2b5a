"""Image envs: ALE and MinAtar ids build through the env section's preprocessing and train.

Needs the ``atari`` extra (left out of a ``.[dev]``-only run: ``tests/optional_extras.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml

from agilerl.arena.models.env import GymEnvSpec
from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.manifest import TrainingManifest
from agilerl.arena.models.trust import code_fields
from agilerl.envs import images
from agilerl.envs.gym import make_single_env, make_vector_env
from agilerl.launch.compose import build_manifest
from agilerl.launch.env_check import check_environment
from agilerl.networks.cnn import EvolvableCNN

CONF = Path(__file__).resolve().parents[2] / "conf"
TINY = {"max_steps": 256, "evo_steps": 128, "eval_loop": 1, "eval_steps": 50}
SMALL_DQN = (
    "env.num_envs=2",
    "training.learning_delay=64",
    "algorithm.batch_size=16",
    "replay_buffer=standard",
    "replay_buffer.max_size=1000",
)


def _env_conf(stem: str) -> dict:
    return yaml.safe_load((CONF / "env" / f"{stem}.yaml").read_text())


def test_pong_preset_gives_stacked_84x84_grey_frames() -> None:
    env = make_vector_env(GymEnvSpec(**{**_env_conf("pong"), "num_envs": 2}), seed=0)
    try:
        space = env.single_observation_space
        assert (space.shape, space.dtype) == ((4, 84, 84), np.uint8)
        obs, _ = env.reset(seed=0)
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        for _ in range(3):
            obs, *_ = env.step(env.action_space.sample())
        assert obs.shape == (2, 4, 84, 84) and obs.max() > 0
    finally:
        env.close()


def test_atari_preprocessing_skips_frames_itself() -> None:
    """The ALE env is made with frameskip=1: AtariPreprocessing does the skipping."""
    env = make_single_env(GymEnvSpec(name="ALE/Breakout-v5", atari_preprocessing={"frame_skip": 3}))
    try:
        preprocess = env
        while not isinstance(preprocess, gym.wrappers.AtariPreprocessing):
            preprocess = preprocess.env
        assert preprocess.frame_skip == 3 and env.unwrapped._frameskip == 1
        assert env.observation_space.shape == (1, 84, 84)  # one grey frame, channels first
    finally:
        env.close()


def test_raw_and_rgb_ale_frames_turn_channels_first() -> None:
    raw = make_single_env(GymEnvSpec(name="ALE/Pong-v5"))
    rgb = make_single_env(
        GymEnvSpec(name="ALE/Pong-v5", atari_preprocessing={"grayscale_obs": False}, frame_stack=2)
    )
    try:
        assert raw.observation_space.shape == (3, 210, 160)
        assert rgb.observation_space.shape == (6, 84, 84)  # 2 RGB frames as 6 channels
        assert rgb.reset(seed=0)[0].shape == (6, 84, 84)
    finally:
        raw.close()
        rgb.close()


def test_public_ale_py_spelling_validates_without_trust_code() -> None:
    spec = GymEnvSpec(name="ale_py:ALE/Breakout-v5")
    assert code_fields(spec) == []  # ale_py is an installed env suite, not the user's code
    env = make_single_env(spec)
    try:
        assert env.observation_space.shape == (3, 210, 160)
    finally:
        env.close()
    assert code_fields(GymEnvSpec(name="my_envs:Walk-v0"))  # other modules still need trust


def test_minatar_frames_are_its_channels_turned_first() -> None:
    import minatar.gym  # noqa: F401

    ours = make_single_env(GymEnvSpec(name="MinAtar/Breakout-v1"))
    raw = gym.make("MinAtar/Breakout-v1")
    try:
        assert ours.observation_space.shape == (4, 10, 10)
        assert ours.observation_space.dtype == np.bool_
        obs, _ = ours.reset(seed=3)
        raw_obs, _ = raw.reset(seed=3)
        np.testing.assert_array_equal(obs, np.transpose(raw_obs, (2, 0, 1)))
        for _ in range(5):
            obs, *_ = ours.step(1)
            raw_obs, *_ = raw.step(1)
            np.testing.assert_array_equal(obs, np.transpose(raw_obs, (2, 0, 1)))
    finally:
        ours.close()
        raw.close()


def test_stacked_frames_put_the_newest_last() -> None:
    env = make_single_env(GymEnvSpec(name="MinAtar/Seaquest-v1", frame_stack=3))
    try:
        assert env.observation_space.shape == (30, 10, 10)  # 3 frames x 10 channels
        first, _ = env.reset(seed=0)
        np.testing.assert_array_equal(first[:10], first[20:])  # reset pads with the first frame
        obs, *_ = env.step(0)
        np.testing.assert_array_equal(obs[10:20], first[20:])
    finally:
        env.close()


@pytest.mark.parametrize("game", ["Breakout", "Freeway", "Seaquest"])
def test_cnn_reads_minatar_channels_on_the_channel_axis(game: str) -> None:
    """Freeway's 7 and Seaquest's 10 channels would be misread as a width if left last."""
    env = make_single_env(GymEnvSpec(name=f"MinAtar/{game}-v1"))
    try:
        channels = env.observation_space.shape[0]
        cnn = EvolvableCNN(
            env.observation_space, channel_size=[8], kernel_size=[3], stride_size=[1]
        )
        assert cnn.convs[0].in_channels == channels and not cnn.channels_last
        obs, _ = env.reset(seed=0)
        out = cnn(torch.as_tensor(np.stack([obs, obs])))
        assert out.shape == (2, cnn.latent_dim) and torch.isfinite(out).all()
    finally:
        env.close()


@pytest.mark.parametrize(
    ("environment", "problem"),
    [
        ({"name": "CartPole-v1", "frame_stack": 4}, "frame_stack: for image observations only"),
        ({"name": "Acrobot-v1", "channels_last": True}, "channels_last: for image observations"),
        ({"name": "MinAtar/Breakout-v1", "atari_preprocessing": {}}, "applies to ALE ids"),
        (
            {"name": "ALE/Pong-v5", "atari_preprocessing": {}, "env_config": {"frameskip": 4}},
            "set atari_preprocessing.frame_skip only",
        ),
        ({"name": "ALE/Pong-v5", "frame_stack": 0}, "greater than or equal to 1"),
    ],
)
def test_settings_that_cannot_apply_are_refused_at_validation(
    environment: dict, problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        TrainingManifest.from_dict({"algorithm": {"name": "DQN"}, "environment": environment})


def test_image_settings_on_an_unknown_vector_env_are_refused_by_the_env_check() -> None:
    manifest = TrainingManifest.from_dict(
        {"algorithm": {"name": "DQN"}, "environment": {"name": "Blackjack-v1", "frame_stack": 2}}
    )
    with pytest.raises(ConfigError, match=r"environment\.frame_stack: Blackjack-v1 observes Tuple"):
        check_environment(manifest)


def test_a_missing_suite_names_the_atari_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    monkeypatch.setattr(images.importlib, "import_module", missing)
    with pytest.raises(ConfigError, match=r"needs the atari extra \(ale_py is not installed\)"):
        images.register_family("ALE/NotAGame-v5")


def test_dqn_on_the_pong_preset_and_ppo_on_minatar_train(compose, tmp_path: Path) -> None:
    from agilerl.trainer import LocalTrainer

    budget = [f"training.{k}={v}" for k, v in TINY.items()]
    cnn = (
        "+network.encoder_config={arch: cnn, channel_size: [8], kernel_size: [8], stride_size: [4]}"
    )
    for algorithm, env, extra in [
        ("dqn", "pong", [cnn, *SMALL_DQN]),
        ("ppo", "minatar_breakout", ["algorithm.learn_step=64", "algorithm.batch_size=32"]),
    ]:
        manifest, _ = build_manifest(
            compose(f"algorithm={algorithm}", f"env={env}", *budget, *extra)
        )
        run = tmp_path / env
        LocalTrainer.from_manifest(
            manifest, run_dir=run, verbose=False, logger={"tensorboard": False}
        ).train()
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["total_steps"] >= TINY["max_steps"]
        assert (run / "metrics.csv").read_text().count("\n") >= 2
