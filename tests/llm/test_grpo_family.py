"""The GRPO loss family's switches, each against hand-computed values and on the tiny model."""

from __future__ import annotations

import math

import pytest
import torch

from agilerl.builders.llm import LLMBuilder
from agilerl.llm.importance import diverged_sequences, pooled_log_ratio, turn_segments
from agilerl.llm.rollout import Sample

pytestmark = pytest.mark.llm

# Two rows: a two-turn episode (an observation between the turns) and a one-turn one.
MASK = torch.tensor([[0, 1, 1, 0, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0]], dtype=torch.float32)
LOG_RATIO = torch.tensor([[9.0, 0.1, 0.3, 9.0, 0.2, 0.2, 0.5], [0.4, 0.0, 0.0, 0.0, 9.0, 9.0, 9.0]])


def test_turns_are_runs_of_generated_tokens() -> None:
    assert turn_segments(MASK).tolist() == [[0, 1, 1, 0, 2, 2, 2], [1, 1, 1, 1, 0, 0, 0]]


@pytest.mark.parametrize(
    ("level", "pooling", "expected"),
    [
        ("token", "mean", LOG_RATIO * MASK),
        # turn 1: (0.1 + 0.3) / 2, turn 2: (0.2 + 0.2 + 0.5) / 3; row 2: 0.4 / 4
        ("turn", "mean", [[0, 0.2, 0.2, 0, 0.3, 0.3, 0.3], [0.1, 0.1, 0.1, 0.1, 0, 0, 0]]),
        # GSPO: the sequence's mean, 1.3 / 5
        ("trajectory", "mean", [[0, 0.26, 0.26, 0, 0.26, 0.26, 0.26], [0.1] * 4 + [0] * 3]),
        ("trajectory", "sum", [[0, 1.3, 1.3, 0, 1.3, 1.3, 1.3], [0.4] * 4 + [0] * 3]),
    ],
)
def test_pooled_log_ratio_by_hand(level: str, pooling: str, expected: object) -> None:
    log_ratio = (LOG_RATIO * MASK).requires_grad_()
    pooled = pooled_log_ratio(log_ratio, MASK, level, pooling)
    assert torch.allclose(pooled, torch.as_tensor(expected, dtype=torch.float32), atol=1e-6)
    if level != "token":
        pooled.sum().backward()  # a span's tokens share its gradient; off-mask ones get none
        assert torch.equal(log_ratio.grad != 0, MASK > 0)


def test_diverged_sequences_drops_only_negative_stale_ones() -> None:
    old = torch.zeros(3, 4)
    logps = torch.tensor([[-0.1] * 4, [-0.1] * 4, [-0.01] * 4])  # mean KL 0.1, 0.1, 0.01
    mask = torch.ones(3, 4)
    advantages = torch.tensor([-1.0, 1.0, -1.0])
    dropped = diverged_sequences(logps, old, mask, advantages, threshold=0.03)
    assert dropped.tolist() == [True, False, False]  # positive advantage, or close to old: kept


def _samples(make_rollout_spec, digit_env, left_tokenizer) -> list[Sample]:
    sampler = LLMBuilder.build(
        make_rollout_spec("GRPO", group_size=4, max_output_tokens=8), tokenizer=left_tokenizer
    )
    torch.manual_seed(0)
    return sampler.rollout(digit_env, digit_env.batch(0, 2, 0))


def _learn(spec, left_tokenizer, samples: list[Sample], rounds: int = 1) -> list[dict]:
    agent = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    out = []
    for _ in range(rounds):
        out.append(agent.learn([Sample(**{**vars(s), "extra": {}}) for s in samples]))
    return out


def test_trajectory_level_ratio_gives_other_losses_than_token_level(
    make_rollout_spec, digit_env, left_tokenizer
) -> None:
    samples = _samples(make_rollout_spec, digit_env, left_tokenizer)
    losses = {}
    for level in (None, "trajectory"):
        spec = make_rollout_spec(
            "GRPO", group_size=4, max_output_tokens=8, importance_sampling_level=level
        )
        losses[level] = [m["loss"] for m in _learn(spec, left_tokenizer, samples, rounds=3)]
    assert losses[None][0] == pytest.approx(losses["trajectory"][0])  # ratio 1 at the start
    assert losses[None][1:] != pytest.approx(losses["trajectory"][1:], rel=1e-4)


def test_loss_norm_micro_batch_is_the_mean_of_micro_batch_token_means(
    make_rollout_spec, digit_env, left_tokenizer
) -> None:
    # Groups of 2 with 8 and 3 generated tokens; micro-batches of 3 rows split a group.
    sampler = LLMBuilder.build(
        make_rollout_spec("GRPO", group_size=2, max_output_tokens=8), tokenizer=left_tokenizer
    )
    torch.manual_seed(0)
    long = sampler.rollout(digit_env, digit_env.batch(0, 4, 0))
    pairs = [long[i : i + 2] for i in range(0, len(long), 2)]
    split = next(p for p in pairs if p[0].reward != p[1].reward)  # rows 2-3: split by micro
    other = next(p for p in pairs if p is not split)
    sampler.spec = sampler.spec.model_copy(update={"max_output_tokens": 3})
    short = sampler.rollout(digit_env, digit_env.batch(4, 1, 0))
    samples = other + split + short
    for index, sample in enumerate(samples):
        sample.group = index // 2
    lengths = [s.num_actions for s in samples]
    assert lengths == [8, 8, 8, 8, 3, 3]  # micro-batches of 24 and 14 tokens
    reported = {}
    for norm in ("micro_batch", "accumulation_window"):
        spec = make_rollout_spec(
            "GRPO", group_size=2, max_output_tokens=8, update_epochs=1, loss_norm=norm,
            mini_batch_size=6, micro_batch_size_per_gpu=3, off_policy_token_mask_bounds=None,
        )  # fmt: skip
        copies = [Sample(**{**vars(s), "extra": {}}) for s in samples]
        agent = LLMBuilder.build(spec, tokenizer=left_tokenizer)
        reported[norm] = agent.learn(copies)["loss"]
        advantages = [s.advantage for s in copies]
    assert any(advantages)
    # One update from the sampling policy: every ratio is 1, a token's loss is -A (beta 0).
    weighted = [-a * n for a, n in zip(advantages, lengths, strict=True)]
    window = sum(weighted) / sum(lengths)
    micro = [sum(weighted[i : i + 3]) / sum(lengths[i : i + 3]) for i in (0, 3)]
    assert reported["accumulation_window"] == pytest.approx(window, abs=1e-5)
    assert reported["micro_batch"] == pytest.approx(sum(micro) / 2, abs=1e-5)
    assert not math.isclose(window, sum(micro) / 2, abs_tol=1e-4)


def test_kl_advantage_shaping_moves_the_kl_from_the_loss_to_the_advantages(
    make_rollout_spec, digit_env, left_tokenizer
) -> None:
    samples = _samples(make_rollout_spec, digit_env, left_tokenizer)
    runs = {}
    for shaping in (False, True):
        spec = make_rollout_spec(
            "GRPO", group_size=4, max_output_tokens=8, beta=0.5, lr=1e-2, update_epochs=1,
            use_kl_advantage_shaping=shaping,
        )  # fmt: skip
        runs[shaping] = _learn(spec, left_tokenizer, samples, rounds=2)
    # The first update starts at the reference (KL 0): the same either way; then the policy
    # has moved and the KL is a loss term in one run and an advantage penalty in the other.
    assert runs[False][0]["loss"] == pytest.approx(runs[True][0]["loss"], abs=1e-6)
    assert runs[False][1]["kl"] > 0 and runs[True][1]["kl"] > 0
    assert runs[False][1]["loss"] != pytest.approx(runs[True][1]["loss"], rel=1e-3)


def test_cispo_weights_every_token_by_its_truncated_ratio_without_a_gradient(
    make_rollout_spec, left_tokenizer
) -> None:
    from agilerl.algorithms.llm_rollout import CISPO
    from agilerl.arena.models.algorithms import CISPOSpec

    spec = CISPOSpec(**{**make_rollout_spec("GRPO").model_dump(), "clip_coef": 0.2})
    agent = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    assert type(agent) is CISPO
    logps = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    ratio = torch.tensor([[0.5, 1.0, 1.5]], requires_grad=True)
    advantages = torch.tensor([[1.0, -1.0, 1.0]])
    loss = agent.surrogate(ratio, advantages, logps)
    # weights min(r, 1.2) = 0.5, 1.0, 1.2; loss = -w * A * log pi
    assert torch.allclose(loss, torch.tensor([[0.5, -2.0, 0.6]]))
    loss.sum().backward()
    assert torch.allclose(logps.grad, torch.tensor([[-0.5, 1.0, -1.2]]))
    assert ratio.grad is None or not ratio.grad.any()  # the weight carries no gradient


def test_gspo_takes_sequence_ratios_and_refuses_token_ones(make_rollout_spec) -> None:
    from pydantic import ValidationError

    from agilerl.algorithms.llm_rollout import GSPO
    from agilerl.arena.models.algorithms import GSPOSpec

    fields = make_rollout_spec("GRPO").model_dump()
    assert GSPO.ratio_level(type("A", (), {"spec": GSPOSpec(**fields)})()) == (
        "trajectory",
        "mean",
    )
    with pytest.raises(ValidationError, match="importance_sampling_level=token is GRPO's"):
        GSPOSpec(**{**fields, "importance_sampling_level": "token"})


@pytest.mark.slow
@pytest.mark.parametrize("name", ["GSPO", "CISPO"])
def test_gspo_and_cispo_learn_the_digit_reward(
    make_rollout_spec, digit_env, left_tokenizer, name: str
) -> None:
    from agilerl.arena.models.registry import MANIFEST_REGISTRY
    from tests.llm.test_grpo import rounds_to_target

    fields = make_rollout_spec("GRPO").model_dump()
    agent = LLMBuilder.build(MANIFEST_REGISTRY.create(name, **fields), tokenizer=left_tokenizer)
    reached, rewards = rounds_to_target(agent, digit_env, budget=25)
    assert rewards[0] < 0.3  # where the untrained model starts (GRPO's test has the same)
    assert reached is not None, rewards


@pytest.mark.parametrize("name", ["LLMPPO", "LLMREINFORCE"])
def test_ratio_pooling_needs_a_turn_or_trajectory_level(name: str) -> None:
    from pydantic import ValidationError

    from agilerl.arena.models.registry import MANIFEST_REGISTRY

    with pytest.raises(ValidationError, match="turn_ratio_pooling pools the ratios of a turn"):
        MANIFEST_REGISTRY.create(name, turn_ratio_pooling="mean")
    spec = MANIFEST_REGISTRY.create(
        name, turn_ratio_pooling="mean", importance_sampling_level="trajectory"
    )
    assert spec.turn_ratio_pooling == "mean"
