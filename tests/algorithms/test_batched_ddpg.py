"""A stacked DDPG / TD3 group learns and acts exactly like its members would alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agilerl.algorithms.batched import DDPGGroup, LoneGroup, make_groups
from agilerl.algorithms.ddpg import DDPG
from agilerl.algorithms.td3 import TD3
from agilerl.arena.models.algorithms.ddpg import DDPGSpec
from agilerl.arena.models.algorithms.td3 import TD3Spec

OBS = spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = spaces.Box(-2.0, 2.0, (2,), np.float32)
NET = {
    "latent_dim": 16,
    "encoder_config": {"arch": "mlp", "hidden_size": [16]},
    "head_config": {"hidden_size": [16]},
}
HPS = [
    {"lr_actor": 1e-3, "lr_critic": 2e-3, "gamma": 0.99, "tau": 0.05, "policy_freq": 2},
    {"lr_actor": 5e-3, "lr_critic": 1e-3, "gamma": 0.9, "tau": 1.0, "policy_freq": 1},
    {"lr_actor": 2e-4, "lr_critic": 5e-4, "gamma": 0.97, "tau": 0.0, "policy_freq": 3},
]
TD3_HPS = [{"policy_noise": 0.2, "noise_clip": 0.5}, {"policy_noise": 0.0}, {"noise_clip": 0.1}]


def _agent(algo: type, index: int, net: dict | None = None, **hps: object) -> DDPG:
    torch.manual_seed(100 + index)
    spec_class = TD3Spec if algo is TD3 else DDPGSpec
    spec = spec_class.model_validate({"net_config": net or NET, "batch_size": 8, **hps})
    return algo(spec, OBS, ACT, index=index)


def _population(algo: type, net: dict | None = None) -> list[DDPG]:
    extra = TD3_HPS if algo is TD3 else [{}] * len(HPS)
    return [
        _agent(algo, i, net, **hp, **x) for i, (hp, x) in enumerate(zip(HPS, extra, strict=True))
    ]


def _batch(rng: np.random.Generator, size: int) -> dict[str, np.ndarray]:
    return {
        "obs": rng.standard_normal((size, 3)).astype(np.float32),
        "action": rng.uniform(-2.0, 2.0, (size, 2)).astype(np.float32),
        "reward": rng.standard_normal(size).astype(np.float32),
        "next_obs": rng.standard_normal((size, 3)).astype(np.float32),
        "done": (rng.random(size) < 0.2).astype(np.float32),
    }


def _weights(agent: DDPG) -> list[torch.Tensor]:
    nets = [getattr(agent, name) for name in agent.network_names]
    return [p.detach().clone() for net in nets for p in net.parameters()]


@pytest.mark.parametrize("algo", [DDPG, TD3])
@pytest.mark.parametrize("layer_norm", [False, True])
def test_group_updates_match_lone_agents(algo: type, layer_norm: bool) -> None:
    torch.set_num_threads(1)
    net = {**NET, "head_config": {"hidden_size": [16], "layer_norm": layer_norm}}
    lone, stacked = _population(algo, net), _population(algo, net)
    groups = make_groups(stacked)
    assert len(groups) == 1 and isinstance(groups[0], DDPGGroup)
    group = groups[0]
    rng = np.random.default_rng(0)
    for _ in range(6):
        batches = [_batch(rng, 8) for _ in lone]
        expected = [agent.learn(b) for agent, b in zip(lone, batches, strict=True)]
        got = group.learn(range(3), batches)
        for e, g in zip(expected, got, strict=True):
            assert g["actor_updated"] == e["actor_updated"]
            for key in ("critic_loss", "actor_loss", "q_mean"):
                assert g[key] == pytest.approx(e[key], rel=1e-4, abs=1e-6), key
    # Only some members learn (different learn steps): the others must not move.
    for subset in ([2], [0, 2]):
        batches = [_batch(rng, 8) for _ in subset]
        for r, b in zip(subset, batches, strict=True):
            lone[r].learn(b)
        group.learn(subset, batches)
    group.sync()
    for a, b in zip(lone, stacked, strict=True):
        assert a.num_updates == b.num_updates
        assert a.last_actor_loss == pytest.approx(b.last_actor_loss, rel=1e-4, abs=1e-6)
        for opt in ("actor_optimizer", "critic_optimizer"):
            assert getattr(a, opt).step_count == getattr(b, opt).step_count
            torch.testing.assert_close(getattr(b, opt).exp_avg_sq, getattr(a, opt).exp_avg_sq)
        for x, y in zip(_weights(a), _weights(b), strict=True):
            torch.testing.assert_close(y, x, rtol=1e-4, atol=1e-6)
    # The members moved (actor, critic and target): not comparing untouched copies.
    fresh = _weights(_population(algo, net)[0])
    moved = _weights(stacked[0])
    assert all(not torch.equal(x, y) for x, y in zip(fresh[:2], moved[:2], strict=True))


@pytest.mark.parametrize("algo", [DDPG, TD3])
def test_group_acts_like_lone_agents(algo: type) -> None:
    lone, stacked = _population(algo), _population(algo)
    group = make_groups(stacked)[0]
    obs = np.random.default_rng(1).standard_normal((3, 5, 3)).astype(np.float32)
    for greedy in (True, False, False):
        expected = [a.get_action(obs[i], greedy=greedy) for i, a in enumerate(lone)]
        got = group.act(obs, [0.0] * 3, greedy=greedy)
        for e, g in zip(expected, got, strict=True):
            assert g.shape == e.shape == (5, 2)
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_other_architectures_and_algorithms_form_their_own_groups() -> None:
    wide = {**NET, "head_config": {"hidden_size": [32]}}
    agents = [
        _agent(DDPG, 0),
        _agent(TD3, 1),
        _agent(DDPG, 2, wide),
        _agent(DDPG, 3),
        _agent(DDPG, 4, share_encoders=True),
    ]
    groups = make_groups(agents)
    assert [g.slots for g in groups] == [[0, 3], [1], [2], [4]]
    # a member with no partner learns on its own (a stack of one is slower)
    assert [type(g) for g in groups] == [DDPGGroup, LoneGroup, LoneGroup, LoneGroup]
    groups = make_groups([*agents, _agent(TD3, 5)])
    assert [g.slots for g in groups] == [[0, 3], [1, 5], [2], [4]]
    assert [type(g) for g in groups] == [DDPGGroup, DDPGGroup, LoneGroup, LoneGroup]


def test_one_member_major_batch_equals_one_batch_per_member() -> None:
    rng = np.random.default_rng(2)
    batches = [_batch(rng, 8) for _ in HPS]
    joined = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
    listed = make_groups(_population(TD3))[0]
    stacked = make_groups(_population(TD3))[0]
    for _ in range(2):
        assert listed.learn(range(3), batches) == stacked.learn(range(3), joined)
    torch.testing.assert_close(stacked.actor.params, listed.actor.params, rtol=0, atol=0)
    torch.testing.assert_close(stacked.critic.target, listed.critic.target, rtol=0, atol=0)
