"""NeuralUCB and NeuralTS: exact covariance updates, evaluation without side effects, regret."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from agilerl.algorithms.core.bandit import sherman_morrison
from agilerl.algorithms.neural_ts import NeuralTS
from agilerl.algorithms.neural_ucb import NeuralUCB
from agilerl.arena.models.algorithms.neural_ts import NeuralTSSpec
from agilerl.arena.models.algorithms.neural_ucb import NeuralUCBSpec
from agilerl.arena.models.env import BanditEnvSpec
from agilerl.arena.models.training import TrainingSpec
from agilerl.components.replay_buffer import ReplayBuffer
from agilerl.envs.bandits import make_bandit_env
from agilerl.logging.run_dir import RunDirectory
from agilerl.training.checkpointing import CheckpointManager
from agilerl.training.run_context import RunContext
from agilerl.training.train_bandits import train_bandits

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bandit_baselines import LinUCB, cumulative_regret

torch.set_num_threads(1)
ALGOS = {"NeuralUCB": (NeuralUCB, NeuralUCBSpec), "NeuralTS": (NeuralTS, NeuralTSSpec)}


def _env(name: str = "iris", seed: int = 0):
    return make_bandit_env(BanditEnvSpec(dataset=name), seed=seed)


def _agent(algo: str = "NeuralUCB", env=None, seed: int = 0, **fields):
    env = env or _env()
    cls, spec_cls = ALGOS[algo]
    torch.manual_seed(seed)
    return cls(spec_cls(**fields), env.observation_space, env.action_space)


def _memory(env) -> ReplayBuffer:
    return ReplayBuffer(
        20_000, observation_space=env.observation_space, action_space=env.action_space, seed=0
    )


def test_sherman_morrison_equals_the_direct_inverse() -> None:
    agent = _agent()
    env = _env()
    contexts = env.reset(seed=0)
    u = torch.eye(agent.sigma_inv.shape[0], dtype=torch.float64) * agent.spec.lamb
    for _ in range(100):
        _, g = agent.features(contexts)
        arm = agent.get_action(contexts)
        u += torch.outer(g[arm], g[arm]).double()
        contexts, _ = env.step(arm)
    torch.testing.assert_close(agent.sigma_inv.double(), torch.linalg.inv(u), atol=1e-5, rtol=0)
    a = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
    g = torch.tensor([0.3, -0.7], dtype=torch.float64)
    expected = torch.linalg.inv(a + torch.outer(g, g))
    torch.testing.assert_close(sherman_morrison(torch.linalg.inv(a), g), expected)


def test_features_are_the_last_layer_gradient() -> None:
    agent = _agent()
    contexts = _env().reset(seed=1)
    f, g = agent.features(contexts)
    last = [m for m in agent.actor.modules() if isinstance(m, torch.nn.Linear)][-1]
    for arm in range(len(contexts)):
        agent.actor.zero_grad()
        out = agent.actor(torch.as_tensor(contexts[arm : arm + 1])).sum()
        out.backward()
        grad = torch.cat([last.weight.grad.reshape(-1), last.bias.grad.reshape(-1)])
        torch.testing.assert_close(g[arm], grad / np.sqrt(last.in_features))
        torch.testing.assert_close(f[arm], out.detach())


@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_evaluation_leaves_the_covariance_unchanged(algo) -> None:
    env = _env()
    agent = _agent(algo)
    contexts = env.reset(seed=0)
    for _ in range(5):
        contexts, _ = env.step(agent.get_action(contexts))
    before = agent.sigma_inv.clone()
    accuracy = agent.test(_env(seed=3), max_steps=50)
    assert agent.fitness == [accuracy]
    assert torch.equal(agent.sigma_inv, before)
    # by hand: the arm of the highest predicted reward, 50 rows of the same table order
    hand, total = _env(seed=3), 0.0
    rows = hand.reset()
    for _ in range(50):
        with torch.no_grad():
            arm = int(agent.actor(torch.as_tensor(rows)).reshape(-1).argmax())
        rows, reward = hand.step(arm)
        total += reward
    assert accuracy == pytest.approx(total / 50)
    agent.get_action(contexts)  # a training pull does change it
    assert not torch.equal(agent.sigma_inv, before)


def test_checkpoint_keeps_the_covariance_and_spec(tmp_path) -> None:
    env = _env()
    agent = _agent("NeuralTS", gamma=0.5, lamb=2.0)
    contexts = env.reset(seed=0)
    for _ in range(10):
        contexts, _ = env.step(agent.get_action(contexts))
    torch.save(agent.state_dict(), tmp_path / "a.pt")
    state = torch.load(tmp_path / "a.pt", weights_only=True)
    restored = NeuralTS._from_state(state, "cpu")
    assert restored.spec.model_dump() == agent.spec.model_dump()
    assert torch.equal(restored.sigma_inv, agent.sigma_inv)
    assert restored.get_action(contexts) == agent.get_action(contexts)  # same TS draws


def test_train_bandits_writes_regret_metrics_plot_and_resumes(tmp_path) -> None:
    run_dir = RunDirectory(tmp_path / "run")

    def context(resume=None) -> RunContext:
        checkpoints = CheckpointManager(run_dir.checkpoints_dir)
        return RunContext(run_dir=run_dir, checkpoints=checkpoints, resume_state=resume)

    env = _env()
    population = [_agent(seed=0, batch_size=16), _agent(seed=1, batch_size=16)]
    population[1].index = 1
    train_bandits(
        population, env, "IRIS", "NeuralUCB", memory=_memory(env),
        training=TrainingSpec(max_steps=60, evo_steps=30, eval_steps=40, checkpoint_steps=120),
        run=context(),
    )  # fmt: skip
    rows = run_dir.metrics_rows
    assert [int(r["step"]) for r in rows] == [60, 60, 120, 120]
    regret = [float(r["cumulative_regret"]) for r in rows]
    assert regret[2] >= regret[0] and regret[3] >= regret[1]
    per_step = float(rows[2]["regret_per_step"])
    assert per_step == pytest.approx((regret[2] - regret[0]) / 30)
    assert (run_dir.plots_dir / "regret.png").stat().st_size > 1000
    states, loop_state, _ = CheckpointManager(run_dir.checkpoints_dir).load_latest()
    assert len(loop_state.extra["member_trainer"]["regret_curves"][0]) == 60
    resumed = [NeuralUCB._from_state(s, "cpu") for s in states]
    train_bandits(
        resumed, env, "IRIS", "NeuralUCB", memory=_memory(env),
        training=TrainingSpec(max_steps=90, evo_steps=30, eval_steps=40),
        run=context(loop_state),
    )  # fmt: skip
    assert [a.steps for a in resumed] == [90, 90]
    last = run_dir.metrics_rows[-1]
    assert int(last["step"]) == 180 and float(last["cumulative_regret"]) >= regret[3]


def _regret(algo: str, dataset: str, steps: int = 1_000, seed: int = 0) -> tuple[float, float]:
    env = _env(dataset, seed=seed)
    agent = _agent(algo, env, seed=seed)
    run = RunContext.ephemeral(seed=seed)
    _, fitness = train_bandits(
        [agent], env, dataset, algo, memory=_memory(env),
        training=TrainingSpec(max_steps=steps, evo_steps=steps, eval_steps=500), run=run,
    )  # fmt: skip
    return run.extra_state["member_trainer"]["regret"][0], fitness[0]


@pytest.mark.slow
def test_neural_ucb_on_iris_beats_linucb_and_random() -> None:
    regret, accuracy = _regret("NeuralUCB", "iris")
    assert regret < 150 and accuracy >= 0.9, (regret, accuracy)
    env = _env("iris")
    linear = cumulative_regret(env, 1_000, LinUCB(env.observation_space.shape[0]))
    random = cumulative_regret(env.copy(), 1_000, None)
    assert regret < linear < random, (regret, linear, random)


@pytest.mark.slow
def test_neural_ts_on_iris() -> None:
    regret, _ = _regret("NeuralTS", "iris")
    assert regret < 250, regret


@pytest.mark.slow
def test_neural_ucb_on_wine() -> None:
    regret, _ = _regret("NeuralUCB", "wine")
    assert regret < 120, regret
