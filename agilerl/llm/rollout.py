"""Collect rollouts: play episodes with an agent, turn by turn, into token-level samples.

A sample is one episode's whole conversation as token ids, with a mask of the
tokens the model generated and their sampler log-probs; the reward is the sum
of the episode's turn rewards. A group is ``group_size`` episodes of one row
(GRPO compares completions within it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from agilerl.llm.generation import Completion, SamplingSettings, generate, left_pad
from agilerl.llm.overlong import is_truncated
from agilerl.llm.rollout_env import RolloutEnv


@dataclass
class Sample:
    """One episode, ready for an update.

    Attributes:
        ids: Prompt and every turn's tokens.
        action_mask: 1 where the model generated the token.
        old_logps: Sampler log-prob of each token (0 where not generated).
        reward: Sum of the turn rewards.
        group: Index of the row (prompt) the episode came from within the batch.
        text: The completions' text, turns joined by newlines.
        advantage: Set by the algorithm before the update.
        extra: Per-sample values an algorithm or the loop adds (sampler log-probs, the
            dynamic-sampling round).
        truncated: A turn was cut by the length cap (see :mod:`agilerl.llm.overlong`).
        forced: Indices (in ``ids``) of generated tokens the thinking budget forced
            (:mod:`agilerl.llm.constraints`): part of their turn (``action_mask`` is 1),
            but not sampled from the policy, so :func:`collate` leaves them out of the loss.
    """

    ids: list[int]
    action_mask: list[int]
    old_logps: list[float]
    reward: float
    group: int
    text: str
    advantage: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    truncated: bool = False
    forced: list[int] = field(default_factory=list)

    @property
    def num_actions(self) -> int:
        """Generated tokens the update learns from (forced tokens excluded)."""
        return sum(self.action_mask) - len(self.forced)


def collect(
    model: Any,
    tokenizer: Any,
    env: RolloutEnv,
    rows: list[dict[str, Any]],
    *,
    group_size: int,
    settings: SamplingSettings,
    generator: Callable[..., list[Completion]] = generate,
) -> list[Sample]:
    """Play ``group_size`` episodes of each row; generation is batched over all live episodes.

    Args:
        model: The policy (its active adapter generates).
        tokenizer: Its tokenizer.
        env: The rollout env (episodes, chat rendering, ``max_turns``).
        rows: Rows of this batch.
        group_size: Episodes per row (adjacent in the result).
        settings: Sampling settings.
        generator: Called like :func:`~agilerl.llm.generation.generate` (HF ``generate``
            by default; a :class:`~agilerl.llm.vllm_engine.VLLMGenerator`).

    Returns:
        ``len(rows) * group_size`` samples, grouped by row.
    """
    episodes = [env.make_episode(row) for row in rows for _ in range(group_size)]
    samples = []
    for i, episode in enumerate(episodes):
        ids = env.encode(episode.first_messages())
        samples.append(Sample(ids, [0] * len(ids), [0.0] * len(ids), 0.0, i // group_size, text=""))
    live = list(range(len(episodes)))
    eos = tokenizer.eos_token_id
    eos_ids = set(eos) if isinstance(eos, list) else {eos}
    for turn in range(env.max_turns):
        if not live:
            break
        completions = generator(model, tokenizer, [samples[i].ids for i in live], settings)
        still = []
        for i, completion in zip(live, completions, strict=True):
            sample = samples[i]
            sample.forced += [len(sample.ids) + j for j in completion.forced]
            sample.ids += completion.ids
            sample.action_mask += [1] * len(completion.ids)
            sample.old_logps += completion.logps
            sample.text = completion.text if turn == 0 else f"{sample.text}\n{completion.text}"
            sample.truncated |= is_truncated(
                completion.ids, completion.text, eos_ids, settings.stop_strings
            )
            observation, reward, done = episodes[i].step(completion.text)
            sample.reward += reward
            room = settings.max_model_len - len(sample.ids)
            if not done and observation is not None and turn + 1 < env.max_turns:
                more = env.encode_turn(observation)
                if len(more) < room:
                    sample.ids += more
                    sample.action_mask += [0] * len(more)
                    sample.old_logps += [0.0] * len(more)
                    still.append(i)
        live = still
    return samples


def collate(samples: list[Sample], pad_id: int) -> dict[str, torch.Tensor]:
    """Left-padded ``input_ids``, ``attention_mask``, ``action_mask`` and ``old_logps``.

    ``action_mask`` is the loss mask: the generated tokens, less the forced ones.
    """
    ids, attention = left_pad([s.ids for s in samples], pad_id)
    width = ids.shape[1]
    action = torch.zeros_like(ids, dtype=torch.float32)
    old = torch.zeros_like(ids, dtype=torch.float32)
    for i, s in enumerate(samples):
        start = width - len(s.ids)
        action[i, start:] = torch.tensor(s.action_mask, dtype=torch.float32)
        action[i, [start + j for j in s.forced]] = 0.0
        old[i, width - len(s.ids) :] = torch.tensor(s.old_logps, dtype=torch.float32)
    return {"input_ids": ids, "attention_mask": attention, "action_mask": action, "old_logps": old}


def pad_rows(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    """Left-pad 1-D per-sample tensors (aligned with the sequence end) to ``width``."""
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, row in enumerate(rows):
        n = min(len(row), width)
        if n:
            out[i, width - n :] = row[-n:]
    return out
