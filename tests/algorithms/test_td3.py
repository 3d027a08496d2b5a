"""TD3: twin critics, delayed actor updates, target smoothing, spec defaults, checkpoints."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agilerl.algorithms import TD3
from agilerl.arena.models.algorithms.td3 import TD3Spec
from agilerl.networks.fastgrad import GradTape

OBS = spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = spaces.Box(-2.0, 2.0, (1,), np.float32)
NET = {
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


def _agent(net: dict | None = None, **kwargs: object) -> TD3:
    return TD3(TD3Spec(), OBS, ACT, net_config=net or NET, **kwargs)


def _batch(size: int = 32, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "obs": torch.rand(size, 3, generator=g) * 2 - 1,
        "action": torch.rand(size, 1, generator=g) * 4 - 2,
        "reward": torch.randn(size, generator=g),
        "next_obs": torch.rand(size, 3, generator=g) * 2 - 1,
        "done": (torch.rand(size, generator=g) < 0.2).float(),
    }


def _params(*modules: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for m in modules for p in m.parameters()]


def _equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_defaults_and_networks() -> None:
    agent = _agent()
    assert agent.tau == 0.005 and agent.policy_noise == 0.2 and agent.noise_clip == 0.5
    assert (agent.batch_size, agent.lr_actor, agent.lr_critic) == (256, 1e-3, 1e-3)
    assert (agent.learn_step, agent.gamma, agent.O_U_noise) == (1, 0.98, False)
    assert set(TD3.network_names) == {
        "actor",
        "actor_target",
        "critic_1",
        "critic_1_target",
        "critic_2",
        "critic_2_target",
    }
    # twin critics start different, even from a seeded net_config
    seeded = _agent(net={**NET, "random_seed": 3})
    assert not _equal(_params(seeded.critic_1), _params(seeded.critic_2))
    again = _agent(net={**NET, "random_seed": 3})
    assert _equal(_params(seeded.critic_2), _params(again.critic_2))
    assert _equal(_params(seeded.actor), _params(again.actor))
    with pytest.raises(ValueError, match="policy_noise"):
        _agent(policy_noise=-1.0)


def test_actions_within_bounds() -> None:
    agent = _agent(expl_noise=10.0, vect_noise_dim=8)
    obs = np.random.default_rng(0).uniform(-1, 1, (8, 3)).astype(np.float32)
    action = agent.get_action(obs)
    assert action.shape == (8, 1) and np.all(np.abs(action) <= 2.0)
    greedy = agent.get_action(obs, greedy=True)
    assert np.array_equal(greedy, agent.get_action(obs, greedy=True))
    assert not np.array_equal(greedy, action)


def _target_actions(agent: TD3, value: float, n: int = 1000) -> torch.Tensor:
    """Smoothed target actions for a target actor pinned to the normalised action ``value``."""
    last = agent.actor_target.head.linears[-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.fill_(math.atanh(value))  # the bounded head ends in Tanh
        return agent.target_action(torch.zeros(n, 3), GradTape())


def test_target_policy_smoothing_is_clipped() -> None:
    agent = _agent(policy_noise=10.0, noise_clip=0.3)
    smoothed = _target_actions(agent, 0.0)
    assert smoothed.abs().max() <= 0.3 + 1e-6
    assert (smoothed.abs() > 0.29).float().mean() > 0.9  # most noise hits the clip
    near_edge = _target_actions(agent, 0.9)
    assert near_edge.max() <= 1.0 and near_edge.min() >= 0.6 - 1e-6
    quiet = _agent(policy_noise=0.0)
    torch.testing.assert_close(_target_actions(quiet, 0.5, 5), torch.full((5, 1), 0.5))


@pytest.mark.parametrize("net", [NET, NORM_NET], ids=["plain", "layer_norm"])
def test_policy_freq_delays_actor_and_target_updates(net: dict) -> None:
    agent = _agent(net=net, policy_freq=3, tau=0.5, lr_actor=1e-2, lr_critic=1e-2)
    targets = ("actor_target", "critic_1_target", "critic_2_target")
    flags = []
    for step in range(6):
        actor0 = _params(agent.actor)
        critics0 = _params(agent.critic_1, agent.critic_2)
        targets0 = _params(*(getattr(agent, t) for t in targets))
        out = agent.learn(_batch(seed=step))
        flags.append(out["actor_updated"])
        assert not _equal(critics0, _params(agent.critic_1, agent.critic_2))
        updated = step % 3 == 2
        assert _equal(actor0, _params(agent.actor)) != updated
        assert _equal(targets0, _params(*(getattr(agent, t) for t in targets))) != updated
        if updated:
            online = _params(agent.actor, agent.critic_1, agent.critic_2)
            new_targets = _params(*(getattr(agent, t) for t in targets))
            for t0, o, t1 in zip(targets0, online, new_targets, strict=True):
                torch.testing.assert_close(t1, 0.5 * t0 + 0.5 * o)
    assert flags == [0.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    assert agent.num_updates == 6


def test_target_uses_the_smaller_critic() -> None:
    agent = _agent(gamma=0.5, policy_noise=0.0, lr_actor=0.0, lr_critic=0.0)
    with torch.no_grad():
        for name, value in (("critic_1", 3.0), ("critic_2", 1.0)):
            for net in (getattr(agent, name), getattr(agent, f"{name}_target")):
                net.head.linears[-1].weight.zero_()
                net.head.linears[-1].bias.fill_(value)
    batch = _batch(8)
    batch["reward"] = torch.zeros(8)
    batch["done"] = torch.zeros(8)
    # y = 0.5 * min(3, 1) = 0.5; critic losses (3 - 0.5)^2 + (1 - 0.5)^2
    out = agent.learn(batch)
    assert out["critic_loss"] == pytest.approx(2.5**2 + 0.5**2)
    assert out["q_mean"] == pytest.approx(3.0)


def test_nan_guard_names_the_loss() -> None:
    agent = _agent(policy_freq=1)
    agent.learn(_batch())
    batch = _batch(seed=1)
    batch["obs"][0, 0] = float("nan")
    critics0 = _params(agent.critic_1, agent.critic_2)
    with pytest.raises(FloatingPointError, match=r"TD3 critic_loss.*update 2"):
        agent.learn(batch)
    assert _equal(critics0, _params(agent.critic_1, agent.critic_2))
