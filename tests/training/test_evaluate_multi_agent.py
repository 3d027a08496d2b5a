"""``agilerl evaluate RUN`` for multi-agent runs: per-agent and summed greedy returns."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agilerl.cli import main
from agilerl.evaluate import evaluate_checkpoint
from agilerl.trainer import LocalTrainer

TINY_NET = {
    "latent_dim": 16,
    "encoder_config": {"arch": "mlp", "hidden_size": [16], "layer_norm": False},
    "head_config": {"hidden_size": [16], "layer_norm": False},
}


@pytest.fixture(scope="module")
def matd3_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("ma_eval") / "run"
    LocalTrainer(
        {"name": "MATD3", "batch_size": 16},
        {
            "env_type": "pettingzoo",
            "name": "mpe2.simple_speaker_listener_v4",
            "num_envs": 2,
            "env_config": {"continuous_actions": False, "max_cycles": 25},
        },
        {"max_steps": 50, "evo_steps": 50, "eval_loop": 1, "learning_delay": 20},
        network=TINY_NET,
        replay_buffer={"max_size": 500},
        run_dir=run,
        verbose=False,
        logger={"tensorboard": False},
    ).train()
    return run


def test_evaluate_reports_summed_and_per_agent_returns(
    matd3_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["evaluate", str(matd3_run), "--episodes", "3", "--seed", "4"]) == 0
    out = capsys.readouterr().out
    assert "episodes: 3" in out and "return:" in out and "95% CI" in out
    assert "speaker_0:" in out and "listener_0:" in out
    result = evaluate_checkpoint(matd3_run, episodes=3, seed=4)
    assert set(result.agent_returns) == {"speaker_0", "listener_0"}
    for i, total in enumerate(result.returns):
        per_agent = sum(r[i] for r in result.agent_returns.values())
        assert total == pytest.approx(per_agent)
    # speaker-listener rewards are negative distances, shared by both agents
    assert all(r < 0 for r in result.returns)
    assert result.agent_returns["speaker_0"] == pytest.approx(result.agent_returns["listener_0"])
    again = evaluate_checkpoint(matd3_run, episodes=3, seed=4)
    assert again.returns == result.returns  # greedy and seeded: the same episodes
    other = evaluate_checkpoint(matd3_run, episodes=3, seed=5)
    assert other.returns != result.returns


def test_evaluate_refuses_a_gym_env_for_a_multi_agent_checkpoint(
    matd3_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["evaluate", str(matd3_run), "--env", "CartPole-v1", "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert "multi-agent MATD3" in err and "CartPole-v1" in err and "Traceback" not in err


def test_an_env_with_other_agents_or_spaces_is_refused(matd3_run: Path) -> None:
    from agilerl.algorithms.core.multi_agent import MultiAgentAlgorithm
    from agilerl.arena.models.env import PettingZooEnvSpec
    from agilerl.arena.models.errors import ConfigError
    from agilerl.evaluate import resolve_agent_file
    from agilerl.evaluate_multi_agent import run_multi_agent_episodes

    agent = MultiAgentAlgorithm.load(resolve_agent_file(matd3_run, None))
    spread = PettingZooEnvSpec(name="mpe2.simple_spread_v3")
    with pytest.raises(ConfigError, match="agents"):
        run_multi_agent_episodes(agent, spread, episodes=1, seed=0)
    continuous = PettingZooEnvSpec(
        name="mpe2.simple_speaker_listener_v4", env_config={"continuous_actions": True}
    )
    with pytest.raises(ConfigError, match="action space"):
        run_multi_agent_episodes(agent, continuous, episodes=1, seed=0)
