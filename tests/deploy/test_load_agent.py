"""``agilerl.load(RUN)``: the run's best agent, acting on one observation or a batch."""

from __future__ import annotations

import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces

import agilerl
from agilerl.arena.models.errors import ConfigError
from agilerl.deploy.trained_agent import TrainedAgent
from tests.deploy.deploy_helpers import env_observations, train_tiny

SINGLE_AGENT = ("PPO discrete", "PPO continuous", "DQN", "SAC", "TD3")


def test_import_agilerl_stays_light_until_load_is_used() -> None:
    code = "import sys, agilerl; assert 'torch' not in sys.modules, sorted(sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    from agilerl.deploy.trained_agent import load

    assert agilerl.load is load and "load" in agilerl.__all__


@pytest.mark.parametrize("name", SINGLE_AGENT)
def test_one_observation_gets_one_env_action_and_a_batch_an_array(
    name: str, trained_run: Callable[[str], Path]
) -> None:
    agent = agilerl.load(trained_run(name))
    assert isinstance(agent, TrainedAgent) and agent.name == name.split()[0]
    env = agent.make_env()
    obs = env_observations(env, 8)
    batch = agent.act(obs, deterministic=True)
    assert isinstance(batch, np.ndarray) and batch.shape == (8, *agent.action_space.shape)
    for row, single_obs in enumerate(obs):
        single = agent.act(single_obs, deterministic=True)
        if isinstance(agent.action_space, spaces.Discrete):
            assert type(single) is int
        else:
            assert isinstance(single, np.ndarray) and single.shape == agent.action_space.shape
            assert single.dtype == np.float32
        assert agent.action_space.contains(single)
        np.testing.assert_allclose(single, batch[row], rtol=1e-6, atol=1e-6)
    env.step(agent.act(obs[0]))  # what the env takes as it is
    env.close()


def test_a_greedy_episode_returns_what_agilerl_evaluate_reports(
    trained_run: Callable[[str], Path],
) -> None:
    from agilerl.evaluate import evaluate_checkpoint

    run = trained_run("PPO discrete")
    agent = agilerl.load(run)
    env = agent.make_env()
    obs, _ = env.reset(seed=7)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(agent.act(obs))
        total += float(reward)
        done = terminated or truncated
    env.close()
    assert evaluate_checkpoint(run, episodes=1, seed=7).returns == [total]


def test_the_best_member_of_a_population_is_loaded(tmp_path: Path) -> None:
    run = train_tiny(tmp_path / "pop", "DQN", pop_size=2)
    from agilerl.training.checkpointing import CheckpointManager, load_file

    latest = CheckpointManager(run / "checkpoints").latest_dir()
    fitness = {f.name: load_file(f)["fitness"][-1] for f in latest.glob("agent_*.pt")}
    assert len(fitness) == 2
    agent = agilerl.load(run)
    assert agent.fitness == fitness[agent.checkpoint.name] == max(fitness.values())
    assert agilerl.load(run, agent=1).checkpoint.name == "agent_1.pt"


def test_a_wrongly_shaped_observation_is_refused(trained_run: Callable[[str], Path]) -> None:
    agent = agilerl.load(trained_run("DQN"))
    with pytest.raises(ValueError, match=r"fits neither one observation .* \(batch, 4\)"):
        agent.act(np.zeros(5))


def test_a_recurrent_policy_keeps_its_state_until_reset(tmp_path: Path) -> None:
    from agilerl.algorithms import PPO
    from agilerl.arena.models.algorithms.ppo import PPOSpec

    torch.manual_seed(0)
    PPO(PPOSpec(recurrent=True), spaces.Box(-1, 1, (3,)), spaces.Box(-1, 1, (2,))).save_checkpoint(
        tmp_path / "agent_0.pt"
    )
    agent = agilerl.load(tmp_path / "agent_0.pt")
    obs = np.full(3, 0.5, np.float32)
    first = agent.act(obs)
    assert not np.array_equal(agent.act(obs), first)  # the LSTM state moved on
    agent.reset()
    np.testing.assert_array_equal(agent.act(obs), first)
    with pytest.raises(ConfigError, match=r"no manifest\.yaml above it"):
        agent.make_env()


def _corrupt(run: Path, tmp_path: Path) -> Path:
    source = run / "checkpoints"
    latest = source / (source / "latest").read_text().strip() / "agent_0.pt"
    broken = tmp_path / "agent_0.pt"
    broken.write_bytes(latest.read_bytes()[:300])
    return broken


class _RunsCode:
    """Unpickling this creates ``marker``: a checkpoint that would run code if loaded unsafely."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("bad", ["missing", "empty_dir", "manifest", "corrupt", "code"])
def test_bad_input_raises_config_error_naming_path_and_fix(
    bad: str, trained_run: Callable[[str], Path], tmp_path: Path
) -> None:
    run = trained_run("DQN")
    marker = tmp_path / "code_ran"
    path = {
        "missing": tmp_path / "no_such_run",
        "empty_dir": tmp_path,
        "manifest": run / "manifest.yaml",
        "corrupt": _corrupt(run, tmp_path) if bad == "corrupt" else None,
        "code": tmp_path / "agent_0.pt",
    }[bad]
    if bad == "code":
        torch.save({"format": "agilerl.algorithm", "spec": _RunsCode(marker)}, path)
        assert pickle.loads(pickle.dumps(_RunsCode(tmp_path / "probe"))) is None  # it would
        assert (tmp_path / "probe").exists()
    with pytest.raises(ConfigError) as error:
        agilerl.load(path)
    message = str(error.value)
    assert str(path) in message
    fixes = ("pass a run directory", "pass its run directory", "earlier checkpoint directory")
    assert any(fix in message for fix in fixes), message
    if bad == "code":
        assert "refused because loading them could run code" in message
    assert not marker.exists()  # weights_only: loading never runs the file's code
