"""``agilerl.load`` of a multi-agent (PettingZoo) run: one action per agent id."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import agilerl
from agilerl.cli import main
from agilerl.deploy.trained_agent import TrainedMultiAgent
from agilerl.trainer import LocalTrainer


@pytest.fixture(scope="module")
def ippo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """IPPO on discrete MPE speaker-listener (the ippo_speaker_listener preset's env), 100 steps."""
    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("ippo") / "run"
    LocalTrainer(
        {"name": "IPPO", "learn_step": 50, "batch_size": 25, "update_epochs": 1},
        {
            "env_type": "pettingzoo",
            "name": "mpe2.simple_speaker_listener_v4",
            "num_envs": 2,
            "env_config": {"continuous_actions": False, "max_cycles": 25},
        },
        {"max_steps": 100, "evo_steps": 100, "eval_loop": 1},
        network={"latent_dim": 16, "encoder_config": {"hidden_size": [16]}},
        run_dir=run,
        verbose=False,
        logger={"tensorboard": False},
    ).train()
    return run


def test_act_returns_one_action_per_agent_id(ippo_run: Path) -> None:
    agent = agilerl.load(ippo_run)
    assert isinstance(agent, TrainedMultiAgent) and agent.name == "IPPO"
    env = agent.make_env()
    obs, _ = env.reset(seed=0)
    actions = agent.act(obs)
    assert set(actions) == set(env.agents) == {"speaker_0", "listener_0"}
    for name, action in actions.items():
        assert type(action) is int and agent.action_spaces[name].contains(action)
    env.step(actions)
    batch = agent.act({name: np.stack([o, o, o]) for name, o in obs.items()})
    for name, action in batch.items():
        assert action.shape == (3,) and np.all(action == actions[name])
    # an agent that has finished is left out, and gets no action
    assert set(agent.act({"listener_0": obs["listener_0"]})) == {"listener_0"}
    env.close()


def test_unknown_agents_and_mixed_layouts_are_refused(ippo_run: Path) -> None:
    agent = agilerl.load(ippo_run)
    with pytest.raises(ValueError, match=r"unknown agent ids \['pilot_0'\]"):
        agent.act({"pilot_0": np.zeros(3)})
    with pytest.raises(ValueError, match="every agent one observation"):
        agent.act({"speaker_0": np.zeros(3), "listener_0": np.zeros((2, 11))})


def test_export_refuses_a_multi_agent_run(
    ippo_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", str(ippo_run), "--format", "torchscript"]) == 2
    err = capsys.readouterr().err
    assert "multi-agent IPPO policy" in err and "agilerl.load" in err
