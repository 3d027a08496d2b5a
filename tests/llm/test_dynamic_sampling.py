"""DAPO's dynamic sampling: extra rounds of new prompts until the batch's groups vary."""

from __future__ import annotations

from typing import Any

import pytest

from agilerl.arena.models.training import TrainingSpec
from agilerl.builders.llm import LLMBuilder
from agilerl.llm.dynamic_sampling import refill_groups
from agilerl.llm.rollout import Sample

pytestmark = pytest.mark.llm


def _group(rewards: list[float], tag: str) -> list[Sample]:
    return [Sample([1, 2], [0, 1], [0.0, -1.0], r, 0, tag) for r in rewards]


def _varied(group: list[Sample]) -> bool:
    return len({s.reward for s in group}) > 1


def test_flat_groups_are_replaced_by_varied_ones_from_extra_rounds() -> None:
    first = _group([1, 1], "a") + _group([0, 1], "b") + _group([0, 0], "c")
    extra = {1: _group([0, 0], "d") + _group([1, 0], "e") + _group([1, 1], "f"),
             2: _group([1, 0], "g") + _group([0, 1], "h") + _group([0, 1], "i")}  # fmt: skip
    asked: list[int] = []

    def more(k: int) -> list[Sample]:
        asked.append(k)
        return extra[k]

    out = refill_groups(first, 2, _varied, more, max_rounds=5)
    # Three varied groups were needed: b (round 0), e (round 1), g (round 2); then it stops.
    assert asked == [1, 2]
    assert [s.text for s in out[::2]] == ["b", "e", "g"]
    assert [s.group for s in out] == [0, 0, 1, 1, 2, 2]
    assert [s.extra["sampling_round"] for s in out[::2]] == [0, 1, 2]


def test_the_round_cap_holds_and_flat_groups_fill_what_is_left() -> None:
    first = _group([1, 1], "a") + _group([0, 1], "b")
    out = refill_groups(first, 2, _varied, lambda k: _group([0, 0], f"x{k}"), max_rounds=1)
    assert [s.text for s in out[::2]] == ["b", "a"]  # varied first, then the earliest flat one
    assert len(out) == 4


def test_grpo_fills_only_when_asked_and_judges_groups_by_the_shaped_reward(
    make_rollout_spec, left_tokenizer
) -> None:
    def sample(reward: float, length: int) -> Sample:
        return Sample(
            [7] * (length + 2), [0, 0] + [1] * length, [0.0] * (length + 2), reward, 0, ""
        )

    flat = [sample(1.0, 3), sample(1.0, 8)]  # equal rewards, different lengths
    extra = [sample(1.0, 2), sample(0.0, 2)]
    spec = make_rollout_spec("GRPO", group_size=2, batch_size=1, max_output_tokens=8)
    off = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    assert off.fill_groups(list(flat), lambda k: pytest.fail("no extra round when off")) == flat
    on = LLMBuilder.build(
        spec.model_copy(update={"dynamic_sampling_max_rounds": 2}), tokenizer=left_tokenizer
    )
    assert on.fill_groups(list(flat), lambda k: list(extra)) == extra
    metrics = on.assign_advantages(extra)[1]
    assert metrics["sampling_rounds"] == 1.0
    # With the soft overlong punishment the lengths make the first group vary.
    shaped = LLMBuilder.build(
        spec.model_copy(update={"dynamic_sampling_max_rounds": 2, "overlong_buffer_len": 4}),
        tokenizer=left_tokenizer,
    )
    assert shaped.fill_groups(list(flat), lambda k: pytest.fail("the group varies")) == flat


def test_the_loop_refills_from_prompts_of_another_order(
    make_rollout_spec, digit_env, left_tokenizer
) -> None:
    from agilerl.training.llm.train_llm_rollout import RolloutMembers

    spec = make_rollout_spec("GRPO", group_size=2, batch_size=2, dynamic_sampling_max_rounds=3)
    agent = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    varied = {"Count to ten.", "What colour is the sky?"}
    seen: list[list[str]] = []

    def rollout(env: Any, rows: list[dict[str, Any]]) -> list[Sample]:
        seen.append([r["prompt"] for r in rows])
        return [
            Sample([1, 2], [0, 1], [0.0, -1.0], float(r["prompt"] in varied and i), g, r["prompt"])
            for g, r in enumerate(rows)
            for i in range(2)
        ]

    agent.rollout = rollout
    members = RolloutMembers(
        digit_env, [], batch_size=2, seed=0, greedy=True, run_dir=None, export=None,
        stop_after=None,
    )  # fmt: skip
    samples, _ = members.generate(0, agent, 0)
    # Round 0 has no varied group, extra round 1 one, round 2 none, round 3 the second.
    assert seen == [[r["prompt"] for r in members.rows(0, k)] for k in range(4)]
    assert seen[0] == [r["prompt"] for r in digit_env.batch(0, 2, 0)]
    assert [s.text for s in samples[::2]] == ["Count to ten.", "What colour is the sky?"]
    assert [s.extra["sampling_round"] for s in samples[::2]] == [1, 3]


def test_a_run_with_refills_resumes_exactly(
    make_rollout_spec, digit_env, left_tokenizer, tmp_path
) -> None:
    """Extra rounds draw from the RNG like the round itself: a run interrupted after a round
    and resumed learns what the straight run learns (and logs the same rounds)."""
    import csv

    import torch

    from agilerl.training.llm.train_llm_rollout import train_llm_rollout

    spec = make_rollout_spec(
        "GRPO", group_size=4, batch_size=2, max_output_tokens=8, dynamic_sampling_max_rounds=2,
        adv_filter_eps=0.05, overlong_buffer_len=4, mask_truncated_completions=True,
    )  # fmt: skip
    straight = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    train_llm_rollout(
        [straight],
        digit_env,
        training=TrainingSpec(max_steps=3, evaluation_interval=3),
        run_dir=tmp_path / "a",
    )
    first = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    train_llm_rollout(
        [first],
        digit_env,
        training=TrainingSpec(max_steps=3, evaluation_interval=1),
        run_dir=tmp_path / "b",
        stop_after=1,
    )
    second = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    train_llm_rollout(
        [second],
        digit_env,
        training=TrainingSpec(max_steps=3, evaluation_interval=3),
        run_dir=tmp_path / "b",
        resume=True,
    )
    rows = {k: list(csv.DictReader((tmp_path / k / "rewards.csv").open())) for k in "ab"}
    assert any(float(r["sampling_rounds"]) > 0 for r in rows["a"])  # refills happened
    assert [r["reward"] for r in rows["b"]] == [r["reward"] for r in rows["a"]]
    a, b = straight.trainable_state(), second.trainable_state()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_asynchronous_rounds_refill_through_the_served_engine(
    make_rollout_spec, digit_env, left_tokenizer
) -> None:
    """The async path (:meth:`RolloutMembers.collect`, no model use) refills with the same
    engine; extra rounds continue its request seeds instead of starting the round again."""
    from agilerl.llm.generation import Completion
    from agilerl.training.llm.train_llm_rollout import RolloutMembers

    class Engine:
        def __init__(self) -> None:
            self.begun: list[tuple[int, int]] = []
            self.calls = 0

        def begin(self, slot: int, round_: int) -> None:
            self.begun.append((slot, round_))

        def __call__(self, model, tokenizer, prompts, settings) -> list[Completion]:
            self.calls += 1  # the first round scores 0 everywhere, the second varies
            texts = ["a"] * len(prompts) if self.calls == 1 else ["1", "a"] * (len(prompts) // 2)
            return [Completion([5], [-1.0], t) for t in texts]

    spec = make_rollout_spec("GRPO", group_size=2, batch_size=2, dynamic_sampling_max_rounds=2)
    agent = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    agent.generator = engine = Engine()
    members = RolloutMembers(
        digit_env, [], batch_size=2, seed=0, greedy=True, run_dir=None, export=None,
        stop_after=None,
    )  # fmt: skip
    samples = members.collect(0, agent, 5)
    assert engine.begun == [(0, 5)] and engine.calls == 2
    assert [s.reward for s in samples] == [1.0, 0.0, 1.0, 0.0]
    assert {s.extra["sampling_round"] for s in samples} == {1}
