"""DQN: acting, epsilon-greedy, targets, soft updates, spec fields, cloning, checkpoints."""

from __future__ import annotations

import math

import numpy as np
import pydantic
import pytest
import torch
from gymnasium import spaces

from agilerl.algorithms import DQN
from agilerl.arena.models.algorithms.dqn import DQNSpec

OBS = spaces.Box(-1.0, 1.0, (4,), np.float32)
PLAIN_NET = {
    "latent_dim": 16,
    "encoder_config": {"hidden_size": [16], "layer_norm": False},
    "head_config": {"hidden_size": [16], "layer_norm": False},
}
NORM_NET = {
    "latent_dim": 16,
    "encoder_config": {"hidden_size": [16], "layer_norm": True},
    "head_config": {"hidden_size": [16], "layer_norm": True},
}


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)


def _agent(n: int = 2, net: dict | None = None, **kwargs: object) -> DQN:
    return DQN(DQNSpec(), OBS, spaces.Discrete(n), net_config=net or PLAIN_NET, **kwargs)


def _batch(size: int = 32, n: int = 2, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "obs": torch.rand(size, 4, generator=g) * 2 - 1,
        "action": torch.randint(0, n, (size,), generator=g),
        "reward": torch.randn(size, generator=g),
        "next_obs": torch.rand(size, 4, generator=g) * 2 - 1,
        "done": (torch.rand(size, generator=g) < 0.2).float(),
    }


def _params(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


# --- construction and acting --------------------------------------------------------------
def test_overrides_are_validated_through_the_spec() -> None:
    with pytest.raises(pydantic.ValidationError, match="not_a_setting"):
        _agent(not_a_setting=1)
    with pytest.raises(ValueError, match="tau"):
        _agent(tau=5.0)
    agent = _agent(lr=1e-3)
    assert agent.lr == pytest.approx(1e-3) and agent.spec.lr == pytest.approx(1e-3)


def test_spec_defaults() -> None:
    agent = DQN(DQNSpec(), OBS, spaces.Discrete(2))
    assert (agent.learn_step, agent.tau, agent.double) == (4, 0.005, True)
    assert agent.lr == DQNSpec().lr
    assert agent.net_config["latent_dim"] == 64


@pytest.mark.parametrize("net", [PLAIN_NET, NORM_NET], ids=["plain", "layer_norm"])
def test_action_shape_range_and_start_offset(net: dict) -> None:
    agent = DQN(DQNSpec(), OBS, spaces.Discrete(3, start=2), net_config=net)
    obs = np.random.default_rng(0).uniform(-1, 1, (7, 4)).astype(np.float32)
    for kwargs in ({}, {"epsilon": 0.5}, {"epsilon": 1.0}, {"greedy": True}):
        action = agent.get_action(obs, **kwargs)
        assert isinstance(action, np.ndarray)
        assert action.shape == (7,)
        assert set(action.tolist()) <= {2, 3, 4}
    # torch tensors and single observations work too
    assert agent.get_action(torch.from_numpy(obs)).shape == (7,)
    assert agent.get_action(obs[0]).shape == (1,)


def test_numpy_and_torch_action_paths_agree() -> None:
    agent = _agent(n=4)
    assert agent._numpy_chain is not None
    obs = np.random.default_rng(1).uniform(-1, 1, (64, 4)).astype(np.float32)
    q = agent.get_q_values(obs)
    np.testing.assert_array_equal(agent.get_action(obs, greedy=True), q.argmax(axis=1))


def test_epsilon_greedy_statistics() -> None:
    agent = _agent(n=4)
    obs = np.random.default_rng(2).uniform(-1, 1, (20_000, 4)).astype(np.float32)
    greedy = agent.get_action(obs, greedy=True)
    assert np.array_equal(agent.get_action(obs, epsilon=0.0), greedy)
    # P(action == greedy) = 1 - eps + eps / n
    for eps in (0.2, 0.5):
        match = np.mean(agent.get_action(obs, epsilon=eps) == greedy)
        assert abs(match - (1 - eps + eps / 4)) < 0.015
    counts = np.bincount(agent.get_action(obs, epsilon=1.0), minlength=4) / len(obs)
    np.testing.assert_allclose(counts, 0.25, atol=0.015)
    # greedy overrides epsilon
    assert np.array_equal(agent.get_action(obs, epsilon=1.0, greedy=True), greedy)


def test_dict_observations() -> None:
    obs_space = spaces.Dict(
        {"pos": spaces.Box(-1, 1, (3,), np.float32), "flag": spaces.Discrete(2)}
    )
    agent = DQN(DQNSpec(), obs_space, spaces.Discrete(3), learn_step=1)
    assert agent._numpy_chain is None
    obs = {"pos": np.zeros((5, 3), np.float32), "flag": np.array([0, 1, 0, 1, 1])}
    assert agent.get_action(obs, epsilon=0.3).shape == (5,)
    batch = {
        "obs": {"pos": torch.zeros(8, 3), "flag": torch.randint(0, 2, (8,))},
        "action": torch.randint(0, 3, (8,)),
        "reward": torch.ones(8),
        "next_obs": {"pos": torch.ones(8, 3), "flag": torch.randint(0, 2, (8,))},
        "done": torch.zeros(8),
    }
    assert math.isfinite(agent.learn(batch)["loss"])


# --- learning -----------------------------------------------------------------------------
@pytest.mark.parametrize("net", [PLAIN_NET, NORM_NET], ids=["plain", "layer_norm"])
def test_learn_moves_online_and_target_by_tau(net: dict) -> None:
    agent = _agent(net=net, tau=0.1, lr=1e-2)
    target_before = _params(agent.actor_target)
    online_before = _params(agent.actor)
    out = agent.learn(_batch())
    assert set(out) == {"loss", "q_mean"}
    assert all(isinstance(v, float) for v in out.values())
    online_after = _params(agent.actor)
    assert any(not torch.equal(a, b) for a, b in zip(online_before, online_after, strict=True))
    for t0, o1, t1 in zip(
        target_before, online_after, agent.actor_target.parameters(), strict=True
    ):
        torch.testing.assert_close(t1, 0.9 * t0 + 0.1 * o1)
    assert agent.num_updates == 1


def _crafted_agent(double: bool, net: dict) -> DQN:
    """Online net prefers action 0 (Q = [1, 0]); target net values [0, 5]."""
    agent = _agent(net=net, double=double, gamma=0.5, lr=0.0, tau=0.0)
    with torch.no_grad():
        for module, bias in ((agent.actor, [1.0, 0.0]), (agent.actor_target, [0.0, 5.0])):
            last = module.head.linears[-1]
            last.weight.zero_()
            last.bias.copy_(torch.tensor(bias))
    return agent


@pytest.mark.parametrize("net", [PLAIN_NET, NORM_NET], ids=["plain", "layer_norm"])
def test_double_dqn_target_differs_from_vanilla(net: dict) -> None:
    batch = {
        "obs": torch.zeros(4, 4),
        "action": torch.zeros(4, dtype=torch.int64),
        "reward": torch.zeros(4),
        "next_obs": torch.zeros(4, 4),
        "done": torch.zeros(4),
    }
    vanilla, double = _crafted_agent(False, net), _crafted_agent(True, net)
    # vanilla target: 0.5 * max_a Q_target = 2.5; double: 0.5 * Q_target(argmax_a Q_online = 0) = 0
    # Q(s, 0) = 1, so the squared TD errors are (1 - 2.5)^2 and (1 - 0)^2
    assert vanilla.learn(batch)["loss"] == pytest.approx(2.25)
    assert double.learn(batch)["loss"] == pytest.approx(1.0)


def test_done_and_n_steps_set_the_discount() -> None:
    agent = _crafted_agent(False, PLAIN_NET)
    batch = {
        "obs": torch.zeros(3, 4),
        "action": torch.zeros(3, dtype=torch.int64),
        "reward": torch.ones(3),
        "next_obs": torch.zeros(3, 4),
        "done": torch.tensor([0.0, 1.0, 0.0]),
        "n_steps": torch.tensor([1, 1, 3]),
    }
    # targets: 1 + 0.5 * 5, 1 (terminal), 1 + 0.125 * 5; Q = 1
    td = np.array([1 - 3.5, 0.0, 1 - 1.625])
    out = agent.learn(batch, weights=torch.ones(3))
    assert out["loss"] == pytest.approx(float(np.mean(td**2)))
    np.testing.assert_allclose(out["priorities"], np.abs(td) + 1e-6, rtol=1e-5)
    # an n-step batch replaces the one-step batch and must say how many steps it spans
    with pytest.raises(ValueError, match="n_steps"):
        agent.learn(batch, n_step_batch={k: v for k, v in batch.items() if k != "n_steps"})
    assert agent.learn(_batch(3), n_step_batch=batch)["loss"] == pytest.approx(out["loss"])


@pytest.mark.parametrize("net", [PLAIN_NET, NORM_NET], ids=["plain", "layer_norm"])
def test_nan_guard(net: dict) -> None:
    agent = _agent(net=net)
    before = _params(agent.actor)
    batch = _batch()
    batch["reward"][3] = float("nan")
    with pytest.raises(FloatingPointError, match=r"loss.*update 1"):
        agent.learn(batch)
    for p, q in zip(before, agent.actor.parameters(), strict=True):
        assert torch.equal(p, q)
    assert agent.num_updates == 0


def test_lr_setter_updates_optimizer() -> None:
    agent = _agent(lr=1e-3)
    agent.lr = 5e-4
    assert agent.optimizer.lr == pytest.approx(5e-4)
    assert agent.spec.lr == pytest.approx(5e-4)
    state = agent.state_dict()
    assert state["spec"]["lr"] == pytest.approx(5e-4)
    agent.set_hp(lr=2e-4)
    assert agent.optimizer.lr == pytest.approx(2e-4)
    with pytest.raises(ValueError, match="lr"):
        agent.lr = 5.0
    assert agent.lr == pytest.approx(2e-4)


# --- cloning, checkpoints, evaluation -----------------------------------------------------
def test_spec_and_args_rebuild() -> None:
    agent = _agent(n=3, double=False, gamma=0.9)
    state = agent.state_dict()
    rebuilt = DQN(DQNSpec.model_validate(state["spec"]), OBS, spaces.Discrete(3))
    assert rebuilt.spec.model_dump() == agent.spec.model_dump()
    assert rebuilt.state_dict()["args"] == state["args"]
