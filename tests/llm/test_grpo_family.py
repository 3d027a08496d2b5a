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
    from agilerl.algorithms.grpo import CISPO
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


def test_clip_higher_raises_only_the_upper_clip(make_rollout_spec, left_tokenizer) -> None:
    from agilerl.algorithms.core.ppo_objective import outside_clip

    spec = make_rollout_spec("GRPO", clip_coef=0.2, clip_coef_high=0.28)
    agent = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    assert agent.clip_range() == (0.2, 0.28)
    ratio = torch.tensor([[0.7, 0.75, 1.25, 1.35]])
    advantages = torch.tensor([[-1.0, 1.0, 1.0, 1.0]])
    # max(-A r, -A clip(r, 0.8, 1.28)): 0.8 (clipped low), -0.75, -1.25 (inside 1.28; the
    # symmetric clip would give -1.2), -1.28 (clipped high)
    loss = agent.surrogate(ratio, advantages, torch.zeros_like(ratio))
    assert torch.allclose(loss, torch.tensor([[0.8, -0.75, -1.25, -1.28]]))
    assert outside_clip(ratio, 0.2, 0.28).tolist() == [[True, True, False, True]]
    symmetric = LLMBuilder.build(
        spec.model_copy(update={"clip_coef_high": None}), tokenizer=left_tokenizer
    )
    assert symmetric.surrogate(ratio, advantages, torch.zeros_like(ratio))[0, 2] == -1.2


def test_cispo_truncates_its_weights_at_the_upper_clip(make_rollout_spec, left_tokenizer) -> None:
    from agilerl.arena.models.algorithms import CISPOSpec

    fields = make_rollout_spec("GRPO").model_dump()
    agent = LLMBuilder.build(
        CISPOSpec(**{**fields, "clip_coef_high": 2.0}), tokenizer=left_tokenizer
    )
    ratio = torch.tensor([[0.5, 2.5, 4.0]])
    loss = agent.surrogate(ratio, torch.ones_like(ratio), torch.full_like(ratio, -1.0))
    assert torch.allclose(loss, torch.tensor([[0.5, 2.5, 3.0]]))  # weights min(r, 3) x 1


def test_clip_coef_is_one_number_and_points_to_clip_coef_high(make_rollout_spec) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="clip_coef_high to the upper one"):
        make_rollout_spec("GRPO", clip_coef=[0.2, 0.28])


@pytest.mark.parametrize("norm", ["accumulation_window", "sequence", "max_length"])
def test_loss_norms_by_hand(make_rollout_spec, digit_env, left_tokenizer, norm: str) -> None:
    """DAPO's token mean, GRPO's mean of sequence means, Dr. GRPO's constant normaliser."""
    sampler = LLMBuilder.build(
        make_rollout_spec("GRPO", group_size=2, max_output_tokens=8), tokenizer=left_tokenizer
    )
    torch.manual_seed(0)
    long = sampler.rollout(digit_env, digit_env.batch(0, 1, 0))
    sampler.spec = sampler.spec.model_copy(update={"max_output_tokens": 3})
    short = sampler.rollout(digit_env, digit_env.batch(1, 1, 0))[:1]
    samples = long + short
    for sample, reward in zip(samples, [1.0, 0.0, 0.0], strict=True):
        sample.reward, sample.group = reward, 0
    n = [s.num_actions for s in samples]
    assert len(set(n)) > 1
    spec = make_rollout_spec(
        "GRPO", group_size=3, max_output_tokens=8, update_epochs=1, loss_norm=norm,
        adv_clip_range=0.5, mini_batch_size=3, micro_batch_size_per_gpu=1,
    )  # fmt: skip
    agent = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    loss = agent.learn([Sample(**{**vars(s), "extra": {}}) for s in samples])["loss"]
    # Rewards 1, 0, 0: A = 2/3, -1/3, -1/3, clipped to 0.5, -1/3, -1/3; ratios 1, so a
    # token's loss is -A.
    a = [0.5, -1 / 3, -1 / 3]
    summed = sum(-ai * ni for ai, ni in zip(a, n, strict=True))
    expected = {
        "accumulation_window": summed / sum(n),
        "sequence": sum(-ai for ai in a) / 3,
        "max_length": summed / (3 * 8),
    }
    assert loss == pytest.approx(expected[norm], abs=1e-5)


def test_max_length_norm_needs_a_generation_cap(make_rollout_spec) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="loss_norm=max_length divides by max_output"):
        make_rollout_spec("GRPO", max_output_tokens=None, loss_norm="max_length")


def test_gspo_takes_sequence_ratios_and_refuses_token_ones(make_rollout_spec) -> None:
    from pydantic import ValidationError

    from agilerl.algorithms.grpo import GSPO
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


# The untrained model almost never ends a completion (EOS) within the 16-token cap: the soft
# punishment (no penalty up to 8 tokens) teaches it to, so the overlong filter is paired
# with it (alone, every completion is cut and leaves the loss: nothing to learn from).
DAPO_VARIANTS = {
    "clip_higher": {"clip_coef_high": 0.28},
    "sequence_norm": {"loss_norm": "sequence"},
    "dr_grpo": {"loss_norm": "max_length"},
    "soft_overlong": {"overlong_buffer_len": 8},
    "overlong_filter": {"mask_truncated_completions": True, "overlong_buffer_len": 8},
    "dynamic_sampling": {"dynamic_sampling_max_rounds": 2, "adv_filter_eps": 0.05},
    "dapo": {
        "clip_coef_high": 0.28, "loss_norm": "accumulation_window", "overlong_buffer_len": 8,
        "mask_truncated_completions": True, "dynamic_sampling_max_rounds": 2,
    },
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(DAPO_VARIANTS))
def test_dapo_variants_learn_the_digit_reward(
    make_rollout_spec, digit_env, left_tokenizer, variant: str
) -> None:
    """Each switch trains the digit reward (GRPO alone reaches it in 19 rounds; the
    overlong ones first learn to end completions), with rounds taken through
    :meth:`fill_groups` as the loop takes them."""
    from agilerl.training.llm.train_llm_rollout import REFILL_SEED_STRIDE

    spec = make_rollout_spec("GRPO", **DAPO_VARIANTS[variant])
    agent = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    rewards, truncated = [], []
    for step in range(40):

        def rows(k: int, step: int = step) -> list:
            return digit_env.batch(step, spec.batch_size, k * REFILL_SEED_STRIDE)

        samples = agent.fill_groups(
            agent.rollout(digit_env, rows(0)), lambda k: agent.rollout(digit_env, rows(k))
        )
        metrics = agent.learn(samples)
        rewards.append(metrics["reward"])
        truncated.append(metrics["frac_truncated"])
        if len(rewards) >= 3 and sum(rewards[-3:]) / 3 > 0.8:
            break
    assert rewards[0] < 0.3
    assert sum(rewards[-3:]) / 3 > 0.8, rewards
    if spec.overlong_buffer_len is not None:  # it learnt to end before the cap
        assert truncated[0] > 0.9 and truncated[-1] < 0.2, truncated


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
