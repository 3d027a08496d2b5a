"""A stacked SAC group learns and acts exactly like its members would alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agilerl.algorithms.batched import LoneGroup, SACGroup, make_groups
from agilerl.algorithms.sac import SAC
from agilerl.arena.models.algorithms.sac import SACSpec
from tests.algorithms.batched_helpers import (
    NET,
    assert_acts_like_lone,
    assert_learns_like_lone,
    assert_same_members,
    learn_subsets,
    network_weights,
    random_batch,
)

OBS = spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = spaces.Box(-2.0, 2.0, (2,), np.float32)
HPS = [
    {"lr_actor": 1e-3, "lr_critic": 2e-3, "gamma": 0.99, "tau": 0.05, "policy_freq": 2},
    {"lr_actor": 5e-3, "lr_critic": 1e-3, "gamma": 0.9, "tau": 1.0, "policy_freq": 1,
     "lr_alpha": 1e-2, "target_entropy": -0.5, "noise_correlation": 0.5},
    {"lr_actor": 2e-4, "lr_critic": 5e-4, "gamma": 0.97, "tau": 0.0, "policy_freq": 3,
     "learn_alpha": False, "alpha_init": 0.2},
]  # fmt: skip


def _agent(index: int, net: dict | None = None, **hps: object) -> SAC:
    torch.manual_seed(100 + index)
    spec = SACSpec.model_validate({"net_config": net or NET, "batch_size": 8, **hps})
    return SAC(spec, OBS, ACT, index=index)


def _population(net: dict | None = None) -> list[SAC]:
    return [_agent(i, net, **hp) for i, hp in enumerate(HPS)]


def _weights(agent: SAC) -> list[torch.Tensor]:
    return [*network_weights(agent), agent.log_alpha.detach().clone()]


@pytest.mark.parametrize("layer_norm", [False, True])
def test_group_updates_match_lone_agents(layer_norm: bool) -> None:
    torch.set_num_threads(1)
    net = {**NET, "head_config": {"hidden_size": [16], "layer_norm": layer_norm}}
    lone, stacked = _population(net), _population(net)
    groups = make_groups(stacked)
    assert len(groups) == 1 and isinstance(groups[0], SACGroup)
    group = groups[0]
    rng = np.random.default_rng(0)
    keys = ("critic_loss", "actor_loss", "alpha_loss", "entropy", "alpha", "q_mean")
    assert_learns_like_lone(lone, group, rng, random_batch, keys)
    # Only some members learn (different learn steps): the others must not move.
    learn_subsets(lone, group, rng, random_batch, ([2], [0, 1]))
    group.sync()
    optimizers = ("actor_optimizer", "critic_optimizer")
    assert_same_members(lone, stacked, _weights, optimizers, counted=("alpha_optimizer",))
    fresh, moved = _weights(_population(net)[1]), _weights(stacked[1])
    assert not torch.equal(fresh[0], moved[0]) and not torch.equal(fresh[-1], moved[-1])


def test_group_acts_like_lone_agents() -> None:
    lone, stacked = _population(), _population()
    assert_acts_like_lone(lone, make_groups(stacked)[0])


def test_shared_encoders_learn_alone() -> None:
    groups = make_groups([_agent(0), _agent(1, share_encoders=True), _agent(2)])
    assert [g.slots for g in groups] == [[0, 2], [1]]
    assert [type(g) for g in groups] == [SACGroup, LoneGroup]
