"""A population whose members start from different points of a search space.

Evolutionary HPO only finds what its population can reach: when every member
starts from the same hyperparameters, selection has nothing to choose between
until mutations (small grow/shrink steps) have wandered away. Drawing each
member's starting hyperparameters from the same ranges the mutations use gives
selection real alternatives from the first generation, as a random search
would, and then keeps training the good ones instead of starting over.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from agilerl.arena.models.mutable import LOG_SCALE_RATIO
from agilerl.hpo.ranges import HpRange, check_ranges, integer_field

__all__ = ["LOG_SCALE_RATIO", "sample_starts", "start_population"]


def sample_starts(
    ranges: Mapping[str, Sequence[float]],
    count: int,
    rng: np.random.Generator,
    integers: Collection[str] | None = None,
    spec: Any = None,
) -> list[dict[str, float | int]]:
    """``count`` independent draws of every hyperparameter in ``ranges``.

    A range spanning a factor of :data:`LOG_SCALE_RATIO` or more (``lr`` over
    1e-5..1e-2) is drawn log-uniformly, others uniformly; integer
    hyperparameters are rounded into their range.

    Args:
        ranges: ``{name: (min, max, grow_factor, shrink_factor)}`` (the mutation ranges;
            ``spec.mutation_ranges()`` gives an algorithm's).
        count: How many starting points.
        rng: The generator every draw comes from.
        integers: Names drawn as integers; ``None``: the integer fields of ``spec``
            when it is given, else those whose range is given with integer ends.
        spec: The algorithm spec (class or instance) the ranges belong to.
    """
    if integers is None and spec is not None:
        integers = {name for name in ranges if integer_field(spec, name)}
    if integers is None:
        integers = {
            name
            for name, value in ranges.items()
            if all(isinstance(v, int) and not isinstance(v, bool) for v in tuple(value)[:2])
        }
    checked: dict[str, HpRange] = check_ranges(ranges)
    starts: list[dict[str, float | int]] = []
    for _ in range(count):
        start: dict[str, float | int] = {}
        for name, (low, high, _grow, _shrink) in checked.items():
            if low > 0 and high / low >= LOG_SCALE_RATIO:
                value = math.exp(rng.uniform(math.log(low), math.log(high)))
            else:
                value = rng.uniform(low, high)
            if name in integers:
                value = int(min(max(round(value), math.ceil(low)), math.floor(high)))
            start[name] = value
        starts.append(start)
    return starts


def start_population(
    population: Sequence[Any], starts: Sequence[Mapping[str, Any]], seed: int | None = None
) -> list[Any]:
    """Rebuild each member from its own starting point.

    Each start maps spec fields to values (``lr``, ``batch_size``, ...); a
    ``net_config`` entry is merged into the member's network section, one level
    deep (``{"head_config": {"hidden_size": [32]}}`` keeps the head's other
    settings). Members are rebuilt from the validated spec with fresh weights
    and optimizers and keep their index.

    Args:
        population: The freshly built agents.
        starts: One mapping per agent.
        seed: Seeds the rebuilt networks (member ``i`` uses ``seed * 1000 + i``);
            ``None`` uses torch's global generator.

    Returns:
        The new agents, in order.

    Raises:
        ValueError: If there are fewer starts than agents.
        pydantic.ValidationError: If a value is invalid for the spec.
    """
    from agilerl.algorithms.core.base import updated_spec

    if len(starts) < len(population):
        raise ValueError(f"{len(population)} agents need as many starts, got {len(starts)}")
    out = []
    for position, (agent, start) in enumerate(zip(population, starts, strict=False)):
        changes = dict(start)
        if "net_config" in changes:
            changes["net_config"] = _merged(agent.spec.net_config, changes["net_config"])
        spec = updated_spec(agent.spec, changes)
        out.append(agent.with_spec(spec, seed=None if seed is None else seed * 1000 + position))
    return out


def _merged(section: Any, change: Mapping[str, Any]) -> dict[str, Any]:
    base = section.model_dump(exclude_unset=True) if hasattr(section, "model_dump") else {}
    merged = copy.deepcopy(dict(base or {}))
    for key, value in change.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = copy.deepcopy(value)
    return merged
