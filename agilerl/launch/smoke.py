"""``training=smoke``: a budget of seconds in the unit of the algorithm's paradigm.

``conf/training/smoke.yaml`` asks for each field through the ``agilerl_smoke`` resolver
with the composed algorithm's name; the answer is the paradigm's
:attr:`~agilerl.strategies.base.TrainingStrategy.smoke_budget`, or the field's default
where the paradigm's smoke run leaves it alone (so a field the paradigm does not read is
never set). The training group is composed after ``experiment``, so a preset's budget
gives way to it; command-line ``training.*`` overrides still win.
"""

from __future__ import annotations

from typing import Any

from agilerl.arena.models.registry import MANIFEST_REGISTRY
from agilerl.arena.models.training import TrainingSpec
from agilerl.strategies import strategy_for


def smoke_value(field: str, algorithm: str) -> Any:
    """The smoke budget's ``training.<field>`` for the algorithm named ``algorithm``.

    An unknown algorithm gets the field's default: validation then names the algorithm.
    """
    try:
        budget = strategy_for(MANIFEST_REGISTRY.get(str(algorithm))).smoke_budget
    except (KeyError, TypeError, ValueError):
        budget = {}
    if field in budget:
        return budget[field]
    return TrainingSpec.model_fields[field].default
