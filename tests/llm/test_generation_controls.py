"""Generation controls on the real tiny model: the thinking budget, the answer pattern,
answer continuation, and the context cap (``max_model_len``).

The tiny model is random, so it never opens a thought by itself: where a test needs
one, the prompt ends in an open ``<think>`` (as a thinking model's chat template
does) and the completion starts inside the thought.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import regex
import torch
from pydantic import ValidationError

from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.registry import MANIFEST_REGISTRY
from agilerl.llm.constraints import THINK_CLOSE, Controller, GenerationControls
from agilerl.llm.generation import SamplingSettings, generate
from agilerl.llm.model import load_causal_lm
from agilerl.llm.rollout import collate, collect
from agilerl.llm.rollout_env import Episode, PromptEpisode, RolloutEnv

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_causal_lm(tiny_model_dir)


def _run(model, tok, prompt: str, n: int = 4, **fields: Any) -> list[Any]:
    controls = GenerationControls(
        **{k: fields.pop(k) for k in list(fields) if k in GenerationControls.__annotations__}
    )
    settings = SamplingSettings(**{"max_new_tokens": 24, **fields}, controls=controls)
    torch.manual_seed(0)
    return generate(model, tok, [tok(prompt)["input_ids"]] * n, settings)


def _answer(text: str) -> str:
    return text.split(THINK_CLOSE)[-1].lstrip(" \t\r\n")


# --- thinking_token_budget ------------------------------------------------------------------
@pytest.mark.parametrize("budget", [0, 3])
def test_a_thought_is_closed_after_exactly_the_budget(model, left_tokenizer, budget) -> None:
    tok = left_tokenizer
    close = tok.encode(THINK_CLOSE, add_special_tokens=False)
    free = _run(model, tok, "Count to ten.<think>")
    assert not any(THINK_CLOSE in c.text for c in free)  # the model never closes by itself
    capped = _run(model, tok, "Count to ten.<think>", thinking_token_budget=budget)
    for c in capped:
        assert c.ids[budget : budget + len(close)] == close
        assert c.forced == list(range(budget, budget + len(close)))
        assert THINK_CLOSE in c.text
    # the thought's tokens are the ones sampled without the budget (same seed)
    assert [c.ids[:budget] for c in capped] == [c.ids[:budget] for c in free]
    # generation goes on into the answer after the forced close
    assert all(len(c.ids) > budget + len(close) for c in capped)


def test_the_budget_applies_to_a_thought_the_completion_opens() -> None:
    """A completion that begins with <think> (not the prompt) is budgeted from the tag on."""
    from agilerl.llm.tiny import build_tokenizer

    tok = build_tokenizer(["<think> a b c </think> 12 apples"] * 4, vocab_size=300)
    controller = Controller(GenerationControls(thinking_token_budget=2), tok, [[1]])
    close = tok.encode(THINK_CLOSE, add_special_tokens=False)
    for token in tok.encode("<think> a b", add_special_tokens=False):
        scores = torch.zeros(len(tok))
        controller.mask(0, scores)
        assert torch.isfinite(scores).all()  # still within the budget: nothing forced
        controller.observe(0, token)
    for token in close:
        scores = torch.zeros(len(tok))
        controller.mask(0, scores)
        assert torch.isfinite(scores).nonzero().flatten().tolist() == [token]
        controller.observe(0, token)
    assert controller.rows[0].phase == "answer" and len(controller.forced[0]) == len(close)


def _thinking_env(tokenizer: Any) -> RolloutEnv:
    """Two prompts whose chat template opens the assistant's thought (as a thinking
    model's does), scored by the digits in the answer."""
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = tok.chat_template.replace("assistant\n'", "assistant\n<think>'")
    rows = [{"prompt": "Count to ten."}, {"prompt": "Hello!"}]

    def episode(row: dict[str, Any]) -> PromptEpisode:
        return PromptEpisode([{"role": "user", "content": row["prompt"]}], row, _digits)

    return RolloutEnv(train=rows, test=rows, make_episode=episode, tokenizer=tok)


def _digits(text: str, row: dict[str, Any]) -> float:
    answer = _answer(text)
    return sum(c.isdigit() for c in answer) / max(1, len(answer))


def test_forced_tokens_stay_in_the_sample_but_out_of_the_loss(model, left_tokenizer) -> None:
    env = _thinking_env(left_tokenizer)
    tok = env.tokenizer
    settings = SamplingSettings(
        max_new_tokens=16, controls=GenerationControls(thinking_token_budget=2)
    )
    torch.manual_seed(0)
    samples = collect(model, tok, env, env.train, group_size=2, settings=settings)
    close = tok.encode(THINK_CLOSE, add_special_tokens=False)
    batch = collate(samples, tok.pad_token_id)
    width = batch["input_ids"].shape[1]
    for i, s in enumerate(samples):
        first = s.action_mask.index(1)
        assert s.forced == list(range(first + 2, first + 2 + len(close)))
        assert [s.ids[j] for j in s.forced] == close
        loss_mask = batch["action_mask"][i, width - len(s.ids) :].tolist()
        assert [loss_mask[j] for j in s.forced] == [0.0] * len(close)
        assert sum(loss_mask) == s.num_actions == sum(s.action_mask) - len(close)


def test_grpo_rolls_out_and_learns_with_the_spec_controls(
    make_rollout_spec, left_tokenizer
) -> None:
    from agilerl.builders.llm import LLMBuilder

    spec = make_rollout_spec(
        "GRPO",
        group_size=2,
        max_output_tokens=12,
        thinking_token_budget=2,
        answer_pattern="[0-9]+",
        answer_continuation=True,
        update_epochs=1,
    )
    agent = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    assert agent.sampling().controls == GenerationControls(2, "[0-9]+", True)
    env = _thinking_env(left_tokenizer)
    agent.tokenizer = env.tokenizer  # the same vocabulary, the thinking chat template
    torch.manual_seed(0)
    samples = agent.rollout(env, env.train)
    assert all(len(s.forced) == len(env.tokenizer.encode(THINK_CLOSE)) for s in samples)
    assert all(regex.match("[0-9]", _answer(s.text)) for s in samples)  # the answer's start
    metrics = agent.learn(samples)
    assert torch.isfinite(torch.tensor(metrics["loss"]))


# --- constrain_answer_pattern / answer_continuation -------------------------------------------
@pytest.mark.parametrize("greedy", [True, False])
def test_answers_match_the_pattern(model, left_tokenizer, greedy: bool) -> None:
    tok, pattern = left_tokenizer, "[0-9]+ apples"
    free = _run(model, tok, "Count to ten.", greedy=greedy)
    assert not any(regex.fullmatch(pattern, _answer(c.text)) for c in free)
    constrained = _run(model, tok, "Count to ten.", greedy=greedy, answer_pattern=pattern)
    ended = [c for c in constrained if c.ids[-1] == tok.eos_token_id]
    assert ended  # the pattern's end is reached within the cap
    for c in constrained:
        match = regex.fullmatch(pattern, _answer(c.text), partial=True)
        assert match is not None  # a prefix of a match at worst (cut by the cap)
        if c in ended:
            assert not match.partial  # a finished answer is a full match


def test_the_pattern_constrains_the_answer_after_a_budgeted_thought(model, left_tokenizer) -> None:
    tok, pattern = left_tokenizer, "[0-9]+ apples"
    out = _run(model, tok, "Count to ten.<think>", thinking_token_budget=3, answer_pattern=pattern)
    for c in out:
        thought, answer = c.text.split(THINK_CLOSE)
        assert not regex.fullmatch(r"[0-9 ]*", thought)  # the thought was not constrained
        assert regex.fullmatch(pattern, answer.lstrip(), partial=True)
    assert any(regex.fullmatch(pattern, _answer(c.text)) for c in out)


def test_continuation_lifts_the_pattern_once_the_answer_matches(model, left_tokenizer) -> None:
    tok = left_tokenizer
    whole = _run(model, tok, "Count to ten.", greedy=True, answer_pattern="ab")
    assert all(c.text == "ab" and c.ids[-1] == tok.eos_token_id for c in whole)
    more = _run(
        model, tok, "Count to ten.", greedy=True, answer_pattern="ab", answer_continuation=True
    )
    for c in more:
        assert c.text.startswith("ab") and len(c.text) > 2 and len(c.ids) == 24


# --- max_model_len ----------------------------------------------------------------------------
def test_prompt_plus_completion_never_exceed_max_model_len(model, left_tokenizer) -> None:
    tok = left_tokenizer
    short, long = tok("Hi")["input_ids"], tok("Count to ten, then count back to one.")["input_ids"]
    limit = len(long)
    settings = SamplingSettings(max_new_tokens=16, max_model_len=limit, min_new_tokens=16)
    torch.manual_seed(0)
    out = generate(model, tok, [short, long, long[: limit - 2]], settings)
    assert out[1].ids == [] and out[1].text == ""  # the prompt fills the context
    assert 0 < len(out[2].ids) <= 2
    assert all(len(p) + len(c.ids) <= limit for p, c in zip([short, long], out, strict=False))


class _ThreeTurns(Episode):
    def __init__(self, row: dict[str, Any]) -> None:
        self.row, self.turns = row, 0

    def first_messages(self) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.row["prompt"]}]

    def step(self, text: str) -> tuple[str | None, float, bool]:
        self.turns += 1
        return "Go on, write more numbers please.", 0.0, self.turns >= 3


def test_a_multi_turn_episode_stops_at_max_model_len(model, left_tokenizer) -> None:
    tok = left_tokenizer
    rows = [{"prompt": "Count to ten."}, {"prompt": "Hello " * 40}]
    env = RolloutEnv(rows, rows, _ThreeTurns, tok, max_turns=3)
    first = len(env.encode(_ThreeTurns(rows[0]).first_messages()))
    more = len(env.encode_turn("Go on, write more numbers please."))
    limit = first + 12 + more + 5  # room for a full first turn and 5 tokens of a second
    assert len(env.encode(_ThreeTurns(rows[1]).first_messages())) >= limit
    settings = SamplingSettings(max_new_tokens=12, min_new_tokens=12, max_model_len=limit)
    torch.manual_seed(0)
    short, filled = collect(model, tok, env, rows, group_size=1, settings=settings)
    assert len(short.ids) == limit  # the second turn stopped at the cap, no third began
    assert sum(short.action_mask) == 12 + 5
    assert filled.num_actions == 0  # a prompt that fills the context generates nothing


# --- validation and refusals ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "fields", "match"),
    [
        ("GRPO", {"thinking_token_budget": 4}, "thinking_token_budget=4 needs .*max_output_tokens"),
        ("GRPO", {"thinking_token_budget": 8, "max_output_tokens": 8}, "must be below"),
        ("GRPO", {"answer_continuation": True}, "answer_continuation=True .*constrain_answer"),
        ("DPO", {"thinking_token_budget": 4}, "thinking_token_budget=4 cannot act here"),
        ("SFT", {"answer_pattern": "[0-9]+"}, "constrain_answer_pattern=.* cannot act here"),
    ],
)
def test_controls_are_validated(name: str, fields: dict, match: str) -> None:
    base = {"group_size": 2} if name == "GRPO" else {}
    with pytest.raises(ValidationError, match=match):
        MANIFEST_REGISTRY.create(name, **base, **fields)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"thinking_token_budget": 2, "max_output_tokens": 8}, "thinking_token_budget"),
        ({"answer_pattern": "[0-9]+"}, "constrain_answer_pattern"),
    ],
)
def test_vllm_generation_refuses_the_controls(make_rollout_spec, fields: dict, named) -> None:
    from agilerl.llm.vllm_engine import VLLMGenerator

    spec = make_rollout_spec("GRPO", lm_head=False, group_size=2, **fields)
    with pytest.raises(ConfigError, match=rf"algorithm\.{named}: acts in HF generate only"):
        VLLMGenerator(spec)


def test_vllm_generation_sends_no_prompt_that_fills_the_context(
    make_rollout_spec, left_tokenizer
) -> None:
    """Only prompts with room reach the engine (here none: no engine is ever started)."""
    from agilerl.llm.vllm_engine import VLLMGenerator

    generator = VLLMGenerator(make_rollout_spec("GRPO", lm_head=False, group_size=2))
    try:
        prompt = left_tokenizer("Count to ten.")["input_ids"]
        settings = SamplingSettings(max_model_len=len(prompt))
        out = generator(None, left_tokenizer, [prompt, [*prompt, 5]], settings)
        assert [c.ids for c in out] == [[], []] and generator._llm is None
    finally:
        generator.close()
