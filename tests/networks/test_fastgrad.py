"""The fast-gradient path gives the same updates as plain autograd, for every algorithm using it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from agilerl.algorithms import DDPG, DQN, PPO, SAC, TD3, RainbowDQN
from agilerl.arena.models.registry import MANIFEST_REGISTRY
from agilerl.components.rollout_buffer import RolloutBuffer
from agilerl.networks.fastgrad import GradTape, MLPChain, autograd_only, chain_of
from agilerl.networks.mlp import MLP

BOX_OBS = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
DISCRETE = gym.spaces.Discrete(3)
BOX_ACT = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)


def _net(layer_norm: bool, activation: str = "ReLU") -> dict:
    mlp = {"hidden_size": [16, 16], "layer_norm": layer_norm, "activation": activation}
    return {"latent_dim": 12, "encoder_config": {"arch": "mlp", **mlp}, "head_config": mlp}


def _off_policy_batch(action_space: gym.Space, n: int = 32, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    if isinstance(action_space, gym.spaces.Discrete):
        action = rng.integers(0, action_space.n, n)
    else:
        action = rng.uniform(action_space.low, action_space.high, (n, *action_space.shape))
    return {
        "obs": rng.normal(size=(n, 5)).astype(np.float32),
        "action": action,
        "reward": rng.normal(size=n).astype(np.float32),
        "next_obs": rng.normal(size=(n, 5)).astype(np.float32),
        "done": (rng.random(n) < 0.2).astype(np.float32),
    }


def _grads(agent) -> list[torch.Tensor]:
    return [p.clone() for name in agent.network_names for p in getattr(agent, name).parameters()]


def _pair(make):
    torch.manual_seed(0)
    fast = make()
    torch.manual_seed(0)
    slow = make()
    return fast, slow


def _assert_same_params(a, b) -> None:
    for pa, pb in zip(_grads(a), _grads(b), strict=True):
        torch.testing.assert_close(pa, pb, rtol=1e-4, atol=1e-5)


OFF_POLICY = [
    ("DQN", DQN, DISCRETE, {"double": True}),
    ("RainbowDQN", RainbowDQN, DISCRETE, {}),
    ("DDPG", DDPG, BOX_ACT, {"policy_freq": 1}),
    ("TD3", TD3, BOX_ACT, {"policy_freq": 1, "policy_noise": 0.0}),
    ("SAC", SAC, BOX_ACT, {"policy_freq": 1}),
    ("SAC-shared", SAC, BOX_ACT, {"policy_freq": 1, "share_encoders": True}),
]


@pytest.mark.parametrize("layer_norm", [False, True])
@pytest.mark.parametrize(("name", "cls", "action_space", "fields"), OFF_POLICY)
def test_off_policy_updates_match_autograd(name, cls, action_space, fields, layer_norm):
    spec = MANIFEST_REGISTRY.create(name.split("-")[0], net_config=_net(layer_norm), **fields)
    fast, slow = _pair(lambda: cls(spec, BOX_OBS, action_space))
    weights = np.linspace(0.5, 1.5, 32).astype(np.float32)
    for step in range(3):
        batch = _off_policy_batch(action_space, seed=step)
        torch.manual_seed(100 + step)
        out_fast = fast.learn(batch, weights=weights)
        torch.manual_seed(100 + step)
        with autograd_only():
            out_slow = slow.learn(batch, weights=weights)
        assert out_fast.keys() == out_slow.keys()
        for key in ("loss", "critic_loss", "actor_loss", "alpha_loss", "alpha", "q_mean"):
            if key in out_fast:
                assert out_fast[key] == pytest.approx(out_slow[key], rel=1e-4, abs=1e-5)
    _assert_same_params(fast, slow)


def _rollout_buffer(agent: PPO, action_space: gym.Space, seed: int = 0) -> RolloutBuffer:
    buffer = agent.create_rollout_buffer()
    rng = np.random.default_rng(seed)
    for _ in range(buffer.capacity_per_env):
        obs = rng.normal(size=(agent.spec.num_envs, 5)).astype(np.float32)
        step = agent.policy_step(obs)
        n = agent.spec.num_envs
        buffer.add(
            obs,
            step.action,
            step.log_prob,
            rng.normal(size=n).astype(np.float32),
            step.value,
            rng.random(n) < 0.05,
            np.zeros(n, dtype=bool),
        )
    buffer.compute_returns_and_advantages(np.zeros(agent.spec.num_envs, dtype=np.float32))
    return buffer


@pytest.mark.parametrize("share_encoders", [False, True])
@pytest.mark.parametrize("action_space", [DISCRETE, BOX_ACT], ids=["discrete", "box"])
def test_ppo_update_matches_autograd(action_space, share_encoders):
    spec = MANIFEST_REGISTRY.create(
        "PPO",
        net_config=_net(layer_norm=True),
        learn_step=64,
        num_envs=2,
        batch_size=16,
        update_epochs=2,
        ent_coef=0.01,
        value_clip_coef=0.2,
        share_encoders=share_encoders,
    )
    fast, slow = _pair(lambda: PPO(spec, BOX_OBS, action_space))
    torch.manual_seed(1)
    buffer = _rollout_buffer(fast, action_space)
    slow.generator.set_state(fast.generator.get_state())  # the same minibatch order
    out_fast = fast.learn(buffer)
    with autograd_only():
        out_slow = slow.learn(buffer)
    for key in ("policy_loss", "value_loss", "entropy", "approx_kl"):
        assert out_fast[key] == pytest.approx(out_slow[key], rel=1e-4, abs=1e-6)
    _assert_same_params(fast, slow)


def test_tape_chains_through_several_modules_like_autograd():
    torch.manual_seed(0)
    encoder = MLP(4, 6, [8], activation="Tanh", layer_norm=True)
    head_a, head_b = MLP(6, 2, [5]), MLP(8, 1, [5])
    x = torch.randn(10, 4)
    extra = torch.randn(10, 2, requires_grad=True)

    def loss_of(tape: GradTape) -> torch.Tensor:
        latent = tape(encoder, x)
        a = tape(head_a, latent)
        b = tape(head_b, torch.cat([latent, extra * a], dim=1))
        return (a.square().sum() + b.sin().sum()) / 10

    modules = [encoder, head_a, head_b]
    grads = []
    for fast in (True, False):
        for m in modules:
            m.zero_grad(set_to_none=True)
        extra.grad = None
        tape = GradTape(fast=fast)
        tape.backward(loss_of(tape))
        grads.append([p.grad.clone() for m in modules for p in m.parameters()] + [extra.grad])
    for g_fast, g_slow in zip(*grads, strict=True):
        torch.testing.assert_close(g_fast, g_slow, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("requires_grad", [False, True])
def test_tanh_chain_matches_torch(requires_grad):
    torch.manual_seed(0)
    mlp = MLP(4, 3, [64, 64], activation="Tanh", output_activation="Tanh", layer_norm=False)
    x = torch.randn(256, 4, requires_grad=requires_grad)
    expected = mlp(x)
    expected.square().sum().backward()
    grads = [p.grad.clone() for p in mlp.parameters()]
    mlp.zero_grad(set_to_none=True)
    x.grad = None
    tape = GradTape()
    out = tape(mlp, x)
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)
    tape.backward(out.square().sum())
    for got, want in zip([p.grad for p in mlp.parameters()], grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    with torch.no_grad():  # the inference path of the chain
        torch.testing.assert_close(chain_of(mlp).forward(x.detach()), expected.detach())


def test_chain_only_for_modules_it_can_run():
    assert isinstance(chain_of(MLP(3, 2, [4], activation="ReLU", layer_norm=True)), MLPChain)
    assert chain_of(MLP(3, 2, [4], activation="GELU")) is None
    assert chain_of(nn.Linear(3, 2)) is None


@pytest.mark.parametrize("stacked", [False, True])
def test_input_gradient_of_some_inputs_only_matches_autograd(stacked):
    # a critic head reading [detached latent, action]: only the action's columns get a
    # gradient, and a 3-wide first layer takes the transposed (narrow-result) product
    torch.manual_seed(0)
    heads = [MLP(3 + 2, 1, [20]), MLP(3 + 2, 1, [20])]
    latent = torch.randn(40, 3)
    action = torch.randn(40, 2, requires_grad=True)
    grads = []
    for fast in (True, False):
        for m in heads:
            m.zero_grad(set_to_none=True)
        action.grad = None
        tape = GradTape(fast=fast)
        if stacked:
            q = tape.stacked(heads, latent, action)
        else:
            q = torch.stack([tape(m, latent, action) for m in heads])
        tape.backward(q.square().mean())
        grads.append([p.grad.clone() for m in heads for p in m.parameters()] + [action.grad])
    for g_fast, g_slow in zip(*grads, strict=True):
        torch.testing.assert_close(g_fast, g_slow, rtol=1e-5, atol=1e-6)
