"""The multi-agent updates through GradTape equal plain autograd (same losses, same parameters)."""

from __future__ import annotations

import pytest
import torch

from agilerl.algorithms.ippo import IPPO
from agilerl.algorithms.maddpg import MADDPG
from agilerl.algorithms.matd3 import MATD3
from agilerl.arena.models.algorithms.ippo import IPPOSpec
from agilerl.arena.models.algorithms.maddpg import MADDPGSpec
from agilerl.arena.models.algorithms.matd3 import MATD3Spec
from agilerl.envs.pettingzoo import make_vector_env
from agilerl.networks.fastgrad import autograd_only, chain_of
from agilerl.training.train_multi_agent import (
    EpisodeTracker,
    _collect_ippo,
    make_replay_buffer,
)

SL = "mpe2.simple_speaker_listener_v4"


def _net(layer_norm: bool) -> dict:
    mlp = {"hidden_size": [16], "layer_norm": layer_norm}
    return {"latent_dim": 12, "encoder_config": {"arch": "mlp", **mlp}, "head_config": mlp}


def _pair(make):
    torch.manual_seed(0)
    fast = make()
    torch.manual_seed(0)
    slow = make()
    return fast, slow


def _assert_same(fast, slow) -> None:
    for name, nets in fast.nets.items():
        for (key, pa), pb in zip(
            nets.named_parameters(), slow.nets[name].parameters(), strict=True
        ):
            torch.testing.assert_close(pa, pb, rtol=1e-4, atol=1e-5, msg=f"{name}.{key}")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.mark.parametrize("layer_norm", [False, True])
@pytest.mark.parametrize("continuous", [False, True])
@pytest.mark.parametrize(("cls", "spec_cls"), [(MADDPG, MADDPGSpec), (MATD3, MATD3Spec)])
def test_off_policy_ma_updates_match_autograd(cls, spec_cls, continuous, layer_norm) -> None:
    env = make_vector_env(SL, {"continuous_actions": continuous}, num_envs=4)
    spec = (
        spec_cls(net_config=_net(layer_norm), policy_freq=1)
        if cls is MATD3
        else spec_cls(net_config=_net(layer_norm))
    )
    fast, slow = _pair(lambda: cls(spec, env.observation_spaces, env.action_spaces))
    assert chain_of(fast.actors[fast.policies[0]]) is not None  # the fast path is taken
    memory = make_replay_buffer(fast, 200, seed=0)
    obs, _ = env.reset(seed=0)
    for _ in range(20):
        action = fast.act(obs)
        next_obs, reward, terminated, _, _ = env.step(action)
        memory.add(obs=obs, action=action, reward=reward, next_obs=next_obs, done=terminated)
        obs = next_obs
    for step in range(3):
        batch = memory.sample(32)
        torch.manual_seed(step)
        out_fast = fast.learn(batch)
        torch.manual_seed(step)
        with autograd_only():
            out_slow = slow.learn(batch)
        for key, value in out_fast.items():
            assert value == pytest.approx(out_slow[key], rel=1e-4, abs=1e-6, nan_ok=True)
        _assert_same(fast, slow)
    env.close()


@pytest.mark.parametrize("continuous", [False, True])
def test_ippo_update_matches_autograd(continuous) -> None:
    env = make_vector_env(SL, {"continuous_actions": continuous}, num_envs=4)
    spec = IPPOSpec(net_config=_net(False), learn_step=64, batch_size=32, update_epochs=2)
    fast, slow = _pair(lambda: IPPO(spec, env.observation_spaces, env.action_spaces))
    obs, _ = env.reset(seed=0)
    rollout, _, _ = _collect_ippo(fast, env, obs, EpisodeTracker(env.agents, 4))
    torch.manual_seed(1)
    out_fast = fast.learn(rollout)
    torch.manual_seed(1)
    with autograd_only():
        out_slow = slow.learn(rollout)
    for key, value in out_fast.items():
        assert value == pytest.approx(out_slow[key], rel=1e-4, abs=1e-6)
    _assert_same(fast, slow)
    env.close()
