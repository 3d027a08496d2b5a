"""DDPG and exploration noise: actions, noise processes, updates, sharing, checkpoints."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agilerl.algorithms import DDPG
from agilerl.arena.models.algorithms.ddpg import DDPGSpec
from agilerl.components.noise import GaussianNoise, OrnsteinUhlenbeckNoise, make_noise

OBS = spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 5.0], np.float32))
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


def _agent(net: dict | None = None, **kwargs: object) -> DDPG:
    return DDPG(DDPGSpec(), OBS, ACT, net_config=net or NET, **kwargs)


def _batch(size: int = 32, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    low, high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 5.0])
    return {
        "obs": torch.rand(size, 3, generator=g) * 2 - 1,
        "action": low + torch.rand(size, 2, generator=g) * (high - low),
        "reward": torch.randn(size, generator=g),
        "next_obs": torch.rand(size, 3, generator=g) * 2 - 1,
        "done": (torch.rand(size, generator=g) < 0.2).float(),
    }


def _params(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def _same(a: list[torch.Tensor], module: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, module.parameters(), strict=True))


# --- noise --------------------------------------------------------------------------------
def test_gaussian_noise_statistics() -> None:
    noise = GaussianNoise(2, vect_noise_dim=3, mean=0.5, std=0.2, rng=np.random.default_rng(0))
    samples = np.stack([noise.sample() for _ in range(4000)])
    assert samples.shape == (4000, 3, 2) and samples.dtype == np.float32
    assert abs(samples.mean() - 0.5) < 0.01 and abs(samples.std() - 0.2) < 0.01


def test_ou_noise_is_correlated_and_resets_per_env() -> None:
    noise = OrnsteinUhlenbeckNoise(
        2, vect_noise_dim=3, std=0.3, theta=0.15, dt=0.01, rng=np.random.default_rng(1)
    )
    first = noise.sample()
    second = noise.sample()
    assert first.shape == (3, 2)
    # one step moves the state by at most a few sqrt(dt) * std: consecutive samples are close
    assert np.all(np.abs(second - first) < 0.3)
    for _ in range(50):
        state = noise.sample()
    assert np.all(state != 0)
    noise.reset([1])
    assert np.all(noise.state[1] == 0) and np.all(noise.state[[0, 2]] == state[[0, 2]])
    noise.reset(np.array([True, False, True]))
    assert np.all(noise.state == 0)
    noise.sample()
    noise.reset()
    assert np.all(noise.state == 0)
    # stationary std: sigma * sqrt(dt / (2 theta dt - (theta dt)^2)) ~ 0.3 * sqrt(1 / (2 * 0.15))
    long = OrnsteinUhlenbeckNoise(1, 64, std=0.3, theta=0.15, dt=0.01, rng=np.random.default_rng(2))
    samples = np.stack([long.sample() for _ in range(3000)])[1500:]
    assert abs(samples.std() - 0.3 * math.sqrt(1 / 0.3)) < 0.1


def test_noise_resizes_and_validates() -> None:
    noise = make_noise(True, 1, vect_noise_dim=2)
    assert isinstance(noise, OrnsteinUhlenbeckNoise)
    assert noise.sample(5).shape == (5, 1) and noise.vect_noise_dim == 5
    assert isinstance(make_noise(False, 1), GaussianNoise)
    with pytest.raises(ValueError):
        GaussianNoise(0)
    with pytest.raises(ValueError):
        OrnsteinUhlenbeckNoise(1, dt=0.0)


# --- construction and acting --------------------------------------------------------------
@pytest.mark.parametrize("net", [NET, NORM_NET], ids=["numpy", "torch"])
def test_actions_within_bounds(net: dict) -> None:
    agent = _agent(net=net, expl_noise=10.0, O_U_noise=False, vect_noise_dim=64)
    obs = np.random.default_rng(0).uniform(-1, 1, (64, 3)).astype(np.float32)
    action = agent.get_action(obs)
    assert action.shape == (64, 2) and action.dtype == np.float32
    assert np.all(action >= ACT.low) and np.all(action <= ACT.high)
    # huge noise pins many actions to the bounds
    assert np.any(action == ACT.low) and np.any(action == ACT.high)
    greedy = agent.get_action(obs, greedy=True)
    np.testing.assert_array_equal(greedy, agent.get_action(obs, greedy=True))
    assert np.all(greedy > ACT.low) and np.all(greedy < ACT.high)
    # a fresh actor starts near the middle of the range (vanishing output layer)
    np.testing.assert_allclose(greedy, np.broadcast_to([0.0, 2.5], greedy.shape), atol=0.2)
    assert agent.get_action(obs[0], greedy=True).shape == (1, 2)


def test_numpy_and_torch_actions_agree() -> None:
    agent = _agent()
    assert agent._numpy_chain is not None
    obs = np.random.default_rng(1).uniform(-1, 1, (16, 3)).astype(np.float32)
    via_numpy = agent.get_action(obs, greedy=True)
    via_torch = agent.get_action(torch.from_numpy(obs), greedy=True)
    np.testing.assert_allclose(via_numpy, via_torch, rtol=1e-5, atol=1e-6)


def test_unbounded_actions_are_not_clipped() -> None:
    agent = DDPG(DDPGSpec(), OBS, spaces.Box(-np.inf, np.inf, (2,), np.float32), net_config=NET)
    assert not agent.actor.bounded
    obs = np.zeros((4, 3), np.float32)
    assert agent.get_action(obs).shape == (4, 2)
    batch = _batch()
    batch["action"] = batch["action"] * 10
    assert math.isfinite(agent.learn(batch)["critic_loss"])


def test_agent_noise_is_per_env_and_resettable() -> None:
    agent = _agent(O_U_noise=True, expl_noise=0.5, vect_noise_dim=3)
    obs = np.zeros((3, 3), np.float32)
    for _ in range(20):
        agent.get_action(obs)
    state = agent.noise.state.copy()
    assert np.all(state != 0)
    agent.reset_noise([0, 2])
    assert np.all(agent.noise.state[[0, 2]] == 0)
    np.testing.assert_array_equal(agent.noise.state[1], state[1])
    agent.reset_noise()
    assert np.all(agent.noise.state == 0)


# --- learning -----------------------------------------------------------------------------
@pytest.mark.parametrize("net", [NET, NORM_NET], ids=["plain", "layer_norm"])
def test_actor_update_every_policy_freq_and_soft_targets(net: dict) -> None:
    agent = _agent(net=net, policy_freq=2, tau=0.25, lr_actor=1e-2, lr_critic=1e-2)
    actor0, critic0 = _params(agent.actor), _params(agent.critic)
    targets0 = _params(agent.actor_target) + _params(agent.critic_target)
    out = agent.learn(_batch())
    assert set(out) == {"critic_loss", "actor_loss", "actor_updated", "q_mean"}
    assert out["actor_updated"] == 0.0 and out["actor_loss"] == 0.0
    assert _same(actor0, agent.actor) and not _same(critic0, agent.critic)
    targets1 = _params(agent.actor_target) + _params(agent.critic_target)
    assert all(torch.equal(a, b) for a, b in zip(targets0, targets1, strict=True))
    out = agent.learn(_batch(seed=1))
    assert out["actor_updated"] == 1.0 and out["actor_loss"] != 0.0
    assert not _same(actor0, agent.actor)
    online = _params(agent.actor) + _params(agent.critic)
    targets = _params(agent.actor_target) + _params(agent.critic_target)
    for t0, o, t1 in zip(targets0, online, targets, strict=True):
        torch.testing.assert_close(t1, 0.75 * t0 + 0.25 * o)
    assert agent.num_updates == 2


def test_critic_target_uses_discount() -> None:
    agent = _agent(gamma=0.5, lr_critic=0.0, lr_actor=0.0)
    with torch.no_grad():
        for critic in (agent.critic, agent.critic_target):
            critic.head.linears[-1].weight.zero_()
            critic.head.linears[-1].bias.fill_(2.0)
    batch = _batch(4)
    batch["reward"] = torch.ones(4)
    batch["done"] = torch.tensor([0.0, 1.0, 0.0, 0.0])
    batch["n_steps"] = torch.tensor([1, 1, 2, 3])
    # Q = 2 everywhere; targets 1 + 0.5 * 2, 1, 1 + 0.25 * 2, 1 + 0.125 * 2
    td = 2.0 - np.array([2.0, 1.0, 1.5, 1.25])
    assert agent.learn(batch)["critic_loss"] == pytest.approx(float(np.mean(td**2)))


@pytest.mark.parametrize("net", [NET, NORM_NET], ids=["plain", "layer_norm"])
def test_nan_guard(net: dict) -> None:
    agent = _agent(net=net)
    critic0 = _params(agent.critic)
    batch = _batch()
    batch["reward"][5] = float("nan")
    with pytest.raises(FloatingPointError, match=r"critic_loss.*update 1"):
        agent.learn(batch)
    assert _same(critic0, agent.critic) and agent.num_updates == 0


def test_lr_setters_update_optimizers() -> None:
    agent = _agent(lr_actor=1e-4, lr_critic=1e-3)
    agent.lr_actor, agent.lr_critic = 2e-4, 3e-3
    assert agent.actor_optimizer.lr == pytest.approx(2e-4)
    assert agent.critic_optimizer.lr == pytest.approx(3e-3)
    assert (agent.spec.lr_actor, agent.spec.lr_critic) == (2e-4, 3e-3)
    assert "lr_actor" in agent.hp_names and "policy_freq" in agent.hp_names
    with pytest.raises(ValueError, match="lr_critic"):
        agent.lr_critic = -1.0
    assert agent.critic_optimizer.lr == pytest.approx(3e-3)


def test_spec_defaults() -> None:
    agent = DDPG(DDPGSpec(), OBS, ACT)
    assert (agent.batch_size, agent.lr_actor, agent.lr_critic) == (128, 1e-3, 1e-3)
    assert (agent.learn_step, agent.gamma, agent.tau, agent.O_U_noise) == (1, 0.98, 0.005, False)
    assert isinstance(agent.noise, GaussianNoise)


def test_shared_encoder() -> None:
    agent = _agent(share_encoders=True, policy_freq=1, lr_actor=1e-2, lr_critic=1e-2)
    assert agent.critic.encoder is agent.actor.encoder
    assert agent.critic_target.encoder is agent.actor_target.encoder
    encoder0 = _params(agent.actor.encoder)
    head0 = _params(agent.actor.head)
    agent.learn(_batch())
    assert not _same(encoder0, agent.actor.encoder)  # trained by the critic
    assert not _same(head0, agent.actor.head)
    clone = agent.clone()
    assert clone.critic.encoder is clone.actor.encoder
    obs = np.zeros((2, 3), np.float32)
    np.testing.assert_array_equal(
        clone.get_action(obs, greedy=True), agent.get_action(obs, greedy=True)
    )


def test_image_observations_use_autograd_path() -> None:
    image = spaces.Box(0, 255, (3, 12, 12), np.uint8)
    agent = DDPG(
        DDPGSpec(),
        image,
        spaces.Box(-1, 1, (1,), np.float32),
        net_config={
            "encoder_config": {
                "channel_size": [4],
                "kernel_size": [3],
                "stride_size": [2],
                "min_channel_size": 4,
            }
        },
        policy_freq=1,
    )
    assert agent._numpy_chain is None
    obs = np.random.default_rng(0).integers(0, 255, (2, 3, 12, 12), dtype=np.uint8)
    assert agent.get_action(obs).shape == (2, 1)
    batch = {
        "obs": torch.from_numpy(obs),
        "action": torch.zeros(2, 1),
        "reward": torch.ones(2),
        "next_obs": torch.from_numpy(obs),
        "done": torch.zeros(2),
    }
    out = agent.learn(batch)
    assert math.isfinite(out["critic_loss"]) and math.isfinite(out["actor_loss"])


# --- cloning, checkpoints, builder, evaluation ----------------------------------------------
