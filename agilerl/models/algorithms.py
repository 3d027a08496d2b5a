"""Re-export of :mod:`agilerl.arena.models.algorithms` (the same objects)."""

from agilerl.arena.models.algorithms import *  # noqa: F403
