"""The rewards registry: countdown arithmetic scored by a safe evaluator, user code gated."""

from __future__ import annotations

import pytest

from agilerl.arena.models.errors import ConfigError
from agilerl.llm.rewards import (
    UnsafeExpression,
    countdown_reward,
    resolve_reward,
    safe_arithmetic,
)
from agilerl.llm.sample_data import countdown_rows

pytestmark = pytest.mark.llm
ROW = {"nums": [3, 5, 7], "target": 22}


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<answer>3*5+7</answer>", 1.0),
        ("<answer>(7 + 5) * 3 - 14</answer>", 0.0),  # 14 is not a given number
        ("<answer>7*3+5-3</answer>", 0.0),  # 3 used twice
        ("<answer>5*3+7</answer>", 1.0),
        ("thinking... <answer>3 * 5 + 7</answer>", 1.0),
        ("<answer>3*5+5</answer>", 0.0),
        ("3*5+7", 1.0),  # untagged: the whole text is the answer
        ("<answer>22</answer>", 0.0),
        ("<answer>7/7*22</answer>", 0.0),
    ],
)
def test_countdown_scores_known_answers(completion: str, expected: float) -> None:
    assert countdown_reward(completion, ROW) == expected


def test_countdown_solutions_of_the_generated_dataset_score_one() -> None:
    rows = countdown_rows(50)
    assert all(countdown_reward(f"<answer>{r['solution']}</answer>", r) == 1.0 for r in rows)
    assert sum(countdown_reward("<answer>1+1</answer>", r) for r in rows) < 10


@pytest.mark.parametrize(
    "code",
    [
        "__import__('os').system('echo hi')",
        "(1).__class__",
        "open('x')",
        "2**100000",
        "[1, 2]",
        "lambda: 1",
        "1.5 + 2",
        "x + 1",
        "1/0",
        "1" * 300,
    ],
)
def test_the_evaluator_refuses_code(code: str) -> None:
    with pytest.raises(UnsafeExpression):
        safe_arithmetic(code)
    assert countdown_reward(f"<answer>{code}</answer>", ROW) == 0.0


def test_exact_division_is_rational() -> None:
    value, numbers = safe_arithmetic("(8 / 3) * 3")
    assert value == 8 and numbers == [8, 3, 3]


def test_builtins_resolve_and_take_their_config() -> None:
    exact = resolve_reward("exact_answer")
    assert exact("<answer> Paris </answer>", {"answer": "paris"}) == 1.0
    numeric = resolve_reward("numeric")
    assert numeric("so it is 27.", {"answer": 27}) == 1.0
    assert numeric("so it is 28.", {"answer": 27}) == 0.0
    regex = resolve_reward("regex", {"pattern": r"\d{3}"})
    assert regex("call 555 now", {}) == 1.0 and regex("call 55", {}) == 0.0
    digits = resolve_reward("digit_fraction")
    assert digits("12 ab", {}) == 0.5
    with pytest.raises(ConfigError, match="reward_config"):
        resolve_reward("regex", {"patern": "x"})
    with pytest.raises(ConfigError, match="unknown reward 'countdwn'"):
        resolve_reward("countdwn")


def test_user_rewards_need_trust_code() -> None:
    with pytest.raises(ConfigError, match="trust_code"):
        resolve_reward("os.path:exists")
    fn = resolve_reward("agilerl.llm.rewards:digit_fraction_reward", trust_code=True)
    assert fn("1", {}) == 1.0
    with pytest.raises(ConfigError, match="cannot import"):
        resolve_reward("agilerl.llm.rewards:nope", trust_code=True)


@pytest.mark.timeout(60)  # a hang is the failure: the old `re` search never returned
@pytest.mark.parametrize("pattern", [r"(x+x+)+y", r"(a|aa)+$"])
def test_a_backtracking_pattern_stops_with_a_config_error(pattern: str) -> None:
    reward = resolve_reward("regex", {"pattern": pattern})
    with pytest.raises(ConfigError, match=r"reward_config.pattern: .*nested repeats"):
        reward("x" * 5000 + "a" * 5000 + "b", {})
    assert resolve_reward("regex", {"pattern": r"<answer>\d+</answer>"})("<answer>7</answer>", {})


@pytest.mark.parametrize(
    ("pattern", "message"),
    [("(unclosed", "is not a regular expression"), ("a" * 5000, "at most 1000 characters")],
)
def test_a_bad_pattern_is_refused_when_the_reward_is_resolved(pattern: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_reward("regex", {"pattern": pattern})
