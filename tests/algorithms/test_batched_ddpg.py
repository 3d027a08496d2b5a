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
from tests.algorithms.batched_helpers import (
    NET,
    assert_acts_like_lone,
    assert_learns_like_lone,
    assert_same_members,
    learn_subsets,
    member_major,
    network_weights,
    random_batch,
)

OBS = spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = spaces.Box(-2.0, 2.0, (2,), np.float32)
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
    assert_learns_like_lone(lone, group, rng, random_batch, ("critic_loss", "actor_loss", "q_mean"))
    # Only some members learn (different learn steps): the others must not move.
    learn_subsets(lone, group, rng, random_batch, ([2], [0, 2]))
    group.sync()
    assert_same_members(lone, stacked, network_weights, ("actor_optimizer", "critic_optimizer"))
    for a, b in zip(lone, stacked, strict=True):
        assert a.last_actor_loss == pytest.approx(b.last_actor_loss, rel=1e-4, abs=1e-6)
    # The members moved (actor, critic and target): not comparing untouched copies.
    fresh = network_weights(_population(algo, net)[0])
    moved = network_weights(stacked[0])
    assert all(not torch.equal(x, y) for x, y in zip(fresh[:2], moved[:2], strict=True))


@pytest.mark.parametrize("algo", [DDPG, TD3])
def test_group_acts_like_lone_agents(algo: type) -> None:
    lone, stacked = _population(algo), _population(algo)
    assert_acts_like_lone(lone, make_groups(stacked)[0])


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
    batches = [random_batch(rng, 8) for _ in HPS]
    joined = member_major(batches)
    listed = make_groups(_population(TD3))[0]
    stacked = make_groups(_population(TD3))[0]
    for _ in range(2):
        assert listed.learn(range(3), batches) == stacked.learn(range(3), joined)
    torch.testing.assert_close(stacked.actor.params, listed.actor.params, rtol=0, atol=0)
    torch.testing.assert_close(stacked.critic.target, listed.critic.target, rtol=0, atol=0)
