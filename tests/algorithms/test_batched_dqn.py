"""A stacked DQN group learns and acts exactly like its members would alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agilerl.algorithms.batched import DQNGroup, LoneGroup, make_groups
from agilerl.algorithms.dqn import DQN
from agilerl.arena.models.algorithms.dqn import DQNSpec
from tests.algorithms.batched_helpers import (
    NET,
    assert_learns_like_lone,
    assert_same_members,
    member_major,
    network_weights,
    random_batch,
)

OBS = spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = spaces.Discrete(3)


def _agent(index: int, net: dict | None = None, obs: spaces.Space = OBS, **hps: object) -> DQN:
    torch.manual_seed(100 + index)
    spec = DQNSpec.model_validate({"net_config": net or NET, "batch_size": 8, **hps})
    return DQN(spec, obs, ACT, index=index)


def _batch(rng: np.random.Generator, size: int) -> dict[str, np.ndarray]:
    return random_batch(rng, size, obs_dim=4, discrete=3)


HPS = [
    {"lr": 1e-3, "gamma": 0.99, "tau": 0.05},
    {"lr": 5e-3, "gamma": 0.9, "tau": 1.0},
    {"lr": 2e-4, "gamma": 0.97, "tau": 0.0},
]


@pytest.mark.parametrize("layer_norm", [False, True])
def test_group_updates_match_lone_agents(layer_norm: bool) -> None:
    torch.set_num_threads(1)
    net = {**NET, "head_config": {"hidden_size": [16], "layer_norm": layer_norm}}
    lone = [_agent(i, net, **hp) for i, hp in enumerate(HPS)]
    stacked = [_agent(i, net, **hp) for i, hp in enumerate(HPS)]
    groups = make_groups(stacked)
    assert len(groups) == 1 and isinstance(groups[0], DQNGroup)
    group = groups[0]
    rng = np.random.default_rng(0)
    assert_learns_like_lone(lone, group, rng, _batch, ("loss",))
    # Only some members learn (different learn steps): the others must not move.
    batches = [_batch(rng, 8) for _ in lone]
    lone[2].learn(batches[2])
    group.learn([2], [batches[2]])
    group.sync()
    assert_same_members(lone, stacked, network_weights, ("optimizer",))
    # The members moved: this is not comparing untouched copies.
    assert not torch.equal(network_weights(stacked[0])[0], network_weights(_agent(0, **HPS[0]))[0])


def test_group_acts_like_lone_agents() -> None:
    lone = [_agent(i, **hp) for i, hp in enumerate(HPS)]
    stacked = [_agent(i, **hp) for i, hp in enumerate(HPS)]
    group = make_groups(stacked)[0]
    obs = np.random.default_rng(1).standard_normal((3, 5, 4)).astype(np.float32)
    for eps in ([0.0, 0.3, 1.0], [0.5, 0.5, 0.5]):
        expected = [a.get_action(obs[i], epsilon=eps[i]) for i, a in enumerate(lone)]
        got = group.act(obs, eps)
        for e, g in zip(expected, got, strict=True):
            np.testing.assert_array_equal(g, e)


def test_other_architectures_form_their_own_groups() -> None:
    wide = {**NET, "head_config": {"hidden_size": [32]}}
    agents = [_agent(0), _agent(1), _agent(2, wide), _agent(3)]
    groups = make_groups(agents)
    assert [g.slots for g in groups] == [[0, 1, 3], [2]]
    assert [type(g) for g in groups] == [DQNGroup, DQNGroup]
    # A 2-D observation is flattened inside the encoder: not a plain chain, so it learns alone.
    square = _agent(4, obs=spaces.Box(-1.0, 1.0, (2, 2), np.float32))
    groups = make_groups([square, _agent(5)])
    assert [type(g) for g in groups] == [LoneGroup, DQNGroup]


def test_one_member_major_batch_equals_one_batch_per_member() -> None:
    rng = np.random.default_rng(2)
    batches = [_batch(rng, 8) for _ in HPS]
    joined = member_major(batches)
    listed = make_groups([_agent(i, **hp) for i, hp in enumerate(HPS)])[0]
    stacked = make_groups([_agent(i, **hp) for i, hp in enumerate(HPS)])[0]
    assert listed.learn(range(3), batches) == stacked.learn(range(3), joined)
    torch.testing.assert_close(stacked.params, listed.params, rtol=0, atol=0)
