"""A stacked Rainbow DQN group learns and acts exactly like its members would alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agilerl.algorithms import RainbowDQN
from agilerl.algorithms.batched import RainbowGroup, make_groups
from agilerl.arena.models.algorithms.rainbow_dqn import RainbowDQNSpec
from tests.algorithms.batched_helpers import (
    NET,
    assert_same_members,
    network_weights,
    random_batch,
)

OBS = spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = spaces.Discrete(3, start=1)

HPS = [
    {"lr": 1e-3, "gamma": 0.99, "tau": 0.05, "max_grad_norm": 0.5},
    {"lr": 5e-3, "gamma": 0.9, "tau": 1.0, "max_grad_norm": None},
    {"lr": 2e-4, "gamma": 0.97, "tau": 0.0, "max_grad_norm": 10.0},
]


def _agent(index: int, combined: bool = False, **hps: object) -> RainbowDQN:
    torch.manual_seed(100 + index)
    spec = RainbowDQNSpec.model_validate(
        {"net_config": NET, "batch_size": 8, "num_atoms": 11, "v_min": -5.0, "v_max": 5.0,
         "combined_reward": combined, **hps}
    )  # fmt: skip
    return RainbowDQN(spec, OBS, ACT, index=index)


def _batch(rng: np.random.Generator, size: int, n_step: bool = False) -> dict[str, np.ndarray]:
    batch = random_batch(rng, size, obs_dim=4, discrete=3)
    batch["action"] = batch["action"] + 1
    if n_step:
        batch["n_steps"] = rng.integers(1, 4, size)
    return batch


@pytest.mark.parametrize("combined", [False, True])
def test_group_updates_match_lone_agents(combined: bool) -> None:
    """PER weights, n-step batches and each member's clip, lr, gamma and tau: as alone."""
    torch.set_num_threads(1)
    lone = [_agent(i, combined, **hp) for i, hp in enumerate(HPS)]
    stacked = [_agent(i, combined, **hp) for i, hp in enumerate(HPS)]
    groups = make_groups(stacked)
    assert len(groups) == 1 and isinstance(groups[0], RainbowGroup)
    group = groups[0]
    rng = np.random.default_rng(0)
    for update in range(6):
        rows = [0, 1, 2] if update % 3 else [2, 0]  # some updates leave members out
        batches = [_batch(rng, 8) for _ in rows]
        n_step = [_batch(rng, 8, n_step=True) for _ in rows] if update % 2 else None
        weights = [rng.uniform(0.2, 1.0, 8).astype(np.float32) for _ in rows]
        expected = [
            lone[r].learn(b, n_step_batch=None if n_step is None else n_step[k], weights=weights[k])
            for k, (r, b) in enumerate(zip(rows, batches, strict=True))
        ]
        got = group.learn(rows, batches, n_step, weights)
        for e, g in zip(expected, got, strict=True):
            assert g["loss"] == pytest.approx(e["loss"], rel=1e-4, abs=1e-6)
            assert g["q_mean"] == pytest.approx(e["q_mean"], rel=1e-4, abs=1e-6)
            np.testing.assert_allclose(g["priorities"], e["priorities"], rtol=1e-4, atol=1e-6)
    group.sync()
    assert_same_members(lone, stacked, network_weights, ("optimizer",))
    for a, b in zip(lone, stacked, strict=True):  # the members' noise went on as alone
        torch.testing.assert_close(
            b.actor.value.layers[0].weight_epsilon, a.actor.value.layers[0].weight_epsilon
        )
        assert torch.equal(b.noise_rng.get_state(), a.noise_rng.get_state())
    assert not torch.equal(network_weights(stacked[0])[0], network_weights(_agent(0))[0])


def test_group_acts_like_lone_agents_and_the_members_draw_their_own_noise() -> None:
    lone = [_agent(i, **hp) for i, hp in enumerate(HPS)]
    stacked = [_agent(i, **hp) for i, hp in enumerate(HPS)]
    group = make_groups(stacked)[0]
    obs = np.random.default_rng(1).standard_normal((3, 5, 4)).astype(np.float32)
    for greedy in (True, False, False):
        for agent in (*lone[:2], *stacked[:2]):  # a loop's episode-end resample, member by member
            agent.reset_noise()
        expected = [a.get_action(obs[i], greedy=greedy) for i, a in enumerate(lone)]
        got = group.act(obs, [0.0] * 3, greedy=greedy)
        lone[2].reset_noise()
        stacked[2].reset_noise()
        for e, g in zip(expected, got, strict=True):
            np.testing.assert_array_equal(g, e)
    group.sync()  # the members own their noise again: a resample no longer reaches the group
    before = group._noise["value.layers.0.weight_epsilon"][0].clone()
    stacked[0].reset_noise()
    assert torch.equal(group._noise["value.layers.0.weight_epsilon"][0], before)
    assert not torch.equal(stacked[0].actor.value.layers[0].weight_epsilon, before)


def test_other_settings_form_their_own_groups() -> None:
    agents = [_agent(0), _agent(1), _agent(2, combined=True), _agent(3)]
    assert [g.slots for g in make_groups(agents)] == [[0, 1, 3], [2]]
