"""The shared action-mask functions: spaces, splitting, masked choices and draws."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agilerl.networks import masking

BOX = spaces.Box(-1.0, 1.0, (3,), np.float32)
MASK = spaces.Box(0, 1, (4,), np.int8)


def test_policy_space_drops_the_mask() -> None:
    masked = spaces.Dict({"observation": BOX, "action_mask": MASK})
    assert masking.has_action_mask(masked)
    assert masking.policy_space(masked) == BOX
    extra = spaces.Dict({"board": BOX, "turn": spaces.Discrete(2), "action_mask": MASK})
    assert masking.policy_space(extra) == spaces.Dict({"board": BOX, "turn": spaces.Discrete(2)})
    assert masking.policy_space(BOX) is BOX and not masking.has_action_mask(BOX)
    with pytest.raises(ValueError, match="nothing to observe"):
        masking.policy_space(spaces.Dict({"action_mask": MASK}))


def test_split_observation_and_numpy_mask() -> None:
    obs = {"observation": np.zeros((2, 3)), "action_mask": np.array([[1, 0, 1, 0], [0, 0, 0, 1]])}
    part, mask = masking.split_observation(obs)
    assert part is obs["observation"] and mask is obs["action_mask"]
    assert masking.numpy_mask(obs).dtype == bool
    assert masking.numpy_mask({"observation": np.zeros(3), "action_mask": np.ones(4)}).shape == (
        1,
        4,
    )
    plain = np.zeros((2, 3))
    assert masking.split_observation(plain) == (plain, None)
    assert masking.numpy_mask(plain) is None


def test_masked_choices_never_pick_an_illegal_action() -> None:
    values = torch.tensor([[5.0, 1.0, 2.0, -1.0], [0.0, 9.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]])
    mask = torch.tensor([[False, True, True, False], [True, False, False, True], [False] * 4])
    assert masking.masked_argmax(values, mask)[:2].tolist() == [2, 3]
    best = masking.masked_max(values, mask)
    assert best.tolist() == [2.0, 4.0, 0.0]  # no legal action: value 0
    assert masking.masked_max(values, None).tolist() == [5.0, 9.0, 4.0]
    np_best = masking.masked_argmax_numpy(values.numpy(), mask.numpy())
    assert np_best[:2].tolist() == [2, 3]
    logits = masking.mask_logits(values, mask)
    probs = torch.softmax(logits[:2], dim=-1)
    assert torch.all(probs[~mask[:2]] == 0.0)
    assert torch.allclose(probs.sum(-1), torch.ones(2))


def test_legal_uniform_is_uniform_over_legal_actions() -> None:
    rng = np.random.default_rng(0)
    mask = np.array([[True, False, True, True], [False, False, False, True]])
    draws = np.stack([masking.legal_uniform(rng, mask) for _ in range(3000)])
    assert set(draws[:, 0]) == {0, 2, 3} and set(draws[:, 1]) == {3}
    counts = np.bincount(draws[:, 0], minlength=4)[[0, 2, 3]]
    assert np.all(np.abs(counts / 3000 - 1 / 3) < 0.03)


def test_mask_must_fit_discrete_actions() -> None:
    masked = spaces.Dict({"observation": BOX, "action_mask": MASK})
    masking.check_maskable(masked, spaces.Discrete(4), "agent")
    with pytest.raises(ValueError, match="only Discrete actions"):
        masking.check_maskable(masked, spaces.Box(-1, 1, (4,)), "agent")
    with pytest.raises(ValueError, match="4 entries but there are 5 actions"):
        masking.check_maskable(masked, spaces.Discrete(5), "agent")


def test_reader_converts_the_observation_part_and_the_mask() -> None:
    masked = spaces.Dict({"observation": BOX, "action_mask": MASK})
    reader = masking.MaskReader(masked, spaces.Discrete(4))
    obs = {"observation": np.ones((2, 3), np.float32), "action_mask": np.eye(2, 4, dtype=np.int8)}
    assert reader.to_tensor(obs).shape == (2, 3)
    assert reader.mask(obs).dtype == torch.bool and reader.mask(obs)[0].tolist() == [
        True,
        False,
        False,
        False,
    ]
    with pytest.raises(ValueError, match="without an action_mask"):
        reader.mask(np.ones((2, 3)))
    plain = masking.MaskReader(BOX, spaces.Discrete(4))
    assert plain.mask(np.ones((2, 3))) is None and plain.numpy_mask(np.ones((2, 3))) is None
