"""The one GAE: hand-computed rollouts, tensors and arrays alike, episodes ending inside."""

from __future__ import annotations

import numpy as np
import torch

from agilerl.components.advantages import gae, gae_torch


def test_gae_matches_a_hand_computed_rollout() -> None:
    rewards = torch.tensor([[1.0], [1.0], [1.0]])
    values = torch.tensor([[0.5], [0.5], [0.5]])
    not_done = torch.tensor([[True], [False], [True]])
    adv, ret = gae_torch(rewards, values, not_done, torch.tensor([2.0]), 0.9, 1.0)
    # t=2: 1 + 0.9*2 - 0.5 = 2.3; t=1 ends the episode: 1 - 0.5 = 0.5;
    # t=0: delta 1 + 0.45 - 0.5 = 0.95, plus 0.9 * 0.5.
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.95 + 0.45, 0.5, 2.3]))
    torch.testing.assert_close(ret, adv + values)
    assert adv.dtype == torch.float32


def test_lambda_discounts_later_deltas() -> None:
    # One episode ending at its last step (LLM PPO's token rollout): deltas -0.5, -0.5, 0.5
    rewards = np.array([0.0, 0.0, 1.0], dtype=np.float32)
    values = np.full(3, 0.5, dtype=np.float32)
    not_done = np.array([True, True, False])
    adv, _ = gae(rewards, values, not_done, 0.0, 1.0, 0.5)
    # t=2: 0.5; t=1: 0 + 0.5 * 0.5 = 0.25 (delta 1*0.5 - 0.5 = 0); t=0: 0 + 0.5 * 0.25
    np.testing.assert_allclose(adv, [0.125, 0.25, 0.5])


def test_writes_into_given_column_slices() -> None:
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(5, 4)).astype(np.float32)
    values = rng.normal(size=(5, 4)).astype(np.float32)
    not_done = rng.random((5, 4)) > 0.3
    last = rng.normal(size=4).astype(np.float32)
    whole_adv, whole_ret = gae(rewards, values, not_done, last, 0.99, 0.95)
    out_adv, out_ret = np.zeros((5, 8), np.float32), np.zeros((5, 8), np.float32)
    gae(
        rewards, values, not_done, last, 0.99, 0.95,
        out_advantages=out_adv[:, 2:6], out_returns=out_ret[:, 2:6],
    )  # fmt: skip
    np.testing.assert_array_equal(out_adv[:, 2:6], whole_adv)
    np.testing.assert_array_equal(out_ret[:, 2:6], whole_ret)
    assert not out_adv[:, :2].any() and not out_adv[:, 6:].any()


def test_an_empty_rollout_has_no_advantages() -> None:
    adv, ret = gae_torch(
        torch.zeros(0), torch.zeros(0), torch.zeros(0, dtype=torch.bool), 0.0, 0.9, 0.9
    )
    assert adv.shape == ret.shape == (0,)
