"""Rewards for LLM rollouts: a registry of built-ins and user rewards from ``module:attr``.

A reward is a callable ``reward(completion: str, row: dict) -> float``: the
generated text of one completion and the dataset row its prompt came from.
Built-ins are looked up by name (:data:`REWARDS`); a ``module:attr`` name
imports user code and is refused unless the run opted in (``trust_code``).

The countdown reward checks arithmetic with a small evaluator that walks
Python's ``ast`` and accepts only integers, ``+ - * /``, unary minus and
parentheses: nothing is ever ``eval``-ed.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import math
import re
from collections import Counter
from collections.abc import Callable
from fractions import Fraction
from functools import partial
from typing import Any

from agilerl.arena.models.errors import ConfigError, Problem
from agilerl.arena.models.trust import TRUST_HINT

RewardFn = Callable[[str, dict[str, Any]], float]

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_MAX_EXPRESSION_CHARS = 200


class UnsafeExpression(ValueError):
    """An expression that is not plain integer arithmetic."""


def extract_answer(text: str) -> str:
    """The text inside the last ``<answer>...</answer>``, else the whole text, stripped."""
    found = _ANSWER_TAG.findall(text)
    return (found[-1] if found else text).strip()


def safe_arithmetic(expression: str) -> tuple[Fraction, list[int]]:
    """Evaluate integer arithmetic exactly, without ``eval``.

    Args:
        expression: Integers combined with ``+ - * /``, unary minus and parentheses.

    Returns:
        ``(value, numbers)``: the exact value and the integer literals used, in order.

    Raises:
        UnsafeExpression: For anything else (names, calls, powers, floats,
            attribute access, ...), an over-long expression, or division by zero.
    """
    if len(expression) > _MAX_EXPRESSION_CHARS:
        raise UnsafeExpression("expression too long")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise UnsafeExpression(f"not an expression: {exc.msg}") from None
    numbers: list[int] = []
    operators = {
        ast.Add: lambda a, b: a + b,
        ast.Sub: lambda a, b: a - b,
        ast.Mult: lambda a, b: a * b,
        ast.Div: lambda a, b: a / b,
    }

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            numbers.append(node.value)
            return Fraction(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in operators:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Div) and right == 0:
                raise UnsafeExpression("division by zero")
            return operators[type(node.op)](left, right)
        raise UnsafeExpression(f"{type(node).__name__} is not allowed")

    return walk(tree), numbers


def _as_numbers(value: Any) -> list[int]:
    if isinstance(value, str):
        return [int(x) for x in re.findall(r"-?\d+", value)]
    return [int(x) for x in value]


def countdown_reward(
    completion: str,
    row: dict[str, Any],
    *,
    numbers_column: str = "nums",
    target_column: str = "target",
    format_bonus: float = 0.0,
) -> float:
    """1.0 if the answer's expression uses each given number at most once and equals the target.

    Args:
        completion: Generated text; the expression is inside ``<answer></answer>``
            (or is the whole text).
        row: Dataset row with the numbers and the target.
        numbers_column: Column with the numbers (a list or a string of integers).
        target_column: Column with the target.
        format_bonus: Reward for a well-formed ``<answer>`` tag whose content is wrong.
    """
    tagged = bool(_ANSWER_TAG.search(completion))
    try:
        value, used = safe_arithmetic(extract_answer(completion))
    except UnsafeExpression:
        return format_bonus if tagged else 0.0
    allowed = Counter(_as_numbers(row[numbers_column]))
    if Counter(used) - allowed:  # a number not given, or given fewer times
        return format_bonus if tagged else 0.0
    return 1.0 if value == int(row[target_column]) else (format_bonus if tagged else 0.0)


def exact_answer_reward(
    completion: str, row: dict[str, Any], *, answer_column: str = "answer"
) -> float:
    """1.0 if the extracted answer equals the row's answer (whitespace and case ignored)."""
    expected = str(row[answer_column]).strip().lower()
    return float(extract_answer(completion).lower() == expected)


def numeric_reward(
    completion: str,
    row: dict[str, Any],
    *,
    answer_column: str = "answer",
    tolerance: float = 1e-6,
) -> float:
    """1.0 if the last number in the extracted answer is within ``tolerance`` of the row's."""
    found = _NUMBER.findall(extract_answer(completion))
    if not found:
        return 0.0
    return float(math.isclose(float(found[-1]), float(row[answer_column]), abs_tol=tolerance))


PATTERN_SECONDS = 0.25
"""Longest one regex reward may search one completion (a data-given pattern is bounded)."""
PATTERN_LENGTH = 1000
"""Longest regex pattern a reward may be given."""


def format_reward(completion: str, row: dict[str, Any], *, pattern: str = _ANSWER_TAG.pattern):
    """1.0 if ``pattern`` (a regular expression) occurs in the completion.

    The search runs in the ``regex`` engine with a time limit: a pattern that backtracks
    catastrophically stops the run with a config error instead of hanging it (a C-level
    ``re`` search cannot be interrupted, not even by the stop signal that checkpoints).

    Raises:
        ConfigError: If one search takes longer than :data:`PATTERN_SECONDS`.
    """
    import regex

    try:
        found = regex.search(pattern, completion, regex.DOTALL, timeout=PATTERN_SECONDS)
    except TimeoutError:
        raise ConfigError(
            [
                Problem(
                    "environment.reward_config.pattern",
                    f"{pattern!r} searched one {len(completion):,}-character completion for "
                    f"over {PATTERN_SECONDS} s: nested repeats such as (a+)+ backtrack "
                    "without end; write it without them",
                )
            ]
        ) from None
    return float(found is not None)


def _check_pattern(pattern: Any, field: str) -> None:
    """A regex reward's pattern: a string that compiles, of bounded length."""
    import regex

    if not isinstance(pattern, str) or len(pattern) > PATTERN_LENGTH:
        raise ConfigError(
            [Problem(field, f"pattern must be a string of at most {PATTERN_LENGTH} characters")]
        )
    try:
        regex.compile(pattern)
    except regex.error as exc:
        problem = Problem(field, f"{pattern!r} is not a regular expression: {exc}")
        raise ConfigError([problem]) from None


def digit_fraction_reward(completion: str, row: dict[str, Any]) -> float:
    """The fraction of non-space characters that are digits: a dense toy reward for tests."""
    chars = [c for c in completion if not c.isspace()]
    return sum(c.isdigit() for c in chars) / len(chars) if chars else 0.0


REWARDS: dict[str, Callable[..., float]] = {
    "countdown": countdown_reward,
    "exact_answer": exact_answer_reward,
    "numeric": numeric_reward,
    "format": format_reward,
    "regex": format_reward,
    "digit_fraction": digit_fraction_reward,
}
"""Built-in rewards by name."""


def resolve_reward(
    name: str,
    config: dict[str, Any] | None = None,
    *,
    trust_code: bool = False,
    field: str = "environment.reward",
) -> RewardFn:
    """The reward callable a manifest names.

    Args:
        name: A key of :data:`REWARDS`, or ``module:attr`` of user code.
        config: Keyword arguments bound to the reward (e.g. ``{"pattern": ...}``).
        trust_code: The run's opt-in to import user code.
        field: The manifest path named in errors.

    Raises:
        ConfigError: For an unknown built-in, user code without ``trust_code``,
            an import failure, a non-callable, or arguments the reward does not take.
    """
    config = dict(config or {})
    if ":" in name:
        if not trust_code:
            raise ConfigError(
                [Problem(field, f"{name!r} runs code (imports it); refused without {TRUST_HINT}")]
            )
        module_name, _, attr = name.partition(":")
        try:
            fn = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError([Problem(field, f"cannot import {name!r}: {exc}")]) from None
        if not callable(fn):
            raise ConfigError([Problem(field, f"{name!r} is not callable")])
    elif name in REWARDS:
        fn = REWARDS[name]
    else:
        known = ", ".join(sorted(REWARDS))
        raise ConfigError(
            [Problem(field, f"unknown reward {name!r}; use one of {known} or 'module:attr'")]
        )
    if not config:
        return fn
    if fn is format_reward and "pattern" in config:
        _check_pattern(config["pattern"], f"{field}_config.pattern")
    try:
        inspect.signature(fn).bind("", {}, **config)
    except TypeError as exc:
        raise ConfigError([Problem(f"{field}_config", f"{name}: {exc}")]) from None
    return partial(fn, **config)
