"""Re-export of :mod:`agilerl.arena.models.registry` (the same objects)."""

from agilerl.arena.models.registry import *  # noqa: F403
