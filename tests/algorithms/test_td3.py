"""TD3: twin critics, delayed actor updates, target smoothing, manual backward, checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agilerl.algorithms import TD3, EvolvableAlgorithm
from agilerl.arena.models.algorithms.td3 import TD3Spec
from agilerl.builders import AlgorithmBuildRuntime, SingleAgentBuilder

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
    return TD3(OBS, ACT, net_config=net or NET, **kwargs)


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
    agent = _agent(expl_noise=20.0, vect_noise_dim=8)
    obs = np.random.default_rng(0).uniform(-1, 1, (8, 3)).astype(np.float32)
    action = agent.get_action(obs)
    assert action.shape == (8, 1) and np.all(np.abs(action) <= 2.0)
    greedy = agent.get_action(obs, greedy=True)
    assert np.array_equal(greedy, agent.get_action(obs, greedy=True))
    assert not np.array_equal(greedy, action)


def test_target_policy_smoothing_is_clipped() -> None:
    agent = _agent(policy_noise=10.0, noise_clip=0.3)
    smoothed = agent._smooth(torch.zeros(1000, 1))
    assert smoothed.abs().max() <= 0.3 + 1e-6
    assert (smoothed.abs() > 0.29).float().mean() > 0.9  # most noise hits the clip
    near_edge = agent._smooth(torch.full((1000, 1), 0.9))
    assert near_edge.max() <= 1.0 and near_edge.min() >= 0.6 - 1e-6
    quiet = _agent(policy_noise=0.0)
    assert torch.equal(quiet._smooth(torch.full((5, 1), 0.5)), torch.full((5, 1), 0.5))


@pytest.mark.parametrize("net", [NET, NORM_NET], ids=["manual", "autograd"])
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


def test_manual_backward_matches_autograd() -> None:
    net = {
        "latent_dim": 12,
        "encoder_config": {"hidden_size": [16], "layer_norm": False, "activation": "Tanh"},
        "head_config": {"hidden_size": [8, 8], "layer_norm": False},
    }
    manual = _agent(net=net, policy_freq=2, lr_actor=1e-2, lr_critic=1e-2, tau=0.1)
    auto = manual.clone()
    auto._chains = None
    for seed in range(6):
        torch.manual_seed(seed)  # the same smoothing noise for both
        a = manual.learn(_batch(seed=seed))
        torch.manual_seed(seed)
        b = auto.learn(_batch(seed=seed))
        assert a["critic_loss"] == pytest.approx(b["critic_loss"], rel=1e-5)
        assert a["actor_loss"] == pytest.approx(b["actor_loss"], rel=1e-5, abs=1e-8)
    for name in TD3.network_names:
        for p, q in zip(
            getattr(manual, name).parameters(), getattr(auto, name).parameters(), strict=True
        ):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_nan_guard_names_the_loss() -> None:
    agent = _agent(policy_freq=1)
    agent.learn(_batch())
    batch = _batch(seed=1)
    batch["obs"][0, 0] = float("nan")
    critics0 = _params(agent.critic_1, agent.critic_2)
    with pytest.raises(FloatingPointError, match=r"TD3 critic_loss.*update 2"):
        agent.learn(batch)
    assert _equal(critics0, _params(agent.critic_1, agent.critic_2))


def test_clone_and_checkpoint_round_trip(tmp_path) -> None:
    agent = _agent(policy_freq=2, policy_noise=0.1, noise_clip=0.2)
    for seed in range(4):
        agent.learn(_batch(seed=seed))
    clone = agent.clone()
    assert (clone.policy_noise, clone.noise_clip, clone.num_updates) == (0.1, 0.2, 4)
    before = _params(clone.critic_2)
    agent.learn(_batch(seed=7))
    assert _equal(before, _params(clone.critic_2))

    path = tmp_path / "td3.pt"
    agent.save_checkpoint(path)
    state = torch.load(path, weights_only=True)
    assert set(state["networks"]) == set(TD3.network_names)
    loaded = EvolvableAlgorithm.load(path)
    assert isinstance(loaded, TD3)
    obs = np.random.default_rng(5).uniform(-1, 1, (10, 3)).astype(np.float32)
    np.testing.assert_array_equal(
        loaded.get_action(obs, greedy=True), agent.get_action(obs, greedy=True)
    )
    for name in TD3.network_names:
        assert _equal(_params(getattr(agent, name)), _params(getattr(loaded, name)))


def test_builder_passes_spec_fields() -> None:
    spec = TD3Spec(policy_noise=0.3, noise_clip=0.4, tau=0.01, lr_critic=2e-3)
    agent = SingleAgentBuilder.build(spec, OBS, ACT, runtime=AlgorithmBuildRuntime(index=0))
    assert isinstance(agent, TD3)
    assert (agent.policy_noise, agent.noise_clip, agent.tau, agent.lr_critic) == (
        0.3,
        0.4,
        0.01,
        2e-3,
    )
    assert agent.critic_optimizer.lr == pytest.approx(2e-3)
