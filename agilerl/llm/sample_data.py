"""Small synthetic chat datasets for tests and demos (written by ``scripts/make_llm_data.py``).

SFT rows are templated facts and sums, so the answer format generalises to
held-out rows while each fact can be memorised. Preference rows pair a polite,
correct answer (chosen) with a curt, wrong one (rejected): a difference a tiny
model learns in a few steps.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

OBJECTS = [
    "apple",
    "banana",
    "cherry",
    "grape",
    "lemon",
    "lime",
    "melon",
    "peach",
    "pear",
    "plum",
    "kiwi",
    "mango",
    "olive",
    "onion",
    "carrot",
    "tomato",
    "potato",
    "pepper",
    "cloud",
    "river",
    "ocean",
    "forest",
    "desert",
    "meadow",
    "stone",
    "brick",
    "candle",
    "lamp",
    "chair",
    "table",
    "door",
    "window",
    "book",
    "pencil",
    "paper",
    "ribbon",
    "button",
    "kite",
    "drum",
    "flute",
    "violin",
    "piano",
    "bell",
    "coin",
    "ring",
    "crown",
    "shield",
    "sword",
    "arrow",
    "boat",
    "wagon",
]
COLOURS = [
    "red",
    "yellow",
    "green",
    "blue",
    "purple",
    "orange",
    "white",
    "black",
    "brown",
    "pink",
    "grey",
    "gold",
]
WORDS = [
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
]


def colour_of(obj: str) -> str:
    """The fixed colour fact for ``obj`` (a deterministic mapping)."""
    return COLOURS[sum(map(ord, obj)) % len(COLOURS)]


def sft_rows(n: int = 300, seed: int = 0) -> list[dict[str, Any]]:
    """Prompt/response rows: colour facts and small sums.

    Args:
        n: Number of rows.
        seed: Seed of the row order and sums.
    """
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for obj in OBJECTS:
        rows.append(
            {"prompt": f"What colour is the {obj}?", "response": f"The {obj} is {colour_of(obj)}."}
        )
    while len(rows) < n:
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        rows.append({"prompt": f"What is {a} plus {b}?", "response": f"{a} plus {b} is {a + b}."})
    rng.shuffle(rows)
    return rows[:n]


def preference_rows(n: int = 300, seed: int = 1) -> list[dict[str, Any]]:
    """Prompt/chosen/rejected rows: polite and correct versus curt and wrong.

    Args:
        n: Number of rows.
        seed: Seed of the rows.
    """
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        if rng.random() < 0.5:
            obj = rng.choice(OBJECTS)
            right = colour_of(obj)
            wrong = rng.choice([c for c in COLOURS if c != right])
            prompt = f"What colour is the {obj}?"
            chosen = f"Happy to help! The {obj} is {right}."
            rejected = f"Whatever. It is {wrong}."
        else:
            a, b = rng.randint(0, 9), rng.randint(0, 9)
            wrong_sum = a + b + rng.choice([-2, -1, 1, 2, 3])
            prompt = f"What is {a} plus {b}?"
            chosen = f"Happy to help! {a} plus {b} is {a + b}."
            rejected = f"Whatever. It is {wrong_sum}."
        rows.append({"prompt": prompt, "chosen": chosen, "rejected": rejected})
    return rows


def countdown_rows(n: int = 200, seed: int = 2, count: int = 3) -> list[dict[str, Any]]:
    """Countdown puzzles: ``count`` numbers in 1..9 and a target one expression reaches.

    Each row holds ``nums``, ``target`` and one ``solution`` (which the
    countdown reward scores 1.0).

    Args:
        n: Number of rows.
        seed: Seed of the puzzles.
        count: Numbers per puzzle.
    """
    rng = random.Random(seed)
    rows = []
    while len(rows) < n:
        nums = [rng.randint(1, 9) for _ in range(count)]
        expression = str(nums[0])
        for x in nums[1:]:
            op = rng.choice("+-*")
            expression = f"({expression}){op}{x}" if op == "*" else f"{expression}{op}{x}"
        target = _integer_value(expression)
        if target <= 0:
            continue
        rows.append({"nums": nums, "target": target, "solution": expression})
    return rows


def arithmetic_rows(n: int = 200, seed: int = 3) -> list[dict[str, Any]]:
    """``What is a + b?`` questions with numeric answers (for a pretrained model's GRPO demo)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(1, 20), rng.randint(1, 20)
        rows.append({"question": f"What is {a} + {b}?", "answer": a + b})
    return rows


DIGIT_PROMPTS = [
    "Write a number.",
    "Count to ten.",
    "Tell me about the {colour} {obj}.",
    "How many {obj}s are there?",
    "Describe a {colour} {obj}.",
    "Say something about a {obj}.",
    "Hello! What colour is the {obj}?",
    "Give me a {word}.",
]


def digit_rows(n: int = 64, seed: int = 4) -> list[dict[str, Any]]:
    """Chat prompts for the ``digit_fraction`` reward (a dense toy task a tiny model can learn)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        template = rng.choice(DIGIT_PROMPTS)
        prompt = template.format(
            colour=rng.choice(COLOURS), obj=rng.choice(OBJECTS), word=rng.choice(WORDS)
        )
        rows.append({"prompt": prompt})
    return rows


def _integer_value(expression: str) -> int:
    from agilerl.llm.rewards import safe_arithmetic

    value, _ = safe_arithmetic(expression)
    return int(value)


def corpus() -> list[str]:
    """Text the tiny tokenizer is trained on (covers the sample datasets' words)."""
    lines = [f"{r['prompt']} {r['response']}" for r in sft_rows(400, seed=7)]
    lines += [f"{r['prompt']} {r['chosen']} {r['rejected']}" for r in preference_rows(200, seed=8)]
    lines += [" ".join(WORDS), " ".join(COLOURS), " ".join(OBJECTS)]
    lines += ["The quick brown fox jumps over the lazy dog.", "Hello! How are you today?"]
    return lines


def write_jsonl(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Write ``rows`` as JSON lines to ``path`` (parents created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    return path
