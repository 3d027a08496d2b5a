"""``agilerl evaluate RUN`` for a smoke run of every single-agent algorithm that trains."""

from __future__ import annotations

from pathlib import Path

import pytest

from agilerl.cli import main
from agilerl.trainer import LocalTrainer

TINY_NET = {
    "latent_dim": 16,
    "encoder_config": {"arch": "mlp", "hidden_size": [16]},
    "head_config": {"hidden_size": [16]},
}
RUNS = {
    "PPO": (
        {"name": "PPO", "learn_step": 128, "batch_size": 64, "update_epochs": 1},
        "CartPole-v1",
    ),
    "DQN": ({"name": "DQN", "batch_size": 32}, "CartPole-v1"),
    "Rainbow DQN": ({"name": "Rainbow DQN", "batch_size": 32}, "CartPole-v1"),
    "DDPG": ({"name": "DDPG", "batch_size": 32}, "Pendulum-v1"),
    "TD3": ({"name": "TD3", "batch_size": 32}, "Pendulum-v1"),
}


def _smoke_run(tmp_path: Path, name: str) -> Path:
    algorithm, env = RUNS[name]
    run = tmp_path / name.replace(" ", "_")
    LocalTrainer(
        algorithm,
        {"name": env, "num_envs": 2},
        {"max_steps": 256, "evo_steps": 256, "eval_loop": 1, "eval_steps": 50},
        network=TINY_NET,
        replay_buffer=None if name == "PPO" else {"max_size": 1000},  # PPO keeps no memory
        run_dir=run,
        verbose=False,
    ).train()
    return run


@pytest.mark.parametrize("name", sorted(RUNS))
def test_evaluate_exits_0_for_every_trainable_algorithm(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _smoke_run(tmp_path, name)
    assert main(["evaluate", str(run), "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "episodes: 2" in out and "return:" in out and "95% CI" in out


def test_evaluate_refuses_an_env_whose_spaces_do_not_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _smoke_run(tmp_path, "DQN")
    assert main(["evaluate", str(run), "--env", "Acrobot-v1", "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert "observation space" in err and "Acrobot-v1" in err and "Traceback" not in err
