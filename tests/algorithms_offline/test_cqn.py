"""CQN: the conservative update, spec-backed hyperparameters, checkpoints, and learning offline."""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from pydantic import ValidationError

from agilerl.algorithms.cqn import CQN
from agilerl.arena.models.algorithms.cqn import CQNSpec
from agilerl.arena.models.training import TrainingSpec
from agilerl.components.replay_buffer import ReplayBuffer
from agilerl.envs.offline import load_mdp_file
from agilerl.hpo import Mutations, TournamentSelection
from agilerl.logging.run_dir import RunDirectory
from agilerl.training.checkpointing import CheckpointManager
from agilerl.training.run_context import RunContext
from agilerl.training.train_offline import train_offline

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from make_offline_dataset import make_dataset

torch.set_num_threads(1)
ENV = gym.make("CartPole-v1")
OBS, ACT = ENV.observation_space, ENV.action_space


def _agent(seed: int = 0, **fields) -> CQN:
    torch.manual_seed(seed)
    return CQN(CQNSpec(**fields), OBS, ACT)


def _batch(n: int = 64, action: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(n, 4)).astype(np.float32) * 0.05
    return {
        "obs": obs,
        "action": np.full(n, action),
        "reward": np.ones(n, np.float32),
        "next_obs": obs,
        "done": np.zeros(n, np.float32),
    }


def test_the_conservative_penalty_lowers_actions_the_data_never_takes() -> None:
    batch = _batch(action=0)
    gaps = {}
    for weight in (0.0, 1.0):
        agent = _agent(conservative_weight=weight, lr=1e-3)
        for _ in range(60):
            out = agent.learn(batch)
        q = agent.actor(torch.as_tensor(batch["obs"])).detach()
        gaps[weight] = float((q[:, 0] - q[:, 1]).mean())
        assert set(out) == {"loss", "td_loss", "conservative_loss", "q_mean"}
    assert gaps[1.0] > gaps[0.0] + 0.5
    assert (agent.get_action(batch["obs"], greedy=True) == 0).all()


def test_hyperparameters_are_the_spec_and_changes_are_validated() -> None:
    agent = _agent(lr=1e-3)
    agent.lr = 3e-3
    assert agent.spec.lr == 3e-3 and agent.optimizer.param_groups[0]["lr"] == 3e-3
    agent.conservative_weight = 0.0
    assert agent.spec.conservative_weight == 0.0
    with pytest.raises(ValidationError):
        agent.gamma = 2.0
    assert agent.spec.gamma == 0.99


def test_checkpoint_records_the_spec_and_loads_weights_only(tmp_path) -> None:
    agent = _agent(double=True, conservative_weight=0.5, batch_size=32)
    agent.learn(_batch())
    agent.steps, agent.fitness = 7, [12.0]
    torch.save(agent.state_dict(), tmp_path / "a.pt")
    state = torch.load(tmp_path / "a.pt", weights_only=True)
    assert state["spec"]["conservative_weight"] == 0.5 and state["spec"]["double"] is True
    restored = CQN._from_state(state, "cpu")
    obs = torch.as_tensor(_batch()["obs"])
    torch.testing.assert_close(restored.actor(obs), agent.actor(obs))
    assert (restored.steps, restored.fitness) == (7, [12.0])
    assert restored.spec.model_dump() == agent.spec.model_dump()
    clone = agent.clone(index=3)
    assert clone.index == 3
    torch.testing.assert_close(clone.actor_target(obs), agent.actor_target(obs))


def test_cqn_needs_discrete_actions() -> None:
    pendulum = gym.make("Pendulum-v1")
    with pytest.raises(ValueError, match="Discrete"):
        CQN(CQNSpec(), pendulum.observation_space, pendulum.action_space)


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "small.h5"
    make_dataset(steps=3_000, epsilon=0.5, seed=1, out=path)
    return load_mdp_file(path)


def _memory() -> ReplayBuffer:
    return ReplayBuffer(100_000, observation_space=OBS, action_space=ACT, seed=0)


def _eval_env():
    return gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")


def test_train_offline_writes_metrics_and_checkpoints_and_resumes(tmp_path, small_dataset) -> None:
    run_dir = RunDirectory(tmp_path / "run")

    def context(resume=None) -> RunContext:
        return RunContext(
            run_dir=run_dir,
            checkpoints=CheckpointManager(run_dir.checkpoints_dir),
            resume_state=resume,
        )

    population = [_agent(0, batch_size=32), _agent(1, batch_size=32)]
    population[1].index = 1
    env = _eval_env()
    population, fitness = train_offline(
        population, env, "CartPole-v1", "CQN", memory=_memory(), dataset=small_dataset,
        training=TrainingSpec(
            max_steps=60, evo_steps=30, eval_loop=2, eval_steps=50, checkpoint_steps=60
        ),
        run=context(),
    )  # fmt: skip
    assert [a.steps for a in population] == [60, 60] and len(fitness) == 2
    rows = run_dir.metrics_rows
    assert [int(r["step"]) for r in rows] == [60, 60, 120, 120]
    assert {"loss", "conservative_loss", "dataset_size"} <= set(rows[0])
    states, loop_state, _ = CheckpointManager(run_dir.checkpoints_dir).load_latest()
    assert loop_state.total_steps == 120
    resumed = [CQN._from_state(s, "cpu") for s in states]
    assert [a.steps for a in resumed] == [60, 60]
    resumed, _ = train_offline(
        resumed, env, "CartPole-v1", "CQN", memory=_memory(), dataset=small_dataset,
        training=TrainingSpec(max_steps=90, evo_steps=30, eval_loop=2, eval_steps=50),
        run=context(loop_state),
    )  # fmt: skip
    assert [a.steps for a in resumed] == [90, 90]
    assert int(run_dir.metrics_rows[-1]["step"]) == 180
    env.close()


def test_train_offline_evolves_the_population(small_dataset) -> None:
    population = [_agent(i, batch_size=32) for i in range(3)]
    for i, agent in enumerate(population):
        agent.index = i
    tournament = TournamentSelection(2, True, 3, rng=np.random.default_rng(0))
    mutation = Mutations(
        {"no_mut": 0.2, "rl_hp_mut": 0.4, "params_mut": 0.4},
        {"lr": (1e-5, 1e-2, 1.2, 0.8), "conservative_weight": (0.1, 5.0, 1.2, 0.8)},
        rng=np.random.default_rng(1),
    )
    env = _eval_env()
    population, _ = train_offline(
        population, env, "CartPole-v1", "CQN", memory=_memory(), dataset=small_dataset,
        training=TrainingSpec(max_steps=40, evo_steps=20, eval_loop=2, eval_steps=30),
        tournament=tournament, mutation=mutation,
    )  # fmt: skip
    env.close()
    assert len(population) == 3 and all(isinstance(a, CQN) for a in population)
    kinds = [a.mut for a in population]
    assert any(k not in (None, "None") for k in kinds)
    for agent in population:  # mutated hyperparameters went through the spec
        assert agent.optimizer.param_groups[0]["lr"] == agent.spec.lr


@pytest.fixture(scope="module")
def replay_dataset(tmp_path_factory):
    """The replay-style dataset of the acceptance test: scripted policy, 50% random actions."""
    path = tmp_path_factory.mktemp("data") / "cartpole_eps05.h5"
    make_dataset(steps=100_000, epsilon=0.5, seed=0, out=path)
    return load_mdp_file(path)


@pytest.mark.slow
def test_cqn_solves_cartpole_offline_and_beats_offline_dqn(replay_dataset) -> None:
    scores = {}
    for weight in (1.0, 0.0):
        agent = _agent(0, batch_size=256, lr=1e-3, tau=1e-3, double=True,
                       conservative_weight=weight)  # fmt: skip
        env = gym.make_vec("CartPole-v1", num_envs=10, vectorization_mode="sync")
        _, fitness = train_offline(
            [agent], env, "CartPole-v1", "CQN", memory=_memory(), dataset=replay_dataset,
            training=TrainingSpec(max_steps=3_000, evo_steps=1_000, eval_loop=10),
        )  # fmt: skip
        env.close()
        scores[weight] = fitness[0]
    assert scores[1.0] >= 400, scores
    assert scores[1.0] - scores[0.0] >= 200, scores


def test_a_minari_dataset_is_evaluated_in_the_env_it_names(tmp_path, monkeypatch) -> None:
    """An Acrobot dataset is scored in Acrobot: -1 a step, so 20 capped steps give -20.

    CartPole (the default env elsewhere in this file) would score between +1 and +20.
    """
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    make_dataset(env_id="Acrobot-v1", policy="random", steps=500, seed=2,
                 minari_id="acrobot/tiny-v0")  # fmt: skip
    acrobot = gym.make("Acrobot-v1")
    torch.manual_seed(0)
    agent = CQN(CQNSpec(batch_size=16), acrobot.observation_space, acrobot.action_space)
    memory = ReplayBuffer(
        1_000, observation_space=acrobot.observation_space,
        action_space=acrobot.action_space, seed=0,
    )  # fmt: skip
    _, fitness = train_offline(
        [agent], None, memory=memory, minari_dataset_id="acrobot/tiny-v0",
        training=TrainingSpec(max_steps=10, evo_steps=10, eval_loop=2, eval_steps=20),
    )  # fmt: skip
    assert len(memory) == 500 and agent.steps == 10
    # an untrained swing-up never reaches the goal in 20 steps
    assert fitness[0] == -20.0


def test_train_offline_refuses_a_dataset_from_another_env(small_dataset) -> None:
    from agilerl.arena.models.errors import ConfigError

    env = gym.make_vec("Acrobot-v1", num_envs=1, vectorization_mode="sync")
    acrobot = gym.make("Acrobot-v1")
    agent = CQN(CQNSpec(), acrobot.observation_space, acrobot.action_space)
    with pytest.raises(ConfigError, match="observations of shape"):
        train_offline(
            [agent], env, "Acrobot-v1", "CQN", training=TrainingSpec(), memory=_memory(),
            dataset=small_dataset,
        )  # fmt: skip
    env.close()


def _train_py(tmp_path: Path, *overrides: str) -> tuple[int, str]:
    from tests.reliability.helpers import train

    budget = ("training.max_steps=200", "training.evo_steps=100", "training.eval_loop=1")
    done = train("algorithm=cqn", "env=cartpole_offline", *budget, *overrides, cwd=tmp_path)
    return done.returncode, done.stdout + done.stderr


def test_a_missing_or_foreign_dataset_file_is_refused_before_anything_is_written(tmp_path) -> None:
    run = tmp_path / "run"
    code, out = _train_py(tmp_path, f"environment.dataset_path={tmp_path / 'none.npz'}",
                          f"run_dir={run}")  # fmt: skip
    assert code == 2 and "none.npz does not exist; record one with" in out
    assert "Traceback" not in out and not run.exists()
    (tmp_path / "data.csv").write_text("obs,action\n")
    code, out = _train_py(tmp_path, f"environment.dataset_path={tmp_path / 'data.csv'}",
                          "dry_run=true")  # fmt: skip
    assert code == 2 and "data.csv is neither HDF5 (.h5/.hdf5) nor .npz" in out


def test_the_replay_memory_is_the_dataset_unless_a_section_sizes_it(tmp_path) -> None:
    data = tmp_path / "small.npz"
    make_dataset(steps=500, epsilon=0.5, seed=1, out=data)
    run = tmp_path / "run"
    code, out = _train_py(tmp_path, f"environment.dataset_path={data}", f"run_dir={run}")
    assert code == 0, out
    assert "no replay_buffer section" not in out  # sized to the dataset, nothing to warn about
    assert "dataset_size" in (run / "metrics.csv").read_text().splitlines()[0]
    small = tmp_path / "small_run"
    code, out = _train_py(tmp_path, f"environment.dataset_path={data}", f"run_dir={small}",
                          "replay_buffer=standard", "replay_buffer.max_size=100")  # fmt: skip
    assert code == 2 and "replay_buffer.max_size: 100 is smaller than the dataset" in out
    assert not small.exists()  # the run stopped before training: the directory it made is gone
