"""Generation controls applied while decoding: a thinking budget and an answer pattern.

A completion *thinks* inside ``<think>...</think>``: it is in a thought from the
start when its prompt ends inside an open ``<think>`` (a chat template that
opens the block for the model), or once it begins with ``<think>`` itself.
Everything after the thought (the whole completion when there is none) is the
*answer*.

* ``thinking_token_budget``: once a thought holds that many tokens (the ones
  after its opening tag) without closing, the tokens of ``</think>`` are
  forced, one per step, and generation goes on into the answer. Forced tokens
  are kept in the completion but were not sampled from the policy: their
  indices are reported (:attr:`Controller.forced`) so the update can leave
  them out of the loss.
* ``answer_pattern`` (``constrain_answer_pattern``): the answer, leading
  spaces, tabs and newlines aside, is kept a prefix of some match of the regex: at each step
  only tokens that keep it so may be sampled, and EOS only once it is a full
  match; when no token can extend a full match, the completion ends there.
  A thought is not constrained (tokens that open or continue one are free).
* ``answer_continuation``: the pattern constrains the *start* of the answer
  only: once the answer is a full match, the constraint lifts and the model
  continues freely (to EOS or the output cap).

The tokens a pattern allows are found by checking candidates in logit order
(``regex`` partial matching on the decoded text): sampling draws from the
consistent tokens, at most ``top_k`` of them (one when greedy) and ignoring
consistent tokens whose total probability is below 0.1% of the kept ones, so
a large vocabulary costs a few checks per step rather than one per token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
NEGLIGIBLE_MASS = 1e-3
"""Unchecked probability, relative to the accepted tokens', below which the search stops."""
LEADING = " \t\r\n"
"""Whitespace an answer may start with before the pattern applies."""
DEFAULT_CANDIDATES = 64
"""Most tokens kept at a constrained step when sampling without ``top_k``."""


@dataclass(frozen=True)
class GenerationControls:
    """The generation controls of a run (from the algorithm spec).

    Attributes:
        thinking_token_budget: Tokens a thought may hold before ``</think>`` is forced.
        answer_pattern: Regex the answer is decoded to match (no anchors).
        answer_continuation: Lift the pattern once the answer is a full match.
    """

    thinking_token_budget: int | None = None
    answer_pattern: str | None = None
    answer_continuation: bool = False

    @property
    def active(self) -> bool:
        """Whether any control changes decoding."""
        return self.thinking_token_budget is not None or self.answer_pattern is not None


def opens_thought(prompt_text: str) -> bool:
    """Whether a prompt ends inside an open ``<think>`` block."""
    return prompt_text.rfind(THINK_OPEN) > prompt_text.rfind(THINK_CLOSE)


@dataclass
class _Row:
    """Decoding state of one completion."""

    phase: str  # "start" (may still open a thought), "think" or "answer"
    text: str = ""
    think_from: int = 0  # index in text where the current thought's content begins
    answer_from: int = 0  # index in text where the answer begins
    thought_tokens: int = 0
    queue: list[int] = field(default_factory=list)  # forced tokens still to emit
    forced: list[int] = field(default_factory=list)  # completion indices of forced tokens
    length: int = 0  # tokens generated so far
    free: bool = False  # the answer matched and continuation lifted the pattern
    done: bool = False


class Controller:
    """Applies :class:`GenerationControls` to a batch of completions, step by step.

    :meth:`observe` takes each row's newly generated token, :meth:`mask` rewrites
    the next step's logits. The same object serves as an HF ``LogitsProcessor``
    (:meth:`__call__`).

    Args:
        controls: What to apply.
        tokenizer: The model's tokenizer (token texts, EOS, the closing tag's tokens).
        prompts: Token ids of each row's prompt.
        top_k: Most tokens kept at a constrained step (0: :data:`DEFAULT_CANDIDATES`).
        greedy: Keep only the best consistent token.
    """

    def __init__(
        self,
        controls: GenerationControls,
        tokenizer: Any,
        prompts: list[list[int]],
        *,
        top_k: int = 0,
        greedy: bool = False,
    ) -> None:
        import regex

        self.controls = controls
        self.tokenizer = tokenizer
        self.pattern = regex.compile(controls.answer_pattern) if controls.answer_pattern else None
        eos = tokenizer.eos_token_id
        self.eos_ids = set(eos) if isinstance(eos, list) else {eos}
        self.close_ids = list(tokenizer.encode(THINK_CLOSE, add_special_tokens=False))
        self.limit = 1 if greedy else (top_k or DEFAULT_CANDIDATES)
        self.rows = [
            _Row(phase="think" if opens_thought(tokenizer.decode(p)) else "start") for p in prompts
        ]
        self._pieces: dict[int, str] = {}
        self._prompt_width: int | None = None

    @property
    def forced(self) -> list[list[int]]:
        """Per row, the indices (within its completion) of the tokens the budget forced."""
        return [list(row.forced) for row in self.rows]

    def piece(self, token: int) -> str:
        """The text a token adds (special tokens add none)."""
        if token not in self._pieces:
            self._pieces[token] = self.tokenizer.decode([token], skip_special_tokens=True)
        return self._pieces[token]

    # --- state --------------------------------------------------------------------------
    def observe(self, i: int, token: int) -> None:
        """Row ``i`` generated ``token``."""
        row = self.rows[i]
        if row.done:
            return
        if token in self.eos_ids:
            row.done = True
            return
        index, row.length = row.length, row.length + 1
        row.text += self.piece(token)
        if row.queue and token == row.queue[0]:
            row.queue.pop(0)
            row.forced.append(index)
            if not row.queue:  # the forced closing tag is complete
                row.phase, row.answer_from = "answer", len(row.text)
            return
        if row.phase == "start":
            if row.text.startswith(THINK_OPEN):
                row.phase, row.think_from, row.thought_tokens = "think", len(THINK_OPEN), 0
            elif not THINK_OPEN.startswith(row.text):
                row.phase, row.answer_from = "answer", 0
        elif row.phase == "think":
            end = row.text.find(THINK_CLOSE, row.think_from)
            if end >= 0:
                row.phase, row.answer_from = "answer", end + len(THINK_CLOSE)
            else:
                row.thought_tokens += 1
        elif self.pattern is None:
            # Without a pattern the answer may open another thought: the budget caps each.
            start = row.text.find(THINK_OPEN, row.answer_from)
            if start >= 0:
                row.phase, row.think_from = "think", start + len(THINK_OPEN)
                row.thought_tokens = 0
        if row.phase == "answer" and self.pattern is not None and self.controls.answer_continuation:
            row.free = row.free or self._answer_ok(row, row.text)[1]

    # --- logits ---------------------------------------------------------------------------
    def mask(self, i: int, scores: torch.Tensor) -> None:
        """Rewrite row ``i``'s next-token ``scores`` (1-D, in place)."""
        row = self.rows[i]
        if row.done:
            return
        budget = self.controls.thinking_token_budget
        thought_over = row.phase == "think" and budget is not None and row.thought_tokens >= budget
        if thought_over and not row.queue:
            row.queue = list(self.close_ids)
        if row.queue:
            keep = scores[row.queue[0]].clone()
            scores.fill_(-float("inf"))
            scores[row.queue[0]] = keep if torch.isfinite(keep) else 0.0
            return
        if self.pattern is None or row.free or row.phase == "think":
            return
        allowed = self._consistent(row, scores)
        kept = scores[allowed].clone()
        scores.fill_(-float("inf"))
        # The pattern outranks an earlier processor's ban (min_new_tokens on EOS at a
        # complete answer): a step always keeps at least one token.
        scores[allowed] = torch.where(torch.isfinite(kept), kept, torch.zeros_like(kept))

    def _answer_ok(self, row: _Row, text: str) -> tuple[bool, bool]:
        """``(consistent, complete)``: whether row's answer, were its text ``text``, is a
        prefix of a pattern match, and whether it is a full match (leading whitespace aside)."""
        answer = text[row.answer_from :] if row.phase == "answer" else text
        match = self.pattern.fullmatch(answer.lstrip(LEADING), partial=True)
        return match is not None, match is not None and not match.partial

    def _consistent(self, row: _Row, scores: torch.Tensor) -> list[int]:
        """Tokens (best first) that keep row's answer a prefix of a pattern match."""
        probs = torch.softmax(scores.float(), dim=-1)
        finite = int(torch.isfinite(scores).sum())
        allowed: list[int] = []
        kept_mass, checked_mass, checked = 0.0, 0.0, 0
        width = 64
        while checked < finite:
            # Candidates in logit order, a growing window at a time (no full sort per step).
            top = torch.topk(scores, min(width, finite)).indices.tolist()[checked:]
            for token in top:
                unchecked = 1.0 - checked_mass
                if allowed and (
                    len(allowed) >= self.limit or unchecked < NEGLIGIBLE_MASS * kept_mass
                ):
                    return allowed
                p = float(probs[token])
                checked_mass += p
                checked += 1
                if self._allows(row, token):
                    allowed.append(token)
                    kept_mass += p
            width *= 8
        if not allowed:  # nothing consistent is left among the finite logits: end here
            allowed = sorted(self.eos_ids)[:1]
        return allowed

    def _allows(self, row: _Row, token: int) -> bool:
        if token in self.eos_ids:
            return self._answer_ok(row, row.text)[1]
        piece = self.piece(token)
        if not piece:  # a special token (or one that adds no text): never part of an answer
            return False
        text = row.text + piece
        if row.phase == "start" and (THINK_OPEN.startswith(text) or text.startswith(THINK_OPEN)):
            return True  # opening a thought, which the pattern does not constrain
        return self._answer_ok(row, text)[0]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """HF ``LogitsProcessor``: observe the last generated tokens, then mask."""
        if self._prompt_width is None:
            self._prompt_width = input_ids.shape[1]
        elif input_ids.shape[1] > self._prompt_width:
            for i, token in enumerate(input_ids[:, -1].tolist()):
                self.observe(i, token)
        for i in range(scores.shape[0]):
            self.mask(i, scores[i])
        return scores
