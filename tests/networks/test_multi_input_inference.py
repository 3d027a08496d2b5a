"""A network section that names sub-encoders but no ``arch`` is fitted to the observation space.

The layout is the public implementation's ``configs/training/multi_input.yaml``
network: ``encoder_config`` gives ``latent_dim`` and ``mlp_config`` only.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agilerl.arena.models.networks import NetworkSpec
from agilerl.networks.config import build_encoder, resolve_net_config
from agilerl.networks.multi_input import EvolvableMultiInput
from agilerl.trainer import LocalTrainer

HERE = Path(__file__).parent
LAYOUT = {  # multi_input.yaml's NET_CONFIG (its head is 64 wide: [8] is below its own 64 minimum)
    "latent_dim": 64,
    "encoder_config": {
        "latent_dim": 64,
        "mlp_config": {
            "hidden_size": [64],
            "activation": "Tanh",
            "min_mlp_nodes": 64,
            "max_mlp_nodes": 500,
        },
    },
    "head_config": {
        "hidden_size": [64],
        "activation": "Tanh",
        "min_hidden_layers": 1,
        "max_hidden_layers": 3,
        "min_mlp_nodes": 64,
        "max_mlp_nodes": 500,
    },
}
DICT_OBS = spaces.Dict(
    {"vec": spaces.Box(-1, 1, (4,), np.float32), "img": spaces.Box(0, 255, (1, 8, 8), np.uint8)}
)


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def test_sub_encoder_keys_mean_a_multi_input_layout() -> None:
    assert NetworkSpec.model_validate(LAYOUT).arch == "multiinput"
    for key in ("vector_space_mlp", "cnn_config"):
        assert NetworkSpec.model_validate({"encoder_config": {key: {} if "cnn" in key else True}})


def test_the_layout_is_fitted_to_the_observation_space() -> None:
    encoder = build_encoder(DICT_OBS, resolve_net_config(LAYOUT, DICT_OBS))
    assert isinstance(encoder, EvolvableMultiInput)
    assert encoder.image_keys == ["img"] and encoder.vector_keys == ["vec"]
    out = encoder({"vec": torch.zeros(3, 4), "img": torch.zeros(3, 1, 8, 8, dtype=torch.uint8)})
    assert out.shape == (3, 64)
    flat = resolve_net_config(LAYOUT, spaces.Box(-1, 1, (5,), np.float32))["encoder_config"]
    assert flat["arch"] == "mlp" and flat["hidden_size"] == [64] and flat["activation"] == "Tanh"
    image = spaces.Box(0, 255, (3, 16, 16), np.uint8)
    assert resolve_net_config(LAYOUT, image)["encoder_config"]["arch"] == "cnn"


@pytest.mark.parametrize(
    ("algorithm", "training"),
    [
        ({"name": "PPO", "learn_step": 256, "batch_size": 64, "update_epochs": 2}, {}),
        ({"name": "DQN", "learn_step": 4, "batch_size": 32}, {"learning_delay": 256}),
    ],
)
def test_the_layout_trains_on_a_dict_observation_env(
    tmp_path: Path, algorithm: dict, training: dict
) -> None:
    env = {"name": "CartPoleDict-v0", "entrypoint": "dict_envs:cartpole_dict", "path": str(HERE)}
    trainer = LocalTrainer(
        algorithm,
        env | {"num_envs": 2},
        {"max_steps": 1024, "evo_steps": 512, "eval_loop": 1, "eval_steps": 100} | training,
        network=LAYOUT,
        replay_buffer={"max_size": 2000} if algorithm["name"] == "DQN" else None,
        seed=0,
        run_dir=tmp_path / "run",
        verbose=False,
        trust_code=True,  # the test's own entrypoint env
    )
    trainer.train()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["total_steps"] >= 1024
    # Between the two checkpoints the gradient reached the image branch and the projection
    # that joins it with the vector key: both sub-observations are trained on.
    first, last = (
        torch.load(tmp_path / "run" / "checkpoints" / f"step_{step:012d}" / "agent_0.pt",
                   weights_only=True)["networks"]
        for step in (512, 1024)
    )  # fmt: skip
    net = "actor"
    for key in ("encoder.cnns.0.convs.0.weight", "encoder.projection.linears.0.weight"):
        assert not torch.equal(first[net][key], last[net][key]), key
