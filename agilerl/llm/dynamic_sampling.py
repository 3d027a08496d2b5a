"""DAPO's dynamic sampling: fill a round's batch with groups whose rewards differ.

A group whose completions all scored alike has zero group-relative
advantage and teaches nothing. Dynamic sampling generates extra rounds of
new prompts (at most ``max_rounds``) until the batch holds as many varied
groups as it had groups; flat groups fill whatever is left, so the batch
keeps its size (``filter_zero_adv`` decides whether they enter the loss).

Under data parallelism every process generates in a round while any process
still lacks varied groups, so all run the same generation calls.
"""

from __future__ import annotations

from collections.abc import Callable

from agilerl.llm import distributed
from agilerl.llm.rollout import Sample


def split_groups(samples: list[Sample], group_size: int) -> list[list[Sample]]:
    """``samples`` (adjacent by group) as a list of groups."""
    return [samples[i : i + group_size] for i in range(0, len(samples), group_size)]


def refill_groups(
    samples: list[Sample],
    group_size: int,
    varied: Callable[[list[Sample]], bool],
    more: Callable[[int], list[Sample]],
    max_rounds: int,
) -> list[Sample]:
    """A batch of as many groups as ``samples`` has, varied groups first.

    Args:
        samples: The round's samples, ``group_size`` adjacent per prompt.
        group_size: Completions per prompt.
        varied: Whether a group's rewards differ (it carries a learning signal).
        more: ``more(k)`` generates the ``k``-th extra round (``k`` from 1).
        max_rounds: Extra rounds allowed.

    Returns:
        The chosen groups' samples in order of generation, varied groups before flat
        ones, each sample's ``group`` renumbered and ``extra["sampling_round"]`` set to the
        round that generated it.
    """
    groups = split_groups(samples, group_size)
    target = len(groups)
    useful, flat = [], []
    for round_ in range(max_rounds + 1):
        if round_:
            short = len(useful) < target
            if not distributed.global_sum(float(short)):
                break
            groups = split_groups(more(round_), group_size)
        for group in groups:
            for sample in group:
                sample.extra["sampling_round"] = round_
            (useful if varied(group) else flat).append(group)
    chosen = (useful + flat)[:target]
    out = []
    for index, group in enumerate(chosen):
        for sample in group:
            sample.group = index
            out.append(sample)
    return out
