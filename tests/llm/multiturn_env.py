"""A two-turn text env for the multi-turn rollout test (loaded through an entry point)."""

from __future__ import annotations


class GuessTwice:
    """Asks for digits twice; each turn's reward is the fraction of digit characters."""

    def __init__(self, bonus: float = 0.0) -> None:
        self.bonus = bonus
        self.turn = 0

    def reset(self, seed: int) -> str:
        self.turn = 0
        return f"Round {seed % 7}: write a number."

    def step(self, text: str) -> tuple[str | None, float, bool]:
        self.turn += 1
        chars = [c for c in text if not c.isspace()]
        reward = sum(c.isdigit() for c in chars) / len(chars) if chars else 0.0
        if self.turn >= 2:
            return None, reward + self.bonus, True
        return "Again, another number.", reward, False
