"""DAPO's overlong filtering and soft overlong punishment, against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from agilerl.builders.llm import LLMBuilder
from agilerl.llm.overlong import episode_penalty, is_truncated, overlong_penalty, turn_lengths
from agilerl.llm.rollout import Sample

pytestmark = pytest.mark.llm


def test_a_completion_is_truncated_when_neither_eos_nor_a_stop_string_ends_it() -> None:
    assert is_truncated([5, 6, 7], "abc", {2}, None)
    assert not is_truncated([5, 6, 2], "ab", {2}, None)  # the model ended it
    assert not is_truncated([5, 6, 7], "x = 4\n", {2}, ["\n"])  # a stop string ended it
    assert not is_truncated([5, 6, 7], "x = 4\nThe", {2}, ["\n"])  # its last token ran past
    assert is_truncated([5, 6, 7], "x = 4", {2}, ["\n"])
    assert not is_truncated([], "", {2}, None)


def test_soft_overlong_punishment_by_hand() -> None:
    # cap 8, buffer 4: free up to 4 tokens, then -1/4 per token down to -1 at 8.
    assert [overlong_penalty(n, 8, 4) for n in (1, 4, 5, 6, 8, 9)] == [
        0.0, 0.0, -0.25, -0.5, -1.0, -1.0,
    ]  # fmt: skip
    assert overlong_penalty(6, 8, 4, factor=2.0) == -1.0
    # Two turns of 6 and 5 tokens, an observation between them: -0.5 - 0.25.
    mask = [0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1]
    assert turn_lengths(mask) == [6, 5]
    assert episode_penalty(mask, 8, 4) == -0.75


def _grpo(make_rollout_spec, left_tokenizer, **fields):
    spec = make_rollout_spec("GRPO", **{"group_size": 3, "max_output_tokens": 8, **fields})
    return LLMBuilder.build(spec, tokenizer=left_tokenizer)


def _sample(lengths: list[int], reward: float, truncated: bool = False) -> Sample:
    mask = [0, 0]
    for n in lengths:
        mask += [1] * n + [0]
    return Sample([7] * len(mask), mask, [0.0] * len(mask), reward, 0, "", truncated=truncated)


def test_the_penalty_shapes_the_advantages_and_gives_flat_groups_a_signal(
    make_rollout_spec, left_tokenizer
) -> None:
    agent = _grpo(
        make_rollout_spec, left_tokenizer, overlong_buffer_len=4, overlong_penalty_factor=2.0
    )
    # All three scored 1; lengths 3, 6 and 8 lose 0, 2 x 0.5 and 2 x 1.
    samples = [_sample([3], 1.0), _sample([6], 1.0), _sample([8], 1.0)]
    kept, metrics = agent.assign_advantages(samples)
    assert [s.advantage for s in samples] == pytest.approx([1.0, 0.0, -1.0])
    assert metrics["overlong_penalty"] == pytest.approx(-1.0)
    assert metrics["frac_reward_zero_std"] == 0.0 and kept == samples
    assert [s.reward for s in samples] == [1.0, 1.0, 1.0]  # the env's reward is kept
    plain = _grpo(make_rollout_spec, left_tokenizer)
    plain.assign_advantages(samples)
    assert [s.advantage for s in samples] == [0.0, 0.0, 0.0]


def test_collected_samples_know_whether_the_cap_cut_them(
    make_rollout_spec, digit_env, left_tokenizer
) -> None:
    agent = _grpo(make_rollout_spec, left_tokenizer, max_output_tokens=3)
    torch.manual_seed(0)
    samples = agent.rollout(digit_env, digit_env.batch(0, 4, 0))
    eos = left_tokenizer.eos_token_id
    expected = [s.num_actions == 3 and s.ids[-1] != eos for s in samples]
    assert [s.truncated for s in samples] == expected and any(expected)
    metrics = agent.assign_advantages(samples)[1]
    assert metrics["frac_truncated"] == pytest.approx(sum(expected) / len(samples))


def test_truncated_completions_leave_the_loss_and_its_normaliser(
    make_rollout_spec, digit_env, left_tokenizer
) -> None:
    agent = _grpo(make_rollout_spec, left_tokenizer)
    torch.manual_seed(0)
    samples = agent.rollout(digit_env, digit_env.batch(0, 1, 0))
    for sample, reward in zip(samples, [1.0, 0.0, 0.0], strict=True):
        sample.reward, sample.truncated = reward, False
    samples[2].truncated = True
    n = [s.num_actions for s in samples]
    losses = {}
    for masked in (False, True):
        agent = _grpo(
            make_rollout_spec, left_tokenizer, update_epochs=1, mask_truncated_completions=masked
        )
        copies = [Sample(**{**vars(s), "extra": {}}) for s in samples]
        losses[masked] = agent.learn(copies)["loss"]
    # One update from the sampling policy: ratios 1, a token's loss is -A; A = 2/3, -1/3, -1/3
    # (the truncated completion still counts in its group's mean).
    a = [2 / 3, -1 / 3, -1 / 3]
    everything = sum(-ai * ni for ai, ni in zip(a, n, strict=True)) / sum(n)
    assert losses[False] == pytest.approx(everything, abs=1e-5)
    assert losses[True] == pytest.approx((-a[0] * n[0] - a[1] * n[1]) / (n[0] + n[1]), abs=1e-5)
    assert abs(losses[True] - losses[False]) > 1e-3


def test_every_truncated_group_dropped_leaves_nothing_to_learn(
    make_rollout_spec, left_tokenizer
) -> None:
    agent = _grpo(make_rollout_spec, left_tokenizer, mask_truncated_completions=True)
    samples = [_sample([8], r, truncated=True) for r in (1.0, 0.0, 0.5)]
    before = agent.num_updates
    metrics = agent.learn(samples)
    assert metrics["loss"] == 0.0 and metrics["frac_truncated"] == 1.0
    assert agent.num_updates == before


def test_overlong_settings_need_a_generation_cap(make_rollout_spec) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"overlong_buffer_len .* set max_output_tokens"):
        make_rollout_spec("GRPO", max_output_tokens=None, overlong_buffer_len=4)
    with pytest.raises(ValidationError, match=r"overlong_buffer_len \(20\)"):
        make_rollout_spec("GRPO", max_output_tokens=16, overlong_buffer_len=20)
